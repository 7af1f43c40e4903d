"""The turns: the pipeline that answers, the runner of check-ins and reminders, and the
queue (scheduler and ingestor) that starts them. One builder each, so that a change of a
constructor touches one small function."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

from bot.app.build.parts import Parts
from bot.app.build.policies import (
    agenda_policy,
    gap_policy,
    initiative_policy,
    session_policy,
)
from bot.app.build.services import Spending
from bot.config import PersonaSettings
from bot.core.clock import Clock
from bot.core.events import ConversationKey, Voice
from bot.core.llm import BaseLLM
from bot.core.ports import Outlet
from bot.metrics import Metrics
from bot.queue import Ingestor, Scheduler
from bot.queue.cutoff import Cutoffs
from bot.runtime.delivery import Delivery
from bot.runtime.extensions import Extensions
from bot.runtime.initiatives import AgendaKey, Persona, Proactive
from bot.runtime.limits import Limits
from bot.runtime.pipeline import AgendaLink, BotProfile, Bots, Pipeline, ReplyPolicies
from bot.runtime.previews import Previews
from bot.runtime.reminders import reminder_extensions
from bot.runtime.streaming import StopSignals
from bot.runtime.tools import ToolPolicy
from bot.runtime.turn import TurnParts
from bot.runtime.usage import Accounting
from bot.runtime.voice import Voices
from bot.store.base import BaseStore
from memory.service import Memory


@dataclass(frozen=True, slots=True)
class Agenda:
    """Check-ins and reminders, when some bot here uses them (docs/initiatives.md)."""

    #: Runs a due check-in or reminder under the turn lease.
    proactive: Proactive
    #: Finds them due, on the runtime's clock.
    scheduler: Scheduler[AgendaKey]


def turn_parts(
    store: BaseStore,
    *,
    llm: BaseLLM,
    clock: Clock,
    memory: Memory,
    outlet_for: Callable[[str], Outlet | None],
    voice_of: Callable[[str, str], Voice | None] | None = None,
    holder: str | None = None,
    metrics: Metrics | None = None,
    accounting: Accounting | None = None,
    limits: Limits | None = None,
    tools: ToolPolicy | None = None,
    stops: StopSignals | None = None,
    cutoffs: Cutoffs | None = None,
    voices: Voices | None = None,
) -> TurnParts:
    """The parts of turns on one store, each part taking it as the contract it uses; what is
    not given is made here (a fresh holder name, the metrics, accounting under ``limits``,
    the stop requests); generations are cut only with ``cutoffs``."""
    metrics = metrics or Metrics()
    return TurnParts(
        leases=store,
        llm=llm,
        clock=clock,
        memory=memory,
        delivery=Delivery(store=store, clock=clock, outlet_for=outlet_for, voice_of=voice_of),
        accounting=accounting
        or Accounting(store=store, clock=clock, metrics=metrics, limits=limits),
        previews=Previews(
            sessions=store,
            leases=store,
            clock=clock,
            stops=stops or StopSignals(store=store, clock=clock),
        ),
        metrics=metrics,
        holder=holder or f"worker-{uuid.uuid4().hex[:12]}",
        tools=tools or ToolPolicy(),
        cutoffs=cutoffs,
        voices=voices,
    )


def _runtime_turn_parts(
    parts: Parts,
    memory: Memory,
    spending: Spending,
    outlet_for: Callable[[str], Outlet | None],
    tools: ToolPolicy | None = None,
    cutoffs: Cutoffs | None = None,
) -> TurnParts:
    """``turn_parts`` on the runtime's store, model, turn clock, holder, metrics and spending."""
    return turn_parts(
        parts.store,
        llm=parts.llm,
        clock=parts.turn_clock,
        memory=memory,
        outlet_for=outlet_for,
        voice_of=parts.hosted.voice_of,
        holder=parts.holder,
        metrics=parts.metrics,
        accounting=spending.accounting,
        tools=tools,
        cutoffs=cutoffs,
        voices=parts.voices,
    )


