"""Check-ins and reminders in the store (issue 17, docs/initiatives.md), on both backends: the
final check of a message the persona writes first, reminders stored with the reply that agreed
to them, and what a person can list, cancel and erase."""

from __future__ import annotations

import asyncio
from typing import Any

from bot.core.agenda import CheckinCap, NewReminder
from bot.core.events import ConversationKey, Inbound, QueuePolicy, UserKey
from bot.store.base import BaseStore
from tests.backends import StoreFactory

C = ConversationKey("telegram", "42")
T0 = 1_700_000_000.0
Q = QueuePolicy(debounce=0.0, max_wait=5.0)
SASHA = UserKey("telegram", "u1")


async def _answered(store: BaseStore, text: str, at: float, **finish: object) -> None:
    """A message from Sasha and the bot's reply to it."""
    await store.ingest(Inbound(C, "u1", "Sasha", text, f"m{at}"), at, Q)
    turn = await store.pending_turn(C)
    assert turn is not None
    lease = await store.acquire_lease(f"turn:{C}", "w", 30, at)
    assert lease is not None
    done = await store.finish_turn(turn, lease, f"re: {text}", at, Q, **finish)  # type: ignore[arg-type]
    assert done.outcome == "recorded"
    await store.release_lease(lease)


async def test_a_check_in_is_recorded_once_and_counts_as_unanswered(store: BaseStore) -> None:
    await _answered(store, "hello", T0)
    state = await store.initiative_state(C)
    assert state is not None and state.last_user_at == T0 and state.person == "u1"
    assert (state.unanswered, state.pending, state.enabled, state.active) == (0, False, True, True)
    await store.arm_initiative(C, T0 + 100, T0)
    assert [(i.kind, i.due_at) for i in await store.due_agenda(T0 + 100)] == [
        ("initiative", T0 + 100)
    ]
    assert await store.due_agenda(T0 + 99) == []
    lease = await store.acquire_lease(f"turn:{C}", "w", 30, T0 + 100)
    assert lease is not None and state.session_no is not None
    done = await store.finish_proactive(
        C,
        lease,
        version=state.version,
        session_no=state.session_no,
        text="How did it go?",
        now=T0 + 100,
        origin="initiative",
        addressee="u1",
        next_due=None,
    )
    assert done.outcome == "recorded" and done.outbox is not None
    assert done.outbox.text == "How did it go?"
    after = await store.initiative_state(C)
    assert after is not None and after.unanswered == 1 and after.sent_at == T0 + 100
    assert after.due_at is None and await store.due_agenda(T0 + 10_000) == []
    history = await store.history(done.outbox.session, 10)
    assert [m.text for m in history][-1] == "How did it go?"
    # The person answers: nothing unanswered any more.
    await _answered(store, "great", T0 + 200)
    answered = await store.initiative_state(C)
    assert answered is not None and answered.unanswered == 0


async def test_a_person_writing_during_generation_wins(store: BaseStore) -> None:
    await _answered(store, "hello", T0)
    state = await store.initiative_state(C)
    assert state is not None and state.session_no is not None
    lease = await store.acquire_lease(f"turn:{C}", "w", 30, T0 + 100)
    assert lease is not None
    await store.ingest(Inbound(C, "u1", "Sasha", "I'm back", "m-back"), T0 + 101, Q)
    done = await store.finish_proactive(
        C,
        lease,
        version=state.version,
        session_no=state.session_no,
        text="Are you there?",
        now=T0 + 102,
        origin="initiative",
        addressee="u1",
    )
    assert done.outcome == "discarded"
    history = await store.history((await store.pending_turn(C)).session, 10)  # type: ignore[union-attr]
    assert "Are you there?" not in [m.text for m in history]


async def test_a_lost_lease_fences_and_checkins_off_discards(store: BaseStore) -> None:
    await _answered(store, "hello", T0)
    state = await store.initiative_state(C)
    assert state is not None and state.session_no is not None
    stale = await store.acquire_lease(f"turn:{C}", "a", 1, T0)
    assert stale is not None
    taken = await store.acquire_lease(f"turn:{C}", "b", 30, T0 + 5)
    assert taken is not None
    common = {"version": state.version, "session_no": state.session_no, "now": T0 + 6}
    fenced = await store.finish_proactive(
        C,
        stale,
        text="x",
        origin="initiative",
        addressee="u1",
        **common,  # type: ignore[arg-type]
    )
    assert fenced.outcome == "fenced"
    await store.set_checkins(C, False, T0 + 6)
    off = await store.finish_proactive(
        C,
        taken,
        text="x",
        origin="initiative",
        addressee="u1",
        **common,  # type: ignore[arg-type]
    )
    assert off.outcome == "discarded"
    await store.arm_initiative(C, T0 + 7, T0 + 6)
    assert await store.due_agenda(T0 + 100) == []  # off: never due, armed or not


