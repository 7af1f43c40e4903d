"""SQLite: retention (expiry as units, per-message age, audit trail;
docs/architecture.md#retention)."""

from __future__ import annotations

import time

import aiosqlite

from bot.core.events import (
    OldMessages,
    RetentionEntry,
    SessionInfo,
    SessionKey,
    Tombstone,
    UserKey,
)
from bot.store import cols, tombstones
from bot.store.sqlite._core import (
    SQLiteCore,
    _conv_args,
    _qualified,
)

_GAPS = tombstones.gap_sql(f"?{i}" for i in range(1, 8))


class RetentionPart(SQLiteCore):
    """Retention: expiry as units, per-message age, the audit trail
    (docs/architecture.md#retention)."""

    # -- retention ----------------------------------------------------------------------------

    async def session_bounds(self, session: SessionKey) -> tuple[int, int] | None:
        """First and last stored turn."""
        async with self._read() as db:
            found = await self._session_row(db, session)
            row = (
                None
                if found is None
                else await self._row(
                    db,
                    "SELECT MIN(turn), MAX(turn) FROM messages WHERE session_id = ?",
                    (found[0],),
                )
            )
        if row is None or row[0] is None:
            return None
        return int(row[0]), int(row[1])

    async def missing_turns(
        self, session: SessionKey, covered: tuple[int, int] | None = None
    ) -> list[tuple[int, int]]:
        """Unexplained holes in the session's turns (see bot/store/tombstones.py)."""
        first, last = covered or (1, 0)
        args = (*_conv_args(session.conversation), session.session_id, first, last)
        async with self._read() as db:
            rows = await self._rows(db, _GAPS, args)
        return [(int(a), int(b)) for a, b in rows]

    async def tombstones(self, session: SessionKey) -> list[Tombstone]:
        """The session's tombstones in turn order."""
        async with self._read() as db:
            found = await self._session_row(db, session)
            rows = (
                []
                if found is None
                else await self._rows(
                    db,
                    "SELECT first_turn, last_turn, reason, at FROM tombstones "
                    "WHERE session_id = ? ORDER BY first_turn",
                    (found[0],),
                )
            )
        return [Tombstone(session, int(r[0]), int(r[1]), str(r[2]), float(r[3])) for r in rows]

    async def sessions_page(
        self, status: str, cursor: int = 0, limit: int = 500
    ) -> tuple[list[SessionInfo], int]:
        """A page of sessions by row id."""
        async with self._read() as db:
            rows = await self._rows(
                db,
                "SELECT s.id, c.bot, c.platform, c.chat_id, c.thread_id, "
                f"{_qualified('s', cols.SESSION_COLS)} FROM sessions s JOIN conversations c "
                "ON c.id = s.conversation_id WHERE s.status = ? AND s.id > ? "
                "ORDER BY s.id LIMIT ?",
                (status, cursor, limit),
            )
        infos = [
            cols.session_info(cols.conversation_key(r[1], r[2], r[3], r[4]), r[5:]) for r in rows
        ]
        return infos, (int(rows[-1][0]) if len(rows) == limit else 0)

    async def expired_sessions(self, closed_before: float, limit: int = 100) -> list[SessionKey]:
        """Closed sessions past their retention."""
        async with self._read() as db:
            rows = await self._rows(
                db,
                "SELECT c.bot, c.platform, c.chat_id, c.thread_id, s.session_no FROM sessions s "
                "JOIN conversations c ON c.id = s.conversation_id "
                "WHERE s.status = 'closed' AND s.closed_at <= ? ORDER BY s.closed_at LIMIT ?",
                (closed_before, limit),
            )
        return [SessionKey(cols.conversation_key(r[0], r[1], r[2], r[3]), int(r[4])) for r in rows]

    async def expire_session(self, session: SessionKey, now: float) -> int:
        """Delete the whole closed session's data at once."""
        async with self._tx() as db:
            found = await self._session_row(db, session)
            if found is None:
                return 0
            sid, conv_id = found
            status = await self._scalar(db, "SELECT status FROM sessions WHERE id = ?", (sid,))
            if status != "closed":
                return 0  # reopened sessions do not exist; an open one never expires
            bounds = await self._row(
                db,
                "SELECT MIN(turn), MAX(turn), COUNT(*) FROM messages WHERE session_id = ?",
                (sid,),
            )
            for table in (
                "messages",
                "session_state",
                "summaries",
                "summary_authors",
                "outbox",
                "tombstones",
            ):
                await db.execute(f"DELETE FROM {table} WHERE session_id = ?", (sid,))
            await db.execute("UPDATE sessions SET status = 'expired' WHERE id = ?", (sid,))
            count = int(bounds[2])
            if count:
                await self._log_deletion(
                    db, now, conv_id, session, bounds[0], bounds[1], count, "session expired"
                )
            return count

    async def _log_deletion(
        self,
        db: aiosqlite.Connection,
        now: float,
        conv_id: int,
        session: SessionKey,
        first: int,
        last: int,
        count: int,
        reason: str,
    ) -> None:
        await db.execute(
            "INSERT INTO retention_log (at, conversation_id, session_no, first_turn, last_turn, "
            "messages, reason) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (now, conv_id, session.session_id, int(first), int(last), count, reason),
        )

    async def old_messages(self, session: SessionKey, cutoff: float) -> OldMessages | None:
        """Old answered/context messages of a session."""
        async with self._read() as db:
            found = await self._session_row(db, session)
            row = (
                None
                if found is None
                else await self._row(
                    db,
                    "SELECT MIN(turn), MAX(turn), COUNT(*), MIN(created_at) FROM messages "
                    "WHERE session_id = ? AND pending = 0 AND created_at <= ?",
                    (found[0], cutoff),
                )
            )
        if row is None or not row[2]:
            return None
        return OldMessages(session, int(row[0]), int(row[1]), int(row[2]), float(row[3]))

    async def sessions_with_old_messages(self, cutoff: float, limit: int = 100) -> list[SessionKey]:
        """Open sessions holding old messages."""
        async with self._read() as db:
            rows = await self._rows(
                db,
                "SELECT c.bot, c.platform, c.chat_id, c.thread_id, s.session_no FROM sessions s "
                "JOIN conversations c ON c.id = s.conversation_id WHERE s.status = 'open' "
                "AND EXISTS (SELECT 1 FROM messages m WHERE m.session_id = s.id "
                "AND m.created_at <= ? AND m.pending = 0) ORDER BY s.id LIMIT ?",
                (cutoff, limit),
            )
        return [SessionKey(cols.conversation_key(r[0], r[1], r[2], r[3]), int(r[4])) for r in rows]

    async def delete_old_messages(
        self, session: SessionKey, through_turn: int, cutoff: float, now: float, limit: int
    ) -> int:
        """One batch of per-message deletions, logged."""
        async with self._tx() as db:
            found = await self._session_row(db, session)
            if found is None:
                return 0
            sid, conv_id = found
            rows = await self._rows(
                db,
                "SELECT id, turn FROM messages WHERE session_id = ? AND pending = 0 "
                "AND turn <= ? AND created_at <= ? ORDER BY turn LIMIT ?",
                (sid, through_turn, cutoff, limit),
            )
            if not rows:
                return 0
            ids = [r[0] for r in rows]
            await self._bury(db, ((sid, r[1]) for r in rows), tombstones.MESSAGE_AGE, now)
            await db.execute(f"DELETE FROM messages WHERE id IN ({','.join('?' * len(ids))})", ids)
            await self._log_deletion(
                db, now, conv_id, session, rows[0][1], rows[-1][1], len(rows), "message age"
            )
            return len(rows)

    async def prune_outbox(self, finished_before: float) -> int:
        """Drop delivered (or given-up) outbox rows."""
        async with self._tx() as db:
            cur = await db.execute(
                "DELETE FROM outbox WHERE status != 'pending' AND finished_at <= ?",
                (finished_before,),
            )
            return int(cur.rowcount)

    async def retention_log(self, limit: int = 100) -> list[RetentionEntry]:
        """Newest audit-trail entries."""
        async with self._read() as db:
            rows = await self._rows(
                db,
                "SELECT r.at, c.bot, c.platform, c.chat_id, c.thread_id, r.session_no, "
                "r.first_turn, r.last_turn, r.messages, r.reason FROM retention_log r "
                "JOIN conversations c ON c.id = r.conversation_id ORDER BY r.id DESC LIMIT ?",
                (limit,),
            )
        return [cols.retention_entry(r) for r in rows]

    async def delete_user_messages(
        self, user: UserKey, *, closed_sessions_only: bool, now: float | None = None
    ) -> int:
        """Delete a person's messages on a platform."""
        status = "AND s.status != 'open'" if closed_sessions_only else ""
        async with self._tx() as db:
            rows = await self._rows(
                db,
                "SELECT m.id, m.session_id, m.turn FROM messages m "
                "JOIN sessions s ON s.id = m.session_id JOIN conversations c "
                "ON c.id = m.conversation_id WHERE c.platform = ? AND m.author_id = ? "
                f"AND m.role = 'user' AND m.pending = 0 {status}",
                (user.platform, user.user_id),
            )
            await self._bury(
                db, ((r[1], r[2]) for r in rows), tombstones.FORGET, now or time.time()
            )
            for start in range(0, len(rows), 500):
                ids = [r[0] for r in rows[start : start + 500]]
                await db.execute(
                    f"DELETE FROM messages WHERE id IN ({','.join('?' * len(ids))})", ids
                )
            return len(rows)
