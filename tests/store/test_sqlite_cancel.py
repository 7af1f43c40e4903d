"""A write cancelled while SQLite starts its transaction must not poison the connection."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bot.core.events import ConversationKey, Inbound, QueuePolicy
from bot.store.sqlite import SQLiteStore


async def test_cancel_during_begin_leaves_the_connection_usable(tmp_path: Path) -> None:
    """Found by tests/bot/test_queue_state.py: a lease renewal cancelled as the model answered
    left BEGIN IMMEDIATE open, and every later write of the process failed ('cannot start a
    transaction within a transaction'), so no conversation of that process was answered."""
    async with SQLiteStore(path=tmp_path / "store.sqlite3") as store:
        for i in range(20):
            task = asyncio.create_task(store.acquire_lease(f"lease{i}", "w", 10, 0.0))
            await asyncio.sleep(0)  # the task now waits for BEGIN IMMEDIATE in the thread
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            assert await store.acquire_lease(f"probe{i}", "w", 10, 0.0) is not None


async def test_cancel_during_the_read_snapshot_leaves_the_connection_usable(
    tmp_path: Path,
) -> None:
    """pending_turn reads v0 and the messages in one deferred transaction: cancelled while its
    BEGIN runs (a turn cancelled at shutdown or by a crash), it must end that transaction too,
    or every later write of the process fails."""
    conversation = ConversationKey("telegram", "chat")
    async with SQLiteStore(path=tmp_path / "store.sqlite3") as store:
        await store.ingest(
            Inbound(conversation, "u1", "U1", "hello", "p1", is_private=True), 0.0, QueuePolicy()
        )
        for i in range(60):
            task = asyncio.create_task(store.pending_turn(conversation))
            for _ in range(i % 12):  # cancel at every point of the read, BEGIN included
                await asyncio.sleep(0)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            assert await store.acquire_lease(f"probe{i}", "w", 10, 0.0) is not None
        turn = await store.pending_turn(conversation)
        assert turn is not None and [m.text for m in turn.messages] == ["hello"]
