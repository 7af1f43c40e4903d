"""What the operator console reads, and its audit log (docs/web.md).

The conversation list is a keyset page over ``sessions_activity``: each conversation appears
once, by its newest session (no later session of it exists), newest activity first; a page
after a cursor costs the same however deep it is. Searching by a participant's name scans
the messages once (a name is not a key and has no index: docs/architecture.md#keys).
"""

from __future__ import annotations

from bot.core.console import AuditEntry, ConversationRow, QueueView, UsageBucket
from bot.core.events import ConversationKey, SessionKey
from bot.store import cols
from bot.store.sql.core import SQLCore

_NEWEST = (
    "NOT EXISTS (SELECT 1 FROM sessions n WHERE n.conversation_id = s.conversation_id "
    "AND n.session_no > s.session_no)"
)
#: How many participant names a row shows.
_NAMES = 5


class ConsolePart(SQLCore):
    """The console's reads and its audit log."""

    async def console_conversations(
        self, *, search: str = "", after: tuple[float, int] | None = None, limit: int = 50
    ) -> list[ConversationRow]:
        """Conversations by their newest session's activity, newest first (keyset pages)."""
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
        """A conversation by row id."""
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

    async def console_lease(self, name: str, now: float) -> tuple[str, float] | None:
        """The lease's holder while it lasts."""
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

    async def record_audit(
        self, actor: str, action: str, target: str, detail: str, now: float
    ) -> None:
        """Append an audit entry."""
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
        """Newest entries first."""
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


def _like(text: str) -> str:
    """``text`` for a LIKE pattern with ``!`` as the escape character."""
    return text.replace("!", "!!").replace("%", "!%").replace("_", "!_")
