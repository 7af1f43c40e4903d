"""Due turns are claimed, not raced (docs/scaling.md#claims), on both stores.

Two stores on one database act as two processes; their claims are started together so that
their statements interleave on the server. Whatever the interleaving, every due timer goes to
at most one claimant, and a claim never takes a turn whose lease another worker holds.
"""

from __future__ import annotations

import asyncio
import time

import asyncpg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.core.events import ConversationKey, Inbound, QueuePolicy
from bot.core.queue_rules import turn_lease
from bot.store.base import BaseStore
from bot.store.postgres import PostgresStore
from tests.backends import StoreFactory

T0 = 1_700_000_000.0
POLICY = QueuePolicy(debounce=1.0, max_wait=8.0)


def key(i: int, bot: str = "b", thread: str | None = None) -> ConversationKey:
    return ConversationKey("telegram", f"chat-{i}", thread, bot)


async def say(store: BaseStore, conversation: ConversationKey, at: float, pid: str) -> float:
    result = await store.ingest(Inbound(conversation, "u1", "Sasha", "hi", pid), at, POLICY)
    assert result.due_at is not None
    return result.due_at


async def test_a_claim_takes_due_timers_earliest_first_with_their_leases(
    store: BaseStore,
) -> None:
    for i in range(5):
        await say(store, key(i), T0 + 10 - i, f"p{i}")  # chat-4 falls due first
    await say(store, key(9, bot="other"), T0, "p9")  # a bot this process does not host
    await say(store, key(8), T0 + 100, "p8")  # not due yet

    claims = await store.claim_due_turns(T0 + 20, 3, holder="h", ttl=30, bots=["b"])
    assert [t.conversation for t in claims.turns] == [key(4), key(3), key(2)]
    assert claims.lost == 0
    for turn in claims.turns:
        assert turn.lease.name == turn_lease(turn.conversation)
        assert turn.lease.holder == "h"
        # The lease is really taken: nobody else can acquire it now.
        assert await store.acquire_lease(turn.lease.name, "x", 30, T0 + 20) is None

    rest = await store.claim_due_turns(T0 + 20, 10, holder="h2", ttl=30, bots=["b"])
    assert [t.conversation for t in rest.turns] == [key(1), key(0)]
    assert (await store.claim_due_turns(T0 + 20, 10, holder="h3", ttl=30, bots=["b"])).turns == ()


async def test_no_free_slot_claims_nothing(store: BaseStore) -> None:
    await say(store, key(1), T0, "p1")
    assert (await store.claim_due_turns(T0 + 5, 0, holder="h", ttl=30, bots=["b"])).turns == ()
    # Nothing was taken: a claim with a slot gets it.
    claims = await store.claim_due_turns(T0 + 5, 1, holder="h", ttl=30, bots=["b"])
    assert [t.conversation for t in claims.turns] == [key(1)]


async def test_a_held_lease_or_a_skipped_one_is_never_claimed_and_an_expired_one_is(
    store: BaseStore,
) -> None:
    await say(store, key(1), T0, "p1")
    await say(store, key(2), T0, "p2")
    held = await store.acquire_lease(turn_lease(key(1)), "racer", 30, T0 + 2)
    assert held is not None
    claims = await store.claim_due_turns(
        T0 + 2, 10, holder="h", ttl=30, bots=["b"], skip=[turn_lease(key(2))]
    )
    assert claims.turns == ()
    # Nothing a claim could take: key(1)'s turn runs elsewhere, key(2)'s here.
    assert await store.next_claim_at(T0 + 2, ["b"], [turn_lease(key(2))]) is None
    assert await store.next_claim_at(T0 + 2, ["b"]) == T0 + 1.0  # key(2), not skipped
    # Once the racer's lease expired, the claim takes it over with a larger fencing token.
    later = await store.claim_due_turns(T0 + 40, 10, holder="h", ttl=30, bots=["b"])
    by_key = {t.conversation: t.lease for t in later.turns}
    assert set(by_key) == {key(1), key(2)}
    assert by_key[key(1)].token > held.token
    # Both due, both leases held now: nothing to claim until one is released or expires.
    assert await store.next_claim_at(T0 + 40, ["b"]) is None
    assert await store.next_claim_at(T0 + 71, ["b"]) == T0 + 1.0


async def test_racing_claims_of_two_processes_hand_each_timer_to_one(
    stores: StoreFactory,
) -> None:
    async with stores.new() as a, stores.new() as b:
        for i in range(30):
            await say(a if i % 2 else b, key(i), T0, f"p{i}")
        pair = (a, b)
        results = await asyncio.gather(
            *(
                pair[i % 2].claim_due_turns(T0 + 5, 4, holder=f"w{i}", ttl=30, bots=["b"])
                for i in range(12)
            )
        )
        claimed = [t.conversation for r in results for t in r.turns]
        assert len(claimed) == len(set(claimed))  # never one timer to two claimants
        assert all(len(r.turns) <= 4 for r in results)
        # What no claim took is still there for the next one; all 30 are taken in the end.
        rest = await a.claim_due_turns(T0 + 5, 100, holder="late", ttl=30, bots=["b"])
        assert sorted(map(str, claimed + [t.conversation for t in rest.turns])) == sorted(
            str(key(i)) for i in range(30)
        )


