"""SQLite's ingest: a whole batch in a handful of statements inside one BEGIN IMMEDIATE (the
write lock makes the read and the writes one step for every process on the file).

One read of the batch's conversations; the messages numbered in memory
(``IngestBase._plan``); then set writes, each one round trip to the connection's thread
however many messages the batch holds: the versions, the sessions' turns, the messages (one
multi-row INSERT), their media, the timers. A message to an existing conversation alone costs
five statements (docs/architecture.md#ingest-in-batches); PostgreSQL writes each message in
one statement instead (postgres/_writes.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bot.core.events import ConversationKey, Inbound, IngestResult, QueuePolicy, SessionPolicy
from bot.store import cols
from bot.store.sql.conn import Conn
from bot.store.sql.core import conv_args
from bot.store.sql.ingest import BATCH_STATE_SQL, IngestBase, IngestState, Planned, results

_STATE_BY_KEYS = BATCH_STATE_SQL.format(
    agg="json_group_object",
    mids="IN (SELECT value FROM json_each($2))",
    where="(c.bot, c.platform, c.chat_id, c.thread_id) IN (SELECT json_extract(value, '$[0]'), "
    "json_extract(value, '$[1]'), json_extract(value, '$[2]'), json_extract(value, '$[3]') "
    "FROM json_each($1))",
)
_MESSAGE_COLS = (
    "conversation_id, session_id, turn, role, author_id, display_name, text, "
    "platform_message_id, is_private, version, pending, addressed, created_at, quote, media_count"
)
_PER_MESSAGE = 13  # parameters of one message row ('user' is a literal, pending = addressed)


class IngestPart(IngestBase):
    """Store, bump the versions, arm the timers: one transaction for a batch."""

    async def ingest_many(
        self,
        items: Sequence[tuple[Inbound, QueuePolicy]],
        now: float,
        sessions: SessionPolicy | None = None,
    ) -> list[IngestResult]:
        """Read, number, write (the module's docstring)."""
        if not items:
            return []
        keys = list(dict.fromkeys(inbound.conversation for inbound, _ in items))
        mids = sorted({i.platform_message_id for i, _ in items if i.platform_message_id})
        async with self._tx() as db:
            ids, states = await self._states(db, keys, mids, now)
            planned = await self._plan(db, items, ids, states, now, sessions)
            rows = [p for p in planned if isinstance(p, Planned)]
            if not rows:
                return results(planned, [])
            last = {p.conv_id: p for p in rows}  # each conversation's last message
            await db.executemany(
                "UPDATE conversations SET version = $2, status = 'active', "
                "status_reason = NULL WHERE id = $1",
                [(conv_id, p.version) for conv_id, p in last.items()],
            )
            await db.executemany(
                "UPDATE sessions SET next_turn = $2, last_activity_at = $3, "
                "last_user_turn = $4 WHERE id = $1",
                [(p.sid, p.turn + 1, now, p.turn) for p in last.values()],
            )
            message_ids = await self._insert_messages(db, rows, now)
            armed = {p.conv_id: p for p in rows if p.armed is not None}  # the last arming
            if armed:
                await db.executemany(
                    cols.ARM_TIMER_SQL,
                    [(c, *p.armed, p.version) for c, p in armed.items() if p.armed is not None],
                )
        return results(planned, message_ids)

    async def _states(
        self, db: Conn, keys: Sequence[ConversationKey], mids: Sequence[str], now: float
    ) -> tuple[dict[ConversationKey, int], dict[int, IngestState]]:
        """The batch's conversations (the new ones created): key -> id, id -> state."""
        found = await db.fetch(
            _STATE_BY_KEYS,
            self.dialect.list_arg([list(conv_args(k)) for k in keys]),
            self.dialect.list_arg(mids),
        )
        states = {int(r[0]): IngestState.of(r) for r in found}
        by_key = {(r[10], r[11], r[12], r[13]): int(r[0]) for r in found}
        ids: dict[ConversationKey, int] = {}
        for key in keys:
            conv_id = by_key.get(conv_args(key))
            if conv_id is None:
                conv_id = await self._conv_id(db, key, now)
                assert conv_id is not None
                states[conv_id] = IngestState.new(conv_id)
            ids[key] = conv_id
        return ids, states

    async def _insert_messages(self, db: Conn, rows: Sequence[Planned], now: float) -> list[int]:
        """One multi-row INSERT (and the media rows): the new ids in the order of ``rows``."""
        values: list[str] = []
        args: list[Any] = []
        for n, p in enumerate(rows):
            at = n * _PER_MESSAGE
            marks = [f"${at + i + 1}" for i in range(_PER_MESSAGE)]
            values.append(
                f"({', '.join(marks[:3])}, 'user', {', '.join(marks[3:10])}, {marks[9]}, "
                f"{', '.join(marks[10:13])})"
            )
            i = p.inbound
            args += [
                p.conv_id,
                p.sid,
                p.turn,
                i.author_id,
                i.display_name,
                i.text,
                i.platform_message_id,
                int(i.is_private),
                p.version,
                int(i.triggers_reply),  # pending, and addressed: memory may learn
                now,
                cols.quote_json(i.quote),
                len(i.media),
            ]
        returned = await db.fetch(
            f"INSERT INTO messages ({_MESSAGE_COLS}) VALUES {', '.join(values)} "
            "RETURNING id, session_id, turn",
            *args,
        )
        # RETURNING's row order is not promised: match by (session, turn), unique per message.
        by_slot = {(int(r[1]), int(r[2])): int(r[0]) for r in returned}
        ids = [by_slot[(p.sid, p.turn)] for p in rows]
        media = [
            (message_id, *row)
            for message_id, p in zip(ids, rows, strict=True)
            for row in cols.media_rows(p.inbound.media, now)
        ]
        if media:
            await db.executemany(
                f"INSERT INTO media (message_id, {cols.MEDIA_INSERT_COLS}) VALUES ($1, $2, "
                "$3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
                media,
            )
        return ids
