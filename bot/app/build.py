"""Composition root: the only place that reads Settings and wires the runtime together."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from adapters.base import BaseAdapter
from bot.app.health import HealthServer
from bot.config import (
    BotSettings,
    LLMSettings,
    PersonaSettings,
    Secrets,
    Settings,
    TranscriptionConfig,
    listen_address,
    unknown_name,
)
from bot.core.agenda import InitiativePolicy, QuietHours
from bot.core.clock import Clock, SystemClock
from bot.core.errors import ConfigError
from bot.core.events import (
    ConversationKey,
    Inbound,
    QueueBacklog,
    QueuePolicy,
    SessionKey,
    SessionPolicy,
)
from bot.core.llm import BaseLLM
from bot.core.media import MediaSource, Transcriber
from bot.core.ports import Outlet, StreamSettings
from bot.llm.offline import OfflineLLM
from bot.llm.transcription import OpenAITranscriber, TranscriptionSettings, transcriber_from
from bot.metrics import Metrics, Price
from bot.queue import Ingestor, Scheduler
from bot.runtime.access import AccessPolicy
from bot.runtime.commands import Commands, PersonaChoice, export_document
from bot.runtime.delivery import Delivery
from bot.runtime.exports import ExportPolicy, Exports
from bot.runtime.extensions import Extensions
from bot.runtime.initiatives import AgendaKey, AgendaPolicy, Persona, Proactive
from bot.runtime.limits import LimitPolicy, Limits
from bot.runtime.media import MediaPreparer, MediaSettings
from bot.runtime.pipeline import AgendaLink, BotProfile, Bots, GapPolicy, Pipeline, ReplyPolicies
from bot.runtime.reminders import AgendaCommands, reminder_extensions
from bot.runtime.router import Router
from bot.runtime.stats import usage_report
from bot.runtime.tools import ToolPolicy
from bot.runtime.turn import TurnParts
from bot.runtime.usage import Accounting
from bot.store.base import BaseStore
from bot.store.postgres import PostgresStore, is_postgres_url
from bot.store.sqlite import SQLiteStore, sqlite_path
from memory.assemble import Budget, PersonaPin
from memory.lorebook import oversized, oversized_text
from memory.macros import MacroContext, expand, speaker_name
from memory.retention.worker import Retention, RetentionPolicy
from memory.service import Memory, MemoryPolicy

log = logging.getLogger("personabot.app")

#: Makes the adapter of one ``[[bots]]`` entry (docs/plugins.md#platforms).
PlatformFactory = Callable[[BotSettings, PersonaSettings, Secrets], BaseAdapter]
#: Makes the model client of ``[llm]`` (docs/plugins.md#model-providers).
ProviderFactory = Callable[[LLMSettings, Secrets], BaseLLM]
#: Makes the transcriber of ``[transcription] provider = name`` (bot.core.media.Transcriber;
#: one with an ``async aclose()`` is closed when the process stops).
TranscriberFactory = Callable[[TranscriptionConfig, Secrets], Transcriber]


def builtin_platform(name: str) -> PlatformFactory:
    """The ``create_adapter`` of ``adapters.<name>``, imported only when a bot uses it."""

    def create(entry: BotSettings, persona: PersonaSettings, secrets: Secrets) -> BaseAdapter:
        module = importlib.import_module(f"adapters.{name}")
        adapter: BaseAdapter = module.create_adapter(entry, persona, secrets)
        return adapter

    return create


def anthropic_provider(llm: LLMSettings, secrets: Secrets) -> BaseLLM:
    """Claude through the Messages API; ConfigError without ``ANTHROPIC_API_KEY``."""
    key = secrets.anthropic_api_key
    if key is None:
        raise ConfigError(
            [
                "ANTHROPIC_API_KEY: not set in the environment (needed by llm.provider = "
                "'anthropic'; set llm.provider = 'offline' to run without Claude)"
            ]
        )
    from bot.llm.anthropic import AnthropicLLM

    return AnthropicLLM(
        api_key=key,
        base_url=llm.base_url,
        timeout_seconds=llm.timeout_seconds,
        max_retries=llm.max_retries,
    )


def offline_provider(llm: LLMSettings, secrets: Secrets) -> BaseLLM:
    """The offline model: no network, echoes what it received."""
    return OfflineLLM()


def builtin_platforms() -> dict[str, PlatformFactory]:
    """The platforms personabot ships."""
    return {name: builtin_platform(name) for name in ("telegram", "discord")}


def builtin_providers() -> dict[str, ProviderFactory]:
    """The model providers personabot ships."""
    return {"anthropic": anthropic_provider, "offline": offline_provider}


def unknown(kind: str, key: str, name: str, installed: Mapping[str, object]) -> ConfigError:
    """The error for a platform or provider nobody registered, listing what is installed."""
    return ConfigError([unknown_name(kind, key, name, installed)])


def build_llm(
    settings: Settings,
    secrets: Secrets,
    *,
    offline_fallback: bool,
    providers: Mapping[str, ProviderFactory] | None = None,
) -> BaseLLM:
    """The configured model; without an API key, the offline model only if allowed."""
    providers = builtin_providers() if providers is None else providers
    name = settings.llm.provider
    factory = providers.get(name)
    if factory is None:
        raise unknown("model provider", "llm.provider", name, providers)
    if name == "anthropic" and secrets.anthropic_api_key is None and offline_fallback:
        return OfflineLLM()
    return factory(settings.llm, secrets)


def build_store(settings: Settings) -> BaseStore:
    """The configured store backend.

    PostgreSQL decides lease expiry by the database server's clock, so that processes on
    several machines never disagree about who holds a conversation.
    """
    storage = settings.storage
    url = storage.url
    if url.startswith("sqlite:"):
        return SQLiteStore(path=sqlite_path(url), busy_timeout_ms=storage.busy_timeout_ms)
    if is_postgres_url(url):
        return PostgresStore(
            dsn=url,
            min_pool=storage.min_pool_size,
            max_pool=storage.max_pool_size,
            use_db_clock=True,
            connect_timeout=storage.connect_timeout_seconds,
        )
    scheme = url.split(":", 1)[0]
    raise ConfigError(
        [
            f"storage.url: unsupported scheme {scheme!r} "
            "(use sqlite:///path or postgresql://user@host/db)"
        ]
    )


def session_policy(settings: Settings) -> SessionPolicy:
    """Session lifecycle rules from [sessions]."""
    s = settings.sessions
    return SessionPolicy(
        idle_seconds=s.idle_timeout_minutes * 60 if s.idle_timeout_minutes else None,
        daily_reset_hour=s.daily_reset_hour,
        utc_offset_hours=s.timezone_offset_hours,
    )


def pin_for(persona: PersonaSettings) -> PersonaPin:
    """The persona's pinned layer; its lorebook's bad patterns and the entries too large for
    its token_budget are logged here, once, not on every prompt that skips them."""
    pin = persona.pin()
    book = pin.lorebook
    for bad in book.bad_keys() if book is not None else ():
        log.warning(
            "persona %r: lorebook entry %r: %s (%s); the key never matches",
            persona.id,
            bad.label,
            bad.reason,
            bad.detail,
        )
    if book is not None and (large := oversized(book.entries, book.token_budget, macro_view(pin))):
        log.warning("persona %r: %s", persona.id, oversized_text(large, book.token_budget))
    return pin


def macro_view(pin: PersonaPin) -> Callable[[str], str]:
    """A lorebook entry's content as a prompt would hold it, for counting its tokens before
    any chat (``{{user}}`` as "User")."""
    context = MacroContext(pin.char, "User", "size")
    return lambda text: expand(text, context)


def persona_choices(
    settings: Settings, key: str, persona: PersonaSettings
) -> tuple[PersonaChoice, ...]:
    """The personas bot ``key`` may speak as, its default (``persona``) first."""
    entry = next((b for b in settings.bots if b.key == key), None)
    if entry is None:  # the terminal chat, or a test's bot: one persona
        return (PersonaChoice(persona.id, persona.name),)
    return tuple(PersonaChoice(p.id, p.name) for p in map(settings.persona, entry.persona_ids))


def greeting_of(pin: PersonaPin, session: SessionKey, inbound: Inbound) -> str:
    """The opening of ``session``, as its pin says it was (memory/pin.py), for the person who
    asked (``{{user}}``)."""
    return pin.greeting(
        session, group=not inbound.is_private, user=speaker_name(inbound.display_name)
    )


def memory_policy(settings: Settings, persona: PersonaSettings) -> MemoryPolicy:
    """[memory] with the persona's override applied."""
    memory = settings.memory_for(persona)
    return MemoryPolicy(
        budget=Budget(
            window_messages=memory.window_messages,
            prompt_tokens=memory.prompt_budget_tokens,
            summary_tokens=memory.summary_budget_tokens,
            memory_tokens=memory.user_memory_budget_tokens,
            max_input_chars=settings.limits.max_input_chars,
            turn_tokens=settings.queue_for(persona).max_turn_tokens,
        ),
        summary_model=memory.summary_model or persona.model,
        private_memory_in_groups=memory.private_memory_in_groups,
        share_across_groups=memory.share_across_groups,
        extract_after_idle_seconds=memory.extract_after_idle_minutes * 60,
        max_images=settings.media.max_images,
    )


