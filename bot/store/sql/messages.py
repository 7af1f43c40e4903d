"""Edits and deletions, history and summaries (ingest itself is each backend's: one
statement on PostgreSQL, a short sequence on SQLite: postgres/_writes.py, sqlite/_ingest.py)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Final

from bot.core.errors import StoreError
from bot.core.events import (
    ConversationKey,
    EditOutcome,
    QueuePolicy,
    SessionKey,
    SessionPolicy,
    StoredMessage,
    StoredSummary,
)
from bot.core.queue_rules import arm
from bot.core.sessions import expiry_reason
from bot.store import cols
from bot.store.sql.conn import Conn
from bot.store.sql.core import CONV_WHERE, SESSION_ID, SQLCore, conv_args, session_args
from bot.store.tombstones import PLATFORM_DELETION

#: Above every turn number (turns are INTEGER on both stores).
_NO_TURN: Final = 2**31 - 1


class MessagesPart(SQLCore):
    """Edits and deletions, history, summaries."""

    async def _arm(
        self, db: Conn, conv_id: int, now: float, queue: QueuePolicy, version: int
    ) -> float:
        """Arm or extend the timer for new input (rules.arm; the caller holds the
        conversation lock)."""
        first = await db.fetchval(
            "SELECT first_pending_at FROM timers WHERE conversation_id = $1", conv_id
        )
        timer = arm(queue, now, None if first is None else float(first), version)
        await db.execute(
            cols.ARM_TIMER_SQL, conv_id, timer.due_at, timer.first_pending_at, timer.armed_version
        )
        return timer.due_at

    async def edit_message(
        self,
        conversation: ConversationKey,
        platform_message_id: str,
        text: str,
        now: float,
        queue: QueuePolicy,
        *,
        author_id: str | None = None,
        triggers_reply: bool = False,
        sessions: SessionPolicy | None = None,
    ) -> EditOutcome:
        d = self.dialect
        async with self._tx() as db:
            conv_id = await self._conv_id(db, conversation, lock=True)
            row = (
                None
                if conv_id is None
                else await db.fetchrow(
                    "SELECT m.id, m.pending, m.answered_by, m.addressed, m.closed_reason, "
                    "s.status, s.opened_at, s.last_activity_at, m.text FROM messages m "
                    "JOIN sessions s ON s.id = m.session_id WHERE m.conversation_id = $1 "
                    "AND m.platform_message_id = $2 AND m.role = 'user' "
                    "AND (CAST($3 AS TEXT) IS NULL OR m.author_id = $3)",
                    conv_id,
                    platform_message_id,
                    author_id,
                )
            )
            if row is None or conv_id is None:
                return "unknown"
            if row[2] is not None:
                return "too_late"  # answered: never edited, never triggers again
            # The same text (Telegram sends an edit that only changed formatting): nothing to
            # read again, so nothing is re-armed and no generation goes stale for it (the
            # cut-off and the final check agree: docs/architecture.md#queue rule 9).
            wakes = row[8] != text and (
                bool(row[1])
                or (
                    triggers_reply
                    and not row[3]
                    and row[4] is None
                    and row[5] == "open"
                    and (
                        sessions is None
                        or expiry_reason(
                            sessions,
                            opened_at=float(row[6]),
                            last_activity_at=float(row[7]),
                            now=now,
                        )
                        is None
                    )
                )
            )
            if not wakes:
                await db.execute(
                    "UPDATE messages SET text = $1, edited_at = $3 WHERE id = $2", text, row[0], now
                )
                return "updated"
            # A pending message changed: a generation that read the old text is discarded by
            # the final check (its v0 is older), and the timer re-arms like for new input.
            # A context-only message that now addresses the bot joins the pending input as
            # if it had just arrived so (docs/architecture.md#queue rule 1).
            version = int(
                await db.fetchval(
                    "UPDATE conversations SET version = version + 1 WHERE id = $1 "
                    "RETURNING version",
                    conv_id,
                )
            )
            await db.execute(
                f"UPDATE messages SET text = $1, version = $2, pending = {d.true}, "
                f"addressed = {d.true}, edited_at = $4 WHERE id = $3",
                text,
                version,
                row[0],
                now,
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
        async with self._tx() as db:
            row = await db.fetchrow(
                f"SELECT {cols.MSG_COLS}, m.session_id FROM messages m "
                "JOIN sessions s ON s.id = m.session_id WHERE m.platform_message_id = $5 "
                f"AND m.conversation_id = (SELECT id FROM conversations WHERE {CONV_WHERE}) "
                "AND (CAST($6 AS TEXT) IS NULL OR m.author_id = $6)",
                *conv_args(conversation),
                platform_message_id,
                author_id,
            )
            if row is None:
                return None
            # Read before the cascade removes them: the caller gets what was deleted.
            deleted = cols.message(conversation, row, await self._media_for(db, [row]))
            # Of two deletions racing for one message (two deliveries of the platform's
            # event), one deletes it and tombstones its turn; the other finds nothing.
            if not await db.execute("DELETE FROM messages WHERE id = $1", deleted.id):
                return None
            await self._bury(
                db, [(int(row[-1]), deleted.turn)], PLATFORM_DELETION, now or time.time()
            )
        return deleted

    async def set_conversation_status(
        self, conversation: ConversationKey, active: bool, reason: str | None = None
    ) -> None:
        async with self._tx() as db:
            await db.execute(
                f"UPDATE conversations SET status = $5, status_reason = $6 WHERE {CONV_WHERE}",
                *conv_args(conversation),
                "active" if active else "inactive",
                reason,
            )

    async def conversation_active(self, conversation: ConversationKey) -> bool:
        async with self._read() as db:
            status = await db.fetchval(
                f"SELECT status FROM conversations WHERE {CONV_WHERE}", *conv_args(conversation)
            )
        return bool(status != "inactive")

    async def conversation_version(self, conversation: ConversationKey) -> int:
        async with self._read() as db:
            version = await db.fetchval(
                f"SELECT version FROM conversations WHERE {CONV_WHERE}", *conv_args(conversation)
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
        order = "ASC" if oldest_first else "DESC"
        async with self._read() as db:
            rows = await db.fetch(
                cols.MESSAGE_SELECT + f"WHERE m.session_id = {SESSION_ID} "
                f"AND m.pending = {self.dialect.false} AND m.turn > $6"
                f"{cols.NOT_REJECTED} ORDER BY m.turn {order} LIMIT $7",
                *session_args(session),
                after_turn,
                limit,
            )
            media = await self._media_for(db, rows)
        if not oldest_first:
            rows.reverse()
        return [cols.message(session.conversation, r, media) for r in rows]

    async def count_history(self, session: SessionKey, *, after_turn: int = 0) -> int:
        async with self._read() as db:
            count = await db.fetchval(
                f"SELECT COUNT(*) FROM messages m WHERE session_id = {SESSION_ID} "
                f"AND pending = {self.dialect.false} AND turn > $6{cols.NOT_REJECTED}",
                *session_args(session),
                after_turn,
            )
        return int(count)

    async def count_unsummarised(self, session: SessionKey) -> int:
        """History messages after the summary's last turn, in one statement."""
        async with self._read() as db:
            count = await db.fetchval(
                f"SELECT COUNT(*) FROM messages m WHERE session_id = {SESSION_ID} "
                f"AND pending = {self.dialect.false} AND turn > COALESCE((SELECT last_turn "
                f"FROM summaries WHERE session_id = m.session_id), 0){cols.NOT_REJECTED}",
                *session_args(session),
            )
        return int(count)

    async def get_summary(self, session: SessionKey) -> StoredSummary | None:
        async with self._read() as db:
            row = await db.fetchrow(
                "SELECT body, first_turn, last_turn, updated_at FROM summaries "
                f"WHERE session_id = {SESSION_ID}",
                *session_args(session),
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
        d = self.dialect
        async with self._tx() as db:
            found = await self._session_row(db, session)
            if found is None:
                raise StoreError(f"unknown session {session}")
            # The session row lock orders this against erase_user_messages, which takes it
            # before deleting: the check below then sees whether the sources survived.
            if d.for_update:
                await db.execute("SELECT 1 FROM sessions WHERE id = $1" + d.for_update, found[0])
            wanted = sorted(set(sources))
            if wanted:
                present = await db.fetchval(
                    "SELECT COUNT(*) FROM messages WHERE id" + d.any_of("$1"), d.list_arg(wanted)
                )
                if int(present) != len(wanted):
                    return False
            args = (found[0], body, first_turn, last_turn, now)
            saved: Any
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
                    f"SELECT $1, value FROM {d.table_of('$2')} WHERE true ON CONFLICT DO NOTHING",
                    found[0],
                    d.list_arg(sorted(set(authors))),
                )
        return saved is not None

    async def sessions_to_extract(
        self, quiet_before: float, limit: int = 20, bots: Sequence[str] | None = None
    ) -> list[tuple[SessionKey, int]]:
        d = self.dialect
        bots_filter = "" if bots is None else " AND c.bot" + d.any_of("$3", "TEXT")
        args: list[Any] = [quiet_before, limit] + ([] if bots is None else [d.list_arg(bots)])
        async with self._read() as db:
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
                    f"UPDATE sessions SET extracted_turn = {self.dialect.greatest}"
                    "(extracted_turn, $1) WHERE id = $2",
                    turn,
                    found[0],
                )

    async def messages(
        self, session: SessionKey, *, before_turn: int | None = None, limit: int | None = None
    ) -> list[StoredMessage]:
        async with self._read() as db:
            found = await self._session_row(db, session)
            rows = (
                []
                if found is None
                else await db.fetch(
                    cols.MESSAGE_SELECT + "WHERE m.session_id = $1 AND m.turn < $2 "
                    "ORDER BY m.turn DESC LIMIT $3",
                    found[0],
                    _NO_TURN if before_turn is None else min(before_turn, _NO_TURN),
                    self.dialect.no_limit if limit is None else limit,
                )
            )
            rows = rows[::-1]
            media = await self._media_for(db, rows)
        return [cols.message(session.conversation, r, media) for r in rows]
