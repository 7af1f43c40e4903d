"""SQLite: ingest, edits and deletions, history and summaries."""

from __future__ import annotations

import time
from collections.abc import Sequence

import aiosqlite

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
from bot.store import cols
from bot.store.sqlite._core import (
    SQLiteCore,
    _conv_args,
)
from bot.store.tombstones import PLATFORM_DELETION


class MessagesPart(SQLiteCore):
    """Ingest, edits and deletions, history, summaries."""

    # -- messages and queue -------------------------------------------------------------------

    async def ingest(
        self,
        inbound: Inbound,
        now: float,
        queue: QueuePolicy,
        sessions: SessionPolicy | None = None,
    ) -> IngestResult:
        """Store, bump the version, arm the timer: one transaction, few statements."""
        key = inbound.conversation
        async with self._tx() as db:
            if inbound.platform_message_id is not None:
                dup = await self._row(
                    db,
                    "SELECT s.session_no, c.version, (SELECT due_at FROM timers t "
                    "WHERE t.conversation_id = c.id) FROM messages m "
                    "JOIN conversations c ON c.id = m.conversation_id "
                    "JOIN sessions s ON s.id = m.session_id WHERE c.bot = ? AND c.platform = ? "
                    "AND c.chat_id = ? AND c.thread_id = ? AND m.platform_message_id = ?",
                    (*_conv_args(key), inbound.platform_message_id),
                )
                if dup is not None:
                    return IngestResult(
                        stored=False,
                        message_id=None,
                        session=SessionKey(key, int(dup[0])),
                        version=int(dup[1]),
                        due_at=None if dup[2] is None else float(dup[2]),
                    )
            # Create the conversation or bump its version in one statement.
            head = await self._row(
                db,
                "INSERT INTO conversations (bot, platform, chat_id, thread_id, created_at, "
                "version) VALUES (?, ?, ?, ?, ?, 1) ON CONFLICT (bot, platform, chat_id, "
                "thread_id) DO UPDATE SET version = version + 1, status = 'active', "
                "status_reason = NULL RETURNING id, version",
                (*_conv_args(key), now),
            )
            conv_id, version = int(head[0]), int(head[1])
            sid, number = await self._ensure_open(db, conv_id, now, sessions)
            turn = int(
                await self._scalar(
                    db,
                    "UPDATE sessions SET next_turn = next_turn + 1, last_activity_at = ?, "
                    "last_user_turn = next_turn WHERE id = ? RETURNING next_turn - 1",
                    (now, sid),
                )
            )
            cur = await db.execute(
                "INSERT INTO messages (conversation_id, session_id, turn, role, author_id, "
                "display_name, text, platform_message_id, is_private, version, pending, "
                "addressed, created_at) VALUES (?, ?, ?, 'user', ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    conv_id,
                    sid,
                    turn,
                    inbound.author_id,
                    inbound.display_name,
                    inbound.text,
                    inbound.platform_message_id,
                    int(inbound.is_private),
                    version,
                    int(inbound.triggers_reply),
                    int(inbound.triggers_reply),  # addressed: memory may learn from it
                    now,
                ),
            )
            message_id = int(cur.lastrowid or 0)
            due_at: float | None = None
            if inbound.triggers_reply:
                due_at = await self._arm(db, conv_id, now, queue, version)
            else:
                due = await self._scalar(
                    db, "SELECT due_at FROM timers WHERE conversation_id = ?", (conv_id,)
                )
                due_at = None if due is None else float(due)
        return IngestResult(
            stored=True,
            message_id=message_id,
            session=SessionKey(inbound.conversation, number),
            version=version,
            due_at=due_at,
        )

    async def _arm(
        self, db: aiosqlite.Connection, conv_id: int, now: float, queue: QueuePolicy, version: int
    ) -> float:
        """Arm or extend the timer: due = min(now + debounce, first_pending + max_wait)."""
        due = await self._scalar(
            db,
            "INSERT INTO timers (conversation_id, due_at, first_pending_at, armed_version) "
            "VALUES (?, ?, ?, ?) ON CONFLICT (conversation_id) DO UPDATE SET "
            "due_at = MIN(?, timers.first_pending_at + ?), "
            "armed_version = excluded.armed_version RETURNING due_at",
            (conv_id, queue.due_at(now, now), now, version, now + queue.debounce, queue.max_wait),
        )
        return float(due)

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
            conv_id = await self._conv_id(db, conversation)
            row = (
                None
                if conv_id is None
                else await self._row(
                    db,
                    "SELECT id, pending, answered_by FROM messages WHERE conversation_id = ? "
                    "AND platform_message_id = ? AND role = 'user' "
                    "AND (? IS NULL OR author_id = ?)",
                    (conv_id, platform_message_id, author_id, author_id),
                )
            )
            if row is None or conv_id is None:
                return "unknown"
            if row[2] is not None:
                return "too_late"
            if not row[1]:
                await db.execute("UPDATE messages SET text = ? WHERE id = ?", (text, row[0]))
                return "updated"
            version = int(
                await self._scalar(
                    db,
                    "UPDATE conversations SET version = version + 1 WHERE id = ? RETURNING version",
                    (conv_id,),
                )
            )
            await db.execute(
                "UPDATE messages SET text = ?, version = ? WHERE id = ?", (text, version, row[0])
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
            conv_id = await self._conv_id(db, conversation)
            if conv_id is None:
                return None
            row = await self._row(
                db,
                cols.MESSAGE_SELECT + "WHERE m.conversation_id = ? AND m.platform_message_id = ? "
                "AND (? IS NULL OR m.author_id = ?)",
                (conv_id, platform_message_id, author_id, author_id),
            )
            if row is None:
                return None
            deleted = cols.message(conversation, row)
            sid = await self._scalar(db, "SELECT session_id FROM messages WHERE id = ?", (row[0],))
            await self._bury(db, [(int(sid), deleted.turn)], PLATFORM_DELETION, now or time.time())
            await db.execute("DELETE FROM messages WHERE id = ?", (row[0],))
        return deleted

    async def set_conversation_status(
        self, conversation: ConversationKey, active: bool, reason: str | None = None
    ) -> None:
        """Mark a conversation (in)active."""
        async with self._tx() as db:
            conv_id = await self._conv_id(db, conversation)
            if conv_id is not None:
                await db.execute(
                    "UPDATE conversations SET status = ?, status_reason = ? WHERE id = ?",
                    ("active" if active else "inactive", reason, conv_id),
                )

    async def conversation_active(self, conversation: ConversationKey) -> bool:
        """Whether the conversation is active."""
        async with self._read() as db:
            conv_id = await self._conv_id(db, conversation)
            if conv_id is None:
                return True
            status = await self._scalar(
                db, "SELECT status FROM conversations WHERE id = ?", (conv_id,)
            )
        return bool(status != "inactive")

    async def conversation_version(self, conversation: ConversationKey) -> int:
        """The version counter."""
        async with self._read() as db:
            conv_id = await self._conv_id(db, conversation)
            if conv_id is None:
                return 0
            return int(
                await self._scalar(db, "SELECT version FROM conversations WHERE id = ?", (conv_id,))
            )

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
        async with self._read() as db:
            found = await self._session_row(db, session)
            if found is None:
                return []
            rows = await self._rows(
                db,
                cols.MESSAGE_SELECT + "WHERE m.session_id = ? AND m.pending = 0 AND m.turn > ?"
                f"{cols.NOT_REJECTED} ORDER BY m.turn {order} LIMIT ?",
                (found[0], after_turn, limit),
            )
        if not oldest_first:
            rows.reverse()
        return [cols.message(session.conversation, r) for r in rows]

    async def count_history(self, session: SessionKey, *, after_turn: int = 0) -> int:
        """Count of non-pending messages after ``after_turn``."""
        async with self._read() as db:
            found = await self._session_row(db, session)
            if found is None:
                return 0
            return int(
                await self._scalar(
                    db,
                    "SELECT COUNT(*) FROM messages m WHERE session_id = ? AND pending = 0 "
                    f"AND turn > ?{cols.NOT_REJECTED}",
                    (found[0], after_turn),
                )
            )

    async def get_summary(self, session: SessionKey) -> StoredSummary | None:
        """The session's summary."""
        async with self._read() as db:
            found = await self._session_row(db, session)
            row = (
                None
                if found is None
                else await self._row(
                    db,
                    "SELECT body, first_turn, last_turn, updated_at FROM summaries "
                    "WHERE session_id = ?",
                    (found[0],),
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
        each other's work, and a summary of messages deleted meanwhile (/forget) is refused."""
        async with self._tx() as db:
            found = await self._session_row(db, session)
            if found is None:
                raise StoreError(f"unknown session {session}")
            current = await self._scalar(
                db, "SELECT last_turn FROM summaries WHERE session_id = ?", (found[0],)
            )
            if (None if current is None else int(current)) != expected_last_turn:
                return False
            wanted = sorted(set(sources))
            for start in range(0, len(wanted), 500):
                part = wanted[start : start + 500]
                present = await self._scalar(
                    db,
                    f"SELECT COUNT(*) FROM messages WHERE id IN ({','.join('?' * len(part))})",
                    part,
                )
                if int(present) != len(part):
                    return False
            await db.executemany(
                "INSERT INTO summary_authors (session_id, author_id) VALUES (?, ?) "
                "ON CONFLICT DO NOTHING",
                [(found[0], a) for a in sorted(set(authors))],
            )
            await db.execute(
                "INSERT INTO summaries (session_id, body, first_turn, last_turn, updated_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (session_id) DO UPDATE SET "
                "body = excluded.body, first_turn = excluded.first_turn, "
                "last_turn = excluded.last_turn, updated_at = excluded.updated_at",
                (found[0], body, first_turn, last_turn, now),
            )
            return True

    async def sessions_to_extract(
        self, quiet_before: float, limit: int = 20, bots: Sequence[str] | None = None
    ) -> list[tuple[SessionKey, int]]:
        """Closed or quiet sessions with unlearned user messages."""
        where, args = self._bots_filter(bots)
        async with self._read() as db:
            rows = await self._rows(
                db,
                "SELECT c.bot, c.platform, c.chat_id, c.thread_id, s.session_no, "
                "s.extracted_turn FROM sessions s JOIN conversations c "
                "ON c.id = s.conversation_id WHERE s.extracted_turn < s.last_user_turn "
                f"AND (s.status = 'closed' OR s.last_activity_at <= ?){where} "
                "ORDER BY s.last_activity_at LIMIT ?",
                (quiet_before, *args, limit),
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
                    "UPDATE sessions SET extracted_turn = MAX(extracted_turn, ?) WHERE id = ?",
                    (turn, found[0]),
                )

    async def messages(self, session: SessionKey) -> list[StoredMessage]:
        """Every message of a session."""
        async with self._read() as db:
            found = await self._session_row(db, session)
            rows = (
                []
                if found is None
                else await self._rows(
                    db,
                    cols.MESSAGE_SELECT + "WHERE m.session_id = ? ORDER BY m.turn",
                    (found[0],),
                )
            )
        return [cols.message(session.conversation, r) for r in rows]
