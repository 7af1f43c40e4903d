"""Retention: expiry as units, per-message age, the audit trail, gaps
(docs/architecture.md#retention)."""

from __future__ import annotations

from collections.abc import Sequence

from bot.core.events import (
    OldMessages,
    SessionInfo,
    SessionKey,
)
from bot.store import cols, tombstones
from bot.store.sql.conn import Conn
from bot.store.sql.core import SQLCore, conv_args

_GAPS = tombstones.gap_sql(
    ["$1", "$2", "$3", "$4", "$5", "CAST($6 AS INTEGER)", "CAST($7 AS INTEGER)"]
)
_SESSION_COLS_S = ", ".join(f"s.{c.strip()}" for c in cols.SESSION_COLS.split(","))


class RetentionPart(SQLCore):
    """Retention: expiry as units, per-message age, the audit trail
    (docs/architecture.md#retention)."""

    async def missing_turns(
        self, session: SessionKey, covered: tuple[int, int] | None = None
    ) -> list[tuple[int, int]]:
        """Unexplained holes in the session's turns (see bot/store/tombstones.py)."""
        first, last = covered or (1, 0)
        args = (*conv_args(session.conversation), session.session_id, first, last)
        async with self._read() as db:
            rows = await db.fetch(_GAPS, *args)
        return [(int(r[0]), int(r[1])) for r in rows]

    async def session_bounds(self, session: SessionKey) -> tuple[int, int] | None:
        async with self._read() as db:
            found = await self._session_row(db, session)
            row = (
                None
                if found is None
                else await db.fetchrow(
                    "SELECT MIN(turn), MAX(turn) FROM messages WHERE session_id = $1", found[0]
                )
            )
        if row is None or row[0] is None:
            return None
        return int(row[0]), int(row[1])

    async def sessions_page(
        self, status: str, cursor: int = 0, limit: int = 500
    ) -> tuple[list[SessionInfo], int]:
        """A page of sessions by row id."""
        async with self._read() as db:
            rows = await db.fetch(
                "SELECT s.id, c.bot, c.platform, c.chat_id, c.thread_id, "
                f"{_SESSION_COLS_S} FROM sessions s JOIN conversations c "
                "ON c.id = s.conversation_id WHERE s.status = $1 AND s.id > $2 "
                "ORDER BY s.id LIMIT $3",
                status,
                cursor,
                limit,
            )
        infos = [
            cols.session_info(cols.conversation_key(r[1], r[2], r[3], r[4]), r[5:]) for r in rows
        ]
        return infos, (int(rows[-1][0]) if len(rows) == limit else 0)

    async def expired_sessions(self, closed_before: float, limit: int = 100) -> list[SessionKey]:
        async with self._read() as db:
            rows = await db.fetch(
                "SELECT c.bot, c.platform, c.chat_id, c.thread_id, s.session_no FROM sessions s "
                "JOIN conversations c ON c.id = s.conversation_id "
                "WHERE s.status = 'closed' AND s.closed_at <= $1 ORDER BY s.closed_at LIMIT $2",
                closed_before,
                limit,
            )
        return [SessionKey(cols.conversation_key(r[0], r[1], r[2], r[3]), int(r[4])) for r in rows]

    async def expire_session(self, session: SessionKey, now: float) -> int:
        async with self._tx() as db:
            found = await self._session_row(db, session)
            if found is None:
                return 0
            sid, conv_id = found
            # The row lock keeps a concurrent expiry (another process) from logging twice.
            status = await db.fetchval(
                "SELECT status FROM sessions WHERE id = $1" + self.dialect.for_update, sid
            )
            if status != "closed":
                return 0  # reopened sessions do not exist; an open one never expires
            bounds = await db.fetchrow(
                "SELECT MIN(turn), MAX(turn), COUNT(*) FROM messages WHERE session_id = $1", sid
            )
            assert bounds is not None
            for table in (
                "messages",
                "session_state",
                "summaries",
                "summary_authors",
                "outbox",
                "tombstones",
            ):
                await db.execute(f"DELETE FROM {table} WHERE session_id = $1", sid)
            await db.execute("UPDATE sessions SET status = 'expired' WHERE id = $1", sid)
            count = int(bounds[2])
            if count:
                await _log_deletion(
                    db, now, conv_id, session, bounds[0], bounds[1], count, "session expired"
                )
            return count

    async def old_messages(self, session: SessionKey, cutoff: float) -> OldMessages | None:
        async with self._read() as db:
            found = await self._session_row(db, session)
            row = (
                None
                if found is None
                else await db.fetchrow(
                    "SELECT MIN(turn), MAX(turn), COUNT(*), MIN(created_at) FROM messages "
                    f"WHERE session_id = $1 AND pending = {self.dialect.false} "
                    "AND created_at <= $2",
                    found[0],
                    cutoff,
                )
            )
        if row is None or not row[2]:
            return None
        return OldMessages(session, int(row[0]), int(row[1]), int(row[2]), float(row[3]))

    async def sessions_with_old_messages(self, cutoff: float, limit: int = 100) -> list[SessionKey]:
        async with self._read() as db:
            rows = await db.fetch(
                "SELECT c.bot, c.platform, c.chat_id, c.thread_id, s.session_no FROM sessions s "
                "JOIN conversations c ON c.id = s.conversation_id WHERE s.status = 'open' "
                "AND EXISTS (SELECT 1 FROM messages m WHERE m.session_id = s.id "
                f"AND m.created_at <= $1 AND m.pending = {self.dialect.false}) "
                "ORDER BY s.id LIMIT $2",
                cutoff,
                limit,
            )
        return [SessionKey(cols.conversation_key(r[0], r[1], r[2], r[3]), int(r[4])) for r in rows]

    async def delete_old_messages(
        self, session: SessionKey, through_turn: int, cutoff: float, now: float, limit: int
    ) -> int:
        d = self.dialect
        async with self._tx() as db:
            found = await self._session_row(db, session)
            if found is None:
                return 0
            sid, conv_id = found
            # The session row lock orders this against erase_user_messages (which takes it
            # before dropping the summary and re-tagging its tombstones): the summary read
            # below is the one the tombstones written here will lean on.
            if d.for_update:
                await db.execute("SELECT 1 FROM sessions WHERE id = $1" + d.for_update, sid)
            covered = await db.fetchrow(
                "SELECT first_turn, last_turn FROM summaries WHERE session_id = $1", sid
            )
            if covered is None:
                return 0
            # Only turns the stored summary covers go as folded; a rejected message was never
            # folded (history leaves it out) nor shown, and goes by age wherever it lies.
            # Below the summary's first turn anything else stays: no summary stands for it.
            # (Two workers at once wait for each other on the session row lock above.)
            rejected = "CASE WHEN closed_reason LIKE 'rejected%' THEN 1 ELSE 0 END"
            rows = await db.fetch(
                "DELETE FROM messages WHERE id IN (SELECT id FROM messages WHERE "
                f"session_id = $1 AND pending = {d.false} AND turn <= $2 AND turn <= $5 "
                f"AND (turn >= $6 OR {rejected} = 1) AND created_at <= $3 "
                f"ORDER BY turn LIMIT $4) RETURNING turn, {rejected}",
                sid,
                through_turn,
                cutoff,
                limit,
                int(covered[1]),
                int(covered[0]),
            )
            if not rows:
                return 0
            turns = sorted(int(r[0]) for r in rows)
            folded = [(sid, int(r[0])) for r in rows if not r[1]]
            unseen = [(sid, int(r[0])) for r in rows if r[1]]
            await self._bury(db, folded, tombstones.MESSAGE_AGE, now)
            await self._bury(db, unseen, tombstones.REJECTED_AGE, now)
            await _log_deletion(
                db, now, conv_id, session, turns[0], turns[-1], len(turns), "message age"
            )
            return len(turns)

    async def prune_outbox(self, finished_before: float) -> int:
        async with self._tx() as db:
            return await db.execute(
                "DELETE FROM outbox WHERE status <> 'pending' AND finished_at <= $1",
                finished_before,
            )

    async def prune_leases(self, expired_before: float, prefixes: Sequence[str]) -> int:
        if not prefixes:
            return 0
        # Prefixes are the code's own constants; LIKE's wildcards in one would widen it.
        assert not any("%" in p or "_" in p for p in prefixes), prefixes
        likes = " OR ".join(f"name LIKE ${i + 2}" for i in range(len(prefixes)))
        async with self._tx() as db:
            return await db.execute(
                f"DELETE FROM leases WHERE expires_at <= $1 AND ({likes})",
                expired_before,
                *(f"{p}%" for p in prefixes),
            )


async def _log_deletion(
    db: Conn,
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
        "messages, reason) VALUES ($1, $2, $3, $4, $5, $6, $7)",
        now,
        conv_id,
        session.session_id,
        int(first),
        int(last),
        count,
        reason,
    )
