"""The persona writes first: check-ins after silence and reminders (docs/initiatives.md).

Both run like a turn (bot/runtime/pipeline.py) under the conversation's turn lease, so never
beside a reply of the same chat, and end in one final check (``finish_proactive``) that records
the message in the session transcript (marked with its origin) and its outbox row, or
discards it. Exactly once: the due rows live in the store, any process may pick one up, the
lease CAS lets one worker at a time work on the chat and the final check lets only the lease
holder record, and only while the row is still due (a reminder still pending, check-ins still
on). A person who writes while a check-in is generated wins: the version moved, the check-in
is discarded, the normal turn answers them.

A check-in is a decision, not a template: the model is given a ``send``/``skip`` choice (one
tool call is required); a skip is recorded on the row and re-armed later, never sent. A
reminder is always sent: in the persona's words, or, when the model fails or a token limit
holds, as a plain line (the person asked for it; a missed reminder is worse than a plain one).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import tzinfo
from typing import Final, Literal

from bot.core.agenda import (
    CAPPED,
    CheckinCap,
    DueItem,
    InitiativePolicy,
    InitiativeState,
    NewReminder,
    WhenError,
    ZoneError,
    blocked_by,
    check_in_due,
    describe_local,
    reminder_due,
    zone,
    zone_name,
)
from bot.core.clock import Clock
from bot.core.errors import ModelError, StoreError
from bot.core.events import ConversationKey, Lease, OutboxItem, SessionKey, UserKey
from bot.core.llm import BaseLLM, ModelRequest, ModelResult, ToolSpec
from bot.core.queue_rules import turn_lease
from bot.core.tasks import Background
from bot.core.visible import has_visible_text
from bot.metrics import Metrics
from bot.queue import lease as leases
from bot.queue.lease import renewing
from bot.runtime.delivery import Delivery
from bot.runtime.tools import Effect, Tool, ToolError
from bot.runtime.usage import Accounting
from bot.store.base import BaseStore
from memory.assemble import Assembled, PersonaPin
from memory.service import Memory, MemoryPolicy

log = logging.getLogger("personabot.initiatives")

#: A key of due work: (kind, conversation, reminder id or 0).
AgendaKey = tuple[str, ConversationKey, int]
Outcome = Literal[
    "sent", "skipped", "discarded", "fenced", "busy", "early", "off", "gone", "retry", "capped"
]

SEND: Final = ToolSpec(
    "send",
    "Write to the person now: the message they will read, in your own voice.",
    {
        "type": "object",
        "properties": {"text": {"type": "string", "description": "the message"}},
        "required": ["text"],
        "additionalProperties": False,
    },
)
SKIP: Final = ToolSpec(
    "skip",
    "Do not write now (nothing is sent); say why in a few words, for the operator's log.",
    {
        "type": "object",
        "properties": {"reason": {"type": "string"}},
        "required": ["reason"],
        "additionalProperties": False,
    },
)
REMIND_TOOL: Final = "remind_me"
#: How long after its check a reminder call is still kept as agreed (a slow reply).
CHECKED_SLACK: Final = 3600.0
#: When a check-in could not be decided (the model failed), try again after this long.
RETRY_SECONDS: Final = 15 * 60.0
#: The note of a reminder that a chat refusing delivery (a blocked bot) never got.
REFUSED: Final = "the chat refuses delivery"


@dataclass(frozen=True, slots=True)
class AgendaPolicy:
    """``[schedule]``: the default time zone and the bounds of reminders."""

    timezone: str = "UTC"
    reminders: bool = False
    max_reminders_per_person: int = 20
    #: Check-ins per bot in any 24 hours (0: no cap).
    max_checkins_per_day: int = 0

    @property
    def checkin_cap(self) -> CheckinCap:
        """The cap on the bot's check-ins."""
        return CheckinCap(self.max_checkins_per_day)


@dataclass(frozen=True, slots=True)
class Persona:
    """What a bot's check-ins and reminders need of its profile."""

    pin: PersonaPin
    initiative: InitiativePolicy
    lease_seconds: float
    # The persona's memory policy (its budget, window): None means the bot's. A persona that
    # is not the bot's default has its own, as its turns do.
    memory: MemoryPolicy | None = None


def _hours(seconds: float) -> str:
    hours = seconds / 3600.0
    if hours < 48:
        return f"{hours:.0f} hours" if hours >= 1.5 else f"{seconds / 60:.0f} minutes"
    return f"{hours / 24:.0f} days"


