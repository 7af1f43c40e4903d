"""Reminders people ask for, and the chat commands of check-ins (docs/initiatives.md).

The ``remind_me`` tool goes through the framework's tool API (bot/runtime/tools.py) as a
tool with side effects and a check: the check reads the time in the person's zone and tells
the model when the reminder will be (or why it cannot be) in the loop; the reminder itself
is stored by the final check with the reply that agreed to it (``finish_turn``), so it exists
exactly when that reply does. A context layer tells the model the person's local time.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Final

from bot.core.agenda import NewReminder, ZoneError, describe_local, zone_name
from bot.core.choices import Answer, Choice
from bot.core.clock import Clock
from bot.core.events import Inbound, UserKey, is_person
from bot.core.i18n import N_
from bot.core.menu import Suggestion
from bot.runtime.commands import Refusal
from bot.runtime.extensions import Command, Extensions, TurnContext
from bot.runtime.initiatives import REMIND_TOOL, Proactive
from bot.runtime.languages import Languages
from bot.runtime.tools import Effect, Tool, ToolError
from bot.store.contracts import AgendaStore

log = logging.getLogger("personabot.reminders")

REMIND_DESCRIPTION: Final = (
    "Set a reminder the person asked for. `at` is their local date and time as "
    "YYYY-MM-DDTHH:MM (the context says their time zone and the time now); `about` says what "
    "to remind them of, in a few words; `asker`: when several people wrote just now, the name "
    "of the one who asked, as shown in the conversation. At that time you will write to them "
    "about it."
)


def person_of(context: TurnContext) -> UserKey:
    """Whose local time the context layer shows: the author of the turn's last message."""
    author = context.messages[-1].author_id if context.messages else ""
    return UserKey(context.conversation.platform, author)


def asker_of(context: TurnContext, asker: str) -> UserKey:
    """Who asked for a reminder: the one person who wrote in the turn, or, in a coalesced
    group turn of several people, the one the model names (``asker``, their display name).
    ToolError when that cannot be told: a reminder never goes to someone who did not ask."""
    people: dict[str, set[str]] = {}
    for m in context.messages:
        if m.role == "user" and is_person(m.author_id):
            people.setdefault(m.author_id, set()).add(m.display_name.strip().casefold())
    if not people:
        raise ToolError("I cannot tell who asked (an anonymous admin or a channel).")
    if len(people) == 1:
        (only,) = people
        return UserKey(context.conversation.platform, only)
    wanted = " ".join(asker.split()).casefold()
    named = [who for who, names in people.items() if wanted and wanted in names]
    if len(named) != 1:
        names = ", ".join(sorted({n for ns in people.values() for n in ns if n}))
        raise ToolError(
            "Several people wrote just now: set `asker` to the name of the one who asked "
            f"(one of: {names})."
            if not named
            else "Two people here share that name: ask the person to say it again on its own."
        )
    return UserKey(context.conversation.platform, named[0])


def reminder_extensions(proactive: Proactive, extensions: Extensions) -> Extensions:
    """``extensions`` with the ``remind_me`` tool and the local-time layer for every bot."""

    async def remind_me(at: str, about: str, turn: TurnContext, asker: str = "") -> str:
        # Never run: the pipeline stores these calls with the reply (module docstring).
        raise ToolError("reminders are stored with the reply")

    async def check(at: str, about: str, turn: TurnContext, asker: str = "") -> str:
        person = asker_of(turn, asker)
        # This turn's calls that passed already are stored with the reply: they count too.
        earlier = sum(1 for call in turn.earlier_calls if _asked_by(turn, call, person))
        _, shown = await proactive.resolve(person, turn.bot, at, about, earlier=earlier)
        return f"The reminder will be set for {shown}."

    remind_me.__personabot_builtin__ = True  # type: ignore[attr-defined]
    tool = Tool.from_function(
        remind_me, name=REMIND_TOOL, description=REMIND_DESCRIPTION, side_effects=True
    )
    tool = replace(tool, check=check)

    async def local_time(turn: TurnContext) -> str | None:
        person = person_of(turn)
        if not is_person(person.user_id):
            return None
        tz, name = await proactive.zone_for(person)
        return f"The person's time now: {describe_local(turn.now, tz)} ({name})."

    return Extensions(
        commands=extensions.commands,
        middleware=extensions.middleware,
        before_model=(*extensions.before_model, local_time),
        after_reply=extensions.after_reply,
        tools=extensions.tools.with_tool(tool),
        per_bot=extensions.per_bot,
        sources=extensions.sources,
    )


