"""Settings read into the rules the runtime follows: pure functions, no I/O.

Each rule object is made here once from ``Settings`` (the only module family that reads it,
docs/architecture.md#plugins); the runtime's parts get them by constructor.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from bot.config import BotSettings, PersonaSettings, Settings
from bot.core.agenda import InitiativePolicy, QuietHours
from bot.core.events import Inbound, QueuePolicy, SessionKey, SessionPolicy, Voice
from bot.core.llm import Price
from bot.core.ports import Outlet, StreamSettings
from bot.core.scenes import CastMember, SceneRules
from bot.runtime.access import AccessPolicy
from bot.runtime.commands import PersonaChoice
from bot.runtime.initiatives import AgendaPolicy
from bot.runtime.languages import Languages
from bot.runtime.limits import LimitPolicy
from bot.runtime.pipeline import NO_STREAM, BotProfile, GapPolicy
from memory.assemble import Budget, PersonaPin
from memory.lorebook import oversized, oversized_text
from memory.macros import MacroContext, expand, speaker_name
from memory.retention.worker import RetentionPolicy
from memory.service import MemoryPolicy

log = logging.getLogger("personabot.app")


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


def memory_policy(
    settings: Settings, persona: PersonaSettings, scene: SceneRules | None = None
) -> MemoryPolicy:
    """[memory] with the persona's override applied (and the scene's cast, in a scene)."""
    memory = settings.memory_for(persona)
    return MemoryPolicy(
        budget=Budget(
            window_messages=memory.window_messages,
            window_max_messages=memory.fold_at,
            prompt_tokens=memory.prompt_budget_tokens,
            summary_tokens=memory.summary_budget_tokens,
            memory_tokens=memory.user_memory_budget_tokens,
            max_input_chars=settings.limits.max_input_chars,
            turn_tokens=settings.queue_for(persona).max_turn_tokens,
            cache_hour=memory.cache_hour,
        ),
        summary_model=memory.summary_model or persona.model,
        summary_provider=settings.routes(persona).tasks.provider,
        private_memory_in_groups=memory.private_memory_in_groups,
        share_across_groups=memory.share_across_groups,
        extract_after_idle_seconds=memory.extract_after_idle_minutes * 60,
        max_images=settings.media.max_images,
        cast=() if scene is None else scene.cast,
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


def limit_policy(settings: Settings) -> LimitPolicy:
    """The spending limits of [limits]."""
    limits = settings.limits
    return LimitPolicy(
        limits.user_turns_per_hour,
        limits.user_turns_per_day,
        limits.bot_tokens_per_day,
        limits.limit_message,
        user_input_tokens_per_day=limits.user_input_tokens_per_day,
        bot_dollars_per_day=limits.bot_dollars_per_day,
        user_dollars_per_day=limits.user_dollars_per_day,
    )


def agenda_policy(settings: Settings) -> AgendaPolicy:
    """Check-ins and reminders of [schedule]."""
    schedule = settings.schedule
    return AgendaPolicy(
        schedule.timezone,
        schedule.reminders,
        schedule.max_reminders_per_person,
        schedule.max_checkins_per_day,
    )


def gap_policy(settings: Settings) -> GapPolicy:
    """What a turn does about history that retention removed ([retention])."""
    r = settings.retention
    return GapPolicy(r.gap_policy, r.tell_user_message, r.refuse_message)


def retention_policy(settings: Settings) -> RetentionPolicy:
    """What the retention worker deletes ([retention])."""
    r = settings.retention
    return RetentionPolicy(mode=r.mode, days=r.days, batch_size=r.batch_size)


def prices(settings: Settings) -> dict[str, Price]:
    """The model prices of [llm.prices], for the cost metrics."""
    return {
        m: Price(p.input, p.output, p.cache_write, p.cache_read, p.cache_write_1h)
        for m, p in settings.llm.prices.items()
    }


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
    scene = None if entry is None else scene_rules(settings, entry)
    return BotProfile(
        key=key,
        pin=pin_for(persona),
        queue=QueuePolicy(debounce=queue.debounce_seconds, max_wait=queue.max_wait_seconds),
        memory=memory_policy(settings, persona, scene),
        outlet=outlet,
        lease_seconds=queue.lease_seconds,
        max_turn_messages=queue.max_turn_messages,
        refusal_message=persona.refusal_message or settings.llm.refusal_message,
        rejected_notice=settings.llm.rejected_notice,
        persona_id=persona.id,
        # A scene's lines are not streamed: several speakers' previews would interleave.
        stream=NO_STREAM if scene is not None else stream,
        scene=scene,
    )


def scene_rules(settings: Settings, entry: BotSettings) -> SceneRules | None:
    """``[bots.scene]`` with its cast (the bot's personas, in their order), or None."""
    scene = entry.scene
    if scene is None:
        return None
    personas = {p.id: p for p in settings.personas}
    cast = tuple(
        CastMember(p.id, p.name, tuple(p.aliases), p.talkativeness)
        for p in (personas[i] for i in entry.personas if i in personas)
    )
    director = None
    if scene.director == "model" and cast:
        first = personas[cast[0].id]
        director = (
            scene.director_model or first.model,
            scene.director_provider or settings.routes(first).reply.provider,
        )
    return SceneRules(
        cast=cast,
        strategy=scene.strategy,
        max_speakers=scene.max_speakers,
        autonomous=scene.autonomous,
        max_autonomous_turns=scene.max_autonomous_turns,
        autonomous_delay=scene.autonomous_delay_seconds,
        max_lines_per_hour=scene.max_lines_per_hour,
        breaker_trips=scene.breaker_trips,
        mute_seconds=scene.mute_minutes * 60,
        director_model=None if director is None else director[0],
        director_provider="default" if director is None else director[1],
    )


def with_admins(policy: AccessPolicy, admins: frozenset[str]) -> AccessPolicy:
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


@dataclass(frozen=True, slots=True)
class Hosted:
    """The bots one runtime hosts and the rules of each, read from the settings once."""

    #: Each bot's default persona and its outlet, by bot key.
    bots: Mapping[str, tuple[PersonaSettings, Outlet]]
    #: Each bot's turn profile (its default persona's).
    profiles: Mapping[str, BotProfile]
    #: Each bot's other personas' profiles, by (bot, persona id) (docs/personas.md).
    variants: Mapping[tuple[str, str], BotProfile]
    #: The personas each bot may speak as, its default first.
    cast: Mapping[str, tuple[PersonaChoice, ...]]
    #: Each bot's default persona id, for /export of sessions that chose none.
    defaults: Mapping[str, str]
    access: Mapping[str, AccessPolicy]
    #: Scene personas' voices, by (bot, persona id) (docs/scenes.md#platforms).
    voices: Mapping[tuple[str, str], Voice] = field(default_factory=dict)
    #: Each bot's personas' languages and the catalogs (docs/i18n.md).
    languages: Languages = field(default_factory=Languages)

    def voice_of(self, bot: str, persona: str) -> Voice | None:
        """The voice a scene's line of ``persona`` goes out in (None: the bot's own)."""
        return self.voices.get((bot, persona))

    @property
    def outlets(self) -> dict[str, Outlet]:
        """Each bot's outlet, by key."""
        return {key: outlet for key, (_, outlet) in self.bots.items()}

    def profile_of(self, bot: str, persona: str | None = None) -> BotProfile:
        """The profile of ``bot`` speaking as ``persona`` (None: its default).

        A conversation of a bot not hosted here (rows written by another process's bots,
        reached by a person's erasure or export) is handled with the first bot's policies.
        """
        default = self.profiles.get(bot) or next(iter(self.profiles.values()))
        return self.variants.get((bot, persona or ""), default)

    def is_admin(self, bot: str, user: str) -> bool:
        """Whether ``user`` is an admin of ``bot`` (exempt from the per-person limits)."""
        policy = self.access.get(bot)
        return policy is not None and policy.is_admin(user)


def hosted(
    settings: Settings,
    bots: Mapping[str, tuple[PersonaSettings, Outlet]],
    admins: Mapping[str, frozenset[str]],
) -> Hosted:
    """The rules of ``bots`` (key -> default persona and outlet), with ``admins`` added."""
    cast = {key: persona_choices(settings, key, persona) for key, (persona, _) in bots.items()}
    return Hosted(
        bots=bots,
        profiles={key: profile_for(settings, p, key, outlet) for key, (p, outlet) in bots.items()},
        variants={
            (key, choice.id): profile_for(settings, settings.persona(choice.id), key, outlet)
            for key, (persona, outlet) in bots.items()
            for choice in cast[key]
            if choice.id != persona.id
        },
        cast=cast,
        languages=Languages(
            {
                key: tuple(
                    (c.id, (persona if c.id == persona.id else settings.persona(c.id)).language)
                    for c in cast[key]
                )
                for key, (persona, _) in bots.items()
            }
        ),
        defaults={b.key: b.default_persona for b in settings.bots}
        | {key: persona.id for key, (persona, _) in bots.items()},
        access={
            key: with_admins(policy, admins.get(key, frozenset()))
            for key, policy in access_policies(settings, bots).items()
        },
        voices={
            (b.key, p.id): Voice(p.id, p.name, p.avatar_url)
            for b in settings.bots
            if b.key in bots and b.scene is not None
            for p in settings.personas
            if p.id in b.personas
        },
    )
