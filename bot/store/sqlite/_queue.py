"""SQLite: timers, leases, the final check, the outbox, limits and usage
(docs/architecture.md#queue)."""

from __future__ import annotations

from collections.abc import Sequence

import aiosqlite

from bot.core.errors import StoreError
from bot.core.events import (
    ConversationKey,
    DueTimer,
    FinishResult,
    Lease,
    OutboxItem,
    QueuePolicy,
    Reservation,
    SessionKey,
    Turn,
    UsageStats,
    UserKey,
)
from bot.core.llm import Usage
from bot.store import cols
from bot.store.sqlite._core import (
    SQLiteCore,
)


class QueuePart(SQLiteCore):
    """Timers, leases, the final check, the outbox, limits and usage
    (docs/architecture.md#queue)."""

    # -- limits and usage -----------------------------------------------------------------------

    async def reserve_turn(
        self,
        user: UserKey,
        bot: str,
        now: float,
        *,
        per_hour: int = 0,
        per_day: int = 0,
    ) -> Reservation:
        """Count and record in one write transaction: two processes cannot both pass."""
        async with self._tx() as db:
            for limit, window in ((per_hour, 3600.0), (per_day, 86400.0)):
                if not limit:
                    continue
                rows = await self._rows(
                    db,
                    "SELECT at FROM turn_usage WHERE platform = ? AND user_id = ? AND at > ? "
                    "ORDER BY at DESC LIMIT ?",
                    (user.platform, user.user_id, now - window, limit),
                )
                if len(rows) >= limit:
                    # The oldest of the last `limit` turns leaves the window first.
                    return Reservation(None, until=float(rows[-1][0]) + window)
            cur = await db.execute(
                "INSERT INTO turn_usage (bot, platform, user_id, at) VALUES (?, ?, ?, ?)",
                (bot, user.platform, user.user_id, now),
            )
            return Reservation(int(cur.lastrowid or 0))

    async def release_turn(self, reservation_id: int) -> None:
        """Drop a reservation."""
        async with self._tx() as db:
            await db.execute("DELETE FROM turn_usage WHERE id = ?", (reservation_id,))

    async def record_usage(
        self,
        conversation: ConversationKey,
        purpose: str,
        model: str | None,
        charges: Sequence[tuple[str | None, Usage]],
        now: float,
    ) -> None:
        """One row per share of the call."""
        async with self._tx() as db:
            await db.executemany(
                "INSERT INTO model_usage (at, bot, platform, user_id, purpose, model, "
                "input_tokens, output_tokens, cache_write_tokens, cache_read_tokens) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        now,
                        conversation.bot,
                        conversation.platform,
                        user,
                        purpose,
                        model,
                        *cols.usage_values(u),
                    )
                    for user, u in charges
                ],
            )

    async def input_tokens_since(self, user: UserKey, since: float) -> int:
        """Input tokens (cached or not) charged to the person since ``since``."""
        async with self._read() as db:
            value = await self._scalar(
                db,
                "SELECT COALESCE(SUM(input_tokens + cache_write_tokens + cache_read_tokens), 0) "
                "FROM model_usage WHERE platform = ? AND user_id = ? AND at >= ?",
                (user.platform, user.user_id, since),
            )
        return int(value)

    async def usage_since(self, since: float, bot: str | None = None) -> UsageStats:
        """Turns from the recorded replies; tokens from every model call (memory tasks too)."""
        where = " AND bot = ?" if bot is not None else ""
        args: tuple[object, ...] = (since, bot) if bot is not None else (since,)
        sums = (
            "COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0), "
            "COALESCE(SUM(cache_write_tokens), 0), COALESCE(SUM(cache_read_tokens), 0)"
        )
        async with self._read() as db:
            turns = await self._row(
                db,
                "SELECT COUNT(*), COUNT(DISTINCT m.conversation_id) FROM messages m "
                "JOIN conversations c ON c.id = m.conversation_id WHERE m.role = 'assistant' "
                "AND m.created_at >= ?" + (" AND c.bot = ?" if bot is not None else ""),
                args,
            )
            total = await self._row(
                db, f"SELECT {sums} FROM model_usage WHERE at >= ?{where}", args
            )
            models = await self._rows(
                db,
                f"SELECT COALESCE(model, ''), {sums} FROM model_usage WHERE at >= ?{where} "
                "GROUP BY model",
                args,
            )
            purposes = await self._rows(
                db,
                f"SELECT purpose, {sums} FROM model_usage WHERE at >= ?{where} GROUP BY purpose",
                args,
            )
        return cols.model_usage_stats(turns, total, models, purposes)

    async def skip_turn(
        self, turn: Turn, lease: Lease, now: float, queue: QueuePolicy, reason: str = "limited"
    ) -> bool:
        """Handle the turn without a reply, under the same fencing as finish_turn."""
        async with self._tx() as db:
            token = await self._scalar(db, "SELECT token FROM leases WHERE name = ?", (lease.name,))
            conv_id = await self._conv_id(db, turn.session.conversation)
            if token != lease.token or conv_id is None:
                return False
            ids = [m.id for m in turn.messages]
            await db.execute(
                "UPDATE messages SET pending = 0, closed_reason = ? "
                f"WHERE id IN ({','.join('?' * len(ids))})",
                (reason[:500], *ids),
            )
            await self._settle_timer(db, conv_id, turn.version, now, queue)
            return True

    async def pending_turn(
        self, conversation: ConversationKey, limit: int | None = None
    ) -> Turn | None:
        """The oldest pending messages of the oldest session with some, plus v0, read together."""
        # One transaction so v0 and the message set are consistent; a cancellation while its
        # BEGIN runs ends it too (see _locked_tx).
        async with self._snapshot() as db:
            conv_id = await self._conv_id(db, conversation)
            if conv_id is None:
                return None
            version = int(
                await self._scalar(db, "SELECT version FROM conversations WHERE id = ?", (conv_id,))
            )
            first_session = await self._scalar(
                db,
                "SELECT MIN(session_id) FROM messages WHERE conversation_id = ? AND pending = 1",
                (conv_id,),
            )
            if first_session is None:
                return None
            rows = await self._rows(
                db,
                cols.MESSAGE_SELECT + "WHERE m.session_id = ? AND m.pending = 1 "
                "AND m.version <= ? ORDER BY m.turn LIMIT ?",
                (first_session, version, -1 if limit is None else limit),
            )
            first_pending = await self._scalar(
                db, "SELECT first_pending_at FROM timers WHERE conversation_id = ?", (conv_id,)
            )
        messages = tuple(cols.message(conversation, r) for r in rows)
        if not messages:
            return None
        return Turn(
            session=messages[0].session,
            version=version,
            messages=messages,
            first_pending_at=messages[0].created_at
            if first_pending is None
            else float(first_pending),
        )

    async def due_timers(
        self, now: float, limit: int = 100, bots: Sequence[str] | None = None
    ) -> list[DueTimer]:
        """Due timers, earliest first."""
        where, args = self._bots_filter(bots)
        async with self._read() as db:
            rows = await self._rows(
                db,
                cols.TIMER_SELECT + f"WHERE t.due_at <= ?{where} ORDER BY t.due_at LIMIT ?",
                (now, *args, limit),
            )
        return [cols.timer(r) for r in rows]

    async def next_due_at(self, bots: Sequence[str] | None = None) -> float | None:
        """Earliest due time."""
        where, args = self._bots_filter(bots)
        async with self._read() as db:
            value = await self._scalar(
                db,
                "SELECT MIN(t.due_at) FROM timers t JOIN conversations c "
                f"ON c.id = t.conversation_id WHERE 1 = 1{where}",
                args,
            )
        return None if value is None else float(value)

    async def timer(self, conversation: ConversationKey) -> DueTimer | None:
        """The conversation's timer."""
        async with self._read() as db:
            conv_id = await self._conv_id(db, conversation)
            row = (
                None
                if conv_id is None
                else await self._row(
                    db, cols.TIMER_SELECT + "WHERE t.conversation_id = ?", (conv_id,)
                )
            )
        return None if row is None else cols.timer(row)

    async def rearm_timer(self, conversation: ConversationKey, due_at: float) -> None:
        """Move (or arm) the conversation's timer."""
        async with self._tx() as db:
            conv_id = await self._conv_id(db, conversation)
            if conv_id is None:
                return
            version = await self._scalar(
                db, "SELECT version FROM conversations WHERE id = ?", (conv_id,)
            )
            await db.execute(
                "INSERT INTO timers (conversation_id, due_at, first_pending_at, armed_version) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (conversation_id) DO UPDATE SET "
                "due_at = excluded.due_at",
                (conv_id, due_at, due_at, version),
            )

    async def clear_timer(
        self, conversation: ConversationKey, armed_version: int, *, only_if_idle: bool = True
    ) -> bool:
        """Remove the timer unless newer input re-armed it (or, by default, input is pending)."""
        # `pending = 1` matches the partial index messages_pending (a bare `pending` would not).
        idle = " AND NOT EXISTS (SELECT 1 FROM messages WHERE conversation_id = ? AND pending = 1)"
        async with self._tx() as db:
            conv_id = await self._conv_id(db, conversation)
            if conv_id is None:
                return False
            args: tuple[int, ...] = (conv_id, armed_version)
            cur = await db.execute(
                "DELETE FROM timers WHERE conversation_id = ? AND armed_version <= ?"
                + (idle if only_if_idle else ""),
                (*args, conv_id) if only_if_idle else args,
            )
            return cur.rowcount > 0

    # -- leases -------------------------------------------------------------------------------

    async def acquire_lease(self, name: str, holder: str, ttl: float, now: float) -> Lease | None:
        """CAS: succeeds only if the lease is free or expired; the token always grows."""
        async with self._tx() as db:
            row = await self._row(
                db,
                "INSERT INTO leases (name, holder, token, expires_at) VALUES (?, ?, 1, ?) "
                "ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, "
                "token = leases.token + 1, expires_at = excluded.expires_at "
                "WHERE leases.expires_at <= ? RETURNING token, expires_at",
                (name, holder, now + ttl, now),
            )
        if row is None:
            return None
        return Lease(name=name, holder=holder, token=int(row[0]), expires_at=float(row[1]))

    async def renew_lease(self, lease: Lease, ttl: float, now: float) -> Lease | None:
        """Extend a lease still held under the same token."""
        async with self._tx() as db:
            row = await self._row(
                db,
                "UPDATE leases SET expires_at = ? WHERE name = ? AND token = ? AND holder = ? "
                "RETURNING expires_at",
                (now + ttl, lease.name, lease.token, lease.holder),
            )
        if row is None:
            return None
        return Lease(lease.name, lease.holder, lease.token, float(row[0]))

    async def release_lease(self, lease: Lease) -> None:
        """Free the lease if still ours."""
        async with self._tx() as db:
            await db.execute(
                "UPDATE leases SET expires_at = 0 WHERE name = ? AND token = ? AND holder = ?",
                (lease.name, lease.token, lease.holder),
            )

    async def lease_expires_at(self, name: str) -> float | None:
        """Read the lease's expiry (a rate limit's "until when")."""
        async with self._read() as db:
            value = await self._scalar(db, "SELECT expires_at FROM leases WHERE name = ?", (name,))
        return None if value is None else float(value)

    # -- final check --------------------------------------------------------------------------

    async def finish_turn(
        self,
        turn: Turn,
        lease: Lease,
        reply: str,
        now: float,
        queue: QueuePolicy,
        usage: Usage | None = None,
        model: str | None = None,
    ) -> FinishResult:
        """Fencing check, version check, then record reply + outbox atomically."""
        if not reply.strip():
            # An empty assistant message would make every later request of the session fail.
            raise StoreError("refusing to record an empty or whitespace-only reply")
        key = turn.session.conversation
        async with self._tx() as db:
            token = await self._scalar(db, "SELECT token FROM leases WHERE name = ?", (lease.name,))
            conv_id = await self._conv_id(db, key)
            found = await self._session_row(db, turn.session)
            if token != lease.token or conv_id is None or found is None:
                return FinishResult("fenced")
            sid = found[0]
            version = int(
                await self._scalar(db, "SELECT version FROM conversations WHERE id = ?", (conv_id,))
            )
            newer = await self._scalar(
                db,
                "SELECT COUNT(*) FROM messages WHERE session_id = ? AND pending = 1 "
                "AND version > ?",
                (sid, turn.version),
            )
            cap_passed = now >= turn.first_pending_at + queue.max_wait
            if newer and not cap_passed:
                # Newer input joined this session while we generated: the timer it armed
                # stays; the next attempt will cover everything.
                return FinishResult("discarded", current_version=version)
            reply_turn = int(
                await self._scalar(
                    db,
                    "UPDATE sessions SET next_turn = next_turn + 1, last_activity_at = ? "
                    "WHERE id = ? RETURNING next_turn - 1",
                    (now, sid),
                )
            )
            u = usage or Usage()
            cur = await db.execute(
                "INSERT INTO messages (conversation_id, session_id, turn, role, author_id, "
                "display_name, text, version, pending, created_at, model, input_tokens, "
                "output_tokens, cache_write_tokens, cache_read_tokens) "
                "VALUES (?, ?, ?, 'assistant', 'assistant', '', ?, ?, 0, ?, ?, ?, ?, ?, ?)",
                (
                    conv_id,
                    sid,
                    reply_turn,
                    reply,
                    turn.version,
                    now,
                    model,
                    u.input_tokens,
                    u.output_tokens,
                    u.cache_creation_input_tokens,
                    u.cache_read_input_tokens,
                ),
            )
            reply_id = int(cur.lastrowid or 0)
            ids = [m.id for m in turn.messages]
            marks = ",".join("?" * len(ids))
            await db.execute(
                f"UPDATE messages SET pending = 0, answered_by = ? WHERE id IN ({marks})",
                (reply_id, *ids),
            )
            reply_to = turn.messages[-1].platform_message_id if turn.messages else None
            cur = await db.execute(
                "INSERT INTO outbox (conversation_id, session_id, reply_message_id, text, "
                "reply_to, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                (conv_id, sid, reply_id, reply, reply_to, now),
            )
            outbox_id = int(cur.lastrowid or 0)
            await self._settle_timer(db, conv_id, turn.version, now, queue)
        item = OutboxItem(
            id=outbox_id,
            conversation=key,
            session=turn.session,
            text=reply,
            reply_message_id=reply_id,
            created_at=now,
            reply_to_platform_message_id=reply_to,
        )
        return FinishResult("recorded", outbox=item, current_version=version)

    async def _settle_timer(
        self, db: aiosqlite.Connection, conv_id: int, v0: int, now: float, queue: QueuePolicy
    ) -> None:
        """After a recorded turn, the timer reflects what is still pending.

        Nothing pending: drop the timer unless input newer than v0 armed it. Something
        pending (newer input, or messages of a newer session): the timer restarts from those
        messages' own times, so a new burst gets its own debounce and its own hard cap.
        """
        remaining = await self._row(
            db,
            "SELECT MIN(created_at), MAX(created_at), MAX(version) FROM messages "
            "WHERE conversation_id = ? AND pending = 1",
            (conv_id,),
        )
        if remaining is None or remaining[0] is None:
            await db.execute(
                "DELETE FROM timers WHERE conversation_id = ? AND armed_version <= ?",
                (conv_id, v0),
            )
            return
        first, last = float(remaining[0]), float(remaining[1])
        await db.execute(
            "INSERT INTO timers (conversation_id, due_at, first_pending_at, armed_version) "
            "VALUES (?, ?, ?, ?) ON CONFLICT (conversation_id) DO UPDATE SET "
            "due_at = excluded.due_at, first_pending_at = excluded.first_pending_at, "
            "armed_version = MAX(timers.armed_version, excluded.armed_version)",
            (conv_id, queue.due_at(last, first), first, int(remaining[2])),
        )

    # -- outbox -------------------------------------------------------------------------------

    async def record_outbox(
        self, conversation: ConversationKey, text: str, now: float, reply_to: str | None = None
    ) -> OutboxItem:
        """A non-transcript row (reply_message_id 0) in the open session."""
        if not text.strip():
            raise StoreError("refusing to record an empty or whitespace-only message")
        async with self._tx() as db:
            conv_id = await self._conv_id(db, conversation, now)
            assert conv_id is not None
            sid, number = await self._ensure_open(db, conv_id, now, None)
            cur = await db.execute(
                "INSERT INTO outbox (conversation_id, session_id, reply_message_id, text, "
                "reply_to, created_at) VALUES (?, ?, 0, ?, ?, ?)",
                (conv_id, sid, text, reply_to, now),
            )
            outbox_id = int(cur.lastrowid or 0)
        return OutboxItem(
            id=outbox_id,
            conversation=conversation,
            session=SessionKey(conversation, number),
            text=text,
            reply_message_id=0,
            created_at=now,
            reply_to_platform_message_id=reply_to,
        )

    async def answered(self, conversation: ConversationKey, platform_message_id: str) -> bool:
        """A lookup through the outbox's session index."""
        async with self._read() as db:
            conv_id = await self._conv_id(db, conversation)
            found = conv_id is not None and await self._scalar(
                db,
                "SELECT 1 FROM outbox WHERE session_id IN "
                "(SELECT id FROM sessions WHERE conversation_id = ?) "
                "AND reply_message_id = 0 AND reply_to = ? LIMIT 1",
                (conv_id, platform_message_id),
            )
        return bool(found)

    async def begin_send(self, item: OutboxItem, now: float) -> bool:
        """CAS on the attempt count."""
        async with self._tx() as db:
            cur = await db.execute(
                "UPDATE outbox SET attempts = attempts + 1, attempted_at = ? "
                "WHERE id = ? AND status = 'pending' AND attempts = ?",
                (now, item.id, item.attempts),
            )
            return cur.rowcount == 1

    async def unsent_outbox(self, older_than: float, limit: int = 50) -> list[OutboxItem]:
        """Never-attempted rows."""
        async with self._read() as db:
            rows = await self._rows(
                db,
                cols.OUTBOX_SELECT + "WHERE o.status = 'pending' AND o.attempts = 0 "
                "AND o.created_at <= ? ORDER BY o.id LIMIT ?",
                (older_than, limit),
            )
        return [cols.outbox(r) for r in rows]

    async def uncertain_outbox(self, older_than: float, limit: int = 50) -> list[OutboxItem]:
        """Attempted but unconfirmed rows."""
        async with self._read() as db:
            rows = await self._rows(
                db,
                cols.OUTBOX_SELECT + "WHERE o.status = 'pending' AND o.attempts > 0 "
                "AND o.attempted_at <= ? ORDER BY o.id LIMIT ?",
                (older_than, limit),
            )
        return [cols.outbox(r) for r in rows]

    async def mark_sent(self, outbox_id: int, now: float) -> None:
        """Confirm delivery."""
        async with self._tx() as db:
            await db.execute(
                "UPDATE outbox SET status = 'sent', finished_at = ?, "
                f"text = {cols.FINISHED_TEXT} WHERE id = ?",
                (now, outbox_id),
            )

    async def mark_failed(self, outbox_id: int, now: float, reason: str) -> None:
        """Give up on a row."""
        async with self._tx() as db:
            await db.execute(
                "UPDATE outbox SET status = 'failed', finished_at = ?, failure = ?, "
                f"text = {cols.FINISHED_TEXT} WHERE id = ?",
                (now, reason[:500], outbox_id),
            )
