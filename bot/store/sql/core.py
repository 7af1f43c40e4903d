"""What every shared store part uses: transactions, conversation and session rows, the
timer after a turn, tombstones and migrations (docs/architecture.md#queue, #keys)."""

from __future__ import annotations

import abc
import logging
from collections.abc import Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, ClassVar

from bot.core.agenda import NewReminder
from bot.core.errors import StoreError
from bot.core.events import (
    ConversationKey,
    Lease,
    OutboxItem,
    QueuePolicy,
    SessionKey,
    SessionPolicy,
)
from bot.core.llm import Usage
from bot.core.media import StoredMedia
from bot.core.queue_rules import settle
from bot.core.sessions import expiry_reason
from bot.store import cols, tombstones
from bot.store.base import BaseStore
from bot.store.sql.conn import Conn, Dialect

log = logging.getLogger("personabot.store")

CONV_WHERE = "bot = $1 AND platform = $2 AND chat_id = $3 AND thread_id = $4"
CONV_WHERE_C = "c.bot = $1 AND c.platform = $2 AND c.chat_id = $3 AND c.thread_id = $4"
#: A session's row id by its key (``session_args``: $1-$5), as a scalar subquery: a statement
#: that needs the row id finds it itself instead of a lookup before it (one round trip, not
#: two). NULL when the session does not exist.
SESSION_ID = (
    "(SELECT s.id FROM sessions s JOIN conversations c ON c.id = s.conversation_id "
    f"WHERE {CONV_WHERE_C} AND s.session_no = $5)"
)


@dataclass(frozen=True, slots=True)
class ReplyRow:
    """A message that passed the final check, as ``SQLCore._record`` writes it: a reply
    (``answers`` the turn's messages) or a message the persona writes first (none)."""

    conv_id: int
    sid: int
    session: SessionKey
    version: int
    answers: tuple[int, ...]
    text: str
    now: float
    usage: Usage
    model: str | None
    reply_to: str | None = None
    # A scene's speaker (docs/scenes.md): its outbox row goes out in that persona's voice.
    persona: str | None = None

    def outbox(self, reply_id: int, outbox_id: int) -> OutboxItem:
        """The outbox row written with it, for Delivery."""
        return OutboxItem(
            id=outbox_id,
            conversation=self.session.conversation,
            session=self.session,
            text=self.text,
            reply_message_id=reply_id,
            created_at=self.now,
            reply_to_platform_message_id=self.reply_to,
            persona=self.persona,
        )


def refuse_blank(text: str) -> None:
    """StoreError for an empty or whitespace-only message: recorded, it would make every
    later request of the session fail."""
    if not text.strip():
        raise StoreError("refusing to record an empty or whitespace-only message")


def conv_args(key: ConversationKey) -> tuple[str, str, str, str]:
    """The four key columns of a conversation, in CONV_WHERE order."""
    return (key.bot, key.platform, key.chat_id, cols.thread_value(key))


def session_args(session: SessionKey) -> tuple[str, str, str, str, int]:
    """The conversation's key columns and the session number, in SESSION_ID order."""
    return (*conv_args(session.conversation), session.session_id)


