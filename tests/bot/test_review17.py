"""Issue 17 under attack (an independent review): check-ins and reminders through the wired
runtime on the manual clock, on both stores, where a hostile user, a careless operator or a
flaky model tried to break what docs/initiatives.md guarantees.

The scripted model is the one of tests/bot/test_initiatives.py.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime

from bot.config import ScheduleSettings
from bot.core.clock import ManualClock
from bot.core.events import ConversationKey, UserKey
from bot.core.llm import ModelRequest, ModelResult, ToolResult, ToolUse, Usage
from bot.runtime.limits import LimitPolicy
from bot.store.base import BaseStore
from tests.backends import StoreFactory
from tests.bot.test_initiatives import CHECK_IN, HOUR, NO_QUIET, Scripted
from tests.harness import BOT, Harness, harness

C = ConversationKey("telegram", "42", None, BOT)
GROUP = ConversationKey("telegram", "-100", None, BOT)
SASHA = UserKey("telegram", "u1")
KIM = UserKey("telegram", "u2")
# A Tuesday, 19:00 UTC.
EVENING = datetime(2026, 12, 1, 19, 0, tzinfo=UTC).timestamp()
QUIET = NO_QUIET.model_copy(update={"quiet_hours": "22:00-08:00"})


def _utc_hour(at: float) -> int:
    return datetime.fromtimestamp(at, UTC).hour


def _check_ins(h: Harness) -> list[float]:
    return [t for t, r in h.outlet.replies if r.text == CHECK_IN]


async def _chat(h: Harness, conversation: ConversationKey, text: str, **kw: object) -> None:
    await h.say(conversation, text, **kw)  # type: ignore[arg-type]
    await h.advance(3.0, step=0.5)


# -- quiet hours: a check-in re-armed (or overdue) must not go out at night -------------------


async def test_a_check_in_re_armed_after_a_skip_never_lands_in_quiet_hours(
    store: BaseStore,
) -> None:
    # Due 21:00 UTC; the model skips; re-armed at 23:00 (inside 22:00-08:00). The rules then
    # read the original due time (21:00, past and not quiet) and the check-in went at 23:00.
    clock = ManualClock(EVENING)
    llm = Scripted(decision="skip")
    async with harness(store, clock, llm, initiative=QUIET) as h:
        await _chat(h, C, "long day")
        await h.advance(2.1 * HOUR, step=300)
        assert len(llm.decisions()) == 1 and _check_ins(h) == []
        llm.decision = "send"
        await h.advance(12 * HOUR, step=600)  # until 09:00 the next morning
        sent = _check_ins(h)
        assert sent, "no check-in at all"
        assert all(8 <= _utc_hour(t) < 22 for t in sent), [_utc_hour(t) for t in sent]


async def test_a_check_in_overdue_after_a_downtime_waits_for_the_end_of_quiet_hours(
    store: BaseStore,
) -> None:
    # The process is down from 20:00 to 23:00 (a careless deploy); the check-in was due at
    # 21:00. At 23:00 it is quiet where the person is: it must wait until 08:00.
    clock = ManualClock(EVENING)
    llm = Scripted()
    async with harness(store, clock, llm, initiative=QUIET) as h:
        await _chat(h, C, "long day")
        await h.advance(HOUR, step=600)
    await clock.advance(3 * HOUR)
    async with harness(store, clock, llm, initiative=QUIET) as h:
        await h.advance(10 * HOUR, step=600)  # until 09:00 the next morning
        sent = _check_ins(h)
        assert sent, "no check-in at all"
        assert all(8 <= _utc_hour(t) < 22 for t in sent), [_utc_hour(t) for t in sent]


# -- reminders: the per-person maximum ---------------------------------------------------------


class ManyReminders(Scripted):
    """A turn that asks for reminders calls ``remind_me`` ``count`` times in one answer (what a
    model does with "remind me every minute of the next hour")."""

    def __init__(self, count: int) -> None:
        super().__init__()
        self.count = count

    async def complete(self, request: ModelRequest) -> ModelResult:
        last = request.messages[-1]
        answered = any(isinstance(b, ToolResult) for b in last.blocks)
        if "remind me" in last.text and not answered and request.tools:
            self.requests.append(request)
            uses = tuple(
                ToolUse(
                    f"r{i}", "remind_me", {"at": f"2026-12-03T09:{i:02d}", "about": f"pill {i}"}
                )
                for i in range(self.count)
            )
            return ModelResult("", Usage(10, 5), "scripted", "tool_use", content=uses)
        return await super().complete(request)


async def test_one_turn_cannot_set_more_reminders_than_the_maximum(store: BaseStore) -> None:
    clock = ManualClock(EVENING)
    llm = ManyReminders(count=6)
    schedule = ScheduleSettings(reminders=True, max_reminders_per_person=2)
    async with harness(store, clock, llm, schedule=schedule) as h:
        await _chat(h, C, "remind me of my pills every minute from 9 on Thursday")
        waiting = await store.reminders(SASHA)
        assert len(waiting) <= 2, [r.about for r in waiting]


# -- reminders: what a group sees --------------------------------------------------------------


async def test_reminders_in_a_group_lists_none_set_in_a_private_chat(store: BaseStore) -> None:
    clock = ManualClock(EVENING)
    llm = Scripted()
    async with harness(store, clock, llm, schedule=ScheduleSettings(reminders=True)) as h:
        await _chat(h, C, "please remind me at 9 on Thursday about the dentist")
        assert len(await store.reminders(SASHA)) == 1
        await h.say(GROUP, "/reminders", private=False)
        shown = h.outlet.texts(GROUP)[-1]
        assert "dentist" not in shown, shown


async def test_a_reminder_asked_for_in_a_busy_group_is_not_given_to_someone_else(
    store: BaseStore,
) -> None:
    # Kim asks; Sasha writes right after (one coalesced turn): the reminder went to Sasha.
    clock = ManualClock(EVENING)
    llm = Scripted()
    async with harness(store, clock, llm, schedule=ScheduleSettings(reminders=True)) as h:
        await h.say(
            GROUP,
            "please remind me at 9 on Thursday about the dentist",
            author="u2",
            name="Kim",
            private=False,
        )
        await h.say(GROUP, "lol", private=False)
        await h.advance(3.0, step=0.5)
        assert await store.reminders(SASHA) == []
        assert await store.reminders(KIM) == []  # the model named nobody: it was told to
        told = [
            b.content
            for r in llm.requests
            for m in r.messages
            for b in m.blocks
            if isinstance(b, ToolResult)
        ]
        assert any("set `asker`" in t and "kim" in t and "sasha" in t for t in told), told


class NamingTheAsker(Scripted):
    """Names the asker in its remind_me call, as the tool's description asks in a group."""

    def __init__(self, asker: str) -> None:
        super().__init__()
        self.asker = asker

    async def complete(self, request: ModelRequest) -> ModelResult:
        result = await super().complete(request)
        uses = tuple(
            ToolUse(u.id, u.name, {**u.input, "asker": self.asker})
            if isinstance(u, ToolUse) and u.name == "remind_me"
            else u
            for u in result.content
        )
        return ModelResult(result.text, result.usage, result.model, result.stop_reason, uses)


