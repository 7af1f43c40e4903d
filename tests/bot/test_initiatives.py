"""The persona writes first (issue 17, docs/initiatives.md): check-ins after silence and
reminders, through the wired runtime on the manual clock, on both stores.

The model is a scripted BaseLLM: a check-in request (a send/skip choice, tool_choice "any")
gets the decision the test sets; a turn that asks for a reminder calls ``remind_me``; a
reminder's request (its "reminder" layer) gets the persona's words.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime

from bot.config import InitiativeSettings, ScheduleSettings
from bot.core.clock import ManualClock
from bot.core.events import ConversationKey, UserKey
from bot.core.llm import BaseLLM, ModelRequest, ModelResult, ToolResult, ToolUse, Usage
from bot.runtime.initiatives import REFUSED
from bot.store.base import BaseStore
from tests.backends import StoreFactory
from tests.harness import BOT, Harness, harness

C = ConversationKey("telegram", "42", None, BOT)
SASHA = UserKey("telegram", "u1")
HOUR = 3600.0
CHECK_IN = "Hey Sasha, how did the exam go?"
# A Tuesday, 10:00 UTC.
T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC).timestamp()
NO_QUIET = InitiativeSettings.model_construct(
    enabled=True,
    after_idle_hours=2.0,
    quiet_hours="",
    max_unanswered=1,
    min_interval_hours=0.0,
    groups=False,
)


class Scripted(BaseLLM):
    """Answers turns, check-in decisions and reminders as the test says."""

    name = "scripted"

    def __init__(self, decision: str = "send", remind_at: str = "2026-12-03T09:00") -> None:
        self.decision = decision
        self.remind_at = remind_at
        self.requests: list[ModelRequest] = []
        self.gate: asyncio.Event | None = None
        self.waiting = asyncio.Event()
        #: Seconds the answer after a tool result takes (on this clock): a slow reply.
        self.slow: tuple[ManualClock, float] | None = None

    def decisions(self) -> list[ModelRequest]:
        """The check-in requests."""
        return [r for r in self.requests if r.tool_choice == "any"]

    async def complete(self, request: ModelRequest) -> ModelResult:
        self.requests.append(request)
        usage = Usage(10, 5)
        if request.tool_choice == "any":
            if self.gate is not None:
                self.waiting.set()
                await self.gate.wait()
            use = (
                ToolUse("c1", "send", {"text": CHECK_IN})
                if self.decision == "send"
                else ToolUse("c1", "skip", {"reason": "they said they were busy"})
            )
            return ModelResult("", usage, "scripted", "tool_use", content=(use,))
        if "reminder" in request.layers:
            return ModelResult("Sasha! The dentist, in an hour's time.", usage, "scripted")
        last = request.messages[-1]
        answered = any(isinstance(b, ToolResult) for b in last.blocks)
        if "remind me" in last.text and not answered and request.tools:
            use = ToolUse("r1", "remind_me", {"at": self.remind_at, "about": "the dentist"})
            return ModelResult("", usage, "scripted", "tool_use", content=(use,))
        if answered:
            if self.slow is not None:
                await self.slow[0].sleep(self.slow[1])
            return ModelResult("I'll remind you.", usage, "scripted")
        return ModelResult(f"reply to: {last.text}", usage, "scripted")


def _texts(h: Harness) -> list[str]:
    return h.outlet.texts(C)


async def _chat(h: Harness, text: str) -> None:
    await h.say(C, text)
    await h.advance(3.0, step=0.5)


async def test_no_check_in_before_the_silence_then_exactly_one(store: BaseStore) -> None:
    clock = ManualClock(T0)
    llm = Scripted()
    async with harness(store, clock, llm, initiative=NO_QUIET) as h:
        await _chat(h, "I have an exam tomorrow")
        assert _texts(h) == ["reply to: I have an exam tomorrow"]
        await h.advance(1.9 * HOUR, step=600)
        assert llm.decisions() == [] and len(_texts(h)) == 1
        await h.advance(0.2 * HOUR, step=60)
        assert _texts(h)[1:] == [CHECK_IN]
        (decision,) = llm.decisions()
        assert "initiative" in decision.layers
        assert "I have an exam tomorrow" in "\n".join(m.text for m in decision.messages)
        # max_unanswered = 1: never a second one while the person stays silent.
        await h.advance(72 * HOUR, step=1800)
        assert _texts(h)[1:] == [CHECK_IN] and len(llm.decisions()) == 1
        # It is part of the transcript: the person's answer is read after it.
        await _chat(h, "it went well")
        last = llm.requests[-1]
        assert CHECK_IN in "\n".join(m.text for m in last.messages)


async def test_quiet_hours_are_kept_in_the_persons_time_zone(store: BaseStore) -> None:
    # Due at 12:00 UTC, 21:00 in Tokyo: quiet 20:00-09:00 there (11:00-00:00 UTC), so the
    # check-in waits until 00:00 UTC, 09:00 in Tokyo (in UTC it would have gone at 12:00).
    clock = ManualClock(T0)
    llm = Scripted()
    quiet = NO_QUIET.model_copy(update={"quiet_hours": "20:00-09:00"})
    async with harness(store, clock, llm, initiative=quiet) as h:
        await h.say(C, "/timezone Asia/Tokyo")
        await _chat(h, "good night")
        await h.advance(11 * HOUR, step=900)  # until 21:00 UTC (06:00 in Tokyo)
        assert llm.decisions() == []
        await h.advance(3.5 * HOUR, step=300)
        (at,) = [t for t, r in h.outlet.replies if r.text == CHECK_IN]
        local = datetime.fromtimestamp(at, UTC)
        assert (local.day, local.hour) == (2, 0), local  # 09:00 on the 2nd in Tokyo


async def test_a_skip_sends_nothing_and_re_arms(store: BaseStore) -> None:
    clock = ManualClock(T0)
    llm = Scripted(decision="skip")
    async with harness(store, clock, llm, initiative=NO_QUIET) as h:
        await _chat(h, "I'm busy this week")
        await h.advance(2.2 * HOUR, step=300)
        assert len(llm.decisions()) == 1 and _texts(h) == ["reply to: I'm busy this week"]
        state = await store.initiative_state(C)
        assert state is not None and state.due_at is not None
        assert state.due_at > clock.now() + 1.5 * HOUR  # later, not at once
        await h.advance(2.2 * HOUR, step=300)
        assert len(llm.decisions()) == 2 and len(_texts(h)) == 1  # asked again, still nothing


async def test_a_person_writing_during_the_check_in_gets_one_reply_and_no_check_in(
    store: BaseStore,
) -> None:
    clock = ManualClock(T0)
    llm = Scripted()
    llm.gate = asyncio.Event()
    async with harness(store, clock, llm, initiative=NO_QUIET) as h:
        await _chat(h, "see you")
        await h.advance(2.1 * HOUR, step=300)
        assert llm.waiting.is_set()  # the check-in is being decided
        await h.say(C, "hi again!")
        llm.gate.set()
        await h.advance(10.0, step=0.5)
        assert _texts(h) == ["reply to: see you", "reply to: hi again!"]
        assert CHECK_IN not in _texts(h)


async def test_checkins_off_and_a_blocked_chat_stop_them(store: BaseStore) -> None:
    clock = ManualClock(T0)
    llm = Scripted()
    often = NO_QUIET.model_copy(update={"max_unanswered": 5})
    async with harness(store, clock, llm, initiative=often) as h:
        await h.say(C, "/checkins off")
        await _chat(h, "hello")
        await h.advance(10 * HOUR, step=900)
        assert llm.decisions() == []
        await h.say(C, "/checkins on")
        await h.advance(2.1 * HOUR, step=300)
        assert len(llm.decisions()) == 1 and CHECK_IN in _texts(h)
        h.outlet.no_private_chat.add(C.chat_id)  # the person blocks the bot
        await h.advance(2.1 * HOUR, step=300)
        assert len(llm.decisions()) == 2  # written, refused: the chat is marked inactive
        await h.advance(20 * HOUR, step=1800)
        assert len(llm.decisions()) == 2  # and no further attempt


async def test_a_reminder_due_in_a_blocked_chat_is_failed_not_sent_and_never_retried(
    store: BaseStore,
) -> None:
    """The person blocks the bot after asking for two reminders. The first is written and
    refused by the platform (the chat is marked inactive): it never reached them, so it is
    failed, not sent. The second falls due in a chat known to refuse delivery: failed with
    the reason, without a model call or a send. Neither comes back, even once they write
    again; /reminders lists none waiting."""
    clock = ManualClock(T0)
    llm = Scripted(remind_at="2026-12-01T12:00")  # UTC, the default zone
    async with harness(store, clock, llm, schedule=ScheduleSettings(reminders=True)) as h:
        await _chat(h, "please remind me at noon about the dentist")
        llm.remind_at = "2026-12-01T13:00"
        await _chat(h, "and remind me at 13:00 about the dentist again")
        assert _texts(h) == ["I'll remind you.", "I'll remind you."]
        assert len(await store.reminders(SASHA)) == 2
        h.outlet.no_private_chat.add(C.chat_id)  # the person blocks the bot
        await h.advance(2.1 * HOUR, step=60)  # past noon
        assert len(h.outlet.refused) == 1  # the first reminder, refused
        assert not await store.conversation_active(C)
        await h.advance(1.1 * HOUR, step=60)  # past 13:00
        await h.advance(48 * HOUR, step=1800)
        assert len(h.outlet.refused) == 1  # the second was never tried
        assert len([r for r in llm.requests if "reminder" in r.layers]) == 1
        assert not any("dentist, in an hour" in t for t in _texts(h))
        stored = await store.reminders(SASHA, pending_only=False)
        assert [(r.status, r.note) for r in stored] == [("failed", REFUSED)] * 2
        h.outlet.no_private_chat.discard(C.chat_id)  # unblocked: they write again
        await _chat(h, "I'm back")
        assert await store.conversation_active(C)
        await h.say(C, "/reminders")
        assert _texts(h)[-2].endswith("I'm back")  # its reply
        assert _texts(h)[-1].startswith("You have no reminders waiting.")
        await h.advance(24 * HOUR, step=1800)
        assert len([r for r in llm.requests if "reminder" in r.layers]) == 1
        assert len(_texts(h)) == 4 and not any("dentist, in" in t for t in _texts(h))


async def _remind(h: Harness) -> None:
    await h.say(C, "/timezone Europe/Berlin")
    await _chat(h, "please remind me at 9 on Thursday about the dentist")


async def test_a_reminder_set_through_the_tool_fires_once_after_a_restart(
    store: BaseStore,
) -> None:
    clock = ManualClock(T0)
    llm = Scripted()
    reminders = ScheduleSettings(reminders=True)
    async with harness(store, clock, llm, schedule=reminders) as h:
        await _remind(h)
        assert _texts(h)[-1] == "I'll remind you."
        tool_results = [
            b.content
            for r in llm.requests
            for m in r.messages
            for b in m.blocks
            if isinstance(b, ToolResult)
        ]
        assert any("Thu 3 Dec 2026, 09:00 (Europe/Berlin)" in t for t in tool_results)
        assert "/reminders" not in _texts(h)
        await h.say(C, "/reminders")
        assert "the dentist" in _texts(h)[-1] and "Thu 3 Dec 2026, 09:00" in _texts(h)[-1]
    # A restart: the reminder is in the store, not in the process.
    async with harness(store, clock, llm, schedule=reminders) as h:
        due = datetime(2026, 12, 3, 8, 0, tzinfo=UTC).timestamp()  # 09:00 in Berlin
        await h.advance(due - clock.now() - 60, step=3600)
        assert not any("dentist, in an hour" in t for t in _texts(h))
        await h.advance(120, step=10)
        fired = [(t, r.text) for t, r in h.outlet.replies if "dentist, in an hour" in r.text]
        assert len(fired) == 1 and due <= fired[0][0] <= due + 15
        await h.advance(3 * HOUR, step=600)
        assert sum("dentist, in an hour" in t for t in _texts(h)) == 1
        (stored,) = await store.reminders(UserKey("telegram", "u1"), pending_only=False)
        assert stored.status == "sent"


async def test_two_processes_fire_each_check_in_and_reminder_once(
    stores: StoreFactory,
) -> None:
    clock = ManualClock(T0)
    llms = [Scripted(remind_at="2026-12-01T14:00"), Scripted(remind_at="2026-12-01T14:00")]
    reminders = ScheduleSettings(reminders=True)
    async with (
        stores.new() as a,
        stores.new() as b,
        harness(a, clock, llms[0], initiative=NO_QUIET, schedule=reminders, holder="a") as ha,
        harness(b, clock, llms[1], initiative=NO_QUIET, schedule=reminders, holder="b") as hb,
    ):
        await _remind(ha)
        await ha.advance(4 * HOUR, step=120)
        await hb.advance(1.0)
        sent: Sequence[str] = [*_texts(ha), *_texts(hb)]
        assert sum(t == CHECK_IN for t in sent) == 1
        assert sum("dentist, in an hour" in t for t in sent) == 1


async def test_a_reminder_whose_time_passed_while_the_reply_was_written_still_fires(
    store: BaseStore,
) -> None:
    """The reply says it is set: it is stored (and fires at once), never dropped silently."""
    clock = ManualClock(T0)
    llm = Scripted(remind_at="2026-12-01T10:01")  # a minute ahead, in UTC (the default zone)
    llm.slow = (clock, 120.0)
    async with harness(store, clock, llm, schedule=ScheduleSettings(reminders=True)) as h:
        await h.say(C, "please remind me in a minute about the dentist")
        await h.advance(130.0, step=1.0)
        assert "I'll remind you." in _texts(h)
        await h.advance(15.0, step=1.0)
        assert sum("dentist, in an hour" in t for t in _texts(h)) == 1


async def test_forget_erases_reminders_and_the_time_zone_and_export_shows_them(
    store: BaseStore,
) -> None:
    clock = ManualClock(T0)
    llm = Scripted()
    other = ConversationKey("telegram", "77", None, BOT)
    async with harness(store, clock, llm, schedule=ScheduleSettings(reminders=True)) as h:
        await _remind(h)
        await h.say(other, "/timezone Asia/Tokyo", author="u2")
        await h.say(other, "remind me at 9 on Thursday about the dentist", author="u2")
        await h.advance(3.0, step=0.5)
        sasha, kim = UserKey("telegram", "u1"), UserKey("telegram", "u2")
        exported = await h.memory.export_all(sasha)
        assert exported["timezone"] == "Europe/Berlin"
        assert [(r["about"], r["status"]) for r in exported["reminders"]] == [
            ("the dentist", "pending")
        ]
        await h.say(C, "/forget confirm")
        assert "I deleted 1 reminder of yours and your time zone setting" in _texts(h)[-1]
        assert await store.reminders(sasha, pending_only=False) == []
        assert await store.timezone_of(sasha) is None
        # Another person's stay.
        assert len(await store.reminders(kim)) == 1
        assert await store.timezone_of(kim) == "Asia/Tokyo"
        exported = await h.memory.export_all(sasha)
        assert exported["reminders"] == [] and exported["timezone"] is None


async def test_check_ins_and_reminders_are_in_their_export_and_go_with_forget(
    store: BaseStore,
) -> None:
    """Written to one person: their /export lists them (with their origin), nobody else's
    does, and /forget (deleting messages) deletes them with the replies to that person."""
    clock = ManualClock(T0)
    llm = Scripted(remind_at="2026-12-01T13:00")
    other = ConversationKey("telegram", "77", None, BOT)
    reminders = ScheduleSettings(reminders=True)
    async with harness(
        store,
        clock,
        llm,
        initiative=NO_QUIET,
        schedule=reminders,
        forget_deletes_messages=True,
    ) as h:
        await _chat(h, "please remind me at 13:00 about the dentist")
        await h.say(other, "hello there", author="u2")
        await h.advance(3.0, step=0.5)
        await h.advance(4 * HOUR, step=120)
        assert CHECK_IN in _texts(h) and any("dentist, in an hour" in t for t in _texts(h))
        sasha, kim = UserKey("telegram", "u1"), UserKey("telegram", "u2")
        mine = (await h.memory.export_all(sasha))["replies_to_you"]
        origins = {r["text"]: r["origin"] for r in mine}
        assert origins[CHECK_IN] == "initiative"
        assert origins["Sasha! The dentist, in an hour's time."] == "reminder"
        assert origins["I'll remind you."] is None
        (due,) = (await h.memory.export_all(sasha))["reminders"]
        assert due["due_local"] == "Tue 1 Dec 2026, 13:00" and due["chat_id"] == "42"
        assert {r["chat_id"] for r in mine} == {"42"}

        async def kims() -> list[tuple[str, str | None]]:
            replies = (await h.memory.export_all(kim))["replies_to_you"]
            return [(r["chat_id"], r["origin"]) for r in replies]

        # Kim's own reply and check-in, in Kim's chat; nothing written to Sasha.
        assert await kims() == [("77", None), ("77", "initiative")]
        await h.say(C, "/forget confirm")
        after = await h.memory.export_all(sasha)
        assert after["replies_to_you"] == [] and after["reminders"] == []
        assert await kims() == [("77", None), ("77", "initiative")]