async def test_reminders_are_stored_with_their_reply_listed_cancelled_and_erased(
    store: BaseStore,
) -> None:
    dentist = NewReminder("u1", "the dentist", T0 + 3600, "Europe/Berlin")
    await _answered(store, "remind me", T0, reminders=[dentist])
    (stored,) = await store.reminders(SASHA)
    assert (stored.about, stored.due_at, stored.timezone) == (
        "the dentist",
        T0 + 3600,
        "Europe/Berlin",
    )
    assert [(i.kind, i.reminder) for i in await store.due_agenda(T0 + 3600)] == [
        ("reminder", stored.id)
    ]
    assert not await store.cancel_reminder(UserKey("telegram", "u2"), stored.id, T0)
    assert not await store.cancel_reminder(UserKey("discord", "u1"), stored.id, T0)
    assert not await store.cancel_reminder(SASHA, stored.id, T0, bot="another-bot")
    assert await store.cancel_reminder(SASHA, stored.id, T0 + 1)
    assert await store.reminders(SASHA) == [] and await store.due_agenda(T0 + 9999) == []
    (cancelled,) = await store.reminders(SASHA, pending_only=False)
    assert cancelled.status == "cancelled"
    await store.set_timezone(SASHA, "Asia/Tokyo", T0)
    assert await store.timezone_of(SASHA) == "Asia/Tokyo"
    assert await store.erase_agenda(SASHA) == 1
    assert await store.timezone_of(SASHA) is None
    assert await store.reminders(SASHA, pending_only=False) == []


async def test_a_reminder_is_sent_once_across_processes(stores: StoreFactory) -> None:
    async with stores.new() as a, stores.new() as b:
        await _answered(a, "remind me", T0, reminders=[NewReminder("u1", "tea", T0 + 60, "UTC")])
        (item,) = await b.due_agenda(T0 + 60)
        assert item.reminder is not None
        outcomes = []
        for store, holder in ((a, "a"), (b, "b")):
            state = await store.initiative_state(C)
            assert state is not None and state.session_no is not None
            lease = await store.acquire_lease(f"turn:{C}", holder, 30, T0 + 60)
            if lease is None:
                outcomes.append("busy")
                continue
            done = await store.finish_proactive(
                C,
                lease,
                version=state.version,
                session_no=state.session_no,
                text="Tea time!",
                now=T0 + 60,
                origin="reminder",
                addressee="u1",
                reminder=item.reminder,
            )
            outcomes.append(done.outcome)
            await store.release_lease(lease)
        assert outcomes == ["recorded", "discarded"]  # b got the lease after a; already sent
        assert (await b.reminder(item.reminder)).status == "sent"  # type: ignore[union-attr]


async def test_a_reminder_fails_only_from_the_status_it_was_seen_in(store: BaseStore) -> None:
    """Failing is a compare-and-set: a reminder cancelled meanwhile stays cancelled, and one
    recorded as sent becomes failed only when the caller saw it sent (its message refused)."""
    reminders = [
        NewReminder("u1", about, T0 + 60 * n, "UTC")
        for n, about in ((1, "tea"), (2, "cake"), (3, "nap"))
    ]
    await _answered(store, "remind me", T0, reminders=reminders)
    tea, cake, nap = await store.reminders(SASHA)
    assert await store.cancel_reminder(SASHA, tea.id, T0 + 1)
    assert not await store.fail_reminder(tea.id, "the chat refuses delivery", T0 + 60)
    assert not await store.fail_reminder(cake.id, "refused", T0 + 120, was="sent")
    assert await store.fail_reminder(cake.id, "the chat refuses delivery", T0 + 120)
    assert not await store.fail_reminder(cake.id, "again", T0 + 121)
    # The nap reminder is written (recorded as sent), then its message is refused.
    state = await store.initiative_state(C)
    lease = await store.acquire_lease(f"turn:{C}", "w", 30, T0 + 180)
    assert state is not None and state.session_no is not None and lease is not None
    done = await store.finish_proactive(
        C,
        lease,
        version=state.version,
        session_no=state.session_no,
        text="Nap time!",
        now=T0 + 180,
        origin="reminder",
        addressee="u1",
        reminder=nap.id,
    )
    assert done.outcome == "recorded"
    assert not await store.fail_reminder(nap.id, "the chat refuses delivery", T0 + 181)
    assert await store.fail_reminder(nap.id, "the chat refuses delivery", T0 + 181, was="sent")
    shown = [(r.about, r.status, r.note) for r in await store.reminders(SASHA, pending_only=False)]
    assert shown == [
        ("tea", "cancelled", None),
        ("cake", "failed", "the chat refuses delivery"),
        ("nap", "failed", "the chat refuses delivery"),
    ]
    assert await store.reminders(SASHA) == [] and await store.due_agenda(T0 + 9999) == []


