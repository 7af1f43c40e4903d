"""PostgreSQL: ingest, edits and deletions, history and summaries."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from bot.core.errors import StoreError
from bot.core.events import (
    ConversationKey,
    EditOutcome,
    Inbound,
    IngestResult,
    QueuePolicy,
    SessionKey,
    SessionPolicy,
    StoredMessage,
    StoredSummary,
)
from bot.core.sessions import expiry_reason
from bot.store import cols
from bot.store.postgres._core import (
    _CONV_WHERE,
    PostgresCore,
    _conv_args,
)
from bot.store.tombstones import PLATFORM_DELETION

if TYPE_CHECKING:
    from bot.store.postgres._core import Conn


class MessagesPart(PostgresCore):
    """Ingest, edits and deletions, history, summaries."""

    # -- messages and queue -------------------------------------------------------------------

    async def ingest(
        self,
        inbound: Inbound,
        now: float,
        queue: QueuePolicy,
        sessions: SessionPolicy | None = None,
    ) -> IngestResult:
        """Store, bump the version, arm the timer: one transaction under the conversation lock.

        Common case in three statements: the lock; one read (duplicate, open session, timer),
        which must come after the lock so that it sees what a racing ingest committed; one
        write (version, turn, message and timer together).
        """
        async with self._tx() as db:
            conv_id = await self._lock_conv(db, inbound.conversation, now)
            assert conv_id is not None
            state = await db.fetchrow(
                "SELECT (SELECT s.session_no FROM messages m JOIN sessions s "
                "ON s.id = m.session_id WHERE m.conversation_id = $1 "
                "AND m.platform_message_id = $2), c.version, t.due_at, t.first_pending_at, "
                "o.id, o.session_no, o.opened_at, o.last_activity_at FROM conversations c "
                "LEFT JOIN timers t ON t.conversation_id = c.id "
                "LEFT JOIN sessions o ON o.conversation_id = c.id AND o.status = 'open' "
                "WHERE c.id = $1",
                conv_id,
                inbound.platform_message_id,
            )
            assert state is not None
            timer_due = None if state[2] is None else float(state[2])
            if state[0] is not None:  # a second delivery of a stored message: no-op
                return IngestResult(
                    stored=False,
                    message_id=None,
                    session=SessionKey(inbound.conversation, int(state[0])),
                    version=int(state[1]),
                    due_at=timer_due,
                )
            reason = (
                None
                if state[4] is None or sessions is None
                else expiry_reason(
                    sessions, opened_at=float(state[6]), last_activity_at=float(state[7]), now=now
                )
            )
            if state[4] is None or reason is not None:
                sid, number = await self._rotate(db, conv_id, now, reason)
            else:
                sid, number = int(state[4]), int(state[5])
            first_pending_at = now if state[3] is None else float(state[3])
            due_at = queue.due_at(now, first_pending_at) if inbound.triggers_reply else timer_due
            row = await db.fetchrow(
                "WITH v AS (UPDATE conversations SET version = version + 1, status = 'active', "
                "status_reason = NULL WHERE id = $1 RETURNING version), "
                "t AS (UPDATE sessions SET next_turn = next_turn + 1, last_activity_at = $3, "
                "last_user_turn = next_turn WHERE id = $2 RETURNING next_turn - 1 AS turn), "
                "m AS (INSERT INTO messages (conversation_id, session_id, turn, role, author_id, "
                "display_name, text, platform_message_id, is_private, version, pending, "
                "addressed, created_at) SELECT $1, $2, t.turn, 'user', $4::text, $5::text, "
                "$6::text, $7::text, $8::boolean, v.version, $9::boolean, $9::boolean, $3 "
                "FROM v, t RETURNING id, version), "
                # Arm or extend the timer (only for a message that asks for a reply).
                "a AS (INSERT INTO timers (conversation_id, due_at, first_pending_at, "
                "armed_version) SELECT $1, $10::float8, $11::float8, m.version FROM m WHERE $9 "
                "ON CONFLICT (conversation_id) DO UPDATE SET due_at = EXCLUDED.due_at, "
                "armed_version = EXCLUDED.armed_version) "
                "SELECT id, version FROM m",
                conv_id,
                sid,
                now,
                inbound.author_id,
                inbound.display_name,
                inbound.text,
                inbound.platform_message_id,
                inbound.is_private,
                inbound.triggers_reply,
                due_at,
                first_pending_at,
            )
            assert row is not None
        return IngestResult(
            stored=True,
            message_id=int(row[0]),
            session=SessionKey(inbound.conversation, number),
            version=int(row[1]),
            due_at=due_at,
        )

    @staticmethod
    async def _arm(db: Conn, conv_id: int, now: float, queue: QueuePolicy, version: int) -> float:
        """Arm or extend the timer (caller holds the conversation lock)."""
        first = await db.fetchval(
            "SELECT first_pending_at FROM timers WHERE conversation_id = $1", conv_id
        )
        first_pending_at = now if first is None else float(first)
        due_at = queue.due_at(now, first_pending_at)
        await db.execute(
            "INSERT INTO timers (conversation_id, due_at, first_pending_at, armed_version) "
            "VALUES ($1, $2, $3, $4) ON CONFLICT (conversation_id) DO UPDATE SET "
            "due_at = EXCLUDED.due_at, armed_version = EXCLUDED.armed_version",
            conv_id,
            due_at,
            first_pending_at,
            version,
        )
        return due_at

    async def edit_message(
        self,
        conversation: ConversationKey,
        platform_message_id: str,
        text: str,
        now: float,
        queue: QueuePolicy,
        *,
        author_id: str | None = None,
    ) -> EditOutcome:
        """Update an unanswered user message; bump the version if it was pending."""
        async with self._tx() as db:
            conv_id = await self._lock_conv(db, conversation)
            row = (
                None
                if conv_id is None
                else await db.fetchrow(
                    "SELECT id, pending, answered_by FROM messages WHERE conversation_id = $1 "
                    "AND platform_message_id = $2 AND role = 'user' "
                    "AND ($3::text IS NULL OR author_id = $3)",
                    conv_id,
                    platform_message_id,
                    author_id,
                )
            )
            if row is None or conv_id is None:
                return "unknown"
            if row[2] is not None:
                return "too_late"
            if not row[1]:
                await db.execute("UPDATE messages SET text = $1 WHERE id = $2", text, row[0])
                return "updated"
            version = int(
                await db.fetchval(
                    "UPDATE conversations SET version = version + 1 WHERE id = $1 "
                    "RETURNING version",
                    conv_id,
                )
            )
            await db.execute(
                "UPDATE messages SET text = $1, version = $2 WHERE id = $3", text, version, row[0]
            )
            await self._arm(db, conv_id, now, queue, version)
            return "updated"

    async def delete_message(
        self,
        conversation: ConversationKey,
        platform_message_id: str,
        *,
        author_id: str | None = None,
        now: float | None = None,
    ) -> StoredMessage | None:
        """Delete a stored message by its platform id (tombstoned); return it."""
        async with self._tx() as db:
            row = await db.fetchrow(
                "WITH d AS (DELETE FROM messages WHERE platform_message_id = $5 AND "
                f"conversation_id = (SELECT id FROM conversations WHERE {_CONV_WHERE}) "
                "AND ($6::text IS NULL OR author_id = $6) RETURNING *) "
                f"SELECT {cols.MSG_COLS}, m.session_id FROM d m JOIN sessions s "
                "ON s.id = m.session_id",
                *_conv_args(conversation),
                platform_message_id,
                author_id,
            )
            if row is None:
                return None
            deleted = cols.message(conversation, row)
            await self._bury(
                db, [(int(row[-1]), deleted.turn)], PLATFORM_DELETION, now or time.time()
            )
        return deleted

    async def set_conversation_status(
        self, conversation: ConversationKey, active: bool, reason: str | None = None
    ) -> None:
        """Mark a conversation (in)active."""
        async with self._tx() as db:
            await db.execute(
                f"UPDATE conversations SET status = $5, status_reason = $6 WHERE {_CONV_WHERE}",
                *_conv_args(conversation),
                "active" if active else "inactive",
                reason,
            )

    async def conversation_active(self, conversation: ConversationKey) -> bool:
        """Whether the conversation is active."""
        async with self._conn() as db:
            status = await db.fetchval(
                f"SELECT status FROM conversations WHERE {_CONV_WHERE}", *_conv_args(conversation)
            )
        return bool(status != "inactive")

    async def conversation_version(self, conversation: ConversationKey) -> int:
        """The version counter."""
        async with self._conn() as db:
            version = await db.fetchval(
                f"SELECT version FROM conversations WHERE {_CONV_WHERE}", *_conv_args(conversation)
            )
        return 0 if version is None else int(version)

    async def history(
        self,
        session: SessionKey,
        limit: int,
        *,
        after_turn: int = 0,
        oldest_first: bool = False,
    ) -> list[StoredMessage]:
        """Non-pending messages after ``after_turn``: newest (or oldest) ``limit``."""
        order = "ASC" if oldest_first else "DESC"
        async with self._conn() as db:
            found = await self._session_row(db, session)
            if found is None:
                return []
            rows = await db.fetch(
                cols.MESSAGE_SELECT + "WHERE m.session_id = $1 AND NOT m.pending AND m.turn > $2"
                f"{cols.NOT_REJECTED} ORDER BY m.turn {order} LIMIT $3",
                found[0],
                after_turn,
                limit,
            )
        if not oldest_first:
            rows.reverse()
        return [cols.message(session.conversation, r) for r in rows]

    async def count_history(self, session: SessionKey, *, after_turn: int = 0) -> int:
        """Count of non-pending messages after ``after_turn``."""
        async with self._conn() as db:
            found = await self._session_row(db, session)
            if found is None:
                return 0
            count = await db.fetchval(
                "SELECT COUNT(*) FROM messages m WHERE session_id = $1 AND NOT pending "
                f"AND turn > $2{cols.NOT_REJECTED}",
                found[0],
                after_turn,
            )
        return int(count)

    async def get_summary(self, session: SessionKey) -> StoredSummary | None:
        """The session's summary."""
        async with self._conn() as db:
            found = await self._session_row(db, session)
            row = (
                None
                if found is None
                else await db.fetchrow(
                    "SELECT body, first_turn, last_turn, updated_at FROM summaries "
                    "WHERE session_id = $1",
                    found[0],
                )
            )
        if row is None:
            return None
        return StoredSummary(session, row[0], int(row[1]), int(row[2]), float(row[3]))

    async def save_summary(
        self,
        session: SessionKey,
        body: str,
        first_turn: int,
        last_turn: int,
        now: float,
        *,
        expected_last_turn: int | None,
        authors: Sequence[str] = (),
        sources: Sequence[int] = (),
    ) -> bool:
        """CAS on the covered range and the folded messages: two summarisers never overwrite
        each other, and a summary of messages deleted meanwhile (/forget) is refused."""
        async with self._tx() as db:
            found = await self._session_row(db, session)
            if found is None:
                raise StoreError(f"unknown session {session}")
            # The session row lock orders this against erase_user_messages, which takes it
            # before deleting: the check below then sees whether the sources survived.
            await db.execute("SELECT 1 FROM sessions WHERE id = $1 FOR UPDATE", found[0])
            wanted = sorted(set(sources))
            if wanted:
                present = await db.fetchval(
                    "SELECT COUNT(*) FROM messages WHERE id = ANY($1::bigint[])", wanted
                )
                if int(present) != len(wanted):
                    return False
            args = (found[0], body, first_turn, last_turn, now)
            if expected_last_turn is None:
                saved = await db.fetchval(
                    "INSERT INTO summaries (session_id, body, first_turn, last_turn, updated_at) "
                    "VALUES ($1, $2, $3, $4, $5) ON CONFLICT (session_id) DO NOTHING "
                    "RETURNING session_id",
                    *args,
                )
            else:
                saved = await db.fetchval(
                    "UPDATE summaries SET body = $2, first_turn = $3, last_turn = $4, "
                    "updated_at = $5 WHERE session_id = $1 AND last_turn = $6 "
                    "RETURNING session_id",
                    *args,
                    expected_last_turn,
                )
            if saved is not None and authors:
                await db.execute(
                    "INSERT INTO summary_authors (session_id, author_id) "
                    "SELECT $1, unnest($2::text[]) ON CONFLICT DO NOTHING",
                    found[0],
                    sorted(set(authors)),
                )
        return saved is not None

    async def sessions_to_extract(
        self, quiet_before: float, limit: int = 20, bots: Sequence[str] | None = None
    ) -> list[tuple[SessionKey, int]]:
        """Closed or quiet sessions with unlearned user messages."""
        bots_filter = "" if bots is None else " AND c.bot = ANY($3::text[])"
        args: list[Any] = [quiet_before, limit] + ([] if bots is None else [list(bots)])
        async with self._conn() as db:
            rows = await db.fetch(
                "SELECT c.bot, c.platform, c.chat_id, c.thread_id, s.session_no, "
                "s.extracted_turn FROM sessions s JOIN conversations c "
                "ON c.id = s.conversation_id WHERE s.extracted_turn < s.last_user_turn "
                f"AND (s.status = 'closed' OR s.last_activity_at <= $1){bots_filter} "
                "ORDER BY s.last_activity_at LIMIT $2",
                *args,
            )
        return [
            (SessionKey(cols.conversation_key(r[0], r[1], r[2], r[3]), int(r[4])), int(r[5]))
            for r in rows
        ]

    async def mark_extracted(self, session: SessionKey, turn: int) -> None:
        """Advance the extraction mark (never backwards)."""
        async with self._tx() as db:
            found = await self._session_row(db, session)
            if found is not None:
                await db.execute(
                    "UPDATE sessions SET extracted_turn = GREATEST(extracted_turn, $1) "
                    "WHERE id = $2",
                    turn,
                    found[0],
                )

    async def messages(self, session: SessionKey) -> list[StoredMessage]:
        """Every message of a session."""
        async with self._conn() as db:
            found = await self._session_row(db, session)
            rows = (
                []
                if found is None
                else await db.fetch(
                    cols.MESSAGE_SELECT + "WHERE m.session_id = $1 ORDER BY m.turn",
                    found[0],
                )
            )
        return [cols.message(session.conversation, r) for r in rows]
