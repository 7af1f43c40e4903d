"""Review of issue 20: the claim-mode scheduler against the real PostgreSQL store, in states
where it must neither spin nor stop (docs/scaling.md#claims).

A "process" is a claim-mode Scheduler with the real Pipeline on its own PostgresStore
(tests/review20/rig.py); the store queries it makes are counted through its TurnClaims.
"""

from __future__ import annotations

import asyncio
import time

import asyncpg

from bot.core.queue_rules import turn_lease
from bot.store.postgres import PostgresStore
from tests.queue.rig import claiming, key, say, until


async def test_a_due_timer_whose_lease_a_dead_process_holds_is_not_polled(pg_dsn: str) -> None:
    """The lease of a SIGKILLed holder blocks its timer until expiry: the scheduler waits for
    its scan, it does not spin; after expiry the turn is answered."""
    now = time.time()
    async with PostgresStore(dsn=pg_dsn, use_db_clock=True) as store:
        await say(store, key(1), now - 5, "p1")
        dead = await store.acquire_lease(turn_lease(key(1)), "dead-holder", 1.5, now)
        assert dead is not None
        async with claiming(store, scan=0.25) as proc:
            await asyncio.sleep(1.0)  # the measured window: the lease is held all along
            assert proc.outlet.texts() == []
            assert proc.counted.claims <= 6, proc.counted.claims  # ~ one per scan
            await until(lambda: len(proc.outlet.texts()) == 1, 5, "the reply after expiry")


async def test_a_due_timer_of_a_bot_not_hosted_here_is_never_polled(pg_dsn: str) -> None:
    now = time.time()
    async with PostgresStore(dsn=pg_dsn, use_db_clock=True) as store:
        await say(store, key(1, bot="elsewhere"), now - 5, "p1")
        async with claiming(store, scan=0.25, listen=True) as proc:
            await asyncio.sleep(1.0)
            assert proc.counted.claims <= 6, proc.counted.claims
            assert proc.outlet.texts() == []
        assert await store.timer(key(1, bot="elsewhere")) is not None


async def test_a_process_with_no_free_slot_claims_nothing_and_another_answers(
    pg_dsn: str,
) -> None:
    """A holds its only slot (a turn blocked on a gate); the other due turns all go to B,
    and A's claim is not even asked while its slot is busy."""
    now = time.time()
    gate = asyncio.Event()
    async with (
        PostgresStore(dsn=pg_dsn, use_db_clock=True, max_pool=1) as a_store,
        PostgresStore(dsn=pg_dsn, use_db_clock=True, max_pool=1) as b_store,
    ):
        await say(a_store, key(0), now - 50, "p0")  # A's first claim takes this one
        async with claiming(a_store, slots=1, gate=gate, scan=0.1, listen=True) as a:
            await until(lambda: a.counted.started == [key(0)], 5, "A's blocked turn")
            claims_before = a.counted.claims
            for i in range(1, 21):
                await say(a_store, key(i), now - 5, f"p{i}")
            async with claiming(b_store, slots=4, scan=0.1, listen=True) as b:
                await until(lambda: len(b.outlet.texts()) == 20, 20, "B answers the rest")
                assert a.counted.claims == claims_before  # no free slot: no claim at all
                assert a.counted.started == [key(0)]
                gate.set()
                await until(lambda: len(a.outlet.texts()) == 1, 5, "A's own turn")
            answered = [r.conversation for _, r in a.outlet.replies + b.outlet.replies]
        assert sorted(answered, key=str) == sorted((key(i) for i in range(21)), key=str)


async def test_a_locked_conversation_or_lease_row_does_not_make_the_scheduler_spin(
    pg_dsn: str,
) -> None:
    now = time.time()
    async with PostgresStore(dsn=pg_dsn, use_db_clock=True) as store:
        await say(store, key(1), now - 5, "p1")
        admin = await asyncpg.connect(pg_dsn)
        try:
            tx = admin.transaction()
            await tx.start()
            # Both locks a claim could meet: the conversation's and its turn lease's.
            await admin.execute("SELECT id FROM conversations FOR UPDATE")
            await admin.execute("SELECT name FROM leases FOR UPDATE")
            async with claiming(store, scan=0.25) as proc:
                await asyncio.sleep(1.0)  # the measured window: the row is locked all along
                claims = proc.counted.claims
                await tx.rollback()
                await until(lambda: len(proc.outlet.texts()) == 1, 5, "the reply once unlocked")
        finally:
            await admin.close()
    # The scan (every 0.25 s) is the bound a blocked timer deserves, with some slack.
    assert claims <= 10, f"{claims} claims in one second while the row was locked"


async def test_a_failed_claim_query_does_not_stop_the_scheduler(pg_dsn: str) -> None:
    """A store query of the scheduler waits on a table another session holds locked (a
    claim never waits on a row, but a table lock stops any read); its pool connection is then
    terminated (as a server restart or a cut connection would)."""
    now = time.time()
    async with PostgresStore(dsn=pg_dsn, use_db_clock=True) as store:
        await say(store, key(1), now - 5, "p1")
        admin = await asyncpg.connect(pg_dsn)
        try:
            tx = admin.transaction()
            await tx.start()
            await admin.execute("LOCK TABLE timers IN ACCESS EXCLUSIVE MODE")
            async with claiming(store, scan=0.2) as proc:

                async def waiting() -> list[int]:
                    rows = await admin.fetch(
                        "SELECT pid FROM pg_stat_activity WHERE application_name = 'personabot' "
                        "AND wait_event_type = 'Lock'"
                    )
                    return [int(r[0]) for r in rows]

                deadline = asyncio.get_running_loop().time() + 10
                while not (pids := await waiting()):
                    assert asyncio.get_running_loop().time() < deadline, "the claim never waited"
                    await asyncio.sleep(0.02)
                await admin.execute("SELECT pg_terminate_backend($1)", pids[0])
                await tx.rollback()
                await say(store, key(2), time.time(), "p2")  # the store works again
                await until(lambda: len(proc.outlet.texts()) >= 1, 5, "a turn after the error")
        finally:
            await admin.close()
