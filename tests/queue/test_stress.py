"""Review of issue 20: claims of three "processes" (stores on one database) interleaved with
ingest, the final check, /new, and check-ins racing for the same turn leases, on both
stores. No deadlock or other store error; in the end every message is answered once."""

from __future__ import annotations

import asyncio
import random

from bot.core.events import ConversationKey, Inbound, QueuePolicy
from bot.core.queue_rules import turn_lease
from bot.store.base import BaseStore
from tests.backends import StoreFactory

POLICY = QueuePolicy(debounce=0.0, max_wait=1.0)
T0 = 1_700_000_000.0
KEYS = [ConversationKey("telegram", f"chat {i}:x/y", None, "b") for i in range(6)]


async def _claimer(store: BaseStore, name: str, stop: asyncio.Event, now: list[float]) -> int:
    replies = 0
    while not stop.is_set():
        claims = await store.claim_due_turns(now[0], 2, holder=name, ttl=30, bots=["b"])
        for claimed in claims.turns:
            try:
                turn = await store.pending_turn(claimed.conversation)
                if turn is not None:
                    done = await store.finish_turn(turn, claimed.lease, "ok", now[0], POLICY)
                    replies += done.outcome == "recorded"
                else:
                    await store.clear_timer(
                        claimed.conversation,
                        await store.conversation_version(claimed.conversation),
                    )
            finally:
                await store.release_lease(claimed.lease)
        await asyncio.sleep(0 if claims.turns else 0.005)
    return replies


async def test_claims_ingest_finish_new_and_checkins_never_deadlock(stores: StoreFactory) -> None:
    rng = random.Random(20)
    now = [T0]
    async with stores.new() as a, stores.new() as b, stores.new() as c:
        stop = asyncio.Event()
        claimers = [
            asyncio.create_task(_claimer(s, f"w{i}", stop, now)) for i, s in enumerate((a, b, c))
        ]
        sent = 0
        for step in range(150):
            now[0] = T0 + step * 0.01
            store = (a, b, c)[step % 3]
            conversation = rng.choice(KEYS)
            await store.ingest(
                Inbound(conversation, "u", "Sasha", f"m{step}", f"p{step}"), now[0], POLICY
            )
            sent += 1
            if step % 25 == 0:
                await store.new_session(conversation, now[0])
            if step % 7 == 0:  # a check-in races for the same turn lease
                lease = await store.acquire_lease(turn_lease(conversation), "checkin", 30, now[0])
                if lease is not None:
                    await store.release_lease(lease)
            await asyncio.sleep(0)
        # Drain: the claimers answer what is left.
        for _ in range(500):
            if all([await a.timer(k) is None for k in KEYS]):
                break
            await asyncio.sleep(0.01)
        stop.set()
        replies = await asyncio.gather(*claimers)  # a deadlock would raise here
        assert all([await a.timer(k) is None for k in KEYS])
        for k in KEYS:
            assert await a.pending_turn(k) is None  # nothing acknowledged is left unanswered
        assert 0 < sum(replies) <= sent
