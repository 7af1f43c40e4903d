"""docs/architecture.md#queue acceptance scenarios on every store backend, timed by a manual
clock."""

from __future__ import annotations

import asyncio
import itertools

from bot.core.clock import ManualClock
from bot.core.events import ConversationKey, Inbound, QueuePolicy, UserKey
from bot.queue import Scheduler
from bot.store.base import BaseStore
from tests.backends import StoreFactory
from tests.fakes.llm import GatedLLM
from tests.harness import harness, settle

C1 = ConversationKey("telegram", "100")


async def test_three_quick_messages_make_one_call_and_one_reply(
    store: BaseStore, clock: ManualClock
) -> None:
    llm = GatedLLM(clock=clock, generation=3.0)  # slower than the debounce
    async with harness(store, clock, llm) as h:
        await h.say(C1, "first")
        await h.advance(0.5)
        await h.say(C1, "second")
        await h.advance(0.5)
        await h.say(C1, "third")
        await h.advance(1.4)
        assert llm.calls == 0  # still inside the debounce after the last message
        await h.advance(10)
        assert llm.calls == 1
        assert llm.last_input() == "first\nsecond\nthird"
        assert len(h.outlet.replies) == 1
        assert h.outlet.texts() == ["reply to: first\nsecond\nthird"]


async def test_message_during_generation_discards_the_stale_reply(
    store: BaseStore, clock: ManualClock
) -> None:
    llm = GatedLLM(clock=clock, gated=True)
    async with harness(store, clock, llm) as h:
        for text in ("one", "two", "three"):
            await h.say(C1, text)
        await h.advance(1.6)
        assert llm.calls == 1
        await h.say(C1, "four")  # arrives while the model works
        llm.release(0)
        await h.advance(0.2)
        assert h.outlet.replies == []  # the first generation's reply is never sent
        await h.advance(1.5)
        assert llm.calls == 2
        assert llm.last_input() == "one\ntwo\nthree\nfour"
        llm.release(1)
        await h.advance(0.2)
        assert h.outlet.texts() == ["reply to: one\ntwo\nthree\nfour"]
        # Typing was shown for both generations and stopped both times.
        assert [e for e, _ in h.outlet.typing_events] == ["start", "stop", "start", "stop"]


async def test_endless_typist_still_gets_replies_within_max_wait(
    store: BaseStore, clock: ManualClock
) -> None:
    generation, max_wait = 1.0, 8.0
    llm = GatedLLM(clock=clock, generation=generation)
    async with harness(store, clock, llm, max_wait=max_wait) as h:
        start = clock.now()
        for i in range(60):  # every 0.5 s for 30 s
            await h.say(C1, f"msg {i}")
            await h.advance(0.5, step=0.25)
        await h.advance(max_wait + generation + 2, step=0.25)
        times = [start] + [t for t, _ in h.outlet.replies]
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert len(h.outlet.replies) >= 3
        assert max(gaps) <= max_wait + generation + 0.6  # + the clock step granularity
        # Every message was answered exactly once, in order, across the replies.
        answered = "\n".join(r.text.removeprefix("reply to: ") for _, r in h.outlet.replies)
        assert answered.split("\n") == [f"msg {i}" for i in range(60)]


async def test_duplicate_delivery_is_processed_once(store: BaseStore, clock: ManualClock) -> None:
    llm = GatedLLM()
    async with harness(store, clock, llm) as h:
        await h.say(C1, "hello", message_id="tg-1")
        await h.say(C1, "hello", message_id="tg-1")  # the platform delivered it again
        await h.advance(2)
        await h.say(C1, "hello", message_id="tg-1")  # and again, after the reply
        await h.advance(2)
        session = await store.current_session(C1)
        assert session is not None
        users = [m for m in await store.messages(session.key) if m.role == "user"]
        assert [m.text for m in users] == ["hello"]
        assert llm.calls == 1
        assert h.outlet.texts() == ["reply to: hello"]
        assert await store.conversation_version(C1) == 1


async def test_two_processes_racing_for_one_timer_make_one_call(
    stores: StoreFactory, clock: ManualClock
) -> None:
    llm = GatedLLM(clock=clock, generation=2.0)
    async with (
        stores.new() as a,
        stores.new() as b,
        harness(a, clock, llm, holder="proc-a") as ha,
        harness(b, clock, llm, holder="proc-b") as hb,
    ):
        for i in range(5):
            conv = ConversationKey("telegram", f"c{i}")
            await ha.say(conv, f"a-{i}", message_id=f"a{i}")
            await hb.say(conv, f"b-{i}", message_id=f"b{i}")
        await ha.advance(8)
        assert llm.calls == 5
        replies = ha.outlet.texts() + hb.outlet.texts()
        assert sorted(replies) == sorted(f"reply to: a-{i}\nb-{i}" for i in range(5))


