"""``personabot run``: host every configured bot until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from adapters.base import BaseAdapter
from bot.app.build import Runtime
from bot.app.signals import EXIT_ABORTED, EarlySignals, ShutdownSignals
from bot.config import PersonaSettings
from bot.core.errors import ConfigError
from bot.core.llm import BaseLLM
from bot.core.ports import Outlet
from bot.runtime.election import Exclusive
from bot.runtime.loopwatch import watch_event_loop
from bot.store.sqlite import SQLiteStore

if TYPE_CHECKING:
    from bot.app.app import App
    from bot.app.web import BotState

log = logging.getLogger("personabot.serve")


async def _receive(rt: Runtime, adapter: BaseAdapter, lease_seconds: float) -> None:
    """Run an adapter; one that must be unique across processes runs only when elected."""
    handler = rt.router.for_bot(adapter.bot_key)  # its own command menu (per-bot plugins)
    if not adapter.exclusive:
        await adapter.run(handler)
        return
    # Identify and register commands while standing by: a takeover then only starts polling.
    await adapter.prepare(handler)
    election = Exclusive(
        store=rt.store, clock=rt.clock, name=f"receiver:{adapter.bot_key}", ttl=lease_seconds
    )
    await election.run(lambda: adapter.run(handler))


async def run_bots(app: App, *, early: EarlySignals | None = None) -> int:
    """``personabot run``: host every configured bot until SIGINT/SIGTERM; return exit code
    (0 after a clean stop, 1 when a bot failed, ``EXIT_ABORTED`` after a second SIGINT)."""
    settings = app.settings
    llm = app.build_llm(offline_fallback=False)
    if not settings.bots:
        raise ConfigError(["bots: no [[bots]] entries; add one (see config.example.toml)"])
    if settings.web.listen:
        from bot.app.web import console_token

        console_token(settings, app.secrets)  # refused before anything connects
    adapters: dict[str, tuple[PersonaSettings, BaseAdapter]] = {}
    signals = ShutdownSignals(grace_seconds=settings.queue.shutdown_grace_seconds)
    main = asyncio.current_task()
    # Installed before startup and kept until every adapter is closed: no signal can kill
    # the process half-way through a shutdown (see bot/app/signals.py).
    # A stop request during startup also gives up a plugin's lifespan that is still starting
    # (one that never returns would otherwise keep the process alive after SIGTERM).
    signals.on_stop_while_starting(app.give_up_starting)
    signals.install(early)
    try:
        for entry in settings.bots:
            adapters[entry.key] = (settings.persona(entry.default_persona), app.make_adapter(entry))
        if main is not None:
            signals.on_abort(main.cancel)  # during startup a second SIGINT gives up at once
        code = await _serve(app, adapters, signals, llm)
    except asyncio.CancelledError:
        if main is None or not (signals.aborted or app.start_given_up):
            raise
        main.uncancel()
        code = EXIT_ABORTED if signals.aborted else 0
    finally:
        signals.on_stop_while_starting(None)
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
    app: App,
    adapters: dict[str, tuple[PersonaSettings, BaseAdapter]],
    signals: ShutdownSignals,
    llm: BaseLLM,
) -> int:
    """Run the adapters on the runtime until a stop request, a bot ends or a task fails."""
    settings = app.settings
    hosted: dict[str, tuple[PersonaSettings, Outlet]] = dict(adapters)
    # The console closes first: no page reads a store the runtime already closed.
    async with (
        app.running(hosted, llm=llm, with_retention=True) as rt,
        contextlib.AsyncExitStack() as console,
    ):
        if settings.web.listen:
            from bot.app.web import console as web_console
            from bot.app.web.playground import playground

            assert rt.memory is not None
            store, memory = rt.store, rt.memory
            if isinstance(store, SQLiteStore):
                # A connection of its own, as `personabot web` has: one SQLite connection runs
                # its statements one at a time, so the console's reads would queue in front of
                # the turns' (scheduler lag p99 +50% with the pages polled once a second,
                # bench/web.py). WAL lets the two connections read side by side.
                store, memory = await console.enter_async_context(app.open_memory())
            try_out = await console.enter_async_context(playground(app, store))
            await console.enter_async_context(
                web_console(
                    settings,
                    app.secrets,
                    store=store,
                    memory=memory,
                    clock=rt.clock,
                    listen=settings.web.listen,
                    bot_state=lambda key: _state(adapters.get(key)),
                    playground=try_out,
                    metrics=rt.metrics,
                )
            )
        signals.on_stop_while_starting(None)  # started: the receivers' loop sees the stop
        scheduler = rt.scheduler

        def abort() -> None:
            scheduler.abort()  # from now on: cancel running turns
            app.abandon_stopping()  # and give up a plugin's close that never returns

        signals.on_abort(abort)
        lease = settings.queue.lease_seconds
        code = await _receive_until_stopped(rt, adapters, signals, lease)
    return EXIT_ABORTED if signals.aborted else code


async def _receive_until_stopped(
    rt: Runtime,
    adapters: dict[str, tuple[PersonaSettings, BaseAdapter]],
    signals: ShutdownSignals,
    lease_seconds: float,
) -> int:
    """Receive on every bot until a stop request, a bot ends or a background task fails
    (logged by ``rt.background``); the exit code so far (1 after a failure)."""
    background = rt.background
    watch = background.start("event loop watch", watch_event_loop(rt.metrics))
    receivers = [
        background.start(f"bot {k}", _receive(rt, a, lease_seconds))
        for k, (_, a) in adapters.items()
    ]
    log.info("running %d bot(s): %s", len(receivers), ", ".join(adapters))
    ends = [asyncio.create_task(signals.stop.wait()), asyncio.create_task(background.failed.wait())]
    await asyncio.wait([*receivers, *ends], return_when=asyncio.FIRST_COMPLETED)
    code = 1 if background.failed.is_set() else 0
    # Stop taking new input first; the runtime then lets running turns finish (grace).
    for end in ends:
        end.cancel()
    await background.cancel([*receivers, watch])
    await asyncio.gather(*ends, return_exceptions=True)
    return code


def _state(hosted: tuple[PersonaSettings, BaseAdapter] | None) -> BotState:
    """A bot's connection and its last failure, for the console's overview."""
    from bot.app.web import BotState  # lazily, as the console itself (jinja2)

    if hosted is None:
        return BotState("not connected", None)
    adapter = hosted[1]
    return BotState("connected" if adapter.connected else "not connected", adapter.last_problem)