def initiative_policy(persona: PersonaSettings) -> InitiativePolicy:
    """``[personas.initiative]`` as the rules read it."""
    i = persona.initiative
    return InitiativePolicy(
        enabled=i.enabled,
        after_idle_seconds=i.after_idle_hours * 3600,
        quiet=QuietHours.parse(i.quiet_hours) if i.quiet_hours else QuietHours(0, 0),
        max_unanswered=i.max_unanswered,
        min_interval_seconds=i.min_interval_hours * 3600,
        groups=i.groups,
    )


def profile_for(
    settings: Settings, persona: PersonaSettings, key: str, outlet: Outlet
) -> BotProfile:
    """Everything a turn of this bot needs."""
    queue = settings.queue_for(persona)
    entry = next((b for b in settings.bots if b.key == key), None)
    stream = (
        StreamSettings()  # the terminal chat (no bot entry): the stream is printed as it comes
        if entry is None
        else StreamSettings(entry.stream, entry.stream_interval_seconds, entry.stop_button)
    )
    return BotProfile(
        key=key,
        pin=pin_for(persona),
        queue=QueuePolicy(debounce=queue.debounce_seconds, max_wait=queue.max_wait_seconds),
        memory=memory_policy(settings, persona),
        outlet=outlet,
        lease_seconds=queue.lease_seconds,
        max_turn_messages=queue.max_turn_messages,
        refusal_message=persona.refusal_message or settings.llm.refusal_message,
        rejected_notice=settings.llm.rejected_notice,
        persona_id=persona.id,
        stream=stream,
    )