class SQLCore(BaseStore):
    """The transactions a backend provides and the helpers written on top of them."""

    dialect: ClassVar[Dialect]
    #: The database's clock as epoch seconds, when leases follow it (PostgreSQL's
    #: ``use_db_clock``); None: the caller's ``now``.
    _db_now: str | None = None
    #: Store operations running or waiting for a connection in this process, counted by the
    #: backend around every connection it hands out (tests wait for it to reach 0: settle()).
    _in_flight: int

    async def _serialize(self, db: Conn, key: str) -> None:
        """Serialize transactions that share ``key`` until commit (a backend whose write
        transactions are not serialized anyway takes a lock here)."""

    @abc.abstractmethod
    def _tx(self) -> AbstractAsyncContextManager[Conn]:
        """One write transaction; atomic across processes (see the backend for how)."""

    @abc.abstractmethod
    def _snapshot(self) -> AbstractAsyncContextManager[Conn]:
        """A read transaction whose statements all see one snapshot."""

    @abc.abstractmethod
    def _read(self) -> AbstractAsyncContextManager[Conn]:
        """A connection for single-statement reads (each sees committed data)."""

    @abc.abstractmethod
    def _write(self) -> AbstractAsyncContextManager[Conn]:
        """A connection for one write statement, atomic by itself (autocommit): what a write
        transaction gives a single statement, without its BEGIN and COMMIT round trips. Only
        for writes that are one statement; anything that reads and then writes is a ``_tx``."""

    # -- migrations ----------------------------------------------------------------------------

    async def _apply_migrations(self, db: Conn, migrations: Sequence[tuple[int, str]]) -> None:
        """Apply the versions not applied yet, in one transaction (the caller's)."""
        await db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        # Versions are applied by membership, not by "newer than the newest applied":
        # versions merged out of order (a 3 after a 4) are still applied once.
        applied = {int(r[0]) for r in await db.fetch("SELECT version FROM schema_version")}
        current = max(applied, default=0)
        latest = max(v for v, _ in migrations)
        if current > latest:
            raise StoreError(
                f"database schema version {current} is newer than this personabot "
                f"({latest}); upgrade personabot"
            )
        for version, script in migrations:
            if version not in applied:
                await self._run_script(db, script)
                await db.execute("INSERT INTO schema_version VALUES ($1)", version)
                log.info("applied schema migration %d", version)

    @abc.abstractmethod
    async def _run_script(self, db: Conn, script: str) -> None:
        """Run one migration script (several statements)."""

    async def schema_version(self) -> int:
        async with self._read() as db:
            return int(await db.fetchval("SELECT MAX(version) FROM schema_version") or 0)

    # -- conversations and sessions ------------------------------------------------------------

    async def _conv_id(
        self, db: Conn, key: ConversationKey, now: float | None = None, *, lock: bool = False
    ) -> int | None:
        """The conversation's row id; created when ``now`` is given; with ``lock`` (or
        ``now``) its row is locked for the rest of the transaction.

        Every transaction that changes a conversation's queue state takes this lock first,
        which serializes them per conversation across processes (on SQLite the write
        transaction itself does).
        """
        args = conv_args(key)
        lock_sql = "SELECT id FROM conversations WHERE " + CONV_WHERE
        if lock or now is not None:
            lock_sql += self.dialect.for_update
        found = await db.fetchval(lock_sql, *args)
        if found is not None or now is None:
            return None if found is None else int(found)
        # A new row is locked by its inserter until commit; a racing inserter gets no row
        # back (DO NOTHING) and then waits on the lock below.
        created = await db.fetchval(
            "INSERT INTO conversations (bot, platform, chat_id, thread_id, created_at) "
            "VALUES ($1, $2, $3, $4, $5) ON CONFLICT (bot, platform, chat_id, thread_id) "
            "DO NOTHING RETURNING id",
            *args,
            now,
        )
        if created is None:
            created = await db.fetchval(lock_sql, *args)
        else:
            # Its turn lease, free: PostgreSQL's claim locks lease rows, so one must exist
            # for the conversation's timers to be claimed (docs/scaling.md#claims).
            await db.execute(
                "INSERT INTO leases (name, holder, token, expires_at) SELECT "
                f"{cols.TURN_LEASE_SQL}, '', 0, 0 FROM conversations c WHERE c.id = $1 "
                "ON CONFLICT (name) DO NOTHING",
                created,
            )
        return int(created)

    @staticmethod
    async def _session_row(db: Conn, session: SessionKey) -> tuple[int, int] | None:
        """(session row id, conversation row id) for a session key."""
        row = await db.fetchrow(
            "SELECT s.id, c.id FROM sessions s JOIN conversations c ON c.id = s.conversation_id "
            f"WHERE {CONV_WHERE_C} AND s.session_no = $5",
            *conv_args(session.conversation),
            session.session_id,
        )
        return None if row is None else (int(row[0]), int(row[1]))

    @staticmethod
    async def _open_row(db: Conn, conv_id: int) -> Any:
        """(row id, SESSION_COLS...) of the conversation's open session, or None."""
        return await db.fetchrow(
            f"SELECT id, {cols.SESSION_COLS} FROM sessions "
            "WHERE conversation_id = $1 AND status = 'open'",
            conv_id,
        )

    @staticmethod
    async def _session_by_id(db: Conn, sid: int) -> Any:
        return await db.fetchrow(f"SELECT {cols.SESSION_COLS} FROM sessions WHERE id = $1", sid)

    @staticmethod
    async def _rotate(
        db: Conn, conv_id: int, now: float, reason: str | None, persona: str | None = None
    ) -> tuple[int, int]:
        """Close the open session (if ``reason``) and open the next one: (row id, number).
        The new session has ``persona``, or (None) the persona of the newest session."""
        if reason is not None:
            await db.execute(
                "UPDATE sessions SET status = 'closed', closed_at = $1, close_reason = $2 "
                "WHERE conversation_id = $3 AND status = 'open'",
                now,
                reason,
                conv_id,
            )
        row = await db.fetchrow(
            "INSERT INTO sessions (conversation_id, session_no, status, opened_at, "
            "last_activity_at, persona) SELECT $1, COALESCE(MAX(session_no), 0) + 1, 'open', "
            "CAST($2 AS DOUBLE PRECISION), $2, COALESCE(CAST($3 AS TEXT), (SELECT persona "
            "FROM sessions WHERE conversation_id = $1 ORDER BY session_no DESC LIMIT 1)) "
            "FROM sessions WHERE conversation_id = $1 RETURNING id, session_no",
            conv_id,
            now,
            persona,
        )
        assert row is not None
        return int(row[0]), int(row[1])

    async def _ensure_open(
        self, db: Conn, conv_id: int, now: float, policy: SessionPolicy | None
    ) -> tuple[int, int]:
        """(session row id, session number) of the open session, rotating an expired one."""
        row = await self._open_row(db, conv_id)
        if row is None:
            return await self._rotate(db, conv_id, now, None)
        reason = (
            None
            if policy is None
            else expiry_reason(
                policy, opened_at=float(row[3]), last_activity_at=float(row[4]), now=now
            )
        )
        if reason is None:
            return int(row[0]), int(row[1])
        return await self._rotate(db, conv_id, now, reason)

    # -- media ---------------------------------------------------------------------------------

    async def _load_media(
        self, db: Conn, message_ids: Iterable[int]
    ) -> dict[int, tuple[StoredMedia, ...]]:
        """The media of these messages (by message id, in order): one query for the batch."""
        wanted = sorted(set(message_ids))
        if not wanted:
            return {}
        rows = await db.fetch(
            f"SELECT {cols.MEDIA_COLS} FROM media WHERE message_id"
            + self.dialect.any_of("$1")
            + " ORDER BY message_id, position",
            self.dialect.list_arg(wanted),
        )
        return cols.media_by_message(rows)

    async def _media_for(
        self, db: Conn, rows: Iterable[Any], offset: int = 0
    ) -> dict[int, tuple[StoredMedia, ...]]:
        """The media of messages read as MSG_COLS rows (from column ``offset``): none is
        looked for when no row counts any (the common case costs no query)."""
        return await self._load_media(
            db,
            (int(r[offset]) for r in rows if r[offset + cols.MEDIA_COUNT_AT]),
        )

    # -- the queue's timer ---------------------------------------------------------------------

    async def _settle_timer(self, db: Conn, conv_id: int, v0: int, queue: QueuePolicy) -> None:
        """After a turn closed, the timer reflects what is still pending (rules.settle)."""
        is_pending = f"pending = {self.dialect.true}"
        # The common case in one statement: nothing is pending any more and the timer is not
        # newer than the turn, so it goes (settle's None). Otherwise read and let the rule say.
        if await db.execute(
            "DELETE FROM timers WHERE conversation_id = $1 AND armed_version <= $2 AND NOT "
            f"EXISTS (SELECT 1 FROM messages WHERE conversation_id = $1 AND {is_pending})",
            conv_id,
            v0,
        ):
            return
        remaining = await db.fetchrow(
            "SELECT MIN(created_at), MAX(created_at), MAX(version) FROM messages "
            f"WHERE conversation_id = $1 AND {is_pending}",
            conv_id,
        )
        pending = (
            None
            if remaining is None or remaining[0] is None
            else (float(remaining[0]), float(remaining[1]), int(remaining[2]))
        )
        timer = settle(queue, pending)
        if timer is None:
            # Nothing pending: the statement above removed the timer, unless input newer than
            # v0 armed it meanwhile (then it is kept), in this same transaction.
            return
        await db.execute(
            "INSERT INTO timers (conversation_id, due_at, first_pending_at, armed_version) "
            "VALUES ($1, $2, $3, $4) ON CONFLICT (conversation_id) DO UPDATE SET "
            "due_at = excluded.due_at, first_pending_at = excluded.first_pending_at, "
            f"armed_version = {self.dialect.greatest}(timers.armed_version, "
            "excluded.armed_version)",
            conv_id,
            timer.due_at,
            timer.first_pending_at,
            timer.armed_version,
        )

    async def _record(self, db: Conn, row: ReplyRow) -> OutboxItem:
        """The final check's one write, for a reply and for a message the persona writes
        first alike (``finish_turn``, ``finish_proactive``): the reply's rows, and the outbox
        row Delivery sends (docs/architecture.md#delivery)."""
        reply_id, outbox_id = await self._record_reply(db, row)
        return row.outbox(reply_id, outbox_id)

    async def _record_reply(self, db: Conn, row: ReplyRow) -> tuple[int, int]:
        """Write a reply that passed the final check: the next turn of its session, its
        messages marked answered by it, its outbox row; (reply id, outbox id)."""
        d = self.dialect
        reply_turn = int(
            await db.fetchval(
                "UPDATE sessions SET next_turn = next_turn + 1, last_activity_at = $1 "
                "WHERE id = $2 RETURNING next_turn - 1",
                row.now,
                row.sid,
            )
        )
        reply_id = int(
            await db.fetchval(
                "INSERT INTO messages (conversation_id, session_id, turn, role, author_id, "
                "display_name, text, version, pending, created_at, model, input_tokens, "
                "output_tokens, cache_write_tokens, cache_read_tokens, persona) VALUES ($1, $2, "
                f"$3, 'assistant', 'assistant', '', $4, $5, {d.false}, $6, $7, $8, $9, $10, $11, "
                "$12) RETURNING id",
                row.conv_id,
                row.sid,
                reply_turn,
                row.text,
                row.version,
                row.now,
                row.model,
                *cols.usage_values(row.usage),
                row.persona,
            )
        )
        if row.answers:
            await db.execute(
                f"UPDATE messages SET pending = {d.false}, answered_by = $1 WHERE id"
                + d.any_of("$2"),
                reply_id,
                d.list_arg(row.answers),
            )
        outbox_id = await db.fetchval(
            "INSERT INTO outbox (conversation_id, session_id, reply_message_id, text, "
            "reply_to, created_at) VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
            row.conv_id,
            row.sid,
            reply_id,
            row.text,
            row.reply_to,
            row.now,
        )
        return reply_id, int(outbox_id)

    async def _add_reminders(
        self, db: Conn, conv_id: int, reminders: Sequence[NewReminder], now: float
    ) -> None:
        """Store reminders agreed to by a reply being recorded (the same transaction)."""
        await db.executemany(
            "INSERT INTO reminders (conversation_id, user_id, about, due_at, timezone, "
            "created_at) VALUES ($1, $2, $3, $4, $5, $6)",
            [(conv_id, r.user_id, r.about, r.due_at, r.timezone, now) for r in reminders],
        )

    async def _lease_token(self, db: Conn, name: str) -> int | None:
        """The lease's current token, its row locked to the end of the transaction: a
        takeover of an expired lease waits for this transaction (the final check)."""
        token = await db.fetchval(
            "SELECT token FROM leases WHERE name = $1" + self.dialect.for_update, name
        )
        return None if token is None else int(token)

    async def _held(self, db: Conn, conversation: ConversationKey, lease: Lease) -> int | None:
        """The conversation's row id, its row and then the lease's locked (the order of
        every final check), when ``lease`` is still ours; None when fenced (or no such
        conversation). Until commit no takeover can read the turn's messages."""
        conv_id = await self._conv_id(db, conversation, lock=True)
        token = await self._lease_token(db, lease.name)
        return conv_id if conv_id is not None and token == lease.token else None

    # -- tombstones ----------------------------------------------------------------------------

    @staticmethod
    async def _bury(db: Conn, rows: Iterable[tuple[int, int]], reason: str, now: float) -> None:
        """Tombstone (session row id, turn) pairs deleted in this transaction: the gap check
        then knows personabot removed them, and why."""
        await db.executemany(
            "INSERT INTO tombstones (session_id, first_turn, last_turn, reason, at) "
            "VALUES ($1, $2, $3, $4, $5)",
            [(sid, first, last, reason, now) for sid, first, last in tombstones.runs(rows)],
        )
