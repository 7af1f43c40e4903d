"""The queue's atomic operations raced from two stores on one database (two "processes").

Each store has its own connection (SQLite) or connection pool (PostgreSQL); the operations are
started together with ``asyncio.gather`` so that their statements interleave on the server.
Whatever the interleaving, the outcome asserted here must hold.
"""

from __future__ import annotations

import asyncio

from bot.core.events import ConversationKey, Inbound, QueuePolicy
from bot.store.base import BaseStore
from tests.backends import StoreFactory

C1 = ConversationKey("telegram", "race")
T0 = 1_700_000_000.0
POLICY = QueuePolicy(debounce=1.5, max_wait=8.0)


def _msg(i: int, pid: str | None = None) -> Inbound:
    return Inbound(C1, f"u{i % 3}", "Sasha", f"text {i}", pid or f"p{i}")


async def test_racing_ingests_get_distinct_versions_and_turns(stores: StoreFactory) -> None:
    async with stores.new() as a, stores.new() as b:
        pair = (a, b)
        results = await asyncio.gather(
            *(pair[i % 2].ingest(_msg(i), T0 + i * 0.001, POLICY) for i in range(40))
        )
        assert all(r.stored for r in results)
        assert sorted(r.version for r in results) == list(range(1, 41))
        assert await a.conversation_version(C1) == 40
        session = await b.current_session(C1)
        assert session is not None
        stored = await b.messages(session.key)
        assert sorted(m.turn for m in stored) == list(range(1, 41))
        timer = await a.timer(C1)
        assert timer is not None and timer.armed_version == 40
        first = next(m for m in stored if m.version == 1)
        assert timer.first_pending_at == first.created_at  # the burst's first message


async def test_racing_duplicate_deliveries_store_one_message(stores: StoreFactory) -> None:
    async with stores.new() as a, stores.new() as b:
        pair = (a, b)
        for round_ in range(5):
            pid = f"dup-{round_}"
            results = await asyncio.gather(
                *(pair[i % 2].ingest(_msg(round_, pid), T0, POLICY) for i in range(6))
            )
            assert sum(r.stored for r in results) == 1
        assert await a.conversation_version(C1) == 5


async def test_racing_deletions_of_one_message_remove_it_once(stores: StoreFactory) -> None:
    """A platform delivers the deletion event twice (Telegram retry, Discord resume), handled by
    two processes at once: one of them removes the message and tombstones its turn once."""
    async with stores.new() as a, stores.new() as b:
        pair = (a, b)
        for round_ in range(5):
            await a.ingest(_msg(round_, f"del-{round_}"), T0 + round_, POLICY)
        for round_ in range(5):
            removed = await asyncio.gather(
                *(pair[i % 2].delete_message(C1, f"del-{round_}", now=T0 + 10) for i in range(6))
            )
            assert sum(r is not None for r in removed) == 1
        session = await a.current_session(C1)
        assert session is not None
        assert await a.messages(session.key) == []
        assert [(t.first_turn, t.last_turn) for t in await a.tombstones(session.key)] == [
            (turn, turn) for turn in range(1, 6)
        ]


async def test_racing_lease_acquisitions_have_one_winner(stores: StoreFactory) -> None:
    async with stores.new() as a, stores.new() as b:
        pair = (a, b)
        tokens: list[int] = []
        for round_ in range(5):
            now = T0 + round_ * 100  # every round starts after the previous lease expired
            leases = await asyncio.gather(
                *(pair[i % 2].acquire_lease("turn:x", f"w{i}", 30, now) for i in range(10))
            )
            won = [lease for lease in leases if lease is not None]
            assert len(won) == 1
            tokens.append(won[0].token)
        assert tokens == sorted(set(tokens))  # fencing tokens only grow


async def _take_over_and_answer(store: BaseStore, now: float) -> str:
    """A second worker: take the (expired) lease, read the pending turn, answer it."""
    lease = await store.acquire_lease("turn:c", "late", 30, now)
    if lease is None:
        return "busy"
    turn = await store.pending_turn(C1)
    if turn is None:
        return "idle"
    return (await store.finish_turn(turn, lease, "second answer", now, POLICY)).outcome


async def test_final_check_racing_a_takeover_answers_each_message_once(
    stores: StoreFactory,
) -> None:
    """The first holder's final check and a takeover of its (expired) lease, interleaved.

    Whichever commits first, the messages are answered exactly once: either the first holder
    is fenced, or the takeover finds nothing pending.
    """
    async with stores.new() as a, stores.new() as b:
        for round_ in range(8):
            now = T0 + round_ * 1000
            await a.ingest(_msg(round_, f"q{round_}"), now, POLICY)
            lease = await a.acquire_lease("turn:c", "first", 5, now)
            turn = await a.pending_turn(C1)
            assert lease is not None and turn is not None
            late = now + 10  # the first holder's lease has expired
            first, second = await asyncio.gather(
                a.finish_turn(turn, lease, "first answer", late, POLICY),
                _take_over_and_answer(b, late),
            )
            assert [first.outcome, second].count("recorded") == 1, (first.outcome, second)
            await b.release_lease(
                (await b.acquire_lease("turn:c", "cleanup", 30, late + 100)) or lease
            )
        session = await a.current_session(C1)
        assert session is not None
        stored = await a.messages(session.key)
        assert [m.role for m in stored] == ["user", "assistant"] * 8
        assert all(m.answered for m in stored if m.role == "user")
