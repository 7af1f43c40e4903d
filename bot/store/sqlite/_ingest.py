"""SQLite's ingest: a short statement sequence inside BEGIN IMMEDIATE (SQLite has no
data-modifying CTEs; PostgreSQL writes the same in one statement: postgres/_writes.py).
The message's media rows and quote are written in the same transaction."""

from __future__ import annotations

from bot.core.events import Inbound, IngestResult, QueuePolicy, SessionKey, SessionPolicy
from bot.store import cols
from bot.store.sql.core import CONV_WHERE_C, conv_args
from bot.store.sql.messages import MessagesPart


class IngestPart(MessagesPart):
    """Store, bump the version, arm the timer: one transaction, few statements."""

    async def ingest(
        self,
        inbound: Inbound,
        now: float,
        queue: QueuePolicy,
        sessions: SessionPolicy | None = None,
    ) -> IngestResult:
        """The write lock is held from BEGIN, so the duplicate check and the writes are one
        step for every process on the file."""
        key = inbound.conversation
        async with self._tx() as db:
            if inbound.platform_message_id is not None:
                dup = await db.fetchrow(
                    "SELECT s.session_no, c.version, (SELECT due_at FROM timers t "
                    "WHERE t.conversation_id = c.id) FROM messages m "
                    "JOIN conversations c ON c.id = m.conversation_id "
                    f"JOIN sessions s ON s.id = m.session_id WHERE {CONV_WHERE_C} "
                    "AND m.platform_message_id = $5",
                    *conv_args(key),
                    inbound.platform_message_id,
                )
                if dup is not None:  # a second delivery of a stored message: no-op
                    return IngestResult(
                        stored=False,
                        message_id=None,
                        session=SessionKey(key, int(dup[0])),
                        version=int(dup[1]),
                        due_at=None if dup[2] is None else float(dup[2]),
                    )
            # Create the conversation or bump its version in one statement.
            head = await db.fetchrow(
                "INSERT INTO conversations (bot, platform, chat_id, thread_id, created_at, "
                "version) VALUES ($1, $2, $3, $4, $5, 1) ON CONFLICT (bot, platform, chat_id, "
                "thread_id) DO UPDATE SET version = version + 1, status = 'active', "
                "status_reason = NULL RETURNING id, version",
                *conv_args(key),
                now,
            )
            assert head is not None
            conv_id, version = int(head[0]), int(head[1])
            sid, number = await self._ensure_open(db, conv_id, now, sessions)
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
                    conv_id,
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
            due_at: float | None
            if inbound.triggers_reply:
                due_at = await self._arm(db, conv_id, now, queue, version)
            else:
                due = await db.fetchval(
                    "SELECT due_at FROM timers WHERE conversation_id = $1", conv_id
                )
                due_at = None if due is None else float(due)
        return IngestResult(
            stored=True,
            message_id=message_id,
            session=SessionKey(inbound.conversation, number),
            version=version,
            due_at=due_at,
        )
