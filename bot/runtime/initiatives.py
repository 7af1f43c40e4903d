"""The persona writes first: check-ins after silence and reminders (docs/initiatives.md).

Both run through the turn kernel like a reply (bot/runtime/turn.py: a ``CheckInJob`` or a
``ReminderJob`` says what differs) under the conversation's turn lease, so never beside a
reply of the same chat, and end in one final check (``finish_proactive``) that records
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

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import tzinfo
from typing import Final, Literal, Protocol

from bot.core.agenda import (
    CAPPED,
    CheckinCap,
    DueItem,
    InitiativePolicy,
    InitiativeState,
    NewReminder,
    Reminder,
    WhenError,
    ZoneError,
    blocked_by,
    check_in_due,
    describe_local,
    reminder_due,
    zone,
)
from bot.core.errors import ModelError, StoreError
from bot.core.events import ConversationKey, FinishResult, Lease, OutboxItem, SessionKey, UserKey
from bot.core.tasks import Background
from bot.core.visible import has_visible_text
from bot.runtime.proactive_prompts import (
    SEND,
    SKIP,
    capped_until,
    check_in_prompt,
    decision,
    due_check_in,
    plain_reminder,
    reminder_note,
    zone_for,
)
from bot.runtime.tools import Effect, LoopResult, Tool, ToolError
from bot.runtime.turn import Ask, Draft, Job, TurnKernel, TurnParts
from bot.runtime.turn_context import TurnContext
from bot.store.contracts import AgendaStore, ConversationReads, SessionStore
from memory.assemble import PersonaPin
from memory.service import MemoryPolicy

log = logging.getLogger("personabot.initiatives")

# SEND, SKIP, check_in_prompt and due_check_in live in bot/runtime/proactive_prompts.py and
# are still importable from here.
__all__ = [
    "CHECKED_SLACK",
    "REFUSED",
    "REMIND_TOOL",
    "RETRY_SECONDS",
    "SEND",
    "SKIP",
    "AgendaKey",
    "AgendaPolicy",
    "CheckInJob",
    "Due",
    "Outcome",
    "Persona",
    "Proactive",
    "ReminderJob",
    "check_in_prompt",
    "due_check_in",
    "reminder_effects",
    "zone_for",
]

#: A key of due work: (kind, conversation, reminder id or 0).
AgendaKey = tuple[str, ConversationKey, int]
Outcome = Literal[
    "sent", "skipped", "discarded", "fenced", "busy", "early", "off", "gone", "retry", "capped"
]

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
    # Its id: it sees what it was told in a scene (docs/scenes.md#memory); "": the pin's.
    persona_id: str = ""


class ProactiveStore(AgendaStore, SessionStore, ConversationReads, Protocol):
    """What check-ins and reminders ask the store: the agenda and its final check
    (``finish_proactive``), the open session a reminder is written in, and whether the chat
    is still active (the turn lease is the kernel's: ``TurnParts.leases``)."""


class Proactive:
    """Runs due check-ins and reminders of the bots this process hosts, through the turn
    kernel (bot/runtime/turn.py): each is a job under the conversation's turn lease."""

    def __init__(
        self,
        *,
        store: ProactiveStore,
        parts: TurnParts,
        personas: Mapping[str, Persona],
        policy: AgendaPolicy = AgendaPolicy(),
        variants: Mapping[tuple[str, str], Persona] | None = None,
    ) -> None:
        self._parts = parts
        self._kernel = TurnKernel(parts)
        self._store = store
        self._clock = parts.clock
        self._personas = dict(personas)
        # A bot's other personas by (bot, persona id): the chat's persona writes
        # (docs/personas.md#several-personas); ``personas`` holds each bot's default.
        self._variants = dict(variants or {})
        self.policy = policy
        self._default_zone = zone(policy.timezone)

    @property
    def releases(self) -> Background:
        """Lease releases the store refused, retried in the background (bot.queue.lease)."""
        return self._kernel.releases

    async def aclose(self) -> None:
        """The process stops: stop retrying releases (their leases expire by themselves)."""
        await self._kernel.aclose()

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

    def persona(self, bot: str, persona: str | None) -> Persona | None:
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
        return await zone_for(self._store, self._parts.memory, user, self.policy.timezone)

    def zone_named(self, name: str) -> tzinfo:
        """A stored zone name's zone (the default zone when it is no longer known)."""
        try:
            return zone(name)
        except ZoneError:
            return self._default_zone

    async def replied(self, conversation: ConversationKey, persona_id: str | None = None) -> None:
        """A reply was recorded (by ``persona_id``; None: the default): the next check-in
        waits for the silence after it (the rules run again when it falls due, so quiet
        hours are applied then)."""
        persona = self.persona(conversation.bot, persona_id)
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
        async with self._kernel.hold(conversation, persona.lease_seconds) as lease:
            if lease is None:
                return "busy"  # a turn (or another process) works on this chat: later
            job: Job[Outcome] = (
                ReminderJob(
                    self, self._parts, self._store, Due(conversation, lease, persona), reminder
                )
                if kind == "reminder"
                else CheckInJob(self, self._parts, self._store, Due(conversation, lease, persona))
            )
            outcome = await self._kernel.run(job, lease)
        log.info("%s of %s: %s", kind, conversation, outcome)
        return outcome

    async def postponed(
        self, conversation: ConversationKey, person: str, now: float
    ) -> Outcome | None:
        """Re-armed for later when a limit holds (the token limits, the bot's check-in cap);
        None when the model may be asked."""
        agenda = self._store
        if not await self._parts.accounting.allow(conversation, [person]):
            await agenda.arm_initiative(
                conversation, now + RETRY_SECONDS * 4, now, "not now: a token limit holds"
            )
            return "off"
        frees = await capped_until(agenda, self.policy.checkin_cap, conversation.bot, now)
        if frees is not None:
            # Postponed, never dropped: the rules run again when the window frees.
            await agenda.arm_initiative(conversation, frees, now, CAPPED)
            self.count(conversation, "capped")
            return "capped"
        return None

    def count(self, conversation: ConversationKey, outcome: str) -> None:
        """Count a check-in's or reminder's outcome in the metrics."""
        metrics = self._parts.metrics
        metrics.initiatives.labels(*metrics.labels(conversation), outcome).inc()

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
        agenda = self._store
        waiting = 0 if checked else len(await agenda.reminders(user, bot=bot)) + earlier
        if waiting >= self.policy.max_reminders_per_person:
            raise ToolError(
                f"This person already has {waiting} reminders waiting, the most allowed; "
                "they can cancel some with /reminders."
            )
        return NewReminder(user.user_id, about, due, name), f"{describe_local(due, tz)} ({name})"


@dataclass(frozen=True, slots=True)
class Due:
    """A due check-in or reminder under the conversation's turn lease."""

    conversation: ConversationKey
    lease: Lease
    persona: Persona  # the bot's default; the chat's own persona writes (read by the job)


def _context(due: Due, session: SessionKey, persona: Persona, now: float) -> TurnContext:
    """What the model step sees of a message the persona writes first (no messages)."""
    conversation = due.conversation
    name = persona.pin.name
    return TurnContext(conversation, session, conversation.bot, name, (), now)


@dataclass(frozen=True, slots=True)
class _Let:
    """A check-in the rules let through: the chat's state, its session, the person (who
    last wrote, when) and their time zone."""

    state: InitiativeState
    session: SessionKey
    person: str
    last_user_at: float
    tz: tzinfo


class CheckInJob(Job[Outcome]):
    """A due check-in: its rules first (each re-arms or disarms as it goes), then the model's
    required ``send``/``skip`` choice; a skip is recorded on the row, never sent."""

    def __init__(self, runner: Proactive, parts: TurnParts, agenda: AgendaStore, due: Due) -> None:
        self._runner = runner
        self._parts = parts
        self._agenda = agenda
        self._due = due
        self._persona = due.persona
        self.ttl = due.persona.lease_seconds
        self._let: _Let | None = None  # what the rules let through (ready())
        self._now = 0.0

    async def ready(self) -> Outcome | None:
        """The rules of docs/initiatives.md, in order; None when the model may be asked."""
        conversation, now = self._due.conversation, self._parts.clock.now()
        state = await self._agenda.initiative_state(conversation)
        if state is None:
            return "gone"
        self._persona = self._runner.persona(conversation.bot, state.persona) or self._persona
        self.ttl = self._persona.lease_seconds
        policy = self._persona.initiative
        arm = self._agenda.arm_initiative
        if not policy.enabled:
            await arm(conversation, None, now, "not now: check-ins off")
            return "off"
        if state.pending:
            # The person wrote: the reply re-arms; until then, look again after the silence.
            await arm(conversation, now + policy.after_idle_seconds, now)
            return "busy"
        if state.last_user_at is None or state.person is None or state.session_no is None:
            await arm(conversation, None, now, "not now: nobody wrote")
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
            await arm(conversation, None, now, f"not now: {blocker}")
            return "off"
        tz, _ = await self._runner.zone_for(UserKey(conversation.platform, state.person))
        due = check_in_due(
            policy,
            last_user_at=state.last_user_at,
            last_initiative_at=state.sent_at,
            tz=tz,
            now=now,
        )
        if due > now:
            await arm(conversation, due, now)
            return "early"
        session = SessionKey(conversation, state.session_no)
        self._let, self._now = _Let(state, session, state.person, state.last_user_at, tz), now
        return await self._runner.postponed(conversation, state.person, now)

    def _ready(self) -> _Let:
        assert self._let is not None  # ready() let it through
        return self._let

    async def prompt(self, lost: asyncio.Event) -> Ask:
        """The session, the check-in note and the send/skip choice."""
        let, persona, now = self._ready(), self._persona, self._now
        assembled = await check_in_prompt(
            self._parts.memory,
            persona.pin,
            let.session,
            let.state,
            let.tz,
            now,
            policy=persona.memory,
            persona=persona.persona_id or None,
        )
        context = _context(self._due, let.session, persona, now)
        return Ask(assembled.request, context, "initiative", {let.person: 1})

    async def failed(self, exc: ModelError) -> Outcome:
        """Not decided: try again later."""
        conversation, now = self._due.conversation, self._now
        log.warning("%s: check-in not decided (%s); trying again later", conversation, exc)
        await self._agenda.arm_initiative(conversation, now + RETRY_SECONDS, now)
        return "retry"

    async def answered(self, answer: LoopResult) -> Draft | Outcome:
        """The model's choice: a skip re-arms for later, a send is recorded."""
        result = answer.result
        text, reason = decision(result)
        self._now = now = self._parts.clock.now()
        if text is None:
            policy, conversation = self._persona.initiative, self._due.conversation
            again = now + max(policy.min_interval_seconds, policy.after_idle_seconds)
            await self._agenda.arm_initiative(conversation, again, now, f"skipped: {reason}")
            self._runner.count(conversation, "skipped")
            return "skipped"
        return Draft(text, result.usage, result.model)

    async def check(self, draft: Draft) -> FinishResult:
        """``finish_proactive``, the bot's cap checked again there under a lock per bot."""
        let, policy, now = self._ready(), self._persona.initiative, self._now
        next_due = None
        if let.state.unanswered + 1 < policy.max_unanswered:
            next_due = check_in_due(
                policy, last_user_at=let.last_user_at, last_initiative_at=now, tz=let.tz
            )
        return await self._agenda.finish_proactive(
            self._due.conversation,
            self._due.lease,
            version=let.state.version,
            session_no=let.session.session_id,
            text=draft.text,
            now=now,
            origin="initiative",
            addressee=let.person,
            usage=draft.usage,
            model=draft.model,
            next_due=next_due,
            cap=self._runner.policy.checkin_cap,
        )

    async def dropped(self, finished: FinishResult) -> Outcome:
        """Fenced, or discarded (the person wrote, the row is no longer due, the cap)."""
        self._runner.count(self._due.conversation, finished.outcome)
        return "fenced" if finished.outcome == "fenced" else "discarded"

    async def recorded(self, outbox: OutboxItem, draft: Draft) -> None:
        """Counted as sent."""
        self._runner.count(self._due.conversation, "sent")

    async def delivered(self, sent: bool) -> Outcome:
        """Recorded and handed to Delivery (a failed send is the outbox row's)."""
        return "sent"


class ReminderJob(Job[Outcome]):
    """A due reminder: always sent, in the persona's words or, when the model fails or a
    token limit holds, as a plain line (a missed reminder is worse than a plain one)."""

    def __init__(
        self,
        runner: Proactive,
        parts: TurnParts,
        store: ProactiveStore,
        due: Due,
        reminder_id: int,
    ) -> None:
        self._runner = runner
        self._parts = parts
        self._store = store
        self._due = due
        self._id = reminder_id
        self._persona = due.persona
        self.ttl = due.persona.lease_seconds
        self._reminder: Reminder | None = None
        self._state: InitiativeState | None = None
        self._session_no = 0

    async def ready(self) -> Outcome | None:
        """Still pending, the chat still active and nobody being answered in it."""
        agenda, conversation = self._store, self._due.conversation
        reminder = await agenda.reminder(self._id)
        if reminder is None or reminder.status != "pending":
            return "gone"
        now = self._parts.clock.now()
        state = await agenda.initiative_state(conversation)
        if state is None:
            return "gone"
        self._persona = self._runner.persona(conversation.bot, state.persona) or self._persona
        self.ttl = self._persona.lease_seconds
        if not state.active:
            await agenda.fail_reminder(self._id, REFUSED, now)
            return "off"
        if state.pending:
            return "busy"  # the person is being answered: the reminder comes right after
        session_no = state.session_no
        if session_no is None:
            session_no = (await self._store.open_session(conversation, now)).key.session_id
            state = await agenda.initiative_state(conversation) or state
        self._reminder, self._state, self._session_no = reminder, state, session_no
        return None

    def _ready(self) -> tuple[Reminder, InitiativeState]:
        assert self._reminder is not None  # ready() passed
        assert self._state is not None
        return self._reminder, self._state

    async def prompt(self, lost: asyncio.Event) -> Ask | Draft:
        """The reminder's note in the session; the plain line while a token limit holds."""
        reminder, state = self._ready()
        conversation, person = self._due.conversation, reminder.user_id
        if not await self._parts.accounting.allow(conversation, [person]):
            return Draft(plain_reminder(reminder.about))
        now = self._parts.clock.now()
        tz = self._runner.zone_named(reminder.timezone)
        session = SessionKey(conversation, self._session_no)
        assembled = await self._parts.memory.prompts.build_proactive(
            session,
            self._persona.pin,
            person=person,
            private=state.private,
            note=reminder_note(reminder.about, reminder.created_at, reminder.due_at, tz),
            layer="reminder",
            now=now,
            policy=self._persona.memory,
            persona=self._persona.persona_id or None,
        )
        context = _context(self._due, session, self._persona, now)
        return Ask(assembled.request, context, "reminder", {person: 1})

    async def failed(self, exc: ModelError) -> Draft:
        """Sent plainly."""
        reminder, _ = self._ready()
        log.warning("%s: reminder %d sent plainly (%s)", self._due.conversation, self._id, exc)
        return Draft(plain_reminder(reminder.about))

    async def answered(self, answer: LoopResult) -> Draft:
        """The persona's words; the plain line when it gave none."""
        reminder, _ = self._ready()
        result = answer.result
        text = plain_reminder(reminder.about)
        if result.stop_reason != "refusal" and has_visible_text(result.text):
            text = result.text
        return Draft(text, result.usage, result.model)

    async def check(self, draft: Draft) -> FinishResult:
        """``finish_proactive``: recorded only while the reminder is still pending."""
        reminder, state = self._ready()
        return await self._store.finish_proactive(
            self._due.conversation,
            self._due.lease,
            version=state.version,
            session_no=self._session_no,
            text=draft.text,
            now=self._parts.clock.now(),
            origin="reminder",
            addressee=reminder.user_id,
            usage=draft.usage,
            model=draft.model,
            reminder=self._id,
        )

    async def dropped(self, finished: FinishResult) -> Outcome:
        """Fenced, or discarded (the person wrote, the reminder was cancelled)."""
        self._runner.count(self._due.conversation, f"reminder_{finished.outcome}")
        return "fenced" if finished.outcome == "fenced" else "discarded"

    async def delivered(self, sent: bool) -> Outcome:
        """Sent; or refused by the platform, which never reached the person."""
        conversation = self._due.conversation
        if not sent and not await self._store.conversation_active(conversation):
            # The platform refused it (Delivery marks the chat inactive before returning):
            # it never reached the person, so it is not "sent". Not retried: the chat refuses.
            now = self._parts.clock.now()
            await self._store.fail_reminder(self._id, REFUSED, now, was="sent")
            self._runner.count(conversation, "reminder_refused")
            return "off"
        self._runner.count(conversation, "reminder_sent")
        return "sent"


def _key(item: DueItem) -> AgendaKey:
    return (item.kind, item.conversation, item.reminder or 0)


def reminder_effects(
    effects: Sequence[Effect],
) -> tuple[tuple[Effect, ...], tuple[Effect, ...]]:
    """(the built-in reminder calls, every other effect): the former are stored with the
    reply in its final check, exactly once; the others run after it (bot/runtime/tools.py)."""
    mine = tuple(e for e in effects if e.tool.name == REMIND_TOOL and _builtin(e.tool))
    return mine, tuple(e for e in effects if e not in mine)


def _builtin(tool: Tool) -> bool:
    return getattr(tool.run, "__personabot_builtin__", False) is True