class _FrozenClock:
    """A process frozen mid-generation: its clock's sleeps never return (no renewals)."""

    def __init__(self, clock: ManualClock) -> None:
        self._clock = clock

    def now(self) -> float:
        return self._clock.now()

    async def sleep(self, seconds: float) -> None:
        await ManualClock().sleep(3600)  # a clock nobody advances


async def test_stalled_worker_is_taken_over_and_its_late_reply_fenced(
    stores: StoreFactory, clock: ManualClock
) -> None:
    stalled_llm = GatedLLM(gated=True)
    healthy_llm = GatedLLM()
    async with stores.new() as a, stores.new() as b:
        async with harness(
            a, clock, stalled_llm, lease=10, holder="stalled", pipeline_clock=_FrozenClock(clock)
        ) as stalled:
            await stalled.say(C1, "are you there?")
            await stalled.advance(1.6)
            assert stalled_llm.calls == 1  # generating, and no longer renewing its lease
            async with harness(b, clock, healthy_llm, lease=10, holder="healthy") as healthy:
                await healthy.advance(5)
                assert healthy_llm.calls == 0  # the lease has not expired yet
                await healthy.advance(6)
                assert healthy_llm.calls == 1
                assert healthy.outlet.texts() == ["reply to: are you there?"]
                stalled_llm.release()  # the stalled worker wakes up with its stale reply
                await settle(a, b)
                await stalled.advance(1)
                assert stalled.outlet.replies == []
        session = await b.current_session(C1)
        assert session is not None
        messages = await b.messages(session.key)
        assert [(m.role, m.text) for m in messages] == [
            ("user", "are you there?"),
            ("assistant", "reply to: are you there?"),
        ]


async def test_finished_turn_keeps_a_timer_armed_by_newer_input(
    store: BaseStore, clock: ManualClock
) -> None:
    policy = QueuePolicy(debounce=1.5, max_wait=2.0)
    first = await store.ingest(Inbound(C1, "u1", "Sasha", "one", "p1"), clock.now(), policy)
    turn = await store.pending_turn(C1)
    assert turn is not None
    lease = await store.acquire_lease("t", "w", 30, clock.now())
    assert lease is not None
    await clock.advance(3.0)  # the hard cap has passed: the reply will be recorded
    later = await store.ingest(Inbound(C1, "u1", "Sasha", "two", "p2"), clock.now(), policy)
    assert later.due_at is not None and first.due_at is not None
    result = await store.finish_turn(turn, lease, "answer to one", clock.now(), policy)
    assert result.outcome == "recorded"
    timer = await store.timer(C1)
    assert timer is not None, "the turn deleted the timer that newer input armed"
    assert timer.due_at >= clock.now()  # "two" gets its own debounce
    assert timer.first_pending_at == clock.now()  # and its own hard cap
    nxt = await store.pending_turn(C1)
    assert nxt is not None and [m.text for m in nxt.messages] == ["two"]


async def test_data_writes_never_touch_the_timer(store: BaseStore, clock: ManualClock) -> None:
    policy = QueuePolicy(debounce=1.5, max_wait=8.0)
    await store.ingest(Inbound(C1, "u1", "Sasha", "hi", "p1"), clock.now(), policy)
    before = await store.timer(C1)
    session = await store.current_session(C1)
    assert before is not None and session is not None
    await clock.advance(1.0)
    await store.set_state(session.key, "choice", "blue mug", clock.now())
    await store.set_user_memory(UserKey("telegram", "u1"), "{}", clock.now())
    await store.ingest(
        Inbound(C1, "u2", "Other", "context only", "p2", triggers_reply=False),
        clock.now(),
        policy,
    )
    assert await store.timer(C1) == before


async def test_discarded_turn_keeps_the_first_pending_time(
    store: BaseStore, clock: ManualClock
) -> None:
    policy = QueuePolicy(debounce=1.5, max_wait=8.0)
    await store.ingest(Inbound(C1, "u1", "S", "one", "p1"), clock.now(), policy)
    turn = await store.pending_turn(C1)
    lease = await store.acquire_lease("t", "w", 30, clock.now())
    assert turn is not None and lease is not None
    await clock.advance(1.0)
    await store.ingest(Inbound(C1, "u1", "S", "two", "p2"), clock.now(), policy)
    result = await store.finish_turn(turn, lease, "stale", clock.now(), policy)
    assert result.outcome == "discarded"
    timer = await store.timer(C1)
    assert timer is not None and timer.first_pending_at == turn.first_pending_at
    session = await store.current_session(C1)
    assert session is not None
    assert all(m.role == "user" for m in await store.messages(session.key))


async def test_lease_cas_and_fencing_tokens(store: BaseStore, clock: ManualClock) -> None:
    now = clock.now()
    first = await store.acquire_lease("x", "a", 10, now)
    assert first is not None
    assert await store.acquire_lease("x", "b", 10, now + 5) is None  # held: CAS fails
    renewed = await store.renew_lease(first, 10, now + 5)
    assert renewed is not None and renewed.expires_at == now + 15
    second = await store.acquire_lease("x", "b", 10, now + 16)  # expired: taken over
    assert second is not None and second.token > first.token
    assert await store.renew_lease(first, 10, now + 17) is None  # the old holder is fenced
    await store.release_lease(second)
    third = await store.acquire_lease("x", "a", 10, now + 17)
    assert third is not None and third.token > second.token
    await store.release_lease(first)  # a stale release is a no-op
    assert await store.acquire_lease("x", "c", 10, now + 18) is None


