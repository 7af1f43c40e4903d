"""PostgreSQL's hot writes as data-modifying CTEs (one round trip where SQLite, which has
none, runs a short statement sequence in-process): ingest (the version, the turn, the message,
its media rows and the timer at once; SQLite's is ``bot/store/sqlite/_ingest.py``), a reply
that passed the final check (the shared sequence is ``SQLCore._record_reply``) and the claim
of due turns (the shared two statements are ``QueuePart.claim_due_turns``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from bot.core.events import (
    Claims,
    ConversationKey,
    Inbound,
    IngestResult,
    QueuePolicy,
    SessionPolicy,
)
from bot.store import cols
from bot.store.postgres._core import no_nul
from bot.store.sql.conn import Conn
from bot.store.sql.core import ReplyRow, conv_args
from bot.store.sql.ingest import (
    BATCH_STATE_SQL,
    IngestBase,
    IngestState,
    Planned,
    results,
    sort_key,
)
from bot.store.sql.queue import QueuePart

# One message: the version, the session's turn, the message, its media ({media}: a CTE, or
# empty) and the timer (armed only for a message that asks for a reply) in one statement.
_WRITE_SQL = (
    "WITH v AS (UPDATE conversations SET version = version + 1, status = 'active', "
    "status_reason = NULL WHERE id = $1 RETURNING version), "
    "t AS (UPDATE sessions SET next_turn = next_turn + 1, last_activity_at = $3, "
    "last_user_turn = next_turn WHERE id = $2 RETURNING next_turn - 1 AS turn), "
    "m AS (INSERT INTO messages (conversation_id, session_id, turn, role, author_id, "
    "display_name, text, platform_message_id, is_private, version, pending, "
    "addressed, created_at, quote, media_count) SELECT $1, $2, t.turn, 'user', "
    "$4::text, $5::text, $6::text, $7::text, $8::boolean, v.version, $9::boolean, "
    "$9::boolean, $3, $12::text, $13::integer FROM v, t RETURNING id, version), "
    "{media}"
    # Arm or extend the timer (only for a message that asks for a reply).
    "a AS (INSERT INTO timers (conversation_id, due_at, first_pending_at, "
    "armed_version) SELECT $1, $10::float8, $11::float8, m.version FROM m WHERE $9 "
    "ON CONFLICT (conversation_id) DO UPDATE SET due_at = EXCLUDED.due_at, "
    "armed_version = EXCLUDED.armed_version) "
    "SELECT id, version FROM m"
)


def _message_args(p: Planned, now: float) -> list[Any]:
    """_WRITE_SQL's arguments $1-$13 for a planned message."""
    i = p.inbound
    return [
        p.conv_id,
        p.sid,
        now,
        i.author_id,
        i.display_name,
        i.text,
        i.platform_message_id,
        i.is_private,
        i.triggers_reply,
        p.due_at,
        None if p.armed is None else p.armed[1],
        cols.quote_json(i.quote),
        len(i.media),
    ]


# The batch's existing conversations, locked in id order (the lock comes before the read of
# their state, which must see what a racing ingest committed).
_LOCK_BATCH = (
    "SELECT c.id, c.bot, c.platform, c.chat_id, c.thread_id FROM conversations c "
    "JOIN unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS k(bot, platform, chat_id, "
    "thread_id) ON c.bot = k.bot AND c.platform = k.platform AND c.chat_id = k.chat_id "
    "AND c.thread_id = k.thread_id ORDER BY c.id FOR UPDATE OF c"
)
# Their queue state, and which of the batch's platform message ids each already holds (with
# the session number: a second delivery is answered with it).
_BATCH_STATE = BATCH_STATE_SQL.format(
    agg="json_object_agg", mids="= ANY($2::text[])", where="c.id = ANY($1::bigint[])"
)