async def test_a_reminder_named_for_one_of_several_speakers_goes_to_them(
    store: BaseStore,
) -> None:
    clock = ManualClock(EVENING)
    llm = NamingTheAsker("kim")  # as the model reads it: case and spacing do not matter
    async with harness(store, clock, llm, schedule=ScheduleSettings(reminders=True)) as h:
        await h.say(
            GROUP,
            "please remind me at 9 on Thursday about the dentist",
            author="u2",
            name="Kim",
            private=False,
        )
        await h.say(GROUP, "lol", private=False)
        await h.advance(3.0, step=0.5)
        assert [r.about for r in await store.reminders(KIM)] == ["the dentist"]
        assert await store.reminders(SASHA) == []


async def test_cancel_with_a_number_past_any_id_is_a_clear_answer(store: BaseStore) -> None:
    # Past 64 bits the store raised (OverflowError on SQLite, StoreError on PostgreSQL) and
    # a superscript digit passed isdigit() and broke int(): the command failed unanswered.
    clock = ManualClock(EVENING)
    llm = Scripted()
    async with harness(store, clock, llm, schedule=ScheduleSettings(reminders=True)) as h:
        await h.say(C, "/reminders cancel 99999999999999999999999")
        assert "no waiting reminder" in h.outlet.texts(C)[-1], h.outlet.texts(C)
        await h.say(C, "/reminders cancel ²")
        assert "Which one?" in h.outlet.texts(C)[-1], h.outlet.texts(C)


async def test_a_reminder_fires_after_the_session_that_set_it_expired(store: BaseStore) -> None:
    clock = ManualClock(EVENING)
    llm = Scripted()
    async with harness(store, clock, llm, schedule=ScheduleSettings(reminders=True)) as h:
        await _chat(h, C, "please remind me at 9 on Thursday about the dentist")
        old = await store.current_session(C)
        assert old is not None
        await h.say(C, "/new")
        await store.expire_session(old.key, clock.now())
        due = datetime(2026, 12, 3, 9, 0, tzinfo=UTC).timestamp()
        await h.advance(due - clock.now() + 30, step=1800)
        assert sum("dentist, in an hour" in t for t in h.outlet.texts(C)) == 1


async def test_no_check_in_in_a_group_by_default(store: BaseStore) -> None:
    clock = ManualClock(EVENING - 8 * HOUR)
    llm = Scripted()
    async with harness(store, clock, llm, initiative=NO_QUIET) as h:
        await _chat(h, GROUP, "hi all", private=False)
        await h.advance(6 * HOUR, step=600)
        assert llm.decisions() == [] and CHECK_IN not in h.outlet.texts(GROUP)


