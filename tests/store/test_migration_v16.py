"""Schema version 16 on a database written by version 15: message-age tombstones that no
stored summary covers (a /forget dropped it, or retention buried turns below its first turn,
before either re-tagged them) stay explained, under a reason that says so, instead of turning
into gap notices on upgrade; the covered ones keep leaning on their summary."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiosqlite
import asyncpg
import pytest

from bot.core.events import ConversationKey, SessionKey
from bot.store.base import BaseStore
from bot.store.migrations import postgres as pg_migrations
from bot.store.migrations import sqlite as sqlite_migrations
from bot.store.postgres import PostgresStore
from bot.store.sqlite import SQLiteStore
from bot.store.sqlite._core import _statements
from tests import pg_cluster
from tests.backends import Backend

CHAT = ConversationKey("telegram", "-100")
UNCHECKED = "message age (no summary covered it at upgrade)"
_ROWS = [
    "INSERT INTO conversations (id, bot, platform, chat_id, created_at) "
    "VALUES (1, 'default', 'telegram', '-100', 0)",
    # 1: summary 1-10 over its tombstones; 2: no summary; 3: a summary starting at turn 5.
    "INSERT INTO sessions (id, conversation_id, session_no, status, opened_at, "
    "last_activity_at, next_turn) VALUES (1, 1, 1, 'closed', 0, 0, 11), "
    "(2, 1, 2, 'closed', 0, 0, 8), (3, 1, 3, 'open', 0, 0, 21)",
    "INSERT INTO summaries (session_id, body, first_turn, last_turn, updated_at) "
    "VALUES (1, '{}', 1, 10, 0), (3, '{}', 5, 20, 0)",
    "INSERT INTO tombstones (session_id, first_turn, last_turn, reason, at) VALUES "
    "(1, 1, 10, 'message age', 0), (2, 1, 6, 'message age', 0), (2, 7, 7, '/forget', 0), "
    "(3, 1, 4, 'message age', 0), (3, 5, 8, 'message age', 0)",
]


def _before_16(migrations: tuple[tuple[int, str], ...]) -> list[tuple[int, str]]:
    return [(version, script) for version, script in migrations if version < 16]


def _applied(migrations: tuple[tuple[int, str], ...]) -> list[str]:
    """The rows that say versions 1-15 are applied (one a version, as the store writes)."""
    return [f"INSERT INTO schema_version VALUES ({v})" for v, _ in _before_16(migrations)]


@pytest.fixture
async def v15_store(backend: Backend, tmp_path: Path) -> AsyncIterator[BaseStore]:
    """A store opened (and so migrated) on a database that holds version-15 data."""
    name = None
    if backend.pg is None:
        path = tmp_path / "v15.sqlite3"
        async with aiosqlite.connect(path) as db:
            await db.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
            for _, script in _before_16(sqlite_migrations.MIGRATIONS):
                for statement in _statements(script):
                    await db.execute(statement)
            for statement in [*_ROWS, *_applied(sqlite_migrations.MIGRATIONS)]:
                await db.execute(statement)
            await db.commit()
        store: BaseStore = SQLiteStore(path=path)
    else:
        name = backend.pg.next_name()
        dsn = await pg_cluster.create_database(backend.pg.server_dsn, name)
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
            for _, script in _before_16(pg_migrations.MIGRATIONS):
                await conn.execute(script)
            for statement in [*_ROWS, *_applied(pg_migrations.MIGRATIONS)]:
                await conn.execute(statement)
        finally:
            await conn.close()
        store = PostgresStore(dsn=dsn)
    try:
        async with store:
            yield store
    finally:
        if backend.pg is not None and name is not None:
            await pg_cluster.drop_database(backend.pg.server_dsn, name)


async def test_uncovered_message_age_tombstones_are_kept_as_explained(
    v15_store: BaseStore,
) -> None:
    assert await v15_store.schema_version() >= 16
    reasons = {
        n: [(t.first_turn, t.last_turn, t.reason) for t in await v15_store.tombstones(s)]
        for n, s in ((n, SessionKey(CHAT, n)) for n in (1, 2, 3))
    }
    assert reasons == {
        1: [(1, 10, "message age")],
        2: [(1, 6, UNCHECKED), (7, 7, "/forget")],
        3: [(1, 4, UNCHECKED), (5, 8, "message age")],
    }
    covered = {1: (1, 10), 2: None, 3: (5, 20)}
    for n, summary in covered.items():
        assert await v15_store.missing_turns(SessionKey(CHAT, n), summary) == []
    # The covered ones still lean on their summary: without it they are a gap.
    assert await v15_store.missing_turns(SessionKey(CHAT, 1)) == [(1, 10)]