async def test_clearing_an_idle_timer_never_strands_a_pending_message(
    store: BaseStore, clock: ManualClock
) -> None:
    """A worker that found nothing pending clears the timer; a message that landed in between
    (its version included in what the worker read later) keeps its timer."""
    policy = QueuePolicy(debounce=1.0, max_wait=8.0)
    await store.ingest(Inbound(C1, "u1", "S", "are you there?", "p1"), clock.now(), policy)
    version = await store.conversation_version(C1)
    assert await store.clear_timer(C1, version) is False
    assert await store.timer(C1) is not None
    # Parking a turn on purpose (a rejected request) may remove it.
    assert await store.clear_timer(C1, version, only_if_idle=False) is True
    assert await store.timer(C1) is None


async def test_a_running_turn_does_not_delay_another_conversations_timer(
    store: BaseStore, clock: ManualClock
) -> None:
    """Head of line: while A's long generation runs, B's timer still fires on time."""
    llm = GatedLLM(gated=True)
    async with harness(store, clock, llm, debounce=0.1) as h:
        await h.say(C1, "slow one")
        await h.advance(0.2, step=0.1)
        assert llm.calls == 1  # A is generating (and its timer is past due)
        other = ConversationKey("telegram", "200")
        await h.say(other, "quick one")
        await h.advance(0.2, step=0.1)  # well under the 0.5 s scan interval
        assert llm.calls == 2
        llm.release()
        await h.advance(0.2, step=0.1)
        assert sorted(h.outlet.texts()) == ["reply to: quick one", "reply to: slow one"]


async def test_a_wake_up_during_the_schedulers_store_read_is_not_lost(
    store: BaseStore, clock: ManualClock
) -> None:
    """A timer armed while the scheduler reads the next due time (on PostgreSQL the read may
    not see it yet) still wakes the scheduler at once, not a scan interval later."""
    calls: list[ConversationKey] = []

    async def run_turn(key: ConversationKey) -> str:
        calls.append(key)
        return "idle"

    scheduler = Scheduler(store=store, clock=clock, run_turn=run_turn, bots=["default"])
    sleeping = asyncio.create_task(scheduler._sleep_until_next())
    await asyncio.sleep(0)  # the task is now inside its store read
    scheduler.wake()  # an ingest armed a timer meanwhile
    # Without moving the clock: the wake-up must end the sleep.
    await asyncio.wait_for(sleeping, timeout=5.0)


async def test_generation_longer_than_the_lease_keeps_it_by_renewal(
    stores: StoreFactory, clock: ManualClock
) -> None:
    """bot.queue.lease.renewing: a healthy worker's slow generation (10 s on a 3 s lease) is
    never taken over by another process, so the burst gets one model call and one reply."""
    llm = GatedLLM(clock=clock, generation=10.0)
    async with (
        stores.new() as a,
        stores.new() as b,
        harness(a, clock, llm, lease=3, holder="slow") as slow,
        harness(b, clock, llm, lease=3, holder="other") as other,
    ):
        await slow.say(C1, "take your time")
        await slow.advance(16, step=0.5)
        await other.advance(1)
        assert llm.calls == 1
        assert slow.outlet.texts() + other.outlet.texts() == ["reply to: take your time"]


async def test_a_context_message_edited_to_mention_the_bot_gets_one_reply(
    store: BaseStore, clock: ManualClock
) -> None:
    """Issue 15: the edit went unanswered. It now arms the timer like a new mention; a later
    edit of the answered message never triggers again."""
    group = ConversationKey("telegram", "-100")
    llm = GatedLLM()

    def said(text: str, *, kind: str = "message", triggers: bool = False) -> Inbound:
        return Inbound(
            group,
            "u1",
            "Sasha",
            text,
            "g1",
            is_private=False,
            triggers_reply=triggers,
            mentions_bot=triggers,
            kind=kind,  # type: ignore[arg-type]
        )

    async with harness(store, clock, llm) as h:
        await h.router(said("what does everyone think?"))
        await h.advance(5)
        assert llm.calls == 0  # context only
        await h.router(said("@Mira what do you think?", kind="edit", triggers=True))
        await h.advance(1.4)
        assert llm.calls == 0  # the debounce of new input
        await h.advance(1)
        assert llm.calls == 1 and "@Mira what do you think?" in llm.last_input()
        assert len(h.outlet.texts(group)) == 1
        await h.router(said("@Mira what do you REALLY think?", kind="edit", triggers=True))
        await h.advance(5)
        assert llm.calls == 1 and len(h.outlet.texts(group)) == 1