def check_in_note(state: InitiativeState, now: float, tz: tzinfo) -> str:
    """The prompt layer of a due check-in: how long it has been and the local time; what the
    person last talked about is in the window and summary right before it."""
    silent = now - (state.last_user_at or now)
    return (
        "Nobody has written here for "
        f"{_hours(silent)}; it is {describe_local(now, tz)} for the person now. You may check "
        "in on them, in character, picking up what they last talked about (see the "
        "conversation above), or decide that now is not a good moment. Call exactly one tool: "
        "send(text) with your message, or skip(reason). Do not mention this note, timers or "
        "tools."
    )


def reminder_note(about: str, set_at: float, due_at: float, tz: tzinfo) -> str:
    """The prompt layer of a due reminder."""
    return (
        f"On {describe_local(set_at, tz)} the person asked you to remind them at "
        f"{describe_local(due_at, tz)} (now) about: {about!r}. Write that reminder now, in "
        "character, briefly. Do not mention this note."
    )


def plain_reminder(about: str) -> str:
    """A reminder without the model (it failed, or a limit holds)."""
    return f"⏰ Reminder: {about}"


class Proactive:
    """Runs due check-ins and reminders of the bots this process hosts."""

    def __init__(
        self,
        *,
        store: BaseStore,
        llm: BaseLLM,
        clock: Clock,
        memory: Memory,
        personas: Mapping[str, Persona],
        delivery: Delivery,
        accounting: Accounting,
        holder: str,
        policy: AgendaPolicy = AgendaPolicy(),
        metrics: Metrics | None = None,
        variants: Mapping[tuple[str, str], Persona] | None = None,
    ) -> None:
        self._store = store
        self._llm = llm
        self._clock = clock
        self._memory = memory
        self._personas = dict(personas)
        # A bot's other personas by (bot, persona id): the chat's persona writes
        # (docs/personas.md#several-personas); ``personas`` holds each bot's default.
        self._variants = dict(variants or {})
        self._delivery = delivery
        self._accounting = accounting
        self._holder = holder
        self.policy = policy
        self._default_zone = zone(policy.timezone)
        self._metrics = metrics
        #: Lease releases the store refused, retried in the background (bot.queue.lease).
        self.releases = Background()

    async def aclose(self) -> None:
        """The process stops: stop retrying releases (their leases expire by themselves)."""
        await self.releases.aclose()

    @property
    def bots(self) -> tuple[str, ...]:
        """Bots with check-ins or reminders here."""
        return tuple(self._personas)

    def checks_in(self, bot: str) -> bool:
        """Whether a persona of this bot writes check-ins."""
        personas = [
            self._personas.get(bot),
            *(p for (b, _), p in self._variants.items() if b == bot),
        ]
        return any(p is not None and p.initiative.enabled for p in personas)

    def _persona(self, bot: str, persona: str | None) -> Persona | None:
        """The bot's persona ``persona`` (an id; None or unknown: the default)."""
        if persona is not None and (bot, persona) in self._variants:
            return self._variants[bot, persona]
        return self._personas.get(bot)

    async def due(self, now: float, limit: int) -> list[tuple[AgendaKey, float]]:
        """Due work for the scheduler (bot.queue.scheduler ``due``)."""
        items = await self._store.due_agenda(now, limit, bots=self.bots)
        return [(_key(item), item.due_at) for item in items]

    async def zone_for(self, user: UserKey) -> tuple[tzinfo, str]:
        """The person's time zone and its name (:func:`zone_for`)."""
        return await zone_for(self._store, self._memory, user, self.policy.timezone)

    async def replied(self, conversation: ConversationKey, persona_id: str | None = None) -> None:
        """A reply was recorded (by ``persona_id``; None: the default): the next check-in
        waits for the silence after it (the rules run again when it falls due, so quiet
        hours are applied then)."""
        persona = self._persona(conversation.bot, persona_id)
        if persona is None or not persona.initiative.enabled:
            return
        now = self._clock.now()
        try:
            await self._store.arm_initiative(
                conversation, now + persona.initiative.after_idle_seconds, now
            )
        except StoreError as exc:  # the reply is sent; the next reply arms it again
            log.warning("%s: next check-in not armed: %s", conversation, exc)

    async def run(self, key: AgendaKey) -> Outcome:
        """One due check-in or reminder."""
        kind, conversation, reminder = key
        persona = self._personas.get(conversation.bot)
        if persona is None:
            return "gone"
        lease = await leases.acquire(
            self._store,
            turn_lease(conversation),
            holder=self._holder,
            ttl=persona.lease_seconds,
            clock=self._clock,
        )
        if lease is None:
            return "busy"  # a turn (or another process) works on this chat: later
        try:
            if kind == "reminder":
                outcome = await self._reminder(conversation, reminder, persona, lease)
            else:
                outcome = await self._check_in(conversation, persona, lease)
        finally:
            # Retried in the background if the store refuses it now (bot.queue.lease).
            await leases.release(
                self._store,
                lease,
                ttl=persona.lease_seconds,
                clock=self._clock,
                later=self.releases,
            )
        log.info("%s of %s: %s", kind, conversation, outcome)
        return outcome

    # -- check-ins --------------------------------------------------------------------------------

    async def _check_in(
        self, conversation: ConversationKey, persona: Persona, lease: Lease
    ) -> Outcome:
        now = self._clock.now()
        state = await self._store.initiative_state(conversation)
        if state is None:
            return "gone"
        persona = self._persona(conversation.bot, state.persona) or persona  # the chat's own
        policy = persona.initiative
        if not policy.enabled:
            await self._store.arm_initiative(conversation, None, now, "not now: check-ins off")
            return "off"
        if state.pending:
            # The person wrote: the reply re-arms; until then, look again after the silence.
            await self._store.arm_initiative(conversation, now + policy.after_idle_seconds, now)
            return "busy"
        if state.last_user_at is None or state.person is None or state.session_no is None:
            await self._store.arm_initiative(conversation, None, now, "not now: nobody wrote")
            return "off"
        blocker = blocked_by(
            policy,
            enabled=state.enabled,
            active=state.active,
            private=state.private,
            unanswered=state.unanswered,
        )
        if blocker is not None:
            # Disarmed: the person's next message (and its reply) arms it again.
            await self._store.arm_initiative(conversation, None, now, f"not now: {blocker}")
            return "off"
        tz, _ = await self.zone_for(UserKey(conversation.platform, state.person))
        due = check_in_due(
            policy,
            last_user_at=state.last_user_at,
            last_initiative_at=state.sent_at,
            tz=tz,
            now=now,
        )
        if due > now:
            await self._store.arm_initiative(conversation, due, now)
            return "early"
        postponed = await self._postponed(conversation, state.person, now)
        if postponed is not None:
            return postponed
        session = SessionKey(conversation, state.session_no)
        assembled = await check_in_prompt(
            self._memory, persona.pin, session, state, tz, now, policy=persona.memory
        )
        request = assembled.request
        try:
            result = await self._ask(request, lease, persona)
        except ModelError as exc:
            log.warning("%s: check-in not decided (%s); trying again later", conversation, exc)
            await self._store.arm_initiative(conversation, now + RETRY_SECONDS, now)
            return "retry"
        await self._accounting.charge(conversation, "initiative", result, {state.person: 1})
        text, reason = _decision(result)
        now = self._clock.now()
        if text is None:
            again = now + max(policy.min_interval_seconds, policy.after_idle_seconds)
            await self._store.arm_initiative(conversation, again, now, f"skipped: {reason}")
            self._count(conversation, "skipped")
            return "skipped"
        next_due = None
        if state.unanswered + 1 < policy.max_unanswered:
            next_due = check_in_due(
                policy, last_user_at=state.last_user_at, last_initiative_at=now, tz=tz
            )
        finished = await self._store.finish_proactive(
            conversation,
            lease,
            version=state.version,
            session_no=state.session_no,
            text=text,
            now=now,
            origin="initiative",
            addressee=state.person,
            usage=result.usage,
            model=result.model,
            next_due=next_due,
            cap=self.policy.checkin_cap,  # checked again there, under a lock per bot
        )
        if finished.outcome != "recorded" or finished.outbox is None:
            self._count(conversation, finished.outcome)
            return "fenced" if finished.outcome == "fenced" else "discarded"
        self._count(conversation, "sent")
        self._memory.schedule_compaction(session)
        await self._delivery.deliver(finished.outbox)
        return "sent"

    async def _postponed(
        self, conversation: ConversationKey, person: str, now: float
    ) -> Outcome | None:
        """Re-armed for later when a limit holds (the token limits, the bot's check-in cap);
        None when the model may be asked."""
        if not await self._accounting.allow(conversation, [person]):
            await self._store.arm_initiative(
                conversation, now + RETRY_SECONDS * 4, now, "not now: a token limit holds"
            )
            return "off"
        frees = await capped_until(self._store, self.policy.checkin_cap, conversation.bot, now)
        if frees is not None:
            # Postponed, never dropped: the rules run again when the window frees.
            await self._store.arm_initiative(conversation, frees, now, CAPPED)
            self._count(conversation, "capped")
            return "capped"
        return None

    # -- reminders --------------------------------------------------------------------------------

    async def _reminder(
        self, conversation: ConversationKey, reminder_id: int, persona: Persona, lease: Lease
    ) -> Outcome:
        reminder = await self._store.reminder(reminder_id)
        if reminder is None or reminder.status != "pending":
            return "gone"
        now = self._clock.now()
        state = await self._store.initiative_state(conversation)
        if state is None:
            return "gone"
        persona = self._persona(conversation.bot, state.persona) or persona  # the chat's own
        if not state.active:
            await self._store.fail_reminder(reminder_id, REFUSED, now)
            return "off"
        if state.pending:
            return "busy"  # the person is being answered: the reminder comes right after
        session_no = state.session_no
        if session_no is None:
            session_no = (await self._store.open_session(conversation, now)).key.session_id
            state = await self._store.initiative_state(conversation) or state
        try:
            tz = zone(reminder.timezone)
        except ZoneError:
            tz = self._default_zone
        session = SessionKey(conversation, session_no)
        text = plain_reminder(reminder.about)
        result: ModelResult | None = None
        if await self._accounting.allow(conversation, [reminder.user_id]):
            assembled = await self._memory.build_proactive(
                session,
                persona.pin,
                person=reminder.user_id,
                private=state.private,
                note=reminder_note(reminder.about, reminder.created_at, reminder.due_at, tz),
                layer="reminder",
                now=now,
                policy=persona.memory,
            )
            try:
                result = await self._ask(assembled.request, lease, persona)
            except ModelError as exc:
                log.warning("%s: reminder %d sent plainly (%s)", conversation, reminder_id, exc)
            if result is not None:
                await self._accounting.charge(
                    conversation, "reminder", result, {reminder.user_id: 1}
                )
                if result.stop_reason != "refusal" and has_visible_text(result.text):
                    text = result.text
        finished = await self._store.finish_proactive(
            conversation,
            lease,
            version=state.version,
            session_no=session_no,
            text=text,
            now=self._clock.now(),
            origin="reminder",
            addressee=reminder.user_id,
            usage=None if result is None else result.usage,
            model=None if result is None else result.model,
            reminder=reminder_id,
        )
        if finished.outcome != "recorded" or finished.outbox is None:
            self._count(conversation, f"reminder_{finished.outcome}")
            return "fenced" if finished.outcome == "fenced" else "discarded"
        self._memory.schedule_compaction(session)
        return await self._deliver_reminder(finished.outbox, reminder_id)

    async def _deliver_reminder(self, outbox: OutboxItem, reminder_id: int) -> Outcome:
        conversation = outbox.conversation
        if not await self._delivery.deliver(outbox) and not (
            await self._store.conversation_active(conversation)
        ):
            # The platform refused it (Delivery marks the chat inactive before returning):
            # it never reached the person, so it is not "sent". Not retried: the chat refuses.
            await self._store.fail_reminder(reminder_id, REFUSED, self._clock.now(), was="sent")
            self._count(conversation, "reminder_refused")
            return "off"
        self._count(conversation, "reminder_sent")
        return "sent"

    async def _ask(self, request: ModelRequest, lease: Lease, persona: Persona) -> ModelResult:
        """One model call under the renewed lease (a lost lease is fenced at the end)."""
        async with renewing(self._store, lease, ttl=persona.lease_seconds, clock=self._clock):
            return await self._llm.complete(request)

    def _count(self, conversation: ConversationKey, outcome: str) -> None:
        if self._metrics is not None:
            labels = self._metrics.labels(conversation)
            self._metrics.initiatives.labels(*labels, outcome).inc()

    # -- the remind_me tool ----------------------------------------------------------------------

    async def resolve(
        self,
        user: UserKey,
        bot: str,
        at: str,
        about: str,
        *,
        checked: bool = False,
        earlier: int = 0,
    ) -> tuple[NewReminder, str]:
        """A reminder from the model's arguments, and how it reads to the person; ToolError
        (shown to the model) when it cannot be kept. ``earlier``: reminders for them that
        this turn agreed to already (stored with the reply, so counted against the cap).
        ``checked``: the loop's check passed already (the reply now says it is set), so
        neither the time that passed while the reply was written nor the count refuses it;
        a time now past fires at once."""
        about = " ".join(about.split())
        if not about:
            raise ToolError("Say what the reminder is about.")
        if len(about) > 500:
            raise ToolError("Keep what the reminder is about under 500 characters.")
        tz, name = await self.zone_for(user)
        try:
            due = reminder_due(at, tz, self._clock.now() - (CHECKED_SLACK if checked else 0.0))
        except WhenError as exc:
            raise ToolError(str(exc)) from None
        waiting = 0 if checked else len(await self._store.reminders(user, bot=bot)) + earlier
        if waiting >= self.policy.max_reminders_per_person:
            raise ToolError(
                f"This person already has {waiting} reminders waiting, the most allowed; "
                "they can cancel some with /reminders."
            )
        return NewReminder(user.user_id, about, due, name), f"{describe_local(due, tz)} ({name})"


