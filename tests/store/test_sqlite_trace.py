"""The SQLite store's optional statement trace (``SQLiteStore.trace``, used by bench/load.py
and by statement budgets): off unless given; when given, it sees every statement the store's
connection runs, transaction statements included, with the parameters filled in."""

from __future__ import annotations

from pathlib import Path

from bot.core.clock import ManualClock
from bot.core.events import ConversationKey, Inbound, QueuePolicy
from bot.store.sqlite import SQLiteStore
from tests.fakes.llm import GatedLLM
from tests.harness import harness

C = ConversationKey("telegram", "42", None, "telegram-mira")
Q = QueuePolicy(debounce=1.0, max_wait=5.0)


async def test_the_trace_is_off_by_default(tmp_path: Path) -> None:
    store = SQLiteStore(path=tmp_path / "bots.sqlite3")
    assert store.trace is None
    async with store:
        await store.ingest(Inbound(C, "u1", "Sasha", "hello", "m1"), 1000.0, Q)
    assert store.trace is None


async def test_the_trace_sees_every_statement_of_an_ingest(tmp_path: Path) -> None:
    seen: list[str] = []
    async with SQLiteStore(path=tmp_path / "bots.sqlite3", trace=seen.append) as store:
        assert any(s.startswith("PRAGMA journal_mode") for s in seen)  # from the open on
        del seen[:]
        await store.ingest(Inbound(C, "u1", "Sasha", "it's me", "m1"), 1000.0, Q)
        first = list(seen)
        del seen[:]
        await store.ingest(Inbound(C, "u1", "Sasha", "again", "m2"), 1001.0, Q)
    assert first[0] == "BEGIN IMMEDIATE" and first[-1] == "COMMIT"
    assert seen[0] == "BEGIN IMMEDIATE" and seen[-1] == "COMMIT"
    inserts = [s for s in first if s.startswith("INSERT INTO messages")]
    assert len(inserts) == 1 and "'it''s me'" in inserts[0]  # the parameters filled in
    assert sum(s.startswith("INSERT INTO messages") for s in seen) == 1


async def test_a_trace_set_before_open_is_installed(tmp_path: Path) -> None:
    """How the load benchmark attaches it to the store ``personabot run`` builds."""
    seen: list[str] = []
    store = SQLiteStore(path=tmp_path / "bots.sqlite3")
    store.trace = seen.append
    async with store:
        await store.ingest(Inbound(C, "u1", "Sasha", "hello", "m1"), 1000.0, Q)
    assert "COMMIT" in seen and any(s.startswith("INSERT INTO messages") for s in seen)


async def test_a_turn_with_nothing_to_fold_takes_no_summary_lease(tmp_path: Path) -> None:
    """The summary check after every reply reads whether the window overflows before it
    takes the summary lease: a turn with nothing to fold writes no lease (two write
    transactions a turn saved). Folding past the window, under the lease, is tested in
    tests/memory/test_memory_flow.py."""
    seen: list[str] = []
    clock = ManualClock(1_000_000.0)
    async with (
        SQLiteStore(path=tmp_path / "bots.sqlite3", trace=seen.append) as store,
        harness(store, clock, GatedLLM(), debounce=0.5) as h,
    ):
        await h.say(ConversationKey("telegram", "42"), "hello")
        await h.advance(2)
        assert len(h.outlet.texts()) == 1
        await h.memory.wait_idle()
    assert not [s for s in seen if "summary:" in s and "INSERT INTO leases" in s]


async def test_reads_are_not_queued_behind_a_write_waiting_for_the_file(tmp_path: Path) -> None:
    """Plain reads go through a second, read-only connection: while another program holds
    the file's write lock and an ingest waits for it (up to busy_timeout_ms), the store still
    answers reads at once from what was committed; the ingest goes through when the lock
    goes. (With one connection the read queued behind the waiting write.)"""
    import asyncio
    import sqlite3

    path = tmp_path / "bots.sqlite3"
    async with SQLiteStore(path=path, busy_timeout_ms=3000) as store:
        await store.ingest(Inbound(C, "u1", "Sasha", "first", "m1"), 1000.0, Q)
        other = sqlite3.connect(path, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            write = asyncio.create_task(
                store.ingest(Inbound(C, "u1", "Sasha", "second", "m2"), 1001.0, Q)
            )
            await asyncio.sleep(0.1)  # the ingest now waits for the file's write lock
            assert not write.done()
            timer = await asyncio.wait_for(store.timer(C), 1.0)
            assert timer is not None and timer.due_at == 1001.0  # "first" armed it
            other.execute("ROLLBACK")
        finally:
            other.close()
        assert (await write).stored
        with sqlite3.connect(path) as check:  # the read connection never writes
            assert check.execute("SELECT COUNT(*) FROM messages").fetchone() == (2,)
