"""Batches of ingest racing each other (issue 23): two store connections (two processes'
worth) ingest overlapping batches in opposite orders at once, on both stores. Nothing
deadlocks, every message is stored once, and each conversation's versions and turns count
up without a gap or a repeat, as if the batches had run one after the other."""

from __future__ import annotations

import asyncio

from bot.core.events import ConversationKey, Inbound, QueuePolicy
from tests.backends import StoreFactory

Q = QueuePolicy(debounce=1.0, max_wait=5.0)
CONVERSATIONS = 12
ROUNDS = 15


def _key(i: int) -> ConversationKey:
    return ConversationKey("telegram", str(2000 + i), None, "mira")


async def test_overlapping_batches_from_two_connections_never_deadlock_or_double(
    stores: StoreFactory,
) -> None:
    async with stores.new() as one, stores.new() as two:
        for i in range(0, CONVERSATIONS, 2):  # half exist before, half are created by batches
            await one.ingest(Inbound(_key(i), "u", "P", "hello", f"seed{i}"), 1000.0, Q)

        async def batch(store: object, name: str, order: range, n: int) -> None:
            items = [
                (Inbound(_key(i), "u", "P", f"{name} {n} {i}", f"{name}-{n}-{i}"), Q) for i in order
            ]
            results = await store.ingest_many(items, 1001.0 + n)  # type: ignore[attr-defined]
            assert all(r.stored for r in results)

        for n in range(ROUNDS):
            await asyncio.gather(
                batch(one, "a", range(CONVERSATIONS), n),
                batch(two, "b", range(CONVERSATIONS - 1, -1, -1), n),
            )
        # Second deliveries of a whole batch change nothing.
        again = await two.ingest_many(
            [(Inbound(_key(i), "u", "P", "x", f"a-0-{i}"), Q) for i in range(CONVERSATIONS)],
            2000.0,
        )
        assert not any(r.stored for r in again)

        for i in range(CONVERSATIONS):
            session = await one.current_session(_key(i))
            assert session is not None
            messages = await one.messages(session.key)
            ids = [m.platform_message_id for m in messages]
            assert len(ids) == len(set(ids)) == 2 * ROUNDS + (1 - i % 2)
            assert sorted(m.version for m in messages) == list(range(1, len(messages) + 1))
            assert sorted(m.turn for m in messages) == list(range(1, len(messages) + 1))


async def test_a_command_that_answered_by_itself_is_recognized_when_delivered_again(
    stores: StoreFactory,
) -> None:
    """``record_ran`` (a command that sent a file or nothing, e.g. /export) makes
    ``answered`` true for its platform message, as an answer's outbox row does; the row has
    no text and nothing waits to be sent."""
    async with stores.new() as store:
        key = _key(99)
        assert not await store.answered(key, "77")
        await store.record_ran(key, "77", 1000.0)
        assert await store.answered(key, "77")
        assert not await store.answered(key, "78")
        assert not await store.answered(_key(98), "77")  # another chat's message 77
        assert await store.unsent_outbox(older_than=2000.0) == []