def build_memory(
    settings: Settings,
    store: BaseStore,
    llm: BaseLLM,
    clock: Clock,
    *,
    policy_for: Callable[[str], MemoryPolicy] | None = None,
    account: Accounting | None = None,
    media: MediaPreparer | None = None,
) -> Memory:
    """The memory service; by default each bot's policy from its persona (the first
    persona's for a bot not in ``[[bots]]``, e.g. the console)."""
    if policy_for is None:
        by_bot = {
            b.key: memory_policy(settings, settings.persona(b.default_persona))
            for b in settings.bots
        }
        default = memory_policy(settings, settings.persona(None))

        def policy_for(bot: str) -> MemoryPolicy:
            return by_bot.get(bot, default)

    return Memory(
        store=store, llm=llm, clock=clock, policy_for=policy_for, account=account, media=media
    )


def openai_transcriber(config: TranscriptionConfig, secrets: Secrets) -> OpenAITranscriber:
    """The built-in transcriber: an OpenAI-compatible ``/audio/transcriptions`` client."""
    key = secrets.get(config.api_key_env) if config.api_key_env else None
    if config.api_key_env and key is None:
        raise ConfigError(
            [f"transcription.api_key_env: the environment variable {config.api_key_env} is unset"]
        )
    return transcriber_from(
        TranscriptionSettings(
            url=config.url,
            model=config.model,
            api_key_env=config.api_key_env,
            language=config.language,
            prompt=config.prompt,
            timeout_seconds=config.timeout_seconds,
            max_seconds=config.max_seconds,
        ),
        key,
    )


