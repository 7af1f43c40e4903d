"""Review of issue 13: the SQLite file deleted or replaced under a running process."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from bot.core.errors import StoreError
from bot.core.events import ConversationKey, Inbound, QueuePolicy, SessionKey
from bot.store.sqlite import SQLiteStore

C1 = ConversationKey("telegram", "100")
POLICY = QueuePolicy(debounce=1.5, max_wait=8.0)


def _remove(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


@pytest.mark.parametrize("how", ["deleted", "replaced"])
async def test_a_message_is_not_acknowledged_into_a_deleted_database(
    tmp_path: Path, how: str
) -> None:
    """Writing on into the unlinked file stored messages nobody would ever see again (the
    next start opens the path): the ingest must fail, so the platform redelivers."""
    path = tmp_path / "bot.db"
    store = SQLiteStore(path=path)
    await store.open()
    try:
        await store.ingest(Inbound(C1, "u1", "Ann", "before", "p1"), 1.0, POLICY)
        _remove(path)
        if how == "replaced":  # e.g. restored from a backup by another tool
            sqlite3.connect(path).close()
        with pytest.raises(StoreError, match="deleted or replaced"):
            await store.ingest(Inbound(C1, "u1", "Ann", "after", "p2"), 2.0, POLICY)
    finally:
        await store.aclose()
    # What the next start reads: nothing was acknowledged into the lost file.
    if how == "deleted":
        assert not path.exists() or os.path.getsize(path) == 0


async def test_an_unchanged_database_keeps_working(tmp_path: Path) -> None:
    path = tmp_path / "bot.db"
    store = SQLiteStore(path=path)
    await store.open()
    try:
        for i in range(3):
            await store.ingest(Inbound(C1, "u1", "Ann", f"m{i}", f"p{i}"), 1.0 + i, POLICY)
        assert len(await store.messages(SessionKey(C1, 1))) == 3
    finally:
        await store.aclose()
    reopened = SQLiteStore(path=path)
    await reopened.open()
    try:
        assert len(await reopened.messages(SessionKey(C1, 1))) == 3
    finally:
        await reopened.aclose()
