"""``personabot run``: host every configured bot until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import signal
from collections.abc import Callable

from adapters.base import BaseAdapter
from bot.app import Runtime, build_llm, runtime
from bot.clock import Clock
from bot.config import BotSettings, PersonaSettings, Secrets, Settings
from bot.election import Exclusive
from bot.errors import ConfigError
from bot.llm.base import BaseLLM

log = logging.getLogger("personabot.serve")


AdapterFactory = Callable[[BotSettings, PersonaSettings, Secrets], BaseAdapter]


def adapter_factory(platform: str) -> AdapterFactory:
    """The ``create_adapter`` function of ``adapters/<platform>.py``."""
    try:
        module = importlib.import_module(f"adapters.{platform}")
    except ImportError as exc:
        raise ConfigError([f"platform {platform!r} is not available: {exc}"]) from None
    factory: AdapterFactory = module.create_adapter
    return factory


async def _receive(rt: Runtime, adapter: BaseAdapter, lease_seconds: float) -> None:
    """Run an adapter; one that must be unique across processes runs only when elected."""
    if not adapter.exclusive:
        await adapter.run(rt.router)
        return
    # Identify and register commands while standing by: a takeover then only starts polling.
    await adapter.prepare(rt.router)
    election = Exclusive(
        store=rt.store, clock=rt.clock, name=f"receiver:{adapter.bot_key}", ttl=lease_seconds
    )
    await election.run(lambda: adapter.run(rt.router))


async def run_bots(
    settings: Settings,
    secrets: Secrets,
    *,
    llm: BaseLLM | None = None,
    clock: Clock | None = None,
) -> int:
    """``personabot run``: host every configured bot until SIGINT/SIGTERM; return exit code."""
    llm = llm or build_llm(settings, secrets, offline_fallback=False)
    if not settings.bots:
        raise ConfigError(["bots: no [[bots]] entries; add one (see config.example.toml)"])
    adapters: dict[str, tuple[PersonaSettings, BaseAdapter]] = {}
    for entry in settings.bots:
        persona = settings.persona(entry.persona)
        adapters[entry.key] = (persona, adapter_factory(entry.platform)(entry, persona, secrets))
    code = 0
    async with runtime(
        settings, llm=llm, adapters=adapters, clock=clock, with_retention=True
    ) as rt:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        running = {
            asyncio.create_task(_receive(rt, a, settings.queue.lease_seconds), name=f"bot {k}"): k
            for k, (_, a) in adapters.items()
        }
        stopper = asyncio.create_task(stop.wait())
        log.info("running %d bot(s): %s", len(running), ", ".join(running.values()))
        done, _ = await asyncio.wait([*running, stopper], return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task is not stopper and not task.cancelled() and task.exception() is not None:
                log.error("bot %s stopped: %s", running[task], task.exception())  # type: ignore[index]
                code = 1
        # Stop taking new input first; the runtime then lets running turns finish (grace).
        for task in [*running, stopper]:
            task.cancel()
        await asyncio.gather(*running, stopper, return_exceptions=True)
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)
    # Adapters close only after the runtime stopped: replies finishing during the shutdown
    # grace period must still reach the platform.
    for _, adapter in adapters.values():
        await adapter.aclose()
    return code