async def stored_reminders(
    proactive: Proactive, effects: Sequence[Effect], context: TurnContext
) -> list[NewReminder]:
    """The reminder calls resolved again for the final check: kept although time passed
    while the reply was written (bot.runtime.initiatives ``resolve``)."""
    out: list[NewReminder] = []
    for effect in effects:
        try:
            reminder, _ = await proactive.resolve(
                asker_of(context, str(effect.kwargs.get("asker", ""))),
                context.bot,
                str(effect.kwargs["at"]),
                str(effect.kwargs["about"]),
                checked=True,
            )
        except ToolError as exc:  # e.g. the person changed their time zone meanwhile
            log.warning("%s: a reminder agreed to is dropped: %s", context.session, exc)
            continue
        out.append(reminder)
    return out


def _asked_by(context: TurnContext, call: Mapping[str, object], person: UserKey) -> bool:
    try:
        return asker_of(context, str(call.get("asker", ""))) == person
    except ToolError:
        return False


Handler = Callable[[Inbound, Command], Awaitable[str | Answer | None]]
#: Reminder ids are 64-bit integers: a longer number names none (and would not fit a query).
_MAX_ID_DIGITS: Final = 18


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class AgendaCommands:
    """``/reminders``, ``/timezone``, ``/checkins``."""

    store: AgendaStore
    clock: Clock
    proactive: Proactive
    #: The language of the answers (docs/i18n.md; Commands.handle adds directional marks).
    languages: Languages = field(default_factory=Languages)

    def specs(self, *, checkins: bool) -> list[tuple[str, str, Handler]]:
        """(name, help, handler) of each command (``/checkins`` when a bot checks in)."""
        specs: list[tuple[str, str, Handler]] = [
            (
                "timezone",
                N_("show or set your time zone (/timezone Europe/Berlin)"),
                self.timezone,
            ),
        ]
        if checkins:
            specs.append(
                (
                    "checkins",
                    N_("let me write first after a silence, or not (on|off)"),
                    self.checkins,
                )
            )
        if self.proactive.policy.reminders:
            specs.insert(
                0, ("reminders", N_("list your reminders; /reminders cancel N"), self.reminders)
            )
        return specs

    async def reminders(self, inbound: Inbound, command: Command) -> str | Answer:
        _ = self.languages.for_inbound(inbound)
        user = UserKey(inbound.conversation.platform, inbound.author_id)
        if not is_person(user.user_id):
            return Refusal(
                _("/reminders is about one person's own reminders: send it as yourself.")
            )
        words = command.args.split()
        if words and words[0].lower() in {"cancel", "delete", "stop"}:
            if len(words) != 2 or not words[1].lstrip("#").isdecimal():
                return Refusal(_("Which one? Send /reminders cancel N, with N from the list."))
            if len(words[1].lstrip("#")) > _MAX_ID_DIGITS:  # past any id the store holds
                return Refusal(_("You have no waiting reminder with that number."))
            number = int(words[1].lstrip("#"))
            bot = inbound.conversation.bot
            if await self.store.cancel_reminder(user, number, self.clock.now(), bot=bot):
                return _("Reminder #{number} cancelled.").format(number=number)
            return Refusal(_("You have no waiting reminder #{number}.").format(number=number))
        if words:
            return Refusal(_("Send /reminders to list them, or /reminders cancel N."))
        waiting = await self.store.reminders(user, bot=inbound.conversation.bot)
        here = False
        if not inbound.is_private:
            # A group reads the answer: only what was asked for in it, as /memory shows a
            # group only what its prompts may hold. The answer never says whether more wait
            # elsewhere, so the group cannot tell what the person set privately.
            waiting = [r for r in waiting if r.conversation == inbound.conversation]
            here = True
        if not waiting:
            if here:
                return _(
                    "You have no reminders waiting in this chat. Ask me in a message to remind "
                    "you of something."
                )
            return _(
                "You have no reminders waiting. Ask me in a message to remind you of something."
            )
        tz, name = await self.proactive.zone_for(user)
        lines = [f"#{r.id} {describe_local(r.due_at, tz)}: {r.about}" for r in waiting]
        title = (
            _("Your reminders in this chat ({zone}):") if here else _("Your reminders ({zone}):")
        )
        # A cancel button per reminder (docs/telegram.md#buttons; elsewhere the typed
        # commands): pressing one takes only its own button away.
        cancel = tuple(
            Choice(
                _("Cancel #{number}").format(number=r.id),
                f"/reminders cancel {r.id}",
                closes=False,
            )
            for r in waiting
        )
        return Answer(title.format(zone=name) + "\n" + "\n".join(lines), cancel)

    async def suggest_reminders(self, inbound: Inbound, typed: str) -> tuple[Suggestion, ...]:
        """The asker's own waiting reminders whose number or text holds ``typed`` (in a group
        only those asked for there, as the list shows), for ``/reminders cancel id:``."""
        user = UserKey(inbound.conversation.platform, inbound.author_id)
        if not is_person(user.user_id):
            return ()
        waiting = await self.store.reminders(user, bot=inbound.conversation.bot)
        if not inbound.is_private:
            waiting = [r for r in waiting if r.conversation == inbound.conversation]
        wanted = typed.strip().lstrip("#").casefold()
        tz, _ = await self.proactive.zone_for(user)
        return tuple(
            Suggestion(f"#{r.id} {describe_local(r.due_at, tz)}: {r.about}"[:100], str(r.id))
            for r in waiting
            if wanted in str(r.id) or wanted in r.about.casefold()
        )

    async def timezone(self, inbound: Inbound, command: Command) -> str:
        _ = self.languages.for_inbound(inbound)
        user = UserKey(inbound.conversation.platform, inbound.author_id)
        if not is_person(user.user_id):
            return Refusal(_("/timezone is about one person: send it as yourself."))
        wanted = command.args.strip()
        now = self.clock.now()
        if wanted.lower() in {"clear", "reset", "none"}:
            await self.store.set_timezone(user, None, now)
            _zone, name = await self.proactive.zone_for(user)
            return _("Your time zone is forgotten; I use {zone} now.").format(zone=name)
        if wanted:
            try:
                name = zone_name(wanted)
            except ZoneError as exc:
                return Refusal(_("I can't use that: {problem}.").format(problem=exc))
            await self.store.set_timezone(user, name, now)
            tz, _name = await self.proactive.zone_for(user)
            return _("Your time zone is {zone}; it is {time} there.").format(
                zone=name, time=describe_local(now, tz)
            )
        tz, name = await self.proactive.zone_for(user)
        return _(
            "I use {zone} for you (it is {time} there). "
            "Set yours with /timezone Europe/Berlin (or UTC+2)."
        ).format(zone=name, time=describe_local(now, tz))

    async def checkins(self, inbound: Inbound, command: Command) -> str | Answer:
        _ = self.languages.for_inbound(inbound)
        conversation = inbound.conversation
        wanted = command.args.strip().lower()
        now = self.clock.now()
        if wanted in {"off", "no", "stop"}:
            await self.store.set_checkins(conversation, False, now)
            return _("Okay, I won't write first in this chat. /checkins on to allow it again.")
        if wanted in {"on", "yes"}:
            await self.store.set_checkins(conversation, True, now)
            await self.proactive.replied(conversation)  # armed from now
            if not self.proactive.checks_in(conversation.bot):
                return _("Check-ins are allowed here, but this bot does not write first.")
            return _("Okay, I may write first in this chat after a while of silence.")
        state = await self.store.initiative_state(conversation)
        # The toggle (docs/telegram.md#buttons; elsewhere the typed command).
        if state is None or state.enabled:
            return Answer(
                _("Check-ins are on in this chat."), (Choice(_("Turn off"), "/checkins off"),)
            )
        return Answer(_("Check-ins are off in this chat."), (Choice(_("Turn on"), "/checkins on"),))