async def _ready(store: BaseStore, conversation: ConversationKey, at: float) -> tuple[Any, Any]:
    """A chat where Sasha was answered at ``at``: its state and the turn lease at ``at``."""
    await store.ingest(Inbound(conversation, "u1", "Sasha", "hi", f"m{conversation}"), at, Q)
    turn = await store.pending_turn(conversation)
    lease = await store.acquire_lease(f"turn:{conversation}", "w", 30, at)
    assert turn is not None and lease is not None
    assert (await store.finish_turn(turn, lease, "hello", at, Q)).outcome == "recorded"
    state = await store.initiative_state(conversation)
    assert state is not None and state.session_no is not None
    return state, lease


async def _check_in(
    store: BaseStore, conversation: ConversationKey, state: Any, lease: Any, now: float
) -> str:
    done = await store.finish_proactive(
        conversation,
        lease,
        version=state.version,
        session_no=state.session_no,
        text="How are you?",
        now=now,
        origin="initiative",
        addressee="u1",
        cap=CheckinCap(2),
    )
    return done.outcome


async def test_the_final_check_keeps_the_bots_check_in_cap_and_re_arms(store: BaseStore) -> None:
    """Past the cap the final check discards the check-in and re-arms it, in the same
    transaction, for the moment the oldest of the bot's last check-ins leaves the 24 hours;
    check-ins of another bot do not count."""
    chats = [ConversationKey("telegram", str(n), None, "mira") for n in (1, 2, 3)]
    other = ConversationKey("telegram", "4", None, "sasha")
    ready = [await _ready(store, c, T0) for c in [*chats, other]]
    assert await _check_in(store, chats[0], *ready[0], T0 + 100) == "recorded"
    assert await _check_in(store, other, *ready[3], T0 + 150) == "recorded"
    assert await _check_in(store, chats[1], *ready[1], T0 + 200) == "recorded"
    assert await store.recent_checkins("mira", T0, 10) == [T0 + 200, T0 + 100]
    assert await _check_in(store, chats[2], *ready[2], T0 + 300) == "discarded"
    state = await store.initiative_state(chats[2])
    assert state is not None and state.due_at == T0 + 100 + 86400 and state.sent_at is None
    assert [i.conversation for i in await store.due_agenda(T0 + 100 + 86400)] == [chats[2]]
    # The window frees: the same chat's check-in is recorded.
    assert await _check_in(store, chats[2], *ready[2], T0 + 100 + 86400) == "recorded"
    assert await store.recent_checkins("mira", T0 + 100, 10) == [T0 + 100 + 86400, T0 + 200]


async def test_two_processes_never_both_take_the_last_check_in_of_the_day(
    stores: StoreFactory,
) -> None:
    """Two processes record check-ins of one bot into two chats at once, one short of the
    cap: one is recorded, the other discarded (the count is taken under a lock per bot)."""
    rounds = [
        [ConversationKey("telegram", str(n), None, f"bot{k}") for n in (1, 2, 3)] for k in range(6)
    ]
    async with stores.new() as a, stores.new() as b:
        for chats in rounds:
            ready = [await _ready(a, c, T0) for c in chats]
            assert await _check_in(a, chats[0], *ready[0], T0 + 10) == "recorded"
            outcomes = await asyncio.gather(
                _check_in(a, chats[1], *ready[1], T0 + 20),
                _check_in(b, chats[2], *ready[2], T0 + 20),
            )
            assert sorted(outcomes) == ["discarded", "recorded"], outcomes
            assert len(await b.recent_checkins(chats[0].bot, T0, 10)) == 2
