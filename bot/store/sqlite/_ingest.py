"""SQLite's ingest: a short statement sequence per message inside one BEGIN IMMEDIATE for the
whole batch (SQLite has no data-modifying CTEs; PostgreSQL writes each message in one
statement: postgres/_writes.py). The message's media rows and quote are written in the same
transaction. An existing conversation costs five statements a message: one read, then the
version, the session's turn, the message and the timer (docs/architecture.md#ingest-in-batches)."""

from __future__ import annotations

from collections.abc import Sequence

from bot.core.events import Inbound, IngestResult, QueuePolicy, SessionKey, SessionPolicy
from bot.core.queue_rules import arm
from bot.store import cols
from bot.store.sql.conn import Conn
from bot.store.sql.core import CONV_WHERE_C, conv_args
from bot.store.sql.ingest import STATE_SQL, IngestBase, IngestState, duplicate

_STATE_BY_KEY = STATE_SQL.format(mid="$5", where=CONV_WHERE_C)


class IngestPart(IngestBase):
    """Store, bump the version, arm the timer: one transaction for a batch, few statements."""

    async def ingest_many(
        self,
        items: Sequence[tuple[Inbound, QueuePolicy]],
        now: float,
        sessions: SessionPolicy | None = None,
    ) -> list[IngestResult]:
        """The write lock is held from BEGIN, so each message's read and writes are one step
        for every process on the file, and so is the whole batch."""
        if not items:
            return []
        async with self._tx() as db:
            return [await self._ingest_one(db, inbound, now, q, sessions) for inbound, q in items]

    async def _ingest_one(
        self,
        db: Conn,
        inbound: Inbound,
        now: float,
        queue: QueuePolicy,
        sessions: SessionPolicy | None,
    ) -> IngestResult:
        key = inbound.conversation
        row = await db.fetchrow(_STATE_BY_KEY, *conv_args(key), inbound.platform_message_id)
        if row is None:
            conv_id = await self._conv_id(db, key, now)
            assert conv_id is not None
            state = IngestState.new(conv_id)
        else:
            state = IngestState.of(row)
        if state.duplicate_in is not None:  # a second delivery of a stored message: no-op
            return duplicate(key, state)
        sid, number = await self._session_for(db, state, now, sessions)
        version = int(
            await db.fetchval(
                "UPDATE conversations SET version = version + 1, status = 'active', "
                "status_reason = NULL WHERE id = $1 RETURNING version",
                state.conv_id,
            )
        )
        turn = int(
            await db.fetchval(
                "UPDATE sessions SET next_turn = next_turn + 1, last_activity_at = $1, "
                "last_user_turn = next_turn WHERE id = $2 RETURNING next_turn - 1",
                now,
                sid,
            )
        )
        message_id = int(
            await db.fetchval(
                "INSERT INTO messages (conversation_id, session_id, turn, role, author_id, "
                "display_name, text, platform_message_id, is_private, version, pending, "
                "addressed, created_at, quote, media_count) VALUES ($1, $2, $3, 'user', $4, "
                "$5, $6, $7, $8, $9, $10, $10, $11, $12, $13) RETURNING id",
                state.conv_id,
                sid,
                turn,
                inbound.author_id,
                inbound.display_name,
                inbound.text,
                inbound.platform_message_id,
                int(inbound.is_private),
                version,
                int(inbound.triggers_reply),  # pending, and addressed: memory may learn
                now,
                cols.quote_json(inbound.quote),
                len(inbound.media),
            )
        )
        if inbound.media:
            await db.executemany(
                f"INSERT INTO media (message_id, {cols.MEDIA_INSERT_COLS}) VALUES ($1, $2, "
                "$3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
                [(message_id, *row) for row in cols.media_rows(inbound.media, now)],
            )
        due_at = state.timer_due
        if inbound.triggers_reply:
            # Arm or extend the timer (rules.arm) from the first pending time read above.
            timer = arm(queue, now, state.first_pending_at, version)
            await self._write_timer(db, state.conv_id, timer)
            due_at = timer.due_at
        return IngestResult(
            stored=True,
            message_id=message_id,
            session=SessionKey(key, number),
            version=version,
            due_at=due_at,
        )