async def zone_for(
    store: BaseStore, memory: Memory, user: UserKey, default: str
) -> tuple[tzinfo, str]:
    """The person's time zone and its name: ``/timezone``, else a remembered ``timezone``
    fact, else ``default``."""
    candidates = [await store.timezone_of(user)]
    record = await memory.user_memory(user)
    candidates += [i.value for i in record.items if i.field.lower() in {"timezone", "time zone"}]
    for name in candidates:
        if not name:
            continue
        try:
            return zone(name), zone_name(name)
        except ZoneError:
            continue
    return zone(default), zone_name(default)


async def capped_until(store: BaseStore, cap: CheckinCap, bot: str, now: float) -> float | None:
    """When the bot may write its next check-in under ``cap`` (None: now)."""
    if cap.limit <= 0:
        return None
    return cap.frees_at(await store.recent_checkins(bot, now - cap.window, cap.limit))


async def due_check_in(
    store: BaseStore,
    memory: Memory,
    policy: InitiativePolicy,
    conversation: ConversationKey,
    now: float,
    default_zone: str,
    cap: CheckinCap = CheckinCap(),  # noqa: B008 - frozen, never mutated
) -> tuple[InitiativeState, tzinfo] | None:
    """The chat's state and the person's zone when a check-in would be decided now (for
    ``personabot prompt``; the runner applies the same rules and re-arms as it goes). The
    token limits are not looked at (they depend on who asks); the bot's cap is."""
    state = await store.initiative_state(conversation)
    if (
        state is None
        or not policy.enabled
        or state.pending
        or state.last_user_at is None
        or state.person is None
        or state.session_no is None
        or blocked_by(
            policy,
            enabled=state.enabled,
            active=state.active,
            private=state.private,
            unanswered=state.unanswered,
        )
        is not None
    ):
        return None
    user = UserKey(conversation.platform, state.person)
    tz, _ = await zone_for(store, memory, user, default_zone)
    due = check_in_due(
        policy, last_user_at=state.last_user_at, last_initiative_at=state.sent_at, tz=tz, now=now
    )
    if due > now or await capped_until(store, cap, conversation.bot, now) is not None:
        return None
    return state, tz


