"""Check-ins and reminders (docs/initiatives.md): their rows, and the final check of a message
the persona writes first.

Like the queue's timers these rows live apart from conversation data. A check-in or reminder
is written under the conversation's turn lease; its final check (``finish_proactive``) takes
the same conversation lock as ingest and ``finish_turn``, so a person's message that arrives
while it is generated always wins (the version moved), and of two processes only the lease
holder records it, once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bot.core.agenda import (
    CAPPED,
    AgendaKind,
    CheckinCap,
    DueItem,
    InitiativeState,
    Reminder,
    ReminderStatus,
)
from bot.core.errors import StoreError
from bot.core.events import (
    ConversationKey,
    FinishResult,
    Lease,
    OutboxItem,
    SessionKey,
    Turn,
    UserKey,
)
from bot.core.llm import Usage
from bot.store import cols
from bot.store.sql.conn import Conn
from bot.store.sql.core import CONV_WHERE_C, SQLCore, conv_args

_REMINDER_COLS = (
    "r.id, c.bot, c.platform, c.chat_id, c.thread_id, r.user_id, r.about, r.due_at, "
    "r.timezone, r.status, r.created_at, r.note"
)
_REMINDER_FROM = " FROM reminders r JOIN conversations c ON c.id = r.conversation_id "


def _reminder(row: Any) -> Reminder:
    return Reminder(
        id=int(row[0]),
        conversation=cols.conversation_key(row[1], row[2], row[3], row[4]),
        user_id=str(row[5]),
        about=str(row[6]),
        due_at=float(row[7]),
        timezone=str(row[8]),
        status=row[9],
        created_at=float(row[10]),
        note=row[11],
    )


def _opt(value: Any) -> float | None:
    return None if value is None else float(value)


async def _arm(
    db: Conn, conv_id: int, due_at: float | None, now: float, decision: str | None
) -> None:
    await db.execute(
        "INSERT INTO initiatives (conversation_id, due_at, decided_at, decision, "
        "updated_at) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (conversation_id) DO "
        "UPDATE SET due_at = excluded.due_at, updated_at = excluded.updated_at, "
        "decided_at = COALESCE(excluded.decided_at, initiatives.decided_at), "
        "decision = COALESCE(excluded.decision, initiatives.decision)",
        conv_id,
        due_at,
        None if decision is None else now,
        None if decision is None else decision[:500],
        now,
    )


async def _recent_checkins(db: Conn, bot: str, since: float, limit: int) -> list[float]:
    # Through the partial index messages_checkins (migration 15): only check-ins are read.
    rows = await db.fetch(
        "SELECT m.created_at FROM messages m JOIN conversations c ON c.id = m.conversation_id "
        "WHERE m.origin = 'initiative' AND m.created_at > $1 AND c.bot = $2 "
        "ORDER BY m.created_at DESC LIMIT $3",
        since,
        bot,
        limit,
    )
    return [float(r[0]) for r in rows]


class AgendaPart(SQLCore):
    """Check-ins, reminders and a person's own settings."""

    # -- check-ins ------------------------------------------------------------------------------

    async def initiative_state(self, conversation: ConversationKey) -> InitiativeState | None:
        """One snapshot of the conversation, its check-in row and its last person message."""
        d = self.dialect
        async with self._snapshot() as db:
            row = await db.fetchrow(
                "SELECT c.id, c.version, c.status, i.enabled, i.due_at, i.sent_at, "
                "(SELECT session_no FROM sessions WHERE conversation_id = c.id "
                "AND status = 'open'), (SELECT 1 FROM messages WHERE conversation_id = c.id "
                f"AND pending = {d.true} LIMIT 1), (SELECT persona FROM sessions WHERE "
                "conversation_id = c.id ORDER BY session_no DESC LIMIT 1) "
                "FROM conversations c LEFT JOIN initiatives i ON i.conversation_id = c.id "
                f"WHERE {CONV_WHERE_C}",
                *conv_args(conversation),
            )
            if row is None:
                return None
            conv_id = int(row[0])
            # Rare (once per due check-in), so through the sessions' indexes rather than an
            # index on every message that ingest would have to maintain.
            last = await db.fetchrow(
                "SELECT m.id, m.created_at, m.author_id, m.is_private FROM sessions s "
                "JOIN messages m ON m.session_id = s.id WHERE s.conversation_id = $1 "
                "AND m.role = 'user' ORDER BY s.session_no DESC, m.turn DESC LIMIT 1",
                conv_id,
            )
            unanswered = await db.fetchval(
                "SELECT COUNT(*) FROM sessions s JOIN messages m ON m.session_id = s.id "
                "WHERE s.conversation_id = $1 AND m.origin = 'initiative' AND m.id > $2",
                conv_id,
                0 if last is None else int(last[0]),
            )
        return InitiativeState(
            version=int(row[1]),
            active=row[2] != "inactive",
            enabled=row[3] is None or bool(row[3]),
            due_at=_opt(row[4]),
            sent_at=_opt(row[5]),
            last_user_at=None if last is None else float(last[1]),
            person=None if last is None else str(last[2]),
            private=last is not None and bool(last[3]),
            unanswered=int(unanswered or 0),
            pending=row[7] is not None,
            session_no=None if row[6] is None else int(row[6]),
            persona=None if row[8] is None else str(row[8]),
        )

    async def arm_initiative(
        self,
        conversation: ConversationKey,
        due_at: float | None,
        now: float,
        decision: str | None = None,
    ) -> None:
        async with self._tx() as db:
            conv_id = await self._conv_id(db, conversation, lock=True)
            if conv_id is None:
                return
            await _arm(db, conv_id, due_at, now, decision)

    async def set_checkins(self, conversation: ConversationKey, enabled: bool, now: float) -> None:
        d = self.dialect
        async with self._tx() as db:
            conv_id = await self._conv_id(db, conversation, now)
            await db.execute(
                "INSERT INTO initiatives (conversation_id, enabled, updated_at) "
                f"VALUES ($1, {d.true if enabled else d.false}, $2) "
                "ON CONFLICT (conversation_id) DO UPDATE SET enabled = excluded.enabled, "
                "updated_at = excluded.updated_at" + ("" if enabled else ", due_at = NULL"),
                conv_id,
                now,
            )

    async def due_agenda(
        self, now: float, limit: int = 100, bots: Sequence[str] | None = None
    ) -> list[DueItem]:
        """Both kinds in one query, earliest first."""
        d = self.dialect
        bots_filter = "" if bots is None else " AND c.bot" + d.any_of("$3", "TEXT")
        args: list[Any] = [now, limit] + ([] if bots is None else [d.list_arg(bots)])
        async with self._read() as db:
            rows = await db.fetch(
                "SELECT 'initiative', c.bot, c.platform, c.chat_id, c.thread_id, i.due_at, "
                "CAST(NULL AS BIGINT) FROM initiatives i JOIN conversations c "
                f"ON c.id = i.conversation_id WHERE i.due_at <= $1 AND i.enabled = {d.true}"
                f"{bots_filter} UNION ALL "
                "SELECT 'reminder', c.bot, c.platform, c.chat_id, c.thread_id, r.due_at, r.id "
                "FROM reminders r JOIN conversations c ON c.id = r.conversation_id "
                f"WHERE r.status = 'pending' AND r.due_at <= $1{bots_filter} "
                "ORDER BY 6 LIMIT $2",
                *args,
            )
        return [
            DueItem(
                kind=r[0],
                conversation=cols.conversation_key(r[1], r[2], r[3], r[4]),
                due_at=float(r[5]),
                reminder=None if r[6] is None else int(r[6]),
            )
            for r in rows
        ]

    async def recent_checkins(self, bot: str, since: float, limit: int) -> list[float]:
        """Newest first, at most ``limit``."""
        async with self._read() as db:
            return await _recent_checkins(db, bot, since, limit)

    async def finish_proactive(
        self,
        conversation: ConversationKey,
        lease: Lease,
        *,
        version: int,
        session_no: int,
        text: str,
        now: float,
        origin: AgendaKind,
        addressee: str,
        usage: Usage | None = None,
        model: str | None = None,
        reminder: int | None = None,
        next_due: float | None = None,
        cap: CheckinCap | None = None,
    ) -> FinishResult:
        """Lock, fence, compare, then record; the same locks as ``finish_turn``."""
        d = self.dialect
        if not text.strip():
            raise StoreError("refusing to record an empty or whitespace-only message")
        async with self._tx() as db:
            conv_id = await self._conv_id(db, conversation, lock=True)
            token = await self._lease_token(db, lease.name)
            if conv_id is None or token != lease.token:
                return FinishResult("fenced")
            row = await db.fetchrow(
                "SELECT c.version, c.status, (SELECT id FROM sessions WHERE conversation_id = "
                "c.id AND status = 'open' AND session_no = $2), (SELECT 1 FROM messages WHERE "
                f"conversation_id = c.id AND pending = {d.true} LIMIT 1), "
                "(SELECT enabled FROM initiatives WHERE conversation_id = c.id), "
                "(SELECT status FROM reminders WHERE id = $3 AND conversation_id = c.id) "
                "FROM conversations c WHERE c.id = $1",
                conv_id,
                session_no,
                reminder if reminder is not None else 0,
            )
            assert row is not None
            current = int(row[0])
            still = (
                current == version
                and row[1] != "inactive"
                and row[2] is not None
                and row[3] is None
                and (
                    (row[4] is None or bool(row[4]))
                    if origin == "initiative"
                    else row[5] == "pending"
                )
            )
            if not still:
                return FinishResult("discarded", current_version=current)
            if origin == "initiative" and cap is not None and cap.limit > 0:
                # Counted and recorded under one lock per bot: two processes writing check-ins
                # of the bot into different chats cannot both take the last one of the day.
                await self._serialize(db, f"checkins:{conversation.bot}")
                recent = await _recent_checkins(db, conversation.bot, now - cap.window, cap.limit)
                frees = cap.frees_at(recent)
                if frees is not None:
                    await _arm(db, conv_id, frees, now, CAPPED)  # postponed, never lost
                    return FinishResult("discarded", current_version=current)
            sid = int(row[2])
            turn = Turn(SessionKey(conversation, session_no), version, (), now)
            reply_id, outbox_id = await self._record_reply(
                db, conv_id, sid, turn, text, now, usage or Usage(), model, None
            )
            await db.execute(
                "UPDATE messages SET origin = $1, addressee = $2 WHERE id = $3",
                origin,
                addressee,
                reply_id,
            )
            if origin == "initiative":
                await db.execute(
                    "INSERT INTO initiatives (conversation_id, due_at, sent_at, decided_at, "
                    "decision, updated_at) VALUES ($1, $2, $3, $3, 'sent', $3) "
                    "ON CONFLICT (conversation_id) DO UPDATE SET due_at = excluded.due_at, "
                    "sent_at = excluded.sent_at, decided_at = excluded.decided_at, "
                    "decision = excluded.decision, updated_at = excluded.updated_at",
                    conv_id,
                    next_due,
                    now,
                )
            else:
                await db.execute(
                    "UPDATE reminders SET status = 'sent', finished_at = $1, message_id = $2 "
                    "WHERE id = $3",
                    now,
                    reply_id,
                    reminder,
                )
        item = OutboxItem(
            id=outbox_id,
            conversation=conversation,
            session=turn.session,
            text=text,
            reply_message_id=reply_id,
            created_at=now,
        )
        return FinishResult("recorded", outbox=item, current_version=current)

    # -- reminders ------------------------------------------------------------------------------

    async def reminder(self, reminder_id: int) -> Reminder | None:
        async with self._read() as db:
            row = await db.fetchrow(
                f"SELECT {_REMINDER_COLS}{_REMINDER_FROM}WHERE r.id = $1", reminder_id
            )
        return None if row is None else _reminder(row)

    async def reminders(
        self, user: UserKey, *, bot: str | None = None, pending_only: bool = True
    ) -> list[Reminder]:
        where = "WHERE c.platform = $1 AND r.user_id = $2"
        args: list[Any] = [user.platform, user.user_id]
        if bot is not None:
            where += " AND c.bot = $3"
            args.append(bot)
        if pending_only:
            where += " AND r.status = 'pending'"
        async with self._read() as db:
            rows = await db.fetch(
                f"SELECT {_REMINDER_COLS}{_REMINDER_FROM}{where} ORDER BY r.due_at, r.id", *args
            )
        return [_reminder(r) for r in rows]

    async def cancel_reminder(
        self, user: UserKey, reminder_id: int, now: float, *, bot: str | None = None
    ) -> bool:
        async with self._tx() as db:
            changed = await db.execute(
                "UPDATE reminders SET status = 'cancelled', finished_at = $1 WHERE id = $2 "
                "AND user_id = $3 AND status = 'pending' AND conversation_id IN "
                "(SELECT id FROM conversations WHERE platform = $4 "
                "AND ($5 = '' OR bot = $5))",
                now,
                reminder_id,
                user.user_id,
                user.platform,
                bot or "",
            )
        return changed > 0

    async def fail_reminder(
        self, reminder_id: int, note: str, now: float, *, was: ReminderStatus = "pending"
    ) -> bool:
        """Compare-and-set on the status: a reminder cancelled or sent meanwhile stays so."""
        async with self._tx() as db:
            changed = await db.execute(
                "UPDATE reminders SET status = 'failed', finished_at = $1, note = $2 "
                "WHERE id = $3 AND status = $4",
                now,
                note[:500],
                reminder_id,
                was,
            )
        return changed > 0

    # -- a person's settings --------------------------------------------------------------------

    async def set_timezone(self, user: UserKey, timezone: str | None, now: float) -> None:
        async with self._tx() as db:
            await db.execute(
                "INSERT INTO person_settings (platform, user_id, timezone, updated_at) "
                "VALUES ($1, $2, $3, $4) ON CONFLICT (platform, user_id) DO UPDATE SET "
                "timezone = excluded.timezone, updated_at = excluded.updated_at",
                user.platform,
                user.user_id,
                timezone,
                now,
            )

    async def timezone_of(self, user: UserKey) -> str | None:
        async with self._read() as db:
            value = await db.fetchval(
                "SELECT timezone FROM person_settings WHERE platform = $1 AND user_id = $2",
                user.platform,
                user.user_id,
            )
        return None if value is None else str(value)

    async def erase_agenda(self, user: UserKey) -> int:
        """Reminders (any status: their text is what the person said) and settings."""
        async with self._tx() as db:
            removed = await db.execute(
                "DELETE FROM reminders WHERE user_id = $1 AND conversation_id IN "
                "(SELECT id FROM conversations WHERE platform = $2)",
                user.user_id,
                user.platform,
            )
            await db.execute(
                "DELETE FROM person_settings WHERE platform = $1 AND user_id = $2",
                user.platform,
                user.user_id,
            )
        return removed
