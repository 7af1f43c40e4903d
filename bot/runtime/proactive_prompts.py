"""What a check-in or a reminder asks the model, and how its answer reads (docs/initiatives.md):
the prompt notes, the required ``send``/``skip`` choice of a check-in and its decision, the
plain reminder; and the reads that say whether a check-in would be written now (the runner,
bot/runtime/initiatives.py, applies the same rules and re-arms as it goes;
``personabot prompt`` shows the prompt)."""

from __future__ import annotations

from dataclasses import replace
from datetime import tzinfo
from typing import Final

from bot.core.agenda import (
    CheckinCap,
    InitiativePolicy,
    InitiativeState,
    ZoneError,
    blocked_by,
    check_in_due,
    describe_local,
    zone,
    zone_name,
)
from bot.core.events import ConversationKey, SessionKey, UserKey
from bot.core.llm import ModelResult, ToolSpec
from bot.core.visible import has_visible_text
from bot.store.contracts import AgendaStore
from memory.assemble import Assembled, PersonaPin
from memory.service import Memory, MemoryPolicy

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


async def zone_for(
    store: AgendaStore, memory: Memory, user: UserKey, default: str
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


async def capped_until(store: AgendaStore, cap: CheckinCap, bot: str, now: float) -> float | None:
    """When the bot may write its next check-in under ``cap`` (None: now)."""
    if cap.limit <= 0:
        return None
    return cap.frees_at(await store.recent_checkins(bot, now - cap.window, cap.limit))


async def due_check_in(
    store: AgendaStore,
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
    persona: str | None = None,
) -> Assembled:
    """The request of a check-in decision: the session, the note, the send/skip choice
    (``policy``: the persona's memory policy, when not the bot's; ``persona``: its id)."""
    assembled = await memory.prompts.build_proactive(
        session,
        pin,
        person=state.person,
        private=state.private,
        note=check_in_note(state, now, tz),
        layer="initiative",
        now=now,
        policy=policy,
        persona=persona,
    )
    request = replace(assembled.request, tools=(SEND, SKIP), tool_choice="any")
    return Assembled(request=request, breakdown=assembled.breakdown)


def decision(result: ModelResult) -> tuple[str | None, str]:
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
