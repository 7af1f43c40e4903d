"""What the operator console reads, and its audit log (docs/web.md).

The conversation list is a keyset page over ``sessions_activity``: each conversation appears
once, by its newest session (no later session of it exists), newest activity first; a page
after a cursor costs the same however deep it is. Searching by a participant's name scans
the messages once (a name is not a key and has no index: docs/architecture.md#keys).

The overview's reads are indexed too: a bot's last update walks ``sessions_activity``; recent
gaps and rejected turns, and today's spend per person, come through migration 14's indexes.
"""

from __future__ import annotations

import json
from typing import Any, Final, Literal

from bot.core.console import (
    GAP_NOTICED_KEY,
    AuditEntry,
    ConsoleEvent,
    ConversationRow,
    PersonUsage,
    QueueView,
    TopMeasure,
    UsageBucket,
)
from bot.core.events import (
    ConversationKey,
    RetentionEntry,
    SessionInfo,
    SessionKey,
    Tombstone,
    UserKey,
)
from bot.core.scenes import SceneState
from bot.store import cols
from bot.store.sql.core import CONV_WHERE, CONV_WHERE_C, SQLCore, conv_args

_NEWEST = (
    "NOT EXISTS (SELECT 1 FROM sessions n WHERE n.conversation_id = s.conversation_id "
    "AND n.session_no > s.session_no)"
)
#: How many participant names a row shows.
_NAMES = 5
#: Sessions read per step of the walk for a bot's last inbound message, and at most steps.
_WALK, _STEPS = 8, 8
_REJECTED = "rejected: "
# The literal predicates of migration 14's partial indexes: a query uses such an index only
# when its WHERE holds the same term (a bound parameter would not do on SQLite).
_IS_REJECTED = "m.closed_reason LIKE 'rejected:%'"
_IS_GAP = f"st.key = '{GAP_NOTICED_KEY}'"
# The people who used the most, from the rows of the inner query. That one reads the rows
# since a time through the index on ``at``, and its LIMIT (no limit: -1 or NULL) keeps SQLite
# from merging it into the grouping, which would rather scan every row ever written through
# the (platform, user_id, at) index to skip a sort.
_TOP = "GROUP BY platform, user_id ORDER BY used DESC, platform, user_id LIMIT $2"
# Each person's rows of one measure since $1 (what a per-person daily limit counts).
_TOP_ROWS: Final[dict[str, str]] = {
    "input_tokens": "SELECT platform, user_id, input_tokens + cache_write_tokens + "
    "cache_read_tokens AS used FROM model_usage WHERE at >= $1 AND user_id IS NOT NULL",
    "cost": "SELECT platform, user_id, cost AS used FROM model_usage "
    "WHERE at >= $1 AND user_id IS NOT NULL AND cost IS NOT NULL",
    "turns": "SELECT platform, user_id, 1 AS used FROM turn_usage WHERE at >= $1",
}
# What an event row shows of its conversation and session (columns 2-7 of the row).
_EVENT_COLS = "c.id, c.bot, c.platform, c.chat_id, c.thread_id, s.session_no"
_EVENT_FROM = "FROM sessions s JOIN conversations c ON c.id = s.conversation_id"