def build_agenda(
    parts: Parts, memory: Memory, spending: Spending, extensions: Extensions
) -> tuple[Agenda | None, Extensions]:
    """The agenda (None when no bot uses check-ins and reminders are off) and the extensions
    with the ``remind_me`` tool added when reminders are on."""
    settings, hosted = parts.settings, parts.hosted
    schedule = settings.schedule
    profiles = hosted.profiles
    proactive = Proactive(
        store=parts.store,
        parts=_runtime_turn_parts(
            parts, memory, spending, lambda bot: profiles[bot].outlet if bot in profiles else None
        ),
        personas={key: _persona(profile, hosted.bots[key][0]) for key, profile in profiles.items()},
        variants={
            (key, pid): _persona(profile, settings.persona(pid))
            for (key, pid), profile in hosted.variants.items()
        },
        policy=agenda_policy(settings),
    )
    if not schedule.reminders and not any(proactive.checks_in(k) for k in profiles):
        return None, extensions
    if schedule.reminders:
        extensions = reminder_extensions(proactive, extensions)
    scheduler = Scheduler(
        store=parts.store,
        clock=parts.clock,
        run_turn=proactive.run,
        bots=list(profiles),
        due=proactive.due,
        scan_interval=schedule.scan_interval_seconds,
        max_concurrent=2,
        busy_backoff=2.0,
        shutdown_grace=settings.queue.shutdown_grace_seconds,
    )
    return Agenda(proactive, scheduler), extensions


def _persona(profile: BotProfile, persona: PersonaSettings) -> Persona:
    """What the runner of check-ins needs of one persona of a bot."""
    return Persona(
        profile.pin,
        initiative_policy(persona),
        profile.lease_seconds,
        profile.memory,
        persona_id=persona.id,
    )


def build_pipeline(
    parts: Parts,
    memory: Memory,
    spending: Spending,
    extensions: Extensions,
    agenda: Agenda | None,
) -> Pipeline:
    """One turn: lease, prompt, model, final check, send (bot/runtime/pipeline.py); with
    ``[queue] cut_stale`` its generations are cut by newer input (the registry the ingestor
    of ``build_queue`` tells, ``Pipeline.cutoffs``)."""
    settings = parts.settings
    bots = Bots(parts.hosted.profiles, parts.hosted.variants)
    cutoffs = Cutoffs() if settings.queue.cut_stale else None
    tools = ToolPolicy(**settings.tools.model_dump())
    return Pipeline(
        store=parts.store,
        parts=_runtime_turn_parts(parts, memory, spending, bots.outlet_for, tools, cutoffs),
        bots=bots,
        policies=ReplyPolicies(
            gap_policy(settings),
            settings.llm.trouble_notice,
            settings.llm.retry_max_seconds,
            parts.hosted.languages,
        ),
        limits=spending.limits,
        extensions=extensions,
        agenda=None if agenda is None else AgendaLink(agenda.proactive, agenda.scheduler.wake),
        scenes=parts.store,
    )


def build_queue(parts: Parts, pipeline: Pipeline) -> tuple[Scheduler[ConversationKey], Ingestor]:
    """The scheduler that starts due turns and the ingestor that arms their timers."""
    queue = parts.settings.queue
    scheduler = Scheduler(
        store=parts.store,
        clock=parts.clock,
        run_turn=pipeline.run_turn,
        bots=list(parts.hosted.profiles),
        scan_interval=queue.scan_interval_seconds,
        max_concurrent=queue.max_concurrent_turns,
        shutdown_grace=queue.shutdown_grace_seconds,
        metrics=parts.metrics,
        claims=pipeline,  # due turns are claimed, not raced (docs/scaling.md#claims)
    )
    ingestor = Ingestor(
        store=parts.store,
        clock=parts.clock,
        policy_for=lambda bot: parts.hosted.profile_of(bot).queue,
        sessions=session_policy(parts.settings),
        wake=scheduler.wake,
        cutoffs=pipeline.cutoffs,
    )
    return scheduler, ingestor
