"""A write cancelled while SQLite starts its transaction must not poison the connection."""

from __future__ import annotations

import asyncio
from pathlib import Path

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
