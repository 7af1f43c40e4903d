"""SQLite: one person's rows across every chat, for /forget (erase) and /export (gather)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import aiosqlite

from bot.core.events import Erasure, UserData, UserKey
from bot.store import cols, tombstones
from bot.store.sqlite._core import SQLiteCore

# The person's user messages on the platform (every bot, chat and session), by name.
_MINE = (
    "SELECT m.id FROM messages m JOIN conversations c ON c.id = m.conversation_id "
    "WHERE c.platform = :platform AND m.author_id = :user AND m.role = 'user'"
)
_REPLIES = (
    f"SELECT DISTINCT answered_by FROM messages WHERE id IN ({_MINE}) AND answered_by IS NOT NULL"
)
# A reply is "only theirs" when no message of anyone else was answered by it.
_ONLY = (
    f"SELECT r.id FROM messages r WHERE r.id IN ({_REPLIES}) AND NOT EXISTS "
    "(SELECT 1 FROM messages o WHERE o.answered_by = r.id AND o.author_id != :user)"
)
_SUMMARIES = (
    "SELECT sa.session_id FROM summary_authors sa JOIN sessions s ON s.id = sa.session_id "
    "JOIN conversations c ON c.id = s.conversation_id "
    "WHERE c.platform = :platform AND sa.author_id = :user"
)
_KEYED_MESSAGE = (
    f"SELECT c.bot, c.platform, c.chat_id, c.thread_id, {cols.MSG_COLS} FROM messages m "
    "JOIN sessions s ON s.id = m.session_id JOIN conversations c ON c.id = m.conversation_id "
)
_CHUNK = 500


class PeoplePart(SQLiteCore):
    """A person's rows across conversations: erasure and export."""

    async def erase_user_messages(self, user: UserKey) -> Erasure:
        """Delete their messages, replies only to them, outbox rows and summaries: one step."""
        who = {"platform": user.platform, "user": user.user_id}
        async with self._tx() as db:
            mine = await _ids(db, _MINE + " AND m.pending = 0", who)
            pending = len(await _ids(db, _MINE + " AND m.pending = 1", who))
            replies = set(await _ids(db, _REPLIES, who))
            only = await _ids(db, _ONLY, who)
            shared = sorted(replies - set(only))
            sessions = await _ids(db, _SUMMARIES, who)
            # Sessions whose summary covers one of their messages, author list or not.
            sessions = sorted(
                set(sessions)
                | set(
                    await _ids(
                        db,
                        "SELECT DISTINCT su.session_id FROM summaries su JOIN messages m "
                        f"ON m.session_id = su.session_id WHERE m.id IN ({_MINE}) "
                        "AND m.turn <= su.last_turn",
                        who,
                    )
                )
            )
            # Tombstoned first: the gap check knows personabot removed these turns (/forget).
            buried = await _all(
                db,
                f"SELECT session_id, turn FROM messages WHERE id IN ({_MINE} AND m.pending = 0) "
                f"OR id IN ({_ONLY})",
                who,
            )
            await self._bury(
                db, ((int(r[0]), int(r[1])) for r in buried), tombstones.FORGET, time.time()
            )
            outbox = await _delete(db, "outbox", "reply_message_id", only)
            outbox += await _delete(db, "outbox", "reply_message_id", shared, "status != 'pending'")
            removed_replies = await _delete(db, "messages", "id", only)
            summaries = await _delete(db, "summaries", "session_id", sessions)
            await _delete(db, "summary_authors", "session_id", sessions)
            messages = await _delete(db, "messages", "id", mine)
        return Erasure(
            messages=messages,
            replies=removed_replies,
            outbox=outbox,
            summaries=summaries,
            shared_replies=len(shared),
            pending=pending,
        )

    async def user_data(self, user: UserKey) -> UserData:
        """Everything stored about them, read in one transaction."""
        who = {"platform": user.platform, "user": user.user_id}
        async with self._read() as db:
            await db.execute("BEGIN")
            try:
                record = await _one(
                    db,
                    "SELECT record FROM user_memory WHERE platform = :platform AND user_id = :user",
                    who,
                )
                own = await _all(db, _KEYED_MESSAGE + f"WHERE m.id IN ({_MINE}) ORDER BY m.id", who)
                replies = await _all(
                    db, _KEYED_MESSAGE + f"WHERE m.id IN ({_REPLIES}) ORDER BY m.id", who
                )
                summaries = await _all(
                    db,
                    "SELECT c.bot, c.platform, c.chat_id, c.thread_id, s.session_no, su.body, "
                    "su.first_turn, su.last_turn, su.updated_at FROM summaries su "
                    "JOIN sessions s ON s.id = su.session_id "
                    "JOIN conversations c ON c.id = s.conversation_id "
                    f"WHERE su.session_id IN ({_SUMMARIES}) ORDER BY su.session_id",
                    who,
                )
                outbox = await _all(
                    db,
                    "SELECT o.id, c.bot, c.platform, c.chat_id, c.thread_id, s.session_no, "
                    "o.reply_message_id, o.text, o.status, o.created_at, o.finished_at "
                    "FROM outbox o JOIN sessions s ON s.id = o.session_id "
                    "JOIN conversations c ON c.id = o.conversation_id "
                    f"WHERE o.reply_message_id IN ({_REPLIES}) ORDER BY o.id",
                    who,
                )
                usage = await _all(
                    db,
                    "SELECT bot, at FROM turn_usage WHERE platform = :platform "
                    "AND user_id = :user ORDER BY at",
                    who,
                )
                charges = await _all(
                    db,
                    "SELECT at, bot, purpose, model, input_tokens, output_tokens, "
                    "cache_write_tokens, cache_read_tokens FROM model_usage "
                    "WHERE platform = :platform AND user_id = :user ORDER BY at",
                    who,
                )
            finally:
                await db.execute("COMMIT")
        return cols.user_data(user, record, own, replies, summaries, outbox, usage, charges)


async def _ids(db: aiosqlite.Connection, sql: str, args: dict[str, str]) -> list[int]:
    async with db.execute(sql, args) as cur:
        return [int(r[0]) for r in await cur.fetchall()]


async def _delete(
    db: aiosqlite.Connection, table: str, column: str, ids: Sequence[int], extra: str = ""
) -> int:
    """Delete rows by id in chunks (SQLite limits bound parameters); return how many."""
    removed = 0
    where = f" AND {extra}" if extra else ""
    for start in range(0, len(ids), _CHUNK):
        part = list(ids[start : start + _CHUNK])
        cur = await db.execute(
            f"DELETE FROM {table} WHERE {column} IN ({','.join('?' * len(part))}){where}", part
        )
        removed += int(cur.rowcount)
    return removed


async def _one(db: aiosqlite.Connection, sql: str, args: dict[str, str]) -> Any:
    async with db.execute(sql, args) as cur:
        row = await cur.fetchone()
    return None if row is None else row[0]


async def _all(db: aiosqlite.Connection, sql: str, args: dict[str, str]) -> list[Any]:
    async with db.execute(sql, args) as cur:
        return list(await cur.fetchall())
