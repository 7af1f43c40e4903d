"""The scheduler of the coalescing queue: runs due turns.

The scheduler finds due timers through
in-process wake-ups (low latency) and a periodic scan of the store (timers armed by other
processes or before a restart), and runs at most ``max_concurrent`` turns at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Generic, TypeVar

from bot.core.clock import Clock
from bot.core.events import (
    ConversationKey,
)
from bot.metrics import Metrics
from bot.store.contracts import QueueStore

log = logging.getLogger("personabot.queue")

K = TypeVar("K", bound=Hashable)
RunTurn = Callable[[K], Awaitable[str]]
#: Due work up to a time, earliest first, at most ``limit``: (key, due time) pairs.
DueSource = Callable[[float, int], Awaitable[Sequence[tuple[K, float]]]]


class Scheduler(Generic[K]):
    """Runs due turns of the hosted bots, never two at once for one conversation here.

    The work comes from the queue's timers; with ``due`` from another source of due work
    keyed by ``K`` (check-ins and reminders: bot/runtime/initiatives.py), with the same
    wake-ups, scan, concurrency bound and backoff.
    """

    def __init__(
        self,
        *,
        store: QueueStore,
        clock: Clock,
        run_turn: RunTurn[K],
        bots: Sequence[str],
        due: DueSource[K] | None = None,
        scan_interval: float = 1.0,
        max_concurrent: int = 16,
        busy_backoff: float | None = None,
        shutdown_grace: float = 10.0,
        metrics: Metrics | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._run_turn = run_turn
        self._bots = tuple(bots)
        self._scan_interval = scan_interval
        self._busy_backoff = scan_interval if busy_backoff is None else busy_backoff
        self._grace = shutdown_grace
        self._metrics = metrics
        self._slots = asyncio.Semaphore(max_concurrent)
        self._wakeup = asyncio.Event()
        self._due: DueSource[K] = due or self._due_timers  # type: ignore[assignment]
        self._running: dict[K, asyncio.Task[None]] = {}
        self._skip_until: dict[K, float] = {}
        self._stopping = False
        self.turns_started = 0

    async def _due_timers(self, now: float, limit: int) -> list[tuple[ConversationKey, float]]:
        timers = await self._store.due_timers(now, limit=limit, bots=self._bots)
        return [(t.conversation, t.due_at) for t in timers]

    def wake(self, due_at: float | None = None) -> None:
        """Tell the scheduler a timer was armed (in this process)."""
        self._wakeup.set()

    @property
    def active(self) -> int:
        """Turns running now."""
        return len(self._running)

    def stop(self) -> None:
        """Stop taking new work (running turns go on)."""
        self._stopping = True
        self._wakeup.set()

    def abort(self) -> None:
        """Stop now: cancel running turns (each releases its lease in the pipeline's
        ``finally``; their messages stay pending with the timer armed)."""
        self.stop()
        for task in list(self._running.values()):
            task.cancel()

    async def run(self) -> None:
        """Loop until stopped: start due turns, then sleep until the next due time or wake-up."""
        while not self._stopping:
            await self.tick()
            await self._sleep_until_next()
        await self.drain(self._grace)

    async def drain(self, grace: float | None = None) -> None:
        """Wait for running turns; cancel those still running after ``grace`` seconds.

        A cancelled turn releases its lease (the pipeline's ``finally``) and its messages stay
        pending with their timer armed, so the next start picks them up.
        """
        tasks = list(self._running.values())
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=grace)
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def tick(self) -> int:
        """Start every due turn that is not running or backing off; return how many."""
        now = self._clock.now()
        started = 0
        for key, due_at in await self._due(now, 200):
            if self._stopping:
                break  # stopped (or aborted) while the timers were read: start nothing new
            if key in self._running or self._skip_until.get(key, 0.0) > now:
                continue
            self._skip_until.pop(key, None)
            self._running[key] = asyncio.create_task(self._turn(key, due_at), name=f"turn {key}")
            started += 1
        return started

    async def _turn(self, key: K, due_at: float) -> None:
        try:
            async with self._slots:
                self.turns_started += 1
                if self._metrics is not None and isinstance(key, ConversationKey):
                    lag = max(0.0, self._clock.now() - due_at)
                    self._metrics.scheduler_lag.labels(*self._metrics.labels(key)).observe(lag)
                outcome = await self._run_turn(key)
            if outcome == "busy":
                self._skip_until[key] = self._clock.now() + self._busy_backoff
        except Exception:
            log.exception("turn of %s failed", key)
            self._skip_until[key] = self._clock.now() + self._busy_backoff
        finally:
            self._running.pop(key, None)
            self._wakeup.set()

    async def _sleep_until_next(self) -> None:
        # Clear before reading the store, never after: a timer armed while the query below
        # runs (another connection, so the query may not see it) sets the event again, and
        # the wait returns at once instead of sleeping past it (a lost wake-up).
        self._wakeup.clear()
        if self._stopping:
            return  # stopped while the last tick ran: its wake-up was just cleared
        now = self._clock.now()
        # The earliest timer that this scheduler could start: a timer whose turn is running
        # here, or backing off after a lost CAS, must not hide a newer one that falls due
        # sooner (head-of-line delay).
        upcoming = await self._due(
            now + self._scan_interval, len(self._running) + len(self._skip_until) + 1
        )
        startable = [
            due_at
            for key, due_at in upcoming
            if key not in self._running and self._skip_until.get(key, 0.0) <= now
        ]
        delay = self._scan_interval
        if startable:
            delay = min(delay, max(0.0, min(startable) - now))
        backoffs = [t - now for t in self._skip_until.values() if t > now]
        if backoffs:
            delay = min([delay, *backoffs])
        waker = asyncio.create_task(self._wakeup.wait())
        sleeper = asyncio.create_task(self._clock.sleep(delay))
        try:
            await asyncio.wait({waker, sleeper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (waker, sleeper):
                task.cancel()
            await asyncio.gather(waker, sleeper, return_exceptions=True)