def builtin_transcribers() -> dict[str, TranscriberFactory]:
    """The transcription providers personabot ships."""
    return {"openai": openai_transcriber}


def build_transcriber(
    settings: Settings,
    secrets: Secrets,
    transcribers: Mapping[str, TranscriberFactory] | None = None,
) -> Transcriber | None:
    """The configured transcriber of voice notes, or None when there is none."""
    config = settings.transcription
    if not config.enabled:
        return None
    transcribers = builtin_transcribers() if transcribers is None else transcribers
    factory = transcribers.get(config.provider)
    if factory is None:
        raise unknown(
            "transcription provider", "transcription.provider", config.provider, transcribers
        )
    return factory(config, secrets)


def media_source(outlet: object) -> MediaSource | None:
    """The adapter's way to fetch the media it received (its ``media``), if it has one."""
    source = getattr(outlet, "media", None)
    return source if callable(getattr(source, "fetch", None)) else None


def build_media(
    settings: Settings,
    store: BaseStore,
    clock: Clock,
    outlets: Mapping[str, Outlet],
    *,
    transcriber: Transcriber | None,
    metrics: Metrics | None = None,
) -> MediaPreparer:
    """Fetching, downscaling and transcribing of each turn's media (bot/runtime/media.py)."""
    media = settings.media
    return MediaPreparer(
        store=store,
        sources=lambda bot: media_source(outlets.get(bot)),
        settings=MediaSettings(
            max_download_bytes=int(media.max_download_mb * 1024 * 1024),
            fetch_timeout_seconds=media.fetch_timeout_seconds,
            transcribe_max_seconds=settings.transcription.max_seconds,
            transcribe_timeout_seconds=settings.transcription.timeout_seconds,
        ),
        clock=clock,
        transcriber=transcriber,
        metrics=metrics,
    )


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
) -> AsyncIterator[Runtime]:
    """Open the store, wire queue, pipeline and router, run the scheduler; stop on exit.

    The one place the runtime is assembled: ``personabot run`` and ``chat`` (through
    ``App``), the admin commands (``open_memory``) and the tests' harness all come here. A
    ``store`` passed in is opened (if it is not) but closed by its owner, not here; so is the
    ``transcriber`` of voice notes (None: voice notes are not transcribed).
    """
    clock = clock or SystemClock()
    turn_clock = seams.turn_clock or clock
    owned = store is None
    store = store or build_store(settings)
    profiles = {
        key: profile_for(settings, persona, key, adapter)
        for key, (persona, adapter) in adapters.items()
    }
    # Each bot's other personas (docs/personas.md#several-personas), by (bot, persona id).
    cast = {key: persona_choices(settings, key, persona) for key, (persona, _) in adapters.items()}
    variants = {
        (key, choice.id): profile_for(settings, settings.persona(choice.id), key, adapter)
        for key, (persona, adapter) in adapters.items()
        for choice in cast[key]
        if choice.id != persona.id
    }

    # Each bot's default persona, for /export of sessions that chose none.
    defaults = {b.key: b.default_persona for b in settings.bots} | {
        key: persona.id for key, (persona, _) in adapters.items()
    }

    def profile_of(bot: str, persona: str | None = None) -> BotProfile:
        # A conversation of a bot not hosted here (rows written by another process's bots,
        # reached by a person's erasure or export) is handled with the first bot's policies.
        default = profiles.get(bot) or next(iter(profiles.values()))
        return variants.get((bot, persona or ""), default)

    access = {
        key: _with_admins(policy, seams.admins.get(key, frozenset()))
        for key, policy in access_policies(settings, adapters).items()
    }
    prices = {m: Price(p.input, p.output) for m, p in settings.llm.prices.items()}
    metrics = Metrics(personas={k: p.id for k, (p, _) in adapters.items()}, prices=prices)

    def is_admin(bot: str, user: str) -> bool:
        policy = access.get(bot)
        return policy is not None and policy.is_admin(user)

    # Everything opened is registered here as it is opened, so a failed start (a locked
    # database, a port in use) closes exactly what it opened and never leaves the process
    # hanging; on a normal exit the scheduler drains first and the store closes last.
    async with contextlib.AsyncExitStack() as exits:
        exits.push_async_callback(llm.aclose)
        if owned:
            await exits.enter_async_context(store)
        else:
            await store.open()
        limits = settings.limits
        spending = Limits(
            store=store,
            clock=turn_clock,
            policy=LimitPolicy(
                limits.user_turns_per_hour,
                limits.user_turns_per_day,
                limits.bot_tokens_per_day,
                limits.limit_message,
                user_input_tokens_per_day=limits.user_input_tokens_per_day,
            ),
            is_admin=is_admin,
        )
        # Replies and memory tasks are charged and limited alike.
        accounting = Accounting(store=store, clock=turn_clock, metrics=metrics, limits=spending)
        media = build_media(
            settings,
            store,
            turn_clock,
            {key: outlet for key, (_, outlet) in adapters.items()},
            transcriber=transcriber,
            metrics=metrics,
        )
        memory = build_memory(
            settings,
            store,
            seams.memory_llm or llm,
            turn_clock,
            policy_for=lambda bot: profile_of(bot).memory,
            account=accounting,
            media=media,
        )
        exits.push_async_callback(memory.aclose)
        retention = settings.retention
        holder = seams.holder or f"worker-{uuid.uuid4().hex[:12]}"
        proactive, agenda, extensions = build_agenda(
            settings,
            store=store,
            llm=llm,
            clocks=(clock, turn_clock),
            memory=memory,
            profiles={key: profile_of(key) for key in profiles},
            personas={key: p for key, (p, _) in adapters.items()},
            variants=variants,
            accounting=accounting,
            holder=holder,
            metrics=metrics,
            extensions=extensions,
        )
        bots = Bots(profiles, variants)
        pipeline = Pipeline(
            parts=TurnParts.of(
                store,
                llm=llm,
                clock=turn_clock,
                memory=memory,
                outlet_for=bots.outlet_for,
                holder=holder,
                metrics=metrics,
                accounting=accounting,
                tools=ToolPolicy(**settings.tools.model_dump()),
            ),
            bots=bots,
            policies=ReplyPolicies(
                GapPolicy(
                    retention.gap_policy, retention.tell_user_message, retention.refuse_message
                ),
                settings.llm.trouble_notice,
                settings.llm.retry_max_seconds,
            ),
            limits=spending,
            extensions=extensions,
            agenda=None
            if proactive is None or agenda is None
            else AgendaLink(proactive, agenda.wake),
        )
        # Closed after the schedulers stopped (exits run last-pushed first).
        exits.push_async_callback(pipeline.aclose)
        if proactive is not None:
            exits.push_async_callback(proactive.aclose)
        queue = settings.queue
        scheduler = Scheduler(
            store=store,
            clock=clock,
            run_turn=pipeline.run_turn,
            bots=list(profiles),
            scan_interval=queue.scan_interval_seconds,
            max_concurrent=queue.max_concurrent_turns,
            shutdown_grace=queue.shutdown_grace_seconds,
            metrics=metrics,
            claims=pipeline,  # due turns are claimed, not raced (docs/scaling.md#claims)
        )
        ingestor = Ingestor(
            store=store,
            clock=clock,
            policy_for=lambda bot: profile_of(bot).queue,
            sessions=session_policy(settings),
            wake=scheduler.wake,
        )
        outlets = {k: a for k, (_, a) in adapters.items()}
        exports = Exports(
            store=store,
            clock=turn_clock,
            outlet_for=outlets.get,
            build=lambda user, conversation: export_document(memory, user, conversation, defaults),
            policy=ExportPolicy(every_seconds=limits.export_every_minutes * 60),
            holder=seams.holder,
            delivery=Delivery(store=store, clock=turn_clock, outlet_for=outlets.get),
        )
        # Exports still on the wire get the shutdown grace, at most 5 seconds.
        exits.push_async_callback(exports.aclose, min(5.0, queue.shutdown_grace_seconds))
        commands = Commands(
            store=store,
            clock=clock,
            greeting=lambda session, inbound: greeting_of(
                profile_of(session.key.conversation.bot, session.persona).pin,
                session.key,
                inbound,
            ),
            personas=cast,
            memory=memory,
            forget_deletes_messages=retention.forget_deletes_messages,
            is_admin=is_admin,
            usage_report=lambda bot: usage_report(store, clock, prices, bot),
            exports=exports,
            extensions=extensions,
            plugin_timeout=settings.tools.command_timeout_seconds,
        )
        if proactive is not None:
            agenda_commands = AgendaCommands(store=store, clock=clock, proactive=proactive)
            checkins = any(proactive.checks_in(k) for k in profiles)
            for name, description, handler in agenda_commands.specs(checkins=checkins):
                commands.register(name, description, handler)
        router = Router(
            ingestor=ingestor,
            commands=commands,
            outlets=outlets,
            store=store,
            clock=clock,
            access=access,
            memory=memory,
            metrics=metrics,
            extensions=extensions,
            middleware_timeout=settings.tools.command_timeout_seconds,
            stops=pipeline.stops,
            delivery=Delivery(store=store, clock=clock, outlet_for=outlets.get),
        )
        if seams.background:
            await pipeline.recover_outbox(older_than=clock.now())
        listen = settings.observability.listen
        health = None
        backlog = Backlog(
            store=store,
            clock=clock,
            bots=tuple(profiles),
            metrics=metrics,
            max_age=settings.queue.max_backlog_age_seconds,
        )
        if listen and seams.health:
            host, port = listen_address(listen)
            health = await exits.enter_async_context(
                HealthServer(
                    host=host,
                    port=port,
                    metrics=metrics,
                    readiness=lambda: readiness(
                        store,
                        [a for _, a in adapters.values() if isinstance(a, BaseAdapter)],
                        backlog=backlog,
                    ),
                    refresh=backlog.measure,
                )
            )
        background: list[asyncio.Task[None]] = []
        if seams.background:
            background.append(
                asyncio.create_task(
                    _sweep_memory(
                        memory, clock, list(profiles), settings.memory.sweep_interval_seconds
                    ),
                    name="memory sweeper",
                )
            )
        exits.push_async_callback(_cancel_all, background)
        if with_retention:
            worker = build_retention(settings, store, memory, clock, metrics)
            background.append(
                asyncio.create_task(
                    _retain(worker, clock, retention.interval_minutes * 60), name="retention"
                )
            )
        background.append(_wake_ups(store, scheduler, frozenset(profiles)))
        task = asyncio.create_task(scheduler.run(), name="scheduler")
        exits.push_async_callback(_stop_scheduler, scheduler, task)
        if agenda is not None:
            agenda_task = asyncio.create_task(agenda.run(), name="check-ins and reminders")
            exits.push_async_callback(_stop_scheduler, agenda, agenda_task)
        yield Runtime(
            store=store,
            llm=llm,
            clock=clock,
            pipeline=pipeline,
            scheduler=scheduler,
            router=router,
            adapters=outlets,
            metrics=metrics,
            health=health,
            ingestor=ingestor,
            memory=memory,
            exports=exports,
            extensions=extensions,
            agenda=agenda,
        )