class ConsolePart(SQLCore):
    """The console's reads (``ConsoleStore``, bot/store/console.py; a person's page is read
    in bot/store/sql/people.py) and its audit log."""

    # -- a conversation's backlog, sessions and what personabot deleted of them -------------------

    async def pending_count(self, conversation: ConversationKey) -> int:
        """Pending messages of the conversation (the partial index ``messages_pending``)."""
        async with self._read() as db:
            count = await db.fetchval(
                "SELECT COUNT(*) FROM messages m JOIN conversations c ON c.id = m.conversation_id "
                f"WHERE {CONV_WHERE_C} AND m.pending = {self.dialect.true}",
                *conv_args(conversation),
            )
        return int(count or 0)

    async def get_session(self, session: SessionKey) -> SessionInfo | None:
        async with self._read() as db:
            found = await self._session_row(db, session)
            row = None if found is None else await self._session_by_id(db, found[0])
        return None if row is None else cols.session_info(session.conversation, row)

    async def list_sessions(
        self, conversation: ConversationKey, limit: int | None = None
    ) -> list[SessionInfo]:
        async with self._read() as db:
            rows = await db.fetch(
                f"SELECT {cols.SESSION_COLS} FROM sessions WHERE conversation_id = "
                f"(SELECT id FROM conversations WHERE {CONV_WHERE}) "
                "ORDER BY session_no DESC LIMIT $5",
                *conv_args(conversation),
                self.dialect.no_limit if limit is None else limit,
            )
        return [cols.session_info(conversation, r) for r in reversed(rows)]

    async def tombstones(self, session: SessionKey, limit: int | None = None) -> list[Tombstone]:
        async with self._read() as db:
            found = await self._session_row(db, session)
            rows = (
                []
                if found is None
                else await db.fetch(
                    "SELECT first_turn, last_turn, reason, at FROM tombstones "
                    "WHERE session_id = $1 ORDER BY first_turn DESC LIMIT $2",
                    found[0],
                    self.dialect.no_limit if limit is None else limit,
                )
            )
        return [
            Tombstone(session, int(r[0]), int(r[1]), str(r[2]), float(r[3])) for r in reversed(rows)
        ]

    async def retention_log(self, limit: int = 100) -> list[RetentionEntry]:
        async with self._read() as db:
            rows = await db.fetch(
                "SELECT r.at, c.bot, c.platform, c.chat_id, c.thread_id, r.session_no, "
                "r.first_turn, r.last_turn, r.messages, r.reason FROM retention_log r "
                "JOIN conversations c ON c.id = r.conversation_id ORDER BY r.id DESC LIMIT $1",
                limit,
            )
        return [cols.retention_entry(r) for r in rows]

    # -- the console's own views ------------------------------------------------------------------

    async def console_conversations(
        self, *, search: str = "", after: tuple[float, int] | None = None, limit: int = 50
    ) -> list[ConversationRow]:
        where = [_NEWEST]
        args: list[object] = []
        if after is not None:
            args += [after[0], after[1]]
            where.append(
                f"(s.last_activity_at < ${len(args) - 1} OR (s.last_activity_at = "
                f"${len(args) - 1} AND s.id < ${len(args)}))"
            )
        term = search.strip()
        if term:
            args += [term, f"%{_like(term.casefold())}%"]
            where.append(
                f"(c.chat_id = ${len(args) - 1} OR c.id IN (SELECT conversation_id FROM "
                f"messages WHERE role = 'user' AND LOWER(display_name) LIKE ${len(args)} "
                "ESCAPE '!'))"
            )
        args.append(limit)
        async with self._read() as db:
            rows = await db.fetch(
                "SELECT c.id, c.bot, c.platform, c.chat_id, c.thread_id, s.session_no, s.status, "
                "s.last_activity_at, s.persona, s.id FROM sessions s JOIN conversations c "
                f"ON c.id = s.conversation_id WHERE {' AND '.join(where)} "
                f"ORDER BY s.last_activity_at DESC, s.id DESC LIMIT ${len(args)}",
                *args,
            )
            names: dict[int, list[str]] = {}
            for row in rows:
                found = await db.fetch(
                    "SELECT display_name FROM messages WHERE session_id = $1 AND role = 'user' "
                    "GROUP BY display_name ORDER BY MIN(turn) LIMIT $2",
                    row[9],
                    _NAMES,
                )
                names[int(row[9])] = [str(r[0]) for r in found]
        return [
            ConversationRow(
                id=int(r[0]),
                key=cols.conversation_key(r[1], r[2], r[3], r[4]),
                session_no=int(r[5]),
                status=str(r[6]),
                last_activity_at=float(r[7]),
                persona=None if r[8] is None else str(r[8]),
                participants=tuple(names[int(r[9])]),
                session_row=int(r[9]),
            )
            for r in rows
        ]

    async def console_conversation(self, conversation_id: int) -> ConversationKey | None:
        async with self._read() as db:
            row = await db.fetchrow(
                "SELECT bot, platform, chat_id, thread_id FROM conversations WHERE id = $1",
                conversation_id,
            )
        return None if row is None else cols.conversation_key(row[0], row[1], row[2], row[3])

    async def console_edits(self, session: SessionKey) -> dict[int, float]:
        """Edited messages of the session (few: a scan of its rows by the session index)."""
        async with self._read() as db:
            found = await self._session_row(db, session)
            rows = (
                []
                if found is None
                else await db.fetch(
                    "SELECT id, edited_at FROM messages WHERE session_id = $1 "
                    "AND edited_at IS NOT NULL",
                    found[0],
                )
            )
        return {int(r[0]): float(r[1]) for r in rows}

    async def console_scene(self, conversation: ConversationKey) -> SceneState:
        """The conversation's scene_state row (migration 21), by its primary key."""
        async with self._read() as db:
            row = await db.fetchrow(
                "SELECT muted_until, caps, last_plan FROM scene_state WHERE conversation_id = "
                "(SELECT id FROM conversations WHERE bot = $1 AND platform = $2 "
                "AND chat_id = $3 AND thread_id = $4)",
                *conv_args(conversation),
            )
        if row is None:
            return SceneState()
        try:
            caps = tuple(float(t) for t in json.loads(str(row[1])))
        except (ValueError, TypeError):
            caps = ()
        return SceneState(None if row[0] is None else float(row[0]), caps, row[2])

    async def console_lease(self, name: str, now: float) -> tuple[str, float] | None:
        async with self._read() as db:
            row = await db.fetchrow(
                "SELECT holder, expires_at FROM leases WHERE name = $1 AND expires_at > $2",
                name,
                now,
            )
        return None if row is None else (str(row[0]), float(row[1]))

    async def console_queue(self, now: float) -> QueueView:
        """Timers and turn leases, from one snapshot."""
        async with self._snapshot() as db:
            timers = await db.fetchrow(
                "SELECT COUNT(*), SUM(CASE WHEN due_at <= $1 THEN 1 ELSE 0 END), "
                "MIN(CASE WHEN due_at <= $1 THEN due_at END) FROM timers",
                now,
            )
            leases = await db.fetch(
                "SELECT holder, COUNT(*) FROM leases WHERE name LIKE 'turn:%' "
                "AND expires_at > $1 GROUP BY holder ORDER BY holder",
                now,
            )
        assert timers is not None
        return QueueView(
            timers=int(timers[0] or 0),
            due=int(timers[1] or 0),
            leases=tuple((str(r[0]), int(r[1])) for r in leases),
            oldest_due_at=None if timers[2] is None else float(timers[2]),
        )

    async def console_usage(self, since: float, bucket_seconds: float) -> list[UsageBucket]:
        """Model calls per bucket since ``since`` (through model_usage's index on ``at``)."""
        async with self._read() as db:
            rows = await db.fetch(
                "SELECT FLOOR((at - $1) / $2), COUNT(*), "
                "SUM(CASE WHEN purpose = 'reply' THEN 1 ELSE 0 END), SUM(input_tokens), "
                "SUM(output_tokens), SUM(cache_read_tokens) FROM model_usage WHERE at >= $1 "
                "GROUP BY FLOOR((at - $1) / $2) ORDER BY 1",
                since,
                bucket_seconds,
            )
        return [
            UsageBucket(
                start=since + float(r[0]) * bucket_seconds,
                calls=int(r[1]),
                replies=int(r[2] or 0),
                input_tokens=int(r[3] or 0),
                output_tokens=int(r[4] or 0),
                cache_read_tokens=int(r[5] or 0),
            )
            for r in rows
        ]

    async def console_last_inbound(self, bot: str) -> float | None:
        """When a person last wrote to ``bot``: its newest stored user message.

        Walks the bot's sessions by last activity (``sessions_activity``), newest first, and
        reads each one's newest user message by its (session, turn) key. A session's activity
        is never older than its newest message, so the walk stops at the first session less
        recently active than the best message found: one or two sessions, usually. After
        ``_STEPS`` steps the best found so far is the answer (then it is a lower bound).
        """
        best: float | None = None
        after: tuple[float, int] | None = None
        async with self._read() as db:
            for _ in range(_STEPS):
                args: list[object] = [bot]
                where = ""
                if after is not None:
                    args += [after[0], after[1]]
                    where = (
                        " AND (s.last_activity_at < $2 OR (s.last_activity_at = $2 AND s.id < $3))"
                    )
                args.append(_WALK)
                # CROSS JOIN: SQLite then walks sessions_activity and stops after the page,
                # rather than reading every session of the bot through the conversations'
                # key and sorting them (PostgreSQL plans by its statistics either way).
                rows = await db.fetch(
                    "SELECT s.id, s.last_activity_at, (SELECT m.created_at FROM messages m "
                    "WHERE m.session_id = s.id AND m.role = 'user' ORDER BY m.turn DESC LIMIT 1) "
                    "FROM sessions s CROSS JOIN conversations c WHERE c.id = s.conversation_id "
                    f"AND c.bot = $1{where} ORDER BY s.last_activity_at DESC, s.id DESC "
                    f"LIMIT ${len(args)}",
                    *args,
                )
                for row in rows:
                    if best is not None and float(row[1]) <= best:
                        return best
                    if row[2] is not None:
                        best = max(best or 0.0, float(row[2]))
                if len(rows) < _WALK:
                    return best
                after = (float(rows[-1][1]), int(rows[-1][0]))
        return best

    async def console_events(self, limit: int = 10) -> list[ConsoleEvent]:
        """The newest gaps found and turns the model rejected, newest first (each read
        through its partial index of migration 14)."""
        async with self._read() as db:
            gaps = await db.fetch(
                f"SELECT st.updated_at, st.value, {_EVENT_COLS} {_EVENT_FROM} "
                f"JOIN session_state st ON st.session_id = s.id WHERE {_IS_GAP} "
                "ORDER BY st.updated_at DESC LIMIT $1",
                limit,
            )
            # A rejected turn is one or more messages with the same reason: enough rows for
            # ``limit`` turns of a few messages each, grouped below.
            rejected = await db.fetch(
                f"SELECT m.created_at, m.closed_reason, {_EVENT_COLS}, m.turn {_EVENT_FROM} "
                f"JOIN messages m ON m.session_id = s.id WHERE {_IS_REJECTED} "
                "ORDER BY m.created_at DESC LIMIT $1",
                limit * 5,
            )
        events = [_event(r, "gap", str(r[1])) for r in gaps]
        grouped: dict[tuple[int, int, str], tuple[Any, list[int]]] = {}
        for row in rejected:  # newest first: a group's first row is its newest
            _, turns = grouped.setdefault((int(row[2]), int(row[7]), str(row[1])), (row, []))
            turns.append(int(row[8]))
        for row, turns in grouped.values():
            detail = str(row[1]).removeprefix(_REJECTED)
            events.append(_event(row, "rejected", detail, tuple(sorted(turns))))
        events.sort(key=lambda e: e.at, reverse=True)
        return events[:limit]

    async def console_top(self, measure: TopMeasure, since: float, limit: int) -> list[PersonUsage]:
        """The people who used the most since ``since`` by ``measure``, most first (the
        ``model_usage_at`` and ``turn_usage_at`` indexes)."""
        async with self._read() as db:
            rows = await db.fetch(
                f"SELECT platform, user_id, SUM(used) AS used FROM ({_TOP_ROWS[measure]} "
                f"LIMIT $3) u {_TOP}",
                since,
                limit,
                self.dialect.no_limit,
            )
        kind = float if measure == "cost" else int
        return [PersonUsage(UserKey(str(r[0]), str(r[1])), kind(r[2])) for r in rows]

    async def record_audit(
        self, actor: str, action: str, target: str, detail: str, now: float
    ) -> None:
        async with self._tx() as db:
            await db.execute(
                "INSERT INTO operator_audit (at, actor, action, target, detail) "
                "VALUES ($1, $2, $3, $4, $5)",
                now,
                actor,
                action,
                target,
                detail,
            )

    async def audit_log(self, *, before: int | None = None, limit: int = 50) -> list[AuditEntry]:
        async with self._read() as db:
            rows = await db.fetch(
                "SELECT id, at, actor, action, target, detail FROM operator_audit "
                "WHERE id < $1 ORDER BY id DESC LIMIT $2",
                2**62 if before is None else before,
                limit,
            )
        return [
            AuditEntry(int(r[0]), float(r[1]), str(r[2]), str(r[3]), str(r[4]), str(r[5]))
            for r in rows
        ]


def _event(
    row: Any, kind: Literal["gap", "rejected"], detail: str, turns: tuple[int, ...] = ()
) -> ConsoleEvent:
    """A ConsoleEvent from a row of ``at, value, <_EVENT_COLS>``."""
    return ConsoleEvent(
        at=float(row[0]),
        kind=kind,
        conversation_id=int(row[2]),
        key=cols.conversation_key(row[3], row[4], row[5], row[6]),
        session_no=int(row[7]),
        detail=detail,
        turns=turns,
    )


def _like(text: str) -> str:
    """``text`` for a LIKE pattern with ``!`` as the escape character."""
    return text.replace("!", "!!").replace("%", "!%").replace("_", "!_")