class WritesPart(IngestBase, QueuePart):
    """Ingest, and the recording of a reply, each in one statement after the locks; the
    claim of due turns in one statement."""

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
        """``QueuePart.claim_due_turns`` in one statement that locks the turn leases
        themselves, ``FOR UPDATE OF l SKIP LOCKED``, and updates them.

        Locking the lease rows, not the conversations, is what keeps concurrent claims from
        wasting work: a claim that reaches a lease another claim has just taken (its snapshot
        older than that commit) finds the row updated, and PostgreSQL re-checks
        ``expires_at <= now`` on the new version (READ COMMITTED's EvalPlanQual), so it passes
        over it instead of reading it and losing the upsert. The claim never waits for a lock
        (SKIP LOCKED), so it cannot take part in a deadlock; ``acquire_lease`` (check-ins) waits
        for it and then sees the lease taken.

        Every conversation has its turn lease row from its creation (``SQLCore._conv_id``;
        migration 13 added the rows of older ones). A due timer found without one gets it
        here, for the next claim (a row a statement inserts is not visible to that statement).
        """
        if limit < 1 or not bots:
            return Claims(())
        d = self.dialect
        args: list[Any] = [now, limit, d.list_arg(bots), *([d.list_arg(skip)] if skip else [])]
        clock = self._db_now or "CAST($1 AS DOUBLE PRECISION)"
        excluded = " AND l.name <> ALL(CAST($4 AS TEXT[]))" if skip else ""
        ttl_at, holder_at = f"${len(args) + 1}", f"${len(args) + 2}"
        async with self._read() as db:  # one statement: its own transaction
            rows = await db.fetch(
                "WITH due AS (SELECT c.bot, c.platform, c.chat_id, c.thread_id, t.due_at, "
                "l.name FROM timers t JOIN conversations c ON c.id = t.conversation_id "
                f"JOIN leases l ON l.name = {cols.TURN_LEASE_SQL} "
                "WHERE t.due_at <= $1 AND c.bot"
                + d.any_of("$3", "TEXT")
                + excluded
                + f" AND l.expires_at <= {clock} ORDER BY t.due_at LIMIT $2 "
                "FOR UPDATE OF l SKIP LOCKED), "
                f"taken AS (UPDATE leases SET holder = {holder_at}, token = leases.token + 1, "
                f"expires_at = {clock} + CAST({ttl_at} AS DOUBLE PRECISION) FROM due "
                "WHERE leases.name = due.name RETURNING leases.name, leases.token, "
                "leases.expires_at), "
                "missing AS (INSERT INTO leases (name, holder, token, expires_at) "
                f"SELECT {cols.TURN_LEASE_SQL}, '', 0, 0 FROM timers t JOIN conversations c "
                "ON c.id = t.conversation_id WHERE t.due_at <= $1 AND c.bot"
                + d.any_of("$3", "TEXT")
                + f" AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.name = {cols.TURN_LEASE_SQL})"
                " ON CONFLICT (name) DO NOTHING) "
                "SELECT due.bot, due.platform, due.chat_id, due.thread_id, due.due_at, due.name, "
                "taken.token, taken.expires_at FROM due LEFT JOIN taken ON taken.name = due.name "
                "ORDER BY due.due_at",
                *args,
                ttl,
                holder,
            )
        return self._claimed(rows, [(r[5], r[6], r[7]) for r in rows], holder)

    async def ingest_many(
        self,
        items: Sequence[tuple[Inbound, QueuePolicy]],
        now: float,
        sessions: SessionPolicy | None = None,
    ) -> list[IngestResult]:
        """The batch in a few round trips: lock every conversation of it (one statement for
        those that exist, in id order; new ones are created and locked in ``sort_key`` order,
        so two batches never wait on each other in a cycle), read all their states after the
        locks (one statement: a racing ingest's commit is seen), number the messages in
        memory (``IngestBase._plan``), then write each message in one statement (version,
        turn, message, media and timer together), pipelined: one round trip for a run of
        messages without media.
        """
        if not items:
            return []
        keys = sorted({inbound.conversation for inbound, _ in items}, key=sort_key)
        mids = sorted({i.platform_message_id for i, _ in items if i.platform_message_id})
        async with self._tx() as db:
            ids = await self._lock_batch(db, keys, now)
            rows = await db.fetch(_BATCH_STATE, list(set(ids.values())), [no_nul(m) for m in mids])
            states = {int(r[0]): IngestState.of(r) for r in rows}
            planned = await self._plan(db, items, ids, states, now, sessions)
            message_ids: list[int] = []
            run: list[list[Any]] = []
            for p in planned:
                if not isinstance(p, Planned):
                    continue
                media_sql, media_args = _media_cte(p.inbound)
                args = _message_args(p, now)
                if not media_sql:
                    run.append(args)
                    continue
                message_ids += await self._write_run(db, run)  # in order: versions count up
                run = []
                row = await db.fetchrow(_WRITE_SQL.format(media=media_sql), *args, *media_args)
                assert row is not None
                message_ids.append(int(row[0]))
            message_ids += await self._write_run(db, run)
        return results(planned, message_ids)

    @staticmethod
    async def _write_run(db: Conn, run: Sequence[Sequence[Any]]) -> list[int]:
        if not run:
            return []
        return [int(r[0]) for r in await db.fetchmany(_WRITE_SQL.format(media=""), run)]

    async def _lock_batch(
        self, db: Conn, keys: Sequence[ConversationKey], now: float
    ) -> dict[ConversationKey, int]:
        """Lock the batch's conversations (creating the new ones): key -> row id."""
        columns = [
            [no_nul(v) for v in column] for column in zip(*map(conv_args, keys), strict=True)
        ]
        rows = await db.fetch(_LOCK_BATCH, *columns)
        found = {(r[1], r[2], r[3], r[4]): int(r[0]) for r in rows}
        ids: dict[ConversationKey, int] = {}
        for key in keys:  # sort_key order: new ones are created (and locked) in it
            conv_id = found.get(conv_args(key)) or await self._conv_id(db, key, now)
            assert conv_id is not None
            ids[key] = conv_id
        return ids

    async def _record_reply(self, db: Conn, row: ReplyRow) -> tuple[int, int]:
        """The next turn, the reply, its messages answered and its outbox row in one statement."""
        usage = row.usage
        recorded = await db.fetchrow(
            "WITH t AS (UPDATE sessions SET next_turn = next_turn + 1, last_activity_at = $3 "
            "WHERE id = $2 RETURNING next_turn - 1 AS turn), "
            "r AS (INSERT INTO messages (conversation_id, session_id, turn, role, author_id, "
            "display_name, text, version, pending, created_at, input_tokens, output_tokens, "
            "cache_write_tokens, cache_read_tokens, model, persona) "
            "SELECT $1, $2, t.turn, 'assistant', 'assistant', '', $4::text, $5::bigint, "
            "FALSE, $3, $8::integer, $9::integer, $10::integer, $11::integer, $12::text, "
            "$13::text FROM t RETURNING id), "
            "a AS (UPDATE messages SET pending = FALSE, answered_by = (SELECT id FROM r) "
            "WHERE id = ANY($6::bigint[])) "
            "INSERT INTO outbox (conversation_id, session_id, reply_message_id, text, "
            "reply_to, created_at) SELECT $1, $2, r.id, $4, $7::text, $3 FROM r "
            "RETURNING reply_message_id, id",
            row.conv_id,
            row.sid,
            row.now,
            row.text,
            row.version,
            list(row.answers),
            row.reply_to,
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_creation_input_tokens,
            usage.cache_read_input_tokens,
            row.model,
            row.persona,
        )
        assert recorded is not None
        return int(recorded[0]), int(recorded[1])