def build_agenda(
    settings: Settings,
    *,
    store: BaseStore,
    llm: BaseLLM,
    clocks: tuple[Clock, Clock],
    memory: Memory,
    profiles: Mapping[str, BotProfile],
    personas: Mapping[str, PersonaSettings],
    accounting: Accounting,
    holder: str,
    metrics: Metrics,
    extensions: Extensions,
    variants: Mapping[tuple[str, str], BotProfile] | None = None,
) -> tuple[Proactive | None, Scheduler[AgendaKey] | None, Extensions]:
    """Check-ins and reminders (docs/initiatives.md), when some bot uses them: the runner,
    its scheduler (on the runtime's clock; turns on the turn clock) and the extensions with
    the ``remind_me`` tool added."""
    clock, turn_clock = clocks
    schedule = settings.schedule
    proactive = Proactive(
        parts=TurnParts.of(
            store,
            llm=llm,
            clock=turn_clock,
            memory=memory,
            outlet_for=lambda bot: profiles[bot].outlet if bot in profiles else None,
            holder=holder,
            metrics=metrics,
            accounting=accounting,
        ),
        personas={
            key: Persona(
                profile.pin, initiative_policy(personas[key]), profile.lease_seconds, profile.memory
            )
            for key, profile in profiles.items()
        },
        variants={
            (key, pid): Persona(
                profile.pin,
                initiative_policy(settings.persona(pid)),
                profile.lease_seconds,
                profile.memory,
            )
            for (key, pid), profile in (variants or {}).items()
        },
        policy=AgendaPolicy(
            schedule.timezone,
            schedule.reminders,
            schedule.max_reminders_per_person,
            schedule.max_checkins_per_day,
        ),
    )
    if not schedule.reminders and not any(proactive.checks_in(k) for k in profiles):
        return None, None, extensions
    if schedule.reminders:
        extensions = reminder_extensions(proactive, extensions)
    agenda = Scheduler(
        store=store,
        clock=clock,
        run_turn=proactive.run,
        bots=list(profiles),
        due=proactive.due,
        scan_interval=schedule.scan_interval_seconds,
        max_concurrent=2,
        busy_backoff=2.0,
        shutdown_grace=settings.queue.shutdown_grace_seconds,
    )
    return proactive, agenda, extensions


