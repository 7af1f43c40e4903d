"""Schema version 2 on a database written by version 1: memory versions, which stored
messages addressed the bot, and who each existing summary folded in."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiosqlite
import asyncpg
import pytest

from bot.core.events import ConversationKey, SessionKey, UserKey
from bot.store.base import BaseStore
from bot.store.migrations import postgres as pg_migrations
from bot.store.migrations import sqlite as sqlite_migrations
from bot.store.postgres import PostgresStore
from bot.store.sqlite import SQLiteStore
from bot.store.sqlite._core import _statements
from tests import pg_cluster
from tests.backends import Backend

GROUP = ConversationKey("telegram", "-100")
ADA = UserKey("telegram", "11")
BO = UserKey("telegram", "22")


def _rows(true: str, false: str) -> list[str]:
    """Version-1 rows: a group where Ada addressed the bot and Bo only chatted (context)."""
    return [
        "INSERT INTO conversations (id, bot, platform, chat_id, created_at) "
        "VALUES (1, 'default', 'telegram', '-100', 0)",
        "INSERT INTO sessions (id, conversation_id, session_no, status, opened_at, "
        "last_activity_at) VALUES (1, 1, 1, 'open', 0, 0)",
        "INSERT INTO messages (id, conversation_id, session_id, turn, role, author_id, "
        f"display_name, text, is_private, pending, answered_by, created_at) VALUES "
        f"(1, 1, 1, 1, 'user', '11', 'Ada', 'hello bot', {false}, {false}, 2, 0), "
        f"(2, 1, 1, 2, 'assistant', 'assistant', '', 'hi Ada', {false}, {false}, NULL, 0), "
        f"(3, 1, 1, 3, 'user', '22', 'Bo', 'just chatting', {false}, {false}, NULL, 0), "
        f"(4, 1, 1, 4, 'user', '11', 'Ada', 'are you there?', {false}, {true}, NULL, 0)",
        "INSERT INTO summaries (session_id, body, first_turn, last_turn, updated_at) "
        'VALUES (1, \'{"user_said": ["hello bot"]}\', 1, 2, 0)',
        "INSERT INTO user_memory (platform, user_id, record, updated_at) "
        "VALUES ('telegram', '11', '{\"items\": []}', 0)",
    ]


@pytest.fixture
async def v1_store(backend: Backend, tmp_path: Path) -> AsyncIterator[BaseStore]:
    """A store opened (and so migrated) on a database that holds version-1 data."""
    name = None
    if backend.pg is None:
        path = tmp_path / "v1.sqlite3"
        async with aiosqlite.connect(path) as db:
            await db.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
            for statement in _statements(sqlite_migrations.MIGRATIONS[0][1]):
                await db.execute(statement)
            for statement in [*_rows("1", "0"), "INSERT INTO schema_version VALUES (1)"]:
                await db.execute(statement)
            await db.commit()
        store: BaseStore = SQLiteStore(path=path)
    else:
        name = backend.pg.next_name()
        dsn = await pg_cluster.create_database(backend.pg.server_dsn, name)
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
            await conn.execute(pg_migrations.MIGRATIONS[0][1])
            for statement in [*_rows("TRUE", "FALSE"), "INSERT INTO schema_version VALUES (1)"]:
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


async def test_version_1_data_gets_versions_addressed_flags_and_summary_authors(
    v1_store: BaseStore,
) -> None:
    assert await v1_store.schema_version() == sqlite_migrations.MIGRATIONS[-1][0]
    assert await v1_store.read_user_memory(ADA) == ('{"items": []}', 1)
    flags = {m.text: m.addressed for m in await v1_store.messages(SessionKey(GROUP, 1))}
    # Bo's unanswered, not pending group message was context only: never learned from.
    assert flags == {
        "hello bot": True,
        "hi Ada": True,
        "just chatting": False,
        "are you there?": True,
    }
    # The old summary is found for everyone who spoke in its session (best effort).
    assert [s.session for s in (await v1_store.user_data(ADA)).summaries] == [SessionKey(GROUP, 1)]
    assert len((await v1_store.user_data(BO)).summaries) == 1


async def test_messages_stored_before_version_5_read_without_media_or_quote(
    v1_store: BaseStore,
) -> None:
    """Version 5 (media, quotes) on old data: every read of old messages works as before."""
    old = await v1_store.messages(SessionKey(GROUP, 1))
    assert [(m.media, m.quote) for m in old] == [((), None)] * 4
    turn = await v1_store.pending_turn(GROUP)
    assert turn is not None and [(m.text, m.media) for m in turn.messages] == [
        ("are you there?", ())
    ]
    assert [m.media for m in (await v1_store.user_data(ADA)).messages] == [(), ()]
