"""Whether the process is ready (store, platforms, backlog), and the health server that says so
on ``[observability] listen`` (bot/app/health.py)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import UTC, datetime

from adapters.base import BaseAdapter
from bot.app.build.parts import Parts
from bot.app.health import Details, HealthServer
from bot.config import listen_address
from bot.core.clock import Clock
from bot.core.events import QueueBacklog
from bot.metrics import Metrics
from bot.store.base import BaseStore


@dataclass(frozen=True, slots=True)
class Backlog:
    """Due turns waiting for a slot, read from the store into the metrics' gauges; over
    ``max_age`` the process is overloaded (docs/scaling.md#overload)."""

    store: BaseStore
    clock: Clock
    bots: tuple[str, ...]
    metrics: Metrics
    max_age: float

    async def measure(self) -> QueueBacklog:
        """Read the backlog and set the gauges."""
        now = self.clock.now()
        found = await self.store.queue_backlog(now, self.bots)
        self.metrics.backlog_turns.set(found.turns)
        self.metrics.backlog_age.set(found.age(now))
        return found

    async def overloaded(self) -> str | None:
        """Why the backlog makes the process not ready, or None."""
        found = await self.measure()
        age = found.age(self.clock.now())
        if self.max_age and age > self.max_age:
            return (
                f"overloaded: {found.turns} due turn(s) waiting, the oldest for {age:.0f} s "
                f"(max_backlog_age_seconds = {self.max_age:g})"
            )
        return None


async def readiness(
    store: BaseStore, adapters: list[BaseAdapter], *, backlog: Backlog | None = None
) -> str | None:
    """None when the store answers, every platform is connected and no due turn has waited
    past the bound, else the reason."""
    try:
        await store.schema_version()
        overloaded = None if backlog is None else await backlog.overloaded()
    except Exception as exc:  # any failure means "not ready"; the reason is reported
        return f"store unreachable: {type(exc).__name__}"
    down = [_down(a) for a in adapters if not a.connected]
    if down:
        return f"not connected: {', '.join(down)}"
    return overloaded


def _down(adapter: BaseAdapter) -> str:
    """A bot that is not connected, with its last failure when it has one."""
    problem = adapter.last_problem
    if problem is None:
        return adapter.bot_key
    at = datetime.fromtimestamp(problem.at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"{adapter.bot_key} (last error at {at}: {problem.message})"


async def open_health(
    parts: Parts, exits: contextlib.AsyncExitStack, details: Details | None = None
) -> HealthServer | None:
    """``/healthz``, ``/readyz`` and ``/metrics`` on ``[observability] listen`` (None: not
    configured), closed by ``exits``; ``details``: lines ``/healthz`` adds (MCP servers)."""
    listen = parts.settings.observability.listen
    if not listen:
        return None
    store = parts.store
    backlog = Backlog(
        store=store,
        clock=parts.clock,
        bots=tuple(parts.hosted.profiles),
        metrics=parts.metrics,
        max_age=parts.settings.queue.max_backlog_age_seconds,
    )
    platforms = [a for a in parts.hosted.outlets.values() if isinstance(a, BaseAdapter)]
    host, port = listen_address(listen)
    return await exits.enter_async_context(
        HealthServer(
            host=host,
            port=port,
            metrics=parts.metrics,
            readiness=lambda: readiness(store, platforms, backlog=backlog),
            refresh=backlog.measure,
            details=details,
        )
    )