def _wake_ups(
    store: BaseStore, scheduler: Scheduler[ConversationKey], hosted: frozenset[str]
) -> asyncio.Task[None]:
    """Timers armed by any process (PostgreSQL's announcements) set the scheduler's alarm."""

    def announced(bot: str | None, due_at: float | None) -> None:
        if bot is None or bot in hosted:
            scheduler.wake(due_at)

    return asyncio.create_task(store.listen_timers(announced), name="wake-ups")


async def _stop_scheduler(scheduler: Scheduler[Any], task: asyncio.Task[None]) -> None:
    """Stop taking work; running turns get the shutdown grace period (or an abort)."""
    scheduler.stop()
    await task


async def _cancel_all(tasks: list[asyncio.Task[None]]) -> None:
    for job in tasks:
        job.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


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


def build_retention(
    settings: Settings,
    store: BaseStore,
    memory: Memory,
    clock: Clock,
    metrics: Metrics | None = None,
) -> Retention:
    """The retention worker of [retention]."""
    r = settings.retention
    return Retention(
        store=store,
        memory=memory,
        clock=clock,
        policy=RetentionPolicy(mode=r.mode, days=r.days, batch_size=r.batch_size),
        metrics=metrics,
    )


def _with_admins(policy: AccessPolicy, admins: frozenset[str]) -> AccessPolicy:
    """``policy`` with these admins, let in by the allow lists (a playground's operator,
    whose private chat id is their id)."""
    if not admins:
        return policy
    return replace(
        policy,
        admins=policy.admins | admins,
        allow_users=policy.allow_users | admins if policy.allow_users else frozenset(),
        allow_chats=policy.allow_chats | admins if policy.allow_chats else frozenset(),
    )


