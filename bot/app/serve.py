"""``personabot run``: host every configured bot until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Callable

from adapters.base import BaseAdapter
from bot.app.build import Runtime, build_llm, runtime
from bot.app.signals import EXIT_ABORTED, EarlySignals, ShutdownSignals
from bot.config import BotSettings, PersonaSettings, Secrets, Settings
from bot.core.clock import Clock
from bot.core.errors import ConfigError
from bot.core.llm import BaseLLM
from bot.runtime.election import Exclusive

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
    early: EarlySignals | None = None,
) -> int:
    """``personabot run``: host every configured bot until SIGINT/SIGTERM; return exit code
    (0 after a clean stop, 1 when a bot failed, ``EXIT_ABORTED`` after a second SIGINT)."""
    llm = llm or build_llm(settings, secrets, offline_fallback=False)
    if not settings.bots:
        raise ConfigError(["bots: no [[bots]] entries; add one (see config.example.toml)"])
    adapters: dict[str, tuple[PersonaSettings, BaseAdapter]] = {}
    signals = ShutdownSignals(grace_seconds=settings.queue.shutdown_grace_seconds)
    main = asyncio.current_task()
    # Installed before startup and kept until every adapter is closed: no signal can kill
    # the process half-way through a shutdown (see bot/app/signals.py).
    signals.install(early)
    try:
        for entry in settings.bots:
            persona = settings.persona(entry.persona)
            factory = adapter_factory(entry.platform)
            adapters[entry.key] = (persona, factory(entry, persona, secrets))
        if main is not None:
            signals.on_abort(main.cancel)  # during startup a second SIGINT gives up at once
        code = await _serve(settings, adapters, signals, llm, clock)
    except asyncio.CancelledError:
        if not signals.aborted or main is None:
            raise
        main.uncancel()
        code = EXIT_ABORTED
    finally:
        signals.on_abort(None)
        # Adapters close only after the runtime stopped: replies finishing during the
        # shutdown grace period must still reach the platform.
        for _, adapter in adapters.values():
            await adapter.aclose()
        signals.uninstall()
    if signals.aborted:
        code = EXIT_ABORTED
        log.warning("stopped by a second SIGINT: running turns were cancelled (exit %d)", code)
    else:
        log.info("stopped (exit %d)", code)
    return code


async def _serve(
    settings: Settings,
    adapters: dict[str, tuple[PersonaSettings, BaseAdapter]],
    signals: ShutdownSignals,
    llm: BaseLLM,
    clock: Clock | None,
) -> int:
    """Run the adapters on the runtime until a stop request or a bot fails."""
    code = 0
    async with runtime(
        settings, llm=llm, adapters=adapters, clock=clock, with_retention=True
    ) as rt:
        signals.on_abort(rt.scheduler.abort)  # from now on: cancel running turns
        running = {
            asyncio.create_task(_receive(rt, a, settings.queue.lease_seconds), name=f"bot {k}"): k
            for k, (_, a) in adapters.items()
        }
        stopper = asyncio.create_task(signals.stop.wait())
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
    return EXIT_ABORTED if signals.aborted else code