# The media columns as arrays (one element per media of the message), after $13.
_MEDIA_ARRAYS: Final = (
    "integer",
    "text",
    "text",
    "text",
    "text",
    "text",
    "bigint",
    "bigint",
    "bigint",
    "float8",
)


def _media_cte(inbound: Inbound) -> tuple[str, list[list[Any]]]:
    """The CTE that writes the message's media rows in the same statement (none without
    media), and its arguments: one array per column, from $14."""
    if not inbound.media:
        return "", []
    rows = cols.media_rows(inbound.media, 0.0)
    columns = [
        [no_nul(v) if t == "text" else v for v in column]
        for t, column in zip(_MEDIA_ARRAYS, zip(*(r[:-1] for r in rows), strict=True), strict=True)
    ]
    arrays = ", ".join(f"${14 + i}::{t}[]" for i, t in enumerate(_MEDIA_ARRAYS))
    names = cols.MEDIA_INSERT_COLS.removesuffix(", updated_at")
    sql = (
        f"md AS (INSERT INTO media (message_id, {cols.MEDIA_INSERT_COLS}) "
        f"SELECT m.id, {', '.join('x.' + n.strip() for n in names.split(','))}, $3 "
        f"FROM m, unnest({arrays}) AS x({names})), "
    )
    return sql, columns