async def test_the_bots_daily_tokens_hold_check_ins_back(store: BaseStore) -> None:
    clock = ManualClock(EVENING - 8 * HOUR)
    llm = Scripted()
    limits = LimitPolicy(bot_tokens_per_day=10)  # the first reply (15 tokens) spends it
    async with harness(store, clock, llm, initiative=NO_QUIET, limits=limits) as h:
        await _chat(h, C, "hello")
        await h.advance(6 * HOUR, step=600)
        assert llm.decisions() == [] and _check_ins(h) == []


async def test_two_unanswered_check_ins_keep_the_interval_and_stop(store: BaseStore) -> None:
    clock = ManualClock(EVENING - 8 * HOUR)  # 11:00 UTC, no quiet hours
    llm = Scripted()
    twice = NO_QUIET.model_copy(update={"max_unanswered": 2, "min_interval_hours": 5.0})
    async with harness(store, clock, llm, initiative=twice) as h:
        await _chat(h, C, "hello")
        start = clock.now()
        await h.advance(48 * HOUR, step=900)
        sent = _check_ins(h)
        assert len(sent) == 2 and len(llm.decisions()) == 2
        assert sent[0] >= start + 2 * HOUR - 5 and sent[1] - sent[0] >= 5 * HOUR


class GatedReminder(Scripted):
    """The reminder's words wait for ``reminder_gate``."""

    def __init__(self) -> None:
        super().__init__(remind_at="2026-12-01T21:00")
        self.reminder_gate = asyncio.Event()
        self.reminder_waiting = asyncio.Event()

    async def complete(self, request: ModelRequest) -> ModelResult:
        if "reminder" in request.layers and not self.reminder_gate.is_set():
            self.reminder_waiting.set()
            await self.reminder_gate.wait()
        return await super().complete(request)


async def test_a_person_writing_during_a_reminder_gets_one_reply_then_the_reminder_once(
    store: BaseStore,
) -> None:
    clock = ManualClock(EVENING)
    llm = GatedReminder()
    async with harness(store, clock, llm, schedule=ScheduleSettings(reminders=True)) as h:
        await _chat(h, C, "please remind me at 21 about the dentist")
        await h.advance(2 * HOUR, step=300)
        assert llm.reminder_waiting.is_set()
        await h.say(C, "are you there?")
        llm.reminder_gate.set()
        await h.advance(30.0, step=0.5)
        texts = h.outlet.texts(C)
        assert sum("dentist, in an hour" in t for t in texts) == 1, texts
        # (the reply echoes the prompt's last message: the local-time layer, then the text)
        assert sum(t.endswith("are you there?") for t in texts) == 1, texts
        (stored,) = await store.reminders(SASHA, pending_only=False)
        assert stored.status == "sent"


async def test_checkins_off_during_generation_discards_the_check_in(store: BaseStore) -> None:
    clock = ManualClock(EVENING - 8 * HOUR)
    llm = Scripted()
    llm.gate = asyncio.Event()
    async with harness(store, clock, llm, initiative=NO_QUIET) as h:
        await _chat(h, C, "see you")
        await h.advance(2.1 * HOUR, step=300)
        assert llm.waiting.is_set()
        await h.say(C, "/checkins off")
        llm.gate.set()
        await h.advance(10.0, step=0.5)
        assert _check_ins(h) == []
        await h.advance(48 * HOUR, step=1800)
        assert _check_ins(h) == [] and len(llm.decisions()) == 1


async def test_a_process_stopped_mid_check_in_leaves_it_to_the_other_once(
    stores: StoreFactory,
) -> None:
    clock = ManualClock(EVENING - 8 * HOUR)
    first, second = Scripted(), Scripted()
    first.gate = asyncio.Event()  # never opened: this process stops while deciding
    async with stores.new() as a, stores.new() as b, contextlib.AsyncExitStack() as process_a:
        ha = await process_a.enter_async_context(
            harness(a, clock, first, initiative=NO_QUIET, holder="a")
        )
        await _chat(ha, C, "see you")
        for _ in range(10):  # "a" alone: it takes the due check-in and starts deciding
            if first.waiting.is_set():
                break
            await ha.advance(1800, step=300)
        assert first.waiting.is_set()
        async with harness(b, clock, second, initiative=NO_QUIET, holder="b") as hb:
            await process_a.aclose()  # "a" stops: its decision is cancelled, its lease released
            await hb.advance(60.0, step=1.0)
            texts = [*ha.outlet.texts(C), *hb.outlet.texts(C)]
            assert texts.count(CHECK_IN) == 1, texts
            await hb.advance(48 * HOUR, step=1800)
            texts = [*ha.outlet.texts(C), *hb.outlet.texts(C)]
            assert texts.count(CHECK_IN) == 1, texts
            assert hb.outlet.texts(C).count(CHECK_IN) == 1  # "b" sent it
