"""The runtime of one process, assembled top-down from the builders of this package."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bot.app.build.background import Background, start_work
from bot.app.build.parts import Parts
from bot.app.build.policies import hosted
from bot.app.build.readiness import open_health
from bot.app.build.routing import build_exports, build_router
from bot.app.build.services import build_metrics, build_services
from bot.app.build.stores import open_store
from bot.app.build.turns import build_agenda, build_pipeline, build_queue
from bot.app.health import HealthServer
from bot.config import PersonaSettings, Settings
from bot.core import tasks
from bot.core.clock import Clock, SystemClock
from bot.core.events import ConversationKey
from bot.core.llm import BaseLLM
from bot.core.media import Transcriber
from bot.core.ports import Outlet
from bot.mcp import ServerSpec

if TYPE_CHECKING:
    from bot.mcp.servers import McpServers
from bot.metrics import Metrics
from bot.queue import Ingestor, Scheduler
from bot.runtime.exports import Exports
from bot.runtime.extensions import Extensions
from bot.runtime.initiatives import AgendaKey
from bot.runtime.pipeline import Pipeline
from bot.runtime.router import Router
from bot.runtime.voice import PersonaVoice, Voices
from bot.store.base import BaseStore
from memory.service import Memory


@dataclass(frozen=True, slots=True)
class Runtime:
    """The wired runtime of one process."""

    store: BaseStore
    llm: BaseLLM
    clock: Clock
    pipeline: Pipeline
    scheduler: Scheduler[ConversationKey]
    router: Router
    adapters: Mapping[str, Outlet]
    metrics: Metrics
    health: HealthServer | None = None
    ingestor: Ingestor | None = None
    memory: Memory | None = None
    exports: Exports | None = None
    extensions: Extensions = Extensions()  # noqa: RUF009 - frozen, never mutated
    #: Check-ins and reminders (None: no bot here uses them).
    agenda: Scheduler[AgendaKey] | None = None
    #: Every task the runtime runs; ``personabot run`` adds the bots' receivers.
    background: Background = field(default_factory=Background)
    #: The MCP servers whose tools the model may call (None: none configured).
    mcp: McpServers | None = None


@dataclass(frozen=True, slots=True)
class Seams:
    """Parts an embedding program or a test supplies instead of the configured ones."""

    #: The process's name in leases (default: a random worker id).
    holder: str | None = None
    #: The clock of turns, memory, limits and exports (default: the runtime's clock).
    turn_clock: Clock | None = None
    #: The model of summaries and memory tasks (default: the reply model).
    memory_llm: BaseLLM | None = None
    #: Background work of a long-running process: outbox recovery at start, memory sweeps.
    background: bool = True
    #: More admins by bot key (exempt from the per-person limits): the playground's operator.
    admins: Mapping[str, frozenset[str]] = field(default_factory=dict)
    #: Serve ``[observability] listen`` (health, readiness, metrics). Once per process: the
    #: playground's runtime inside ``personabot run`` leaves it to the bots' runtime (binding
    #: the port twice failed the start with "address already in use").
    health: bool = True


@contextlib.asynccontextmanager
async def runtime(
    settings: Settings,
    *,
    llm: BaseLLM,
    adapters: Mapping[str, tuple[PersonaSettings, Outlet]],
    clock: Clock | None = None,
    store: BaseStore | None = None,
    with_retention: bool = False,
    extensions: Extensions = Extensions(),  # noqa: B008 - frozen, never mutated
    seams: Seams = Seams(),
    transcriber: Transcriber | None = None,
    voices: Mapping[str, PersonaVoice] | None = None,
    plugins: AbstractAsyncContextManager[object] = contextlib.nullcontext(),  # noqa: B008
    mcp: Sequence[ServerSpec] = (),
) -> AsyncIterator[Runtime]:
    """Open the store, wire queue, pipeline and router, run the scheduler; stop on exit.

    The one place the runtime is assembled: ``personabot run`` and ``chat`` (through
    ``App``) and the tests' harness come here. A ``store`` passed in is opened (if it is not)
    but closed by its owner, not here; so is the ``transcriber`` of voice notes (None: voice
    notes are not transcribed), and the personas' ``voices`` (by persona id; docs/voices.md).
    ``plugins``: the plugins' lifespans (bot/app/lifespans.py).
    ``mcp``: the MCP servers (bot/mcp), connected in the background: none delays the start.

    Everything opened is registered on ``exits`` as it is opened, so a failed start (a locked
    database, a port in use) closes exactly what it opened and never leaves the process
    hanging. Exits run last-pushed first: the agenda and the scheduler stop (running turns
    get the grace period), the loops are cancelled, then the health server, the exports, the
    agenda's runner, the pipeline, memory, the store, the plugins' lifespans, the model close.
    """
    clock = clock or SystemClock()
    bots = hosted(settings, adapters, seams.admins)
    metrics = build_metrics(settings, bots)
    async with contextlib.AsyncExitStack() as exits:
        exits.push_async_callback(llm.aclose)
        await exits.enter_async_context(plugins)
        opened = await open_store(settings, store, exits)
        # Closed after the schedulers stopped: a turn finishing in the grace may call a tool.
        servers = None
        if mcp:
            from bot.mcp.servers import McpServers  # the SDK, only when a server is set

            servers = McpServers(mcp, clock=clock, metrics=metrics)
            await exits.enter_async_context(servers)
            extensions = extensions.with_source(servers)
        holder = seams.holder or f"worker-{uuid.uuid4().hex[:12]}"
        turn_clock = seams.turn_clock or clock
        spoken = None
        if voices:
            spoken = Voices(voices=voices, store=opened, clock=turn_clock, metrics=metrics)
        parts = Parts(settings, bots, opened, llm, clock, turn_clock, metrics, holder, spoken)
        spending, memory = build_services(parts, seams.memory_llm or llm, transcriber)
        exits.push_async_callback(memory.aclose)
        agenda, extensions = build_agenda(parts, memory, spending, extensions)
        pipeline = build_pipeline(parts, memory, spending, extensions, agenda)
        # Closed after the schedulers stopped (exits run last-pushed first).
        exits.push_async_callback(pipeline.aclose)
        if agenda is not None:
            exits.push_async_callback(agenda.proactive.aclose)
        scheduler, ingestor = build_queue(parts, pipeline)
        exports = build_exports(parts, memory, seams.holder)
        # Exports still on the wire get the shutdown grace, at most 5 seconds.
        exits.push_async_callback(exports.aclose, min(5.0, settings.queue.shutdown_grace_seconds))
        # The router's work that outlives an event (a command claimed by a run elsewhere).
        later = tasks.Background()
        exits.push_async_callback(later.aclose)
        router = build_router(
            parts, ingestor, memory, exports, pipeline, (extensions, agenda), later=later
        )
        if seams.background:
            await pipeline.recover_outbox(older_than=clock.now())
        details = None if servers is None else servers.status
        health = await open_health(parts, exits, details) if seams.health else None
        background = Background()
        exits.push_async_callback(background.aclose)
        work = (scheduler, agenda)
        start_work(
            background,
            parts,
            memory,
            work,
            sweeps=seams.background,
            retention=with_retention,
            cutoffs=pipeline.cutoffs,
        )
        yield Runtime(
            store=opened,
            llm=llm,
            clock=clock,
            pipeline=pipeline,
            scheduler=scheduler,
            router=router,
            adapters=bots.outlets,
            metrics=metrics,
            health=health,
            ingestor=ingestor,
            memory=memory,
            exports=exports,
            extensions=extensions,
            agenda=None if agenda is None else agenda.scheduler,
            background=background,
            mcp=servers,
        )