def access_policies(
    settings: Settings, adapters: Mapping[str, tuple[PersonaSettings, Outlet]]
) -> dict[str, AccessPolicy]:
    """Each hosted bot's access rules: its own lists, else the [access] defaults."""
    defaults = settings.access
    entries = {b.key: b for b in settings.bots}
    policies = {}
    for key in adapters:
        entry = entries.get(key)

        def pick(own: list[str] | None, default: list[str]) -> frozenset[str]:
            return frozenset(default if own is None else own)

        policies[key] = AccessPolicy(
            allow_users=pick(entry.allow_users if entry else None, defaults.allow_users),
            allow_chats=pick(entry.allow_chats if entry else None, defaults.allow_chats),
            admins=pick(entry.admins if entry else None, defaults.admins),
            denied_reply=defaults.denied_reply,
        )
    return policies


async def _retain(worker: Retention, clock: Clock, interval: float) -> None:
    """Run retention on its schedule, forever (cancelled at shutdown)."""
    while True:
        try:
            await worker.run_once()
        except Exception:
            log.exception("retention run failed")
        await clock.sleep(interval)


async def _sweep_memory(memory: Memory, clock: Clock, bots: list[str], interval: float) -> None:
    """Learn user memory from quiet and closed sessions, forever (cancelled at shutdown)."""
    while True:
        try:
            await memory.extract_due(bots)
        except Exception:
            log.exception("memory sweep failed")
        await clock.sleep(interval)