async def check_in_prompt(
    memory: Memory,
    pin: PersonaPin,
    session: SessionKey,
    state: InitiativeState,
    tz: tzinfo,
    now: float,
    *,
    policy: MemoryPolicy | None = None,
) -> Assembled:
    """The request of a check-in decision: the session, the note, the send/skip choice
    (``policy``: the persona's memory policy, when not the bot's)."""
    assembled = await memory.build_proactive(
        session,
        pin,
        person=state.person,
        private=state.private,
        note=check_in_note(state, now, tz),
        layer="initiative",
        now=now,
        policy=policy,
    )
    request = replace(assembled.request, tools=(SEND, SKIP), tool_choice="any")
    return Assembled(request=request, breakdown=assembled.breakdown)


def _key(item: DueItem) -> AgendaKey:
    return (item.kind, item.conversation, item.reminder or 0)


def _decision(result: ModelResult) -> tuple[str | None, str]:
    """(text to send, or None to skip; the reason of a skip)."""
    for use in result.tool_uses:
        if use.name == "send":
            text = use.input.get("text")
            if isinstance(text, str) and has_visible_text(text):
                return text.strip(), ""
            return None, "send without text"
        if use.name == "skip":
            reason = use.input.get("reason")
            return None, str(reason)[:200] if reason else "no reason given"
    # No tool call (a provider that ignored the choice): never send unstructured text.
    return None, "no decision"


def reminder_effects(
    effects: Sequence[Effect],
) -> tuple[tuple[Effect, ...], tuple[Effect, ...]]:
    """(the built-in reminder calls, every other effect): the former are stored with the
    reply in its final check, exactly once; the others run after it (bot/runtime/tools.py)."""
    mine = tuple(e for e in effects if e.tool.name == REMIND_TOOL and _builtin(e.tool))
    return mine, tuple(e for e in effects if e not in mine)


def _builtin(tool: Tool) -> bool:
    return getattr(tool.run, "__personabot_builtin__", False) is True