async def test_a_claim_racing_a_lease_acquisition_has_one_winner(stores: StoreFactory) -> None:
    async with stores.new() as a, stores.new() as b:
        for round_ in range(6):
            conversation = key(round_)
            await say(a, conversation, T0, f"p{round_}")
            claims, lease = await asyncio.gather(
                a.claim_due_turns(T0 + 5, 1, holder="claimer", ttl=30, bots=["b"]),
                b.acquire_lease(turn_lease(conversation), "racer", 30, T0 + 5),
            )
            assert len(claims.turns) + (lease is not None) == 1
            await a.clear_timer(conversation, 10**9, only_if_idle=False)


_names = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    min_size=1,
    max_size=12,
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(chat=_names, thread=st.none() | _names, bot=_names)
async def test_the_store_names_a_claimed_lease_as_the_pipeline_does(
    stores: StoreFactory, chat: str, thread: str | None, bot: str
) -> None:
    """The claim spells turn_lease in SQL; any key, threads and odd characters included."""
    conversation = ConversationKey("telegram", chat, thread, bot)
    async with stores.new() as store:
        due = await say(store, conversation, T0, f"{chat}/{thread}/{bot}")
        claims = await store.claim_due_turns(due, 5, holder="h", ttl=30, bots=[bot])
        assert [t.lease.name for t in claims.turns if t.conversation == conversation] == [
            turn_lease(conversation)
        ]
        await store.clear_timer(conversation, 10**9, only_if_idle=False)


async def test_with_the_database_clock_a_claim_takes_leases_by_the_servers_time(
    pg_dsn: str,
) -> None:
    """``personabot run``'s PostgreSQL store decides lease expiry by the server's clock."""
    now = time.time()
    async with PostgresStore(dsn=pg_dsn, use_db_clock=True) as store:
        await say(store, key(1), now - 10, "p1")
        await say(store, key(2), now - 10, "p2")
        claims = await store.claim_due_turns(now, 1, holder="h", ttl=30, bots=["b"])
        (turn,) = claims.turns
        assert abs(turn.lease.expires_at - (now + 30)) < 5  # the server's clock, not T0
        assert await store.next_claim_at(now, ["b"]) == now - 9  # the other one
        skip = [turn_lease(key(2))]
        assert await store.next_claim_at(now, ["b"], skip) is None
        rest = await store.claim_due_turns(now, 5, holder="h2", ttl=30, bots=["b"], skip=skip)
        assert rest.turns == ()


async def test_the_backlog_counts_due_turns_no_process_has_started(store: BaseStore) -> None:
    """Overload is measured by what waits: a running turn (lease held) is not backlog."""
    assert (await store.queue_backlog(T0, ["b"])).turns == 0
    first = await say(store, key(1), T0, "p1")
    await say(store, key(2), T0 + 3, "p2")
    await say(store, key(3), T0 + 100, "p3")  # not due yet
    backlog = await store.queue_backlog(T0 + 10, ["b"])
    assert (backlog.turns, backlog.oldest_due_at) == (2, first)
    assert backlog.age(T0 + 10) == T0 + 10 - first
    await store.claim_due_turns(T0 + 10, 1, holder="h", ttl=30, bots=["b"])  # key(1) starts
    backlog = await store.queue_backlog(T0 + 10, ["b"])
    assert (backlog.turns, backlog.oldest_due_at) == (1, T0 + 4.0)
    assert (await store.queue_backlog(T0 + 10, ["other"])).turns == 0


async def test_a_due_timer_without_its_lease_row_is_claimed_all_the_same(pg_dsn: str) -> None:
    """PostgreSQL's claim locks lease rows; a conversation left without one (made before
    migration 13 by another path) gets it from the first claim and goes to the next."""
    async with PostgresStore(dsn=pg_dsn) as store:
        await say(store, key(1), T0, "p1")
        admin = await asyncpg.connect(pg_dsn)
        try:
            assert await admin.execute("DELETE FROM leases WHERE name = $1", turn_lease(key(1)))
        finally:
            await admin.close()
        assert await store.next_claim_at(T0 + 5, ["b"]) == T0 + 1.0  # the scheduler looks now
        first = await store.claim_due_turns(T0 + 5, 4, holder="h", ttl=30, bots=["b"])
        second = await store.claim_due_turns(T0 + 5, 4, holder="h", ttl=30, bots=["b"])
        assert [t.conversation for t in first.turns + second.turns] == [key(1)]
        assert first.lost == second.lost == 0


async def test_racing_claims_on_postgresql_waste_no_reads(pg_dsn: str) -> None:
    """A claim passes over leases another claim has just taken instead of reading and losing
    them (the lease rows are locked and re-checked), so racing claims lose nothing. (SQLite
    has one writer: its claims never overlap.)"""
    async with PostgresStore(dsn=pg_dsn) as a, PostgresStore(dsn=pg_dsn) as b:
        for i in range(60):
            await say(a, key(i), T0, f"p{i}")
        pair = (a, b)
        results = await asyncio.gather(
            *(
                pair[i % 2].claim_due_turns(T0 + 5, 3, holder=f"w{i}", ttl=30, bots=["b"])
                for i in range(20)
            )
        )
        assert sum(len(r.turns) for r in results) == 60
        assert sum(r.lost for r in results) == 0
