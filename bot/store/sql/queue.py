"""Timers, leases, the final check, the outbox, limits and usage (docs/architecture.md#queue).

The rules (when a timer is due, what stays armed after a turn, what the final check
decides) are the pure functions of ``bot.core.queue_rules``; this part reads what they need and
writes what they decide, inside one transaction each.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bot.core.agenda import NewReminder
from bot.core.choices import Choices
from bot.core.events import (
    ClaimedTurn,
    Claims,
    ConversationKey,
    DueTimer,
    FinishOutcome,
    FinishResult,
    Lease,
    OutboxItem,
    QueueBacklog,
    QueuePolicy,
    Reservation,
    SceneLine,
    SessionKey,
    Turn,
    UsageStats,
    UserKey,
)
from bot.core.llm import Price, Usage
from bot.core.queue_rules import final_verdict
from bot.core.scenes import SceneState
from bot.store import cols
from bot.store.sql.conn import Conn
from bot.store.sql.core import (
    CONV_WHERE,
    CONV_WHERE_C,
    SESSION_ID,
    ReplyRow,
    SQLCore,
    conv_args,
    refuse_blank,
    session_args,
)

#: Where the columns after MSG_COLS start in a row of ``pending_turn``'s read.
_AFTER_MSG = len(cols.MSG_COLS.split(","))
#: The columns of a model_usage row, in the order record_usage writes them.
_USAGE_COLUMNS = (
    "at",
    "bot",
    "platform",
    "user_id",
    "purpose",
    "model",
    "input_tokens",
    "output_tokens",
    "cache_write_tokens",
    "cache_read_tokens",
    "cost",
)
_SUMS = (
    "COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0), "
    "COALESCE(SUM(cache_write_tokens), 0), COALESCE(SUM(cache_read_tokens), 0), "
    "COALESCE(SUM(cost), 0)"
)


def _lease_free(clock: str) -> str:
    """`` AND`` the turn lease of conversation ``c`` is free at ``clock`` (no row, or expired):
    what the claim, the next claim time and the backlog all ask of a timer."""
    return (
        f" AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.name = {cols.TURN_LEASE_SQL} "
        f"AND l.expires_at > {clock})"
    )


@dataclass(frozen=True, slots=True)
class _Verdict:
    """What the final check of a reply found: the verdict, the conversation's version and,
    when it is recorded, the conversation's and the session's row ids."""

    outcome: FinishOutcome
    version: int = 0
    row: tuple[int, int] | None = None


class QueuePart(SQLCore):
    """Timers, leases, the final check, the outbox, limits and usage."""

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
        """Count and record in one serialized step: two processes cannot both pass."""
        async with self._tx() as db:
            await self._serialize(db, f"turn_usage:{user.platform}:{user.user_id}")
            for limit, window in ((per_hour, 3600.0), (per_day, 86400.0)):
                if not limit:
                    continue
                rows = await db.fetch(
                    "SELECT at FROM turn_usage WHERE platform = $1 AND user_id = $2 AND at > $3 "
                    "ORDER BY at DESC LIMIT $4",
                    user.platform,
                    user.user_id,
                    now - window,
                    limit,
                )
                if len(rows) >= limit:
                    # The oldest of the last `limit` turns leaves the window first.
                    return Reservation(None, until=float(rows[-1][0]) + window)
            reserved = await db.fetchval(
                "INSERT INTO turn_usage (bot, platform, user_id, at) VALUES ($1, $2, $3, $4) "
                "RETURNING id",
                bot,
                user.platform,
                user.user_id,
                now,
            )
        return Reservation(int(reserved))

    async def release_turn(self, reservation_id: int) -> None:
        async with self._write() as db:
            await db.execute("DELETE FROM turn_usage WHERE id = $1", reservation_id)

    async def record_usage(
        self,
        conversation: ConversationKey,
        purpose: str,
        model: str | None,
        charges: Sequence[tuple[str | None, Usage]],
        now: float,
        price: Price | None = None,
    ) -> None:
        """One row per share of the call, all in one statement."""
        if not charges:
            return
        width = len(_USAGE_COLUMNS)
        rows = ", ".join(
            "(" + ", ".join(f"${i * width + j}" for j in range(1, width + 1)) + ")"
            for i in range(len(charges))
        )
        args = [
            value
            for user, u in charges
            for value in (
                now,
                conversation.bot,
                conversation.platform,
                user,
                purpose,
                model,
                *cols.usage_values(u),
                None if price is None else price.cost(u),
            )
        ]
        async with self._write() as db:
            await db.execute(
                f"INSERT INTO model_usage ({', '.join(_USAGE_COLUMNS)}) VALUES {rows}", *args
            )

    async def input_tokens_since(self, user: UserKey, since: float) -> int:
        async with self._read() as db:
            value = await db.fetchval(
                "SELECT COALESCE(SUM(input_tokens + cache_write_tokens + cache_read_tokens), 0) "
                "FROM model_usage WHERE platform = $1 AND user_id = $2 AND at >= $3",
                user.platform,
                user.user_id,
                since,
            )
        return int(value)

    async def cost_since(self, user: UserKey, since: float) -> float:
        """Dollars charged to ``user`` since ``since``, over every bot (priced calls)."""
        async with self._read() as db:
            value = await db.fetchval(
                "SELECT COALESCE(SUM(cost), 0) FROM model_usage "
                "WHERE platform = $1 AND user_id = $2 AND at >= $3",
                user.platform,
                user.user_id,
                since,
            )
        return float(value)

    async def usage_since(self, since: float, bot: str | None = None) -> UsageStats:
        """Turns from the recorded replies; tokens from every model call (memory tasks too)."""
        where = " AND bot = $2" if bot is not None else ""
        args: tuple[object, ...] = (since, bot) if bot is not None else (since,)
        async with self._read() as db:
            turns = await db.fetchrow(
                "SELECT COUNT(*), COUNT(DISTINCT m.conversation_id) FROM messages m "
                "JOIN conversations c ON c.id = m.conversation_id WHERE m.role = 'assistant' "
                "AND m.created_at >= $1" + (" AND c.bot = $2" if bot is not None else ""),
                *args,
            )
            total = await db.fetchrow(
                f"SELECT {_SUMS} FROM model_usage WHERE at >= $1{where}", *args
            )
            models = await db.fetch(
                f"SELECT COALESCE(model, ''), {_SUMS} FROM model_usage WHERE at >= $1{where} "
                "GROUP BY model",
                *args,
            )
            purposes = await db.fetch(
                f"SELECT purpose, {_SUMS} FROM model_usage WHERE at >= $1{where} GROUP BY purpose",
                *args,
            )
        return cols.model_usage_stats(turns, total, models, purposes)

    # -- turns ----------------------------------------------------------------------------------

    async def skip_turn(
        self, turn: Turn, lease: Lease, now: float, queue: QueuePolicy, reason: str = "limited"
    ) -> bool:
        """Handle the turn without a reply, under the same locks and fencing as finish_turn."""
        d = self.dialect
        async with self._tx() as db:
            conv_id = await self._held(db, turn.session.conversation, lease)
            if conv_id is None:
                return False
            await db.execute(
                f"UPDATE messages SET pending = {d.false}, closed_reason = $2 WHERE id"
                + d.any_of("$1"),
                d.list_arg(m.id for m in turn.messages),
                reason[:500],
            )
            await self._settle_timer(db, conv_id, turn.version, queue)
            return True

    async def pending_turn(
        self, conversation: ConversationKey, limit: int | None = None
    ) -> Turn | None:
        """The oldest pending messages of the oldest session with some, plus v0 and the
        session's persona, from one snapshot: one statement (a second one reads the media
        rows of those messages, only when one has any)."""
        d = self.dialect
        async with self._read() as db:
            rows = await db.fetch(
                "WITH head AS (SELECT c.version AS v0, t.first_pending_at AS first_pending, "
                "(SELECT MIN(session_id) FROM messages WHERE conversation_id = c.id "
                f"AND pending = {d.true}) AS sid FROM conversations c "
                f"LEFT JOIN timers t ON t.conversation_id = c.id WHERE {CONV_WHERE_C}) "
                f"SELECT {cols.MSG_COLS}, h.v0, h.first_pending, s.persona FROM head h "
                "JOIN messages m ON m.session_id = h.sid JOIN sessions s ON s.id = m.session_id "
                f"WHERE m.pending = {d.true} AND m.version <= h.v0 ORDER BY m.turn LIMIT $5",
                *conv_args(conversation),
                d.no_limit if limit is None else limit,
            )
            # Media rows are written with their message and change only as they are prepared
            # (which a turn reads again anyway, bot/runtime/media.py).
            media = await self._media_for(db, rows)
        if not rows:
            return None
        messages = tuple(cols.message(conversation, r, media) for r in rows)
        head = rows[0]
        version, first_pending, persona = (head[_AFTER_MSG + i] for i in range(3))
        return Turn(
            session=messages[0].session,
            version=int(version),
            messages=messages,
            first_pending_at=messages[0].created_at
            if first_pending is None
            else float(first_pending),
            persona=None if persona is None else str(persona),
        )

    async def newer_input(self, session: SessionKey, version: int) -> bool:
        """The final check's ``newer_pending`` read (``_turn_verdict``), without its locks."""
        d = self.dialect
        async with self._read() as db:
            found = await db.fetchval(
                f"SELECT 1 FROM messages m WHERE m.session_id = {SESSION_ID} "
                f"AND m.pending = {d.true} AND m.version > $6 LIMIT 1",
                *session_args(session),
                version,
            )
        return found is not None

    # -- timers -------------------------------------------------------------------------------

    async def due_timers(
        self, now: float, limit: int = 100, bots: Sequence[str] | None = None
    ) -> list[DueTimer]:
        """Due timers, earliest first (the lease CAS decides who runs each)."""
        d = self.dialect
        bots_filter = "" if bots is None else " AND c.bot" + d.any_of("$3", "TEXT")
        args: list[Any] = [now, limit] + ([] if bots is None else [d.list_arg(bots)])
        async with self._read() as db:
            rows = await db.fetch(
                cols.TIMER_SELECT + f"WHERE t.due_at <= $1{bots_filter} ORDER BY t.due_at LIMIT $2",
                *args,
            )
        return [cols.timer(r) for r in rows]

    def _claim_read(self, *, skip: bool) -> str:
        """The claim's read: due timers of the bots ``$3`` whose turn lease is free at ``$1``
        (or the database's clock), none of the lease names ``$4`` (with ``skip``), earliest
        first, at most ``$2``. Columns: bot, platform, chat_id, thread_id, due_at, the lease
        name."""
        d = self.dialect
        clock = self._db_now or "CAST($1 AS DOUBLE PRECISION)"
        excluded = f" AND NOT {cols.TURN_LEASE_SQL}" + d.any_of("$4", "TEXT") if skip else ""
        return (
            f"SELECT c.bot, c.platform, c.chat_id, c.thread_id, t.due_at, "
            f"{cols.TURN_LEASE_SQL} AS name FROM timers t JOIN conversations c "
            "ON c.id = t.conversation_id WHERE t.due_at <= $1 AND c.bot"
            + d.any_of("$3", "TEXT")
            + excluded
            + _lease_free(clock)
            + " ORDER BY t.due_at LIMIT $2"
        )

    @staticmethod
    def _claimed(rows: Sequence[Any], taken: Sequence[Any], holder: str) -> Claims:
        """Claims from the read's rows and the leases taken (name, token, expires_at)."""
        leases = {str(r[0]): (int(r[1]), float(r[2])) for r in taken if r[1] is not None}
        turns = tuple(
            ClaimedTurn(
                cols.conversation_key(r[0], r[1], r[2], r[3]),
                float(r[4]),
                Lease(str(r[5]), holder, *leases[str(r[5])]),
            )
            for r in rows
            if str(r[5]) in leases
        )
        return Claims(turns, lost=len(rows) - len(turns))

    async def claim_due_turns(
        self,
        now: float,
        limit: int,
        *,
        holder: str,
        ttl: float,
        bots: Sequence[str],
        skip: Sequence[str] = (),
    ) -> Claims:
        """Hand up to ``limit`` due timers whose turn lease is free to ``holder``, earliest
        first, each with its turn lease taken; ``skip`` names leases not to claim (turns
        running here or backing off). Nothing is claimed for ``limit`` below 1.

        One transaction of two statements (docs/scaling.md#claims), the shared version that
        SQLite runs: its write lock (BEGIN IMMEDIATE) makes the read and the lease writes one
        step no other writer can interleave with. The read (``_claim_read``) finds the due
        timers with a free lease; the write takes the leases by the same compare-and-swap as
        ``acquire_lease``, which stays the safety: a lease taken in between is counted as
        lost. PostgreSQL's store claims in one statement that locks the lease rows
        (bot/store/postgres/_writes.py).
        """
        if limit < 1 or not bots:
            return Claims(())
        d = self.dialect
        args = (now, limit, d.list_arg(bots), *([d.list_arg(skip)] if skip else []))
        async with self._read() as db:
            # Most looks find nothing due: a plain read, no write lock taken for nothing (on
            # SQLite a write transaction every scan would queue every other writer behind it).
            if not await db.fetch(self._claim_read(skip=bool(skip)), *args):
                return Claims(())
        async with self._tx() as db:
            rows = await db.fetch(self._claim_read(skip=bool(skip)), *args)
            if not rows:
                return Claims(())
            clock = self._db_now or "CAST($4 AS DOUBLE PRECISION)"
            taken = await db.fetch(
                "INSERT INTO leases (name, holder, token, expires_at) "
                f"SELECT value, $2, 1, {clock} + CAST($3 AS DOUBLE PRECISION) FROM "
                + d.table_of("$1")
                + " WHERE 1 = 1"
                + self._LEASE_UPSERT.format(clock=clock),
                d.list_arg(str(r[5]) for r in rows),
                holder,
                ttl,
                *([] if self._db_now else [now]),
            )
        return self._claimed(rows, taken, holder)

    #: The lease CAS of a claim: a free or expired lease is taken, its token grows.
    _LEASE_UPSERT = (
        " ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, "
        "token = leases.token + 1, expires_at = excluded.expires_at "
        "WHERE leases.expires_at <= {clock} RETURNING name, token, expires_at"
    )

    async def next_claim_at(
        self, now: float, bots: Sequence[str], skip: Sequence[str] = ()
    ) -> float | None:
        """The earliest due time of a timer of ``bots`` that a claim could take (its turn
        lease free, not named in ``skip``); None when there is none.

        A timer whose turn another process is running is left out: when that turn ends, its
        holder claims what is still pending itself, and a holder that died is found by the
        scan after its lease expired (docs/scaling.md#claims)."""
        d = self.dialect
        args: list[Any] = [d.list_arg(bots), *([d.list_arg(skip)] if skip else [])]
        # The database's clock where leases follow it, else ``now`` as the last placeholder
        # (a placeholder PostgreSQL never sees used would have no type).
        clock = self._db_now or f"CAST(${len(args) + 1} AS DOUBLE PRECISION)"
        excluded = f" AND NOT {cols.TURN_LEASE_SQL}" + d.any_of("$2", "TEXT") if skip else ""
        async with self._read() as db:
            value = await db.fetchval(
                "SELECT t.due_at FROM timers t JOIN conversations c ON c.id = t.conversation_id "
                "WHERE c.bot"
                + d.any_of("$1", "TEXT")
                + excluded
                + _lease_free(clock)
                + " ORDER BY t.due_at LIMIT 1",
                *args,
                *([] if self._db_now else [now]),
            )
        return None if value is None else float(value)

    async def queue_backlog(self, now: float, bots: Sequence[str]) -> QueueBacklog:
        d = self.dialect
        clock = self._db_now or "CAST($1 AS DOUBLE PRECISION)"
        async with self._read() as db:
            row = await db.fetchrow(
                "SELECT COUNT(*), MIN(t.due_at) FROM timers t JOIN conversations c "
                "ON c.id = t.conversation_id WHERE t.due_at <= $1 AND c.bot"
                + d.any_of("$2", "TEXT")
                + _lease_free(clock),
                now,
                d.list_arg(bots),
            )
        assert row is not None
        return QueueBacklog(int(row[0]), None if row[1] is None else float(row[1]))

    async def timer(self, conversation: ConversationKey) -> DueTimer | None:
        async with self._read() as db:
            row = await db.fetchrow(
                cols.TIMER_SELECT + f"WHERE {CONV_WHERE_C}", *conv_args(conversation)
            )
        return None if row is None else cols.timer(row)

    async def rearm_timer(
        self, conversation: ConversationKey, due_at: float, *, keep_earlier: bool = False
    ) -> None:
        moved = (
            "CASE WHEN timers.due_at < excluded.due_at THEN timers.due_at ELSE excluded.due_at END"
            if keep_earlier
            else "excluded.due_at"
        )
        async with self._tx() as db:
            conv_id = await self._conv_id(db, conversation, lock=True)
            if conv_id is None:
                return
            await db.execute(
                "INSERT INTO timers (conversation_id, due_at, first_pending_at, armed_version) "
                "SELECT id, CAST($2 AS DOUBLE PRECISION), CAST($2 AS DOUBLE PRECISION), version "
                "FROM conversations WHERE id = $1 "
                f"ON CONFLICT (conversation_id) DO UPDATE SET due_at = {moved}",
                conv_id,
                due_at,
            )

    async def clear_timer(
        self, conversation: ConversationKey, armed_version: int, *, only_if_idle: bool = True
    ) -> bool:
        # `pending = 1` matches SQLite's partial index messages_pending (a bare `pending`
        # would not).
        idle = (
            " AND NOT EXISTS (SELECT 1 FROM messages WHERE conversation_id = $1 "
            f"AND pending = {self.dialect.true})"
        )
        async with self._tx() as db:
            # The lock orders this after any ingest in flight: that ingest's message and timer
            # are then visible to the checks below.
            conv_id = await self._conv_id(db, conversation, lock=True)
            if conv_id is None:
                return False
            removed = await db.execute(
                "DELETE FROM timers WHERE conversation_id = $1 AND armed_version <= $2"
                + (idle if only_if_idle else ""),
                conv_id,
                armed_version,
            )
        return removed > 0

    # -- leases -------------------------------------------------------------------------------

    async def acquire_lease(self, name: str, holder: str, ttl: float, now: float) -> Lease | None:
        """CAS in one statement: succeeds only if free or expired; the token always grows.

        On PostgreSQL the conflicting row is locked and the WHERE evaluated on its latest
        version, so of two racing workers exactly one wins (SQLite: one writer at a time).
        """
        clock = self._db_now or "CAST($4 AS DOUBLE PRECISION)"
        args: list[Any] = [name, holder, ttl] + ([] if self._db_now else [now])
        async with self._write() as db:
            row = await db.fetchrow(
                "INSERT INTO leases (name, holder, token, expires_at) "
                f"VALUES ($1, $2, 1, {clock} + CAST($3 AS DOUBLE PRECISION)) "
                "ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, "
                "token = leases.token + 1, expires_at = excluded.expires_at "
                f"WHERE leases.expires_at <= {clock} RETURNING token, expires_at",
                *args,
            )
        if row is None:
            return None
        return Lease(name=name, holder=holder, token=int(row[0]), expires_at=float(row[1]))

    async def renew_lease(self, lease: Lease, ttl: float, now: float) -> Lease | None:
        clock = self._db_now or "CAST($5 AS DOUBLE PRECISION)"
        args: list[Any] = [lease.name, lease.token, lease.holder, ttl]
        async with self._write() as db:
            expires = await db.fetchval(
                f"UPDATE leases SET expires_at = {clock} + CAST($4 AS DOUBLE PRECISION) "
                "WHERE name = $1 AND token = $2 AND holder = $3 RETURNING expires_at",
                *args,
                *([] if self._db_now else [now]),
            )
        if expires is None:
            return None
        return Lease(lease.name, lease.holder, lease.token, float(expires))

    async def release_lease(self, lease: Lease) -> None:
        async with self._write() as db:
            await db.execute(
                "UPDATE leases SET expires_at = 0 WHERE name = $1 AND token = $2 AND holder = $3",
                lease.name,
                lease.token,
                lease.holder,
            )

    async def lease_expires_at(self, name: str) -> float | None:
        async with self._read() as db:
            value = await db.fetchval("SELECT expires_at FROM leases WHERE name = $1", name)
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
        reminders: Sequence[NewReminder] = (),
        *,
        committed: bool = False,
        line: SceneLine | None = None,
    ) -> FinishResult:
        """Fencing check, version check (rules.final_verdict), then reply + outbox, atomically.

        The conversation is locked, then the lease row: a worker cannot take over an expired
        lease, read the pending messages and answer them again while this transaction
        commits; the takeover waits for it and then finds nothing pending.
        """
        refuse_blank(reply)
        async with self._tx() as db:
            found = await self._turn_verdict(db, turn, lease, queue, now, committed)
            if found.outcome != "recorded" or found.row is None:
                return FinishResult(found.outcome, current_version=found.version)
            conv_id, sid = found.row
            item = await self._record(
                db,
                ReplyRow(
                    conv_id=conv_id,
                    sid=sid,
                    session=turn.session,
                    version=turn.version,
                    answers=tuple(m.id for m in turn.messages),
                    text=reply,
                    now=now,
                    usage=usage or Usage(),
                    model=model,
                    reply_to=turn.messages[-1].platform_message_id if turn.messages else None,
                    persona=None if line is None else line.persona,
                ),
            )
            if reminders:
                await self._add_reminders(db, conv_id, reminders, now)
            await self._settle_timer(db, conv_id, turn.version, queue)
        return FinishResult("recorded", outbox=item, current_version=found.version)

    async def finish_line(
        self,
        turn: Turn,
        lease: Lease,
        reply: str,
        now: float,
        line: SceneLine,
        usage: Usage | None = None,
        model: str | None = None,
    ) -> FinishResult:
        """The turn's version check with no hard cap (an extra speaker is never worth a stale
        line): the same locks and read as ``finish_turn``'s, then the line and its outbox row;
        it answers no message and leaves the timer as it is."""
        refuse_blank(reply)
        uncapped = QueuePolicy(debounce=0.0, max_wait=math.inf)
        async with self._tx() as db:
            found = await self._turn_verdict(db, turn, lease, uncapped, now)
            if found.outcome != "recorded" or found.row is None:
                return FinishResult(found.outcome, current_version=found.version)
            conv_id, sid = found.row
            status = await db.fetchval("SELECT status FROM sessions WHERE id = $1", sid)
            if status != "open":
                # /new (or an idle timeout) ended the session between two speakers: a line
                # of the old one now would be stale.
                return FinishResult("discarded", current_version=found.version)
            item = await self._record(
                db,
                ReplyRow(
                    conv_id=conv_id,
                    sid=sid,
                    session=turn.session,
                    version=turn.version,
                    answers=(),
                    text=reply,
                    now=now,
                    usage=usage or Usage(),
                    model=model,
                    persona=line.persona,
                ),
            )
        return FinishResult("recorded", outbox=item, current_version=found.version)

    async def scene_lines_since(self, conversation: ConversationKey, since: float) -> int:
        """Counted on the partial index of persona lines (migration 20)."""
        async with self._read() as db:
            count = await db.fetchval(
                "SELECT COUNT(*) FROM messages WHERE persona IS NOT NULL AND created_at > $5 "
                f"AND conversation_id = (SELECT id FROM conversations WHERE {CONV_WHERE})",
                *conv_args(conversation),
                since,
            )
        return int(count or 0)

    async def scene_state(self, conversation: ConversationKey) -> SceneState:
        async with self._read() as db:
            row = await db.fetchrow(
                "SELECT muted_until, caps, last_plan FROM scene_state WHERE conversation_id = "
                f"(SELECT id FROM conversations WHERE {CONV_WHERE})",
                *conv_args(conversation),
            )
        if row is None:
            return SceneState()
        return SceneState(
            muted_until=None if row[0] is None else float(row[0]),
            caps=_times(row[1]),
            last_plan=row[2],
        )

    async def mute_scene(
        self, conversation: ConversationKey, until: float | None, now: float
    ) -> None:
        await self._scene_upsert(conversation, now, "muted_until", until)

    async def note_scene(
        self,
        conversation: ConversationKey,
        now: float,
        *,
        caps: Sequence[float] | None = None,
        last_plan: str | None = None,
    ) -> None:
        if caps is not None:
            await self._scene_upsert(conversation, now, "caps", json.dumps(list(caps)))
        if last_plan is not None:
            await self._scene_upsert(conversation, now, "last_plan", last_plan)

    async def _scene_upsert(
        self, conversation: ConversationKey, now: float, column: str, value: object
    ) -> None:
        """One column of the conversation's scene_state row, the row made when missing (one
        statement: a column written never overwrites another, whoever writes at once)."""
        async with self._tx() as db:
            conv_id = await self._conv_id(db, conversation, now)
            assert conv_id is not None
            await db.execute(
                f"INSERT INTO scene_state (conversation_id, {column}, updated_at) "
                "VALUES ($1, $2, $3) ON CONFLICT (conversation_id) DO UPDATE SET "
                f"{column} = excluded.{column}, updated_at = excluded.updated_at",
                conv_id,
                value,
                now,
            )

    async def _turn_verdict(
        self,
        db: Conn,
        turn: Turn,
        lease: Lease,
        queue: QueuePolicy,
        now: float,
        committed: bool = False,
    ) -> _Verdict:
        """The final check's read and verdict (rules.final_verdict), its rows locked."""
        d = self.dialect
        if d.for_update:
            # Row locks: the conversation's first, then (in the read below) the lease's.
            # On SQLite the write transaction itself serializes every writer.
            await self._conv_id(db, turn.session.conversation, lock=True)
        # The conversation, the turn's session, the version, whether newer input joined
        # the session, and the lease's token, its row locked: one read.
        row = await db.fetchrow(
            "SELECT c.id, s.id, c.version, (SELECT COUNT(*) FROM messages m WHERE "
            f"m.session_id = s.id AND m.pending = {d.true} AND m.version > $6), "
            f"(SELECT token FROM leases WHERE name = $7{d.for_update}) "
            "FROM conversations c LEFT JOIN sessions s ON s.conversation_id = c.id "
            f"AND s.session_no = $5 WHERE {CONV_WHERE_C}",
            *session_args(turn.session),
            turn.version,
            lease.name,
        )
        if row is None or row[1] is None:
            return _Verdict("fenced")  # the conversation or the session is gone
        verdict = final_verdict(
            queue,
            still_leased=row[4] is not None and int(row[4]) == lease.token,
            newer_pending=int(row[3]) > 0 and not committed,
            first_pending_at=turn.first_pending_at,
            now=now,
        )
        # Discarded: newer input joined this session while we generated; the timer it armed
        # stays, and the next attempt will cover everything.
        version = 0 if verdict == "fenced" else int(row[2])
        rows = (int(row[0]), int(row[1])) if verdict == "recorded" else None
        return _Verdict(verdict, version, rows)

    # -- outbox -------------------------------------------------------------------------------

    async def record_outbox(
        self,
        conversation: ConversationKey,
        text: str,
        now: float,
        reply_to: str | None = None,
        choices: Choices | None = None,
    ) -> OutboxItem:
        refuse_blank(text)
        async with self._tx() as db:
            conv_id = await self._conv_id(db, conversation, now)
            assert conv_id is not None
            sid, number = await self._ensure_open(db, conv_id, now, None)
            outbox_id = await db.fetchval(
                "INSERT INTO outbox (conversation_id, session_id, reply_message_id, text, "
                "reply_to, created_at, choices) VALUES ($1, $2, 0, $3, $4, $5, $6) RETURNING id",
                conv_id,
                sid,
                text,
                reply_to,
                now,
                None if choices is None else choices.dumps(),
            )
        return OutboxItem(
            id=int(outbox_id),
            conversation=conversation,
            session=SessionKey(conversation, number),
            text=text,
            reply_message_id=0,
            created_at=now,
            reply_to_platform_message_id=reply_to,
            choices=choices,
        )

    async def record_ran(
        self, conversation: ConversationKey, platform_message_id: str, now: float
    ) -> None:
        async with self._tx() as db:
            conv_id = await self._conv_id(db, conversation, now)
            assert conv_id is not None
            sid, _ = await self._ensure_open(db, conv_id, now, None)
            await db.execute(
                "INSERT INTO outbox (conversation_id, session_id, reply_message_id, text, "
                "reply_to, status, created_at, finished_at) VALUES ($1, $2, 0, '', $3, 'sent', "
                "$4, $4)",
                conv_id,
                sid,
                platform_message_id,
                now,
            )

    async def answered(self, conversation: ConversationKey, platform_message_id: str) -> bool:
        """A lookup through the outbox's session index."""
        async with self._read() as db:
            found = await db.fetchval(
                "SELECT 1 FROM outbox WHERE session_id IN (SELECT s.id FROM sessions s "
                f"JOIN conversations c ON c.id = s.conversation_id WHERE {CONV_WHERE_C}) "
                "AND reply_message_id = 0 AND reply_to = $5 LIMIT 1",
                *conv_args(conversation),
                platform_message_id,
            )
        return found is not None

    async def begin_send(self, item: OutboxItem, now: float) -> bool:
        async with self._write() as db:
            claimed = await db.execute(
                "UPDATE outbox SET attempts = attempts + 1, attempted_at = $1 "
                "WHERE id = $2 AND status = 'pending' AND attempts = $3",
                now,
                item.id,
                item.attempts,
            )
        return claimed == 1

    async def unsent_outbox(self, older_than: float, limit: int = 50) -> list[OutboxItem]:
        return await self._pending_outbox("o.attempts = 0 AND o.created_at", older_than, limit)

    async def uncertain_outbox(self, older_than: float, limit: int = 50) -> list[OutboxItem]:
        return await self._pending_outbox("o.attempts > 0 AND o.attempted_at", older_than, limit)

    async def _pending_outbox(self, since: str, older_than: float, limit: int) -> list[OutboxItem]:
        """Pending rows whose ``since`` column (with its attempts condition) is at or before
        ``older_than``, oldest row first."""
        async with self._read() as db:
            rows = await db.fetch(
                cols.OUTBOX_SELECT + f"WHERE o.status = 'pending' AND {since} <= $1 "
                "ORDER BY o.id LIMIT $2",
                older_than,
                limit,
            )
        return [cols.outbox(r) for r in rows]

    async def mark_sent(self, outbox_id: int, now: float) -> None:
        async with self._write() as db:
            await db.execute(
                "UPDATE outbox SET status = 'sent', finished_at = $1, "
                f"text = {cols.FINISHED_TEXT}, choices = NULL WHERE id = $2",
                now,
                outbox_id,
            )

    async def mark_failed(self, outbox_id: int, now: float, reason: str) -> None:
        async with self._write() as db:
            await db.execute(
                "UPDATE outbox SET status = 'failed', finished_at = $1, failure = $2, "
                f"text = {cols.FINISHED_TEXT}, choices = NULL WHERE id = $3",
                now,
                reason[:500],
                outbox_id,
            )


def _times(stored: object) -> tuple[float, ...]:
    """The caps' times as stored (JSON list); unreadable: none (a note, never an error)."""
    try:
        loaded = json.loads(str(stored))
    except ValueError:
        return ()
    if not isinstance(loaded, list):
        return ()
    return tuple(float(t) for t in loaded if isinstance(t, (int, float)))
