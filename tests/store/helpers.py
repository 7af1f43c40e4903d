"""What tests set up or read past the store contracts (issue 36: no store method exists for
tests alone). Each helper is SQL on the store's own connection interface (bot/store/sql), so
it runs on both backends and inside the store's transactions; the product never needs it."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

import asyncpg

from bot.core.events import ConversationKey, SessionInfo, UserKey
from bot.core.media import StoredMedia
from bot.store import cols
from bot.store.contracts import StoreLifecycle
from bot.store.sql.core import SQLCore
from tests.backends import StoreFactory


def _sql(store: StoreLifecycle) -> SQLCore:
    """The store as its SQL implementation (every backend under test is one)."""
    assert isinstance(store, SQLCore), f"not an SQL store: {type(store).__name__}"
    return store


def in_flight(store: StoreLifecycle) -> int:
    """Store operations running or queued in this process (what ``settle`` waits out)."""
    return _sql(store)._in_flight


async def close_session(
    store: StoreLifecycle, conversation: ConversationKey, now: float, reason: str = "closed"
) -> SessionInfo | None:
    """Close the conversation's open session without opening the next (what an idle timeout
    does when the next message comes); return it, or None if none was open. Deletes nothing."""
    sql = _sql(store)
    async with sql._tx() as db:
        conv_id = await sql._conv_id(db, conversation, lock=True)
        if conv_id is None:
            return None
        row = await db.fetchrow(
            "UPDATE sessions SET status = 'closed', closed_at = $1, close_reason = $2 "
            f"WHERE conversation_id = $3 AND status = 'open' RETURNING {cols.SESSION_COLS}",
            now,
            reason,
            conv_id,
        )
    return None if row is None else cols.session_info(conversation, row)


async def media_of(
    store: StoreLifecycle, message_ids: Sequence[int]
) -> dict[int, tuple[StoredMedia, ...]]:
    """The media rows of these messages by message id, each in order (without bytes)."""
    sql = _sql(store)
    async with sql._read() as db:
        return await sql._load_media(db, message_ids)


async def delete_user_memory(store: StoreLifecycle, user: UserKey) -> bool:
    """Remove a user's memory record row; True if there was one."""
    sql = _sql(store)
    async with sql._tx() as db:
        removed = await db.execute(
            "DELETE FROM user_memory WHERE platform = $1 AND user_id = $2",
            user.platform,
            user.user_id,
        )
    return removed > 0


async def outbox_rows(store: StoreLifecycle) -> list[tuple[str, str | None]]:
    """Every outbox row's (text, choices) as stored, in order."""
    sql = _sql(store)
    async with sql._read() as db:
        rows = await db.fetch("SELECT text, choices FROM outbox ORDER BY id")
    return [(str(r[0]), r[1]) for r in rows]


async def insert_fault(stores: StoreFactory, table: str, on: bool, when: str = "TRUE") -> None:
    """Make the store's database refuse (``on``) or take again (not ``on``) inserts into
    ``table`` whose new row meets ``when`` (SQL on ``NEW``), as a failing database would:
    a trigger, on SQLite or PostgreSQL. One fault per table at a time."""
    name = f"{table}_fault"
    if not stores.dsn:
        db = sqlite3.connect(stores.path, isolation_level=None)
        try:
            db.execute(
                f"CREATE TRIGGER {name} BEFORE INSERT ON {table} WHEN {when} "
                "BEGIN SELECT RAISE(ABORT, 'injected fault'); END"
                if on
                else f"DROP TRIGGER {name}"
            )
        finally:
            db.close()
        return
    conn = await asyncpg.connect(stores.dsn)
    try:
        await conn.execute(
            f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"IF {when} THEN RAISE EXCEPTION 'injected fault'; END IF; RETURN NEW; END $$; "
            f"CREATE TRIGGER {name} BEFORE INSERT ON {table} FOR EACH ROW "
            f"EXECUTE FUNCTION {name}()"
            if on
            else f"DROP TRIGGER {name} ON {table}; DROP FUNCTION {name}()"
        )
    finally:
        await conn.close()
