"""PostgreSQL store (asyncpg): the store for several processes or machines on one database.

Semantics mirror the SQLite store (the reference) statement for statement; what differs is how
atomicity is reached when several processes write at once:

- Every write is one transaction (READ COMMITTED). Every transaction that changes a
  conversation's queue state (messages, version, timer, sessions) first takes the
  conversation's row lock (``SELECT ... FOR UPDATE``, the row created if needed). Those
  transactions therefore run one after another per conversation, as SQLite's
  ``BEGIN IMMEDIATE`` runs all of them one after another, and every statement after the lock
  sees what the previous holder committed. Conversations never wait for each other.
- A duplicate delivery is found under that lock; the partial unique index on
  ``(conversation_id, platform_message_id)`` stands behind it.
- The lease CAS is one statement (``INSERT ... ON CONFLICT DO UPDATE ... WHERE
  leases.expires_at <= now RETURNING token``): PostgreSQL locks the conflicting row and
  evaluates the WHERE on its latest version, so of two racing workers exactly one wins.
- The final check (``finish_turn``) locks the conversation and then the lease row
  (``FOR UPDATE``), so a worker cannot take over an expired lease, read the pending messages
  and answer them again while the previous holder is committing its reply: the takeover waits
  for that commit and then finds nothing pending.
- ``pending_turn`` reads v0 and the messages in one REPEATABLE READ snapshot.
- Due timers are found by an index on ``due_at``; workers of several processes may see the
  same due timer, and the lease CAS decides which one runs the turn (no ``SKIP LOCKED``
  needed: a loser backs off after one cheap statement).
- Migrations run in one transaction under a transaction-level advisory lock, so processes
  starting together migrate once.

Clocks: the contract passes ``now`` from the caller's injected clock, and this store uses it
everywhere, exactly like SQLite, so the contract suite runs on a manual clock. With several
machines their clocks must then be NTP-synced: skew never causes a duplicate reply (fencing
tokens and the version check are decided in the database) but a fast clock takes an expired
lease early and skews debounce timings. With ``use_db_clock=True`` (what ``personabot run``
uses through ``bot.app.build_store``) lease expiry (acquire and renew) is decided by the
database server's clock instead, ignoring ``now``; debounce timers keep the callers' clocks.

Secrets: the password comes from the URL or ``PGPASSWORD`` (libpq rules, applied by asyncpg);
it never appears in an error message or a log line of this module.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from typing import TYPE_CHECKING, Any, Final, TypeAlias
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from bot.errors import StoreError
from bot.events import (
    NOT_SET,
    ConversationKey,
    DueTimer,
    EditOutcome,
    FinishResult,
    Inbound,
    IngestResult,
    Lease,
    NotSet,
    OldMessages,
    OutboxItem,
    QueuePolicy,
    Reservation,
    RetentionEntry,
    SessionInfo,
    SessionKey,
    SessionPolicy,
    StoredMessage,
    StoredSummary,
    Turn,
    UsageStats,
    UserKey,
)
from bot.llm.base import Usage
from bot.sessions import expiry_reason
from bot.store import cols
from bot.store.base import BaseStore
from bot.store.migrations.postgres import MIGRATION_LOCK, MIGRATIONS

log = logging.getLogger("personabot.store")

if TYPE_CHECKING:
    Conn: TypeAlias = asyncpg.pool.PoolConnectionProxy[asyncpg.Record]

_DRIVER_ERRORS: Final = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError)
_DB_NOW: Final = "extract(epoch FROM clock_timestamp())::float8"
_CONV_WHERE: Final = "bot = $1 AND platform = $2 AND chat_id = $3 AND thread_id = $4"


def is_postgres_url(url: str) -> bool:
    """Whether ``url`` names a PostgreSQL database."""
    return url.startswith(("postgresql://", "postgres://"))


def redact_url(url: str) -> str:
    """The URL with its password (if any) replaced by ``***``: safe to show and log."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return url.split(":", 1)[0] + "://..."
    if not password:
        return url
    userinfo, _, hostinfo = parts.netloc.rpartition("@")
    user = userinfo.split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{hostinfo}"))


def _conv_args(key: ConversationKey) -> tuple[str, str, str, str]:
    return (key.bot, key.platform, key.chat_id, cols.thread_value(key))


def _rowcount(status: str) -> int:
    """Rows touched, from a command tag such as ``UPDATE 3`` or ``DELETE 0``."""
    tail = status.rsplit(" ", 1)[-1]
    return int(tail) if tail.isdigit() else 0


async def _keep_session_state(conn: object) -> None:
    """Pool reset hook: nothing to reset (no session state is ever set), saves a round trip."""


class PostgresStore(BaseStore):
    """The BaseStore contract on one PostgreSQL database, shared by any number of processes."""

    def __init__(
        self,
        *,
        dsn: str,
        min_pool: int = 1,
        max_pool: int = 10,
        use_db_clock: bool = False,
        connect_timeout: float = 10.0,
    ) -> None:
        if not is_postgres_url(dsn):
            raise StoreError(f"not a PostgreSQL URL: {redact_url(dsn)}")
        if not 0 <= min_pool <= max_pool or max_pool < 1:
            raise StoreError(
                f"pool sizes: need 0 <= min ({min_pool}) <= max ({max_pool}), max >= 1"
            )
        self._dsn = dsn
        self._min_pool = min_pool
        self._max_pool = max_pool
        self._connect_timeout = connect_timeout
        self.use_db_clock = use_db_clock
        self._pool: asyncpg.Pool[asyncpg.Record] | None = None
        self._in_flight = 0
        now = _DB_NOW if use_db_clock else "$4::float8"
        self._acquire_sql = (
            "INSERT INTO leases (name, holder, token, expires_at) "
            f"VALUES ($1, $2, 1, {now} + $3::float8) "
            "ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, "
            "token = leases.token + 1, expires_at = EXCLUDED.expires_at "
            f"WHERE leases.expires_at <= {now} RETURNING token, expires_at"
        )
        self._renew_sql = (
            f"UPDATE leases SET expires_at = {_DB_NOW if use_db_clock else '$5::float8'} "
            "+ $4::float8 "
            "WHERE name = $1 AND token = $2 AND holder = $3 RETURNING expires_at"
        )

    @property
    def dsn(self) -> str:
        """The database URL without its password."""
        return redact_url(self._dsn)

    def _redact(self, text: str) -> str:
        """``text`` with every known secret (URL password, PGPASSWORD) masked."""
        secrets = [os.environ.get("PGPASSWORD", "")]
        with suppress(ValueError):
            secrets.append(urlsplit(self._dsn).password or "")
        for secret in secrets:
            if secret:
                text = text.replace(secret, "***")
        return text

    # -- lifecycle ----------------------------------------------------------------------------

    async def open(self) -> None:
        """Create the connection pool and migrate."""
        if self._pool is not None:
            return
        try:
            pool = await asyncpg.create_pool(
                self._dsn,
                min_size=self._min_pool,
                max_size=self._max_pool,
                timeout=self._connect_timeout,
                reset=_keep_session_state,
                server_settings={"application_name": "personabot"},
            )
        except (*_DRIVER_ERRORS, ValueError) as exc:
            # Not chained: the driver's message may quote the URL, password included.
            raise StoreError(
                self._redact(f"cannot connect to PostgreSQL at {self.dsn}: {exc}")
            ) from None
        self._pool = pool
        try:
            await self._migrate()
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        """Close the pool (waits for connections in use to be released)."""
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

    @property
    def in_flight(self) -> int:
        """Operations running or waiting for a pool connection (for drains and tests)."""
        return self._in_flight

    @asynccontextmanager
    async def _conn(self) -> AsyncIterator[Conn]:
        if self._pool is None:
            raise StoreError("store is not open")
        self._in_flight += 1
        try:
            async with self._pool.acquire() as conn:
                yield conn
        except _DRIVER_ERRORS as exc:
            raise StoreError(self._redact(f"PostgreSQL failed: {exc}")) from exc
        finally:
            self._in_flight -= 1

    @asynccontextmanager
    async def _tx(self) -> AsyncIterator[Conn]:
        """One write transaction (READ COMMITTED; callers take the row locks they need)."""
        async with self._conn() as conn, conn.transaction():
            yield conn

    @asynccontextmanager
    async def _snapshot(self) -> AsyncIterator[Conn]:
        """A read-only transaction that sees one snapshot for all its statements."""
        async with (
            self._conn() as conn,
            conn.transaction(isolation="repeatable_read", readonly=True),
        ):
            yield conn

    async def _migrate(self) -> None:
        async with self._tx() as db:
            # Held to the end of this transaction: a second process waits here, then finds
            # the migrations applied.
            await db.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK)
            await db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            current = int(await db.fetchval("SELECT MAX(version) FROM schema_version") or 0)
            latest = MIGRATIONS[-1][0]
            if current > latest:
                raise StoreError(
                    f"database schema version {current} is newer than this personabot "
                    f"({latest}); upgrade personabot"
                )
            for version, script in MIGRATIONS:
                if version > current:
                    await db.execute(script)
                    await db.execute("INSERT INTO schema_version VALUES ($1)", version)
                    log.info("applied schema migration %d", version)

    async def schema_version(self) -> int:
        """The applied schema version."""
        async with self._conn() as db:
            return int(await db.fetchval("SELECT MAX(version) FROM schema_version") or 0)

    # -- helpers ------------------------------------------------------------------------------

    @staticmethod
    async def _lock_conv(db: Conn, key: ConversationKey, now: float | None = None) -> int | None:
        """Lock the conversation's row for this transaction; create it when ``now`` is given.

        Every transaction that changes queue state takes this lock first, which serializes
        them per conversation across processes.
        """
        args = _conv_args(key)
        lock = f"SELECT id FROM conversations WHERE {_CONV_WHERE} FOR UPDATE"
        found = await db.fetchval(lock, *args)
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
            created = await db.fetchval(lock, *args)
        return int(created)

    async def _session_row(self, db: Conn, session: SessionKey) -> tuple[int, int] | None:
        """(session row id, conversation row id) for a session key."""
        row = await db.fetchrow(
            "SELECT s.id, c.id FROM sessions s JOIN conversations c ON c.id = s.conversation_id "
            "WHERE c.bot = $1 AND c.platform = $2 AND c.chat_id = $3 AND c.thread_id = $4 "
            "AND s.session_no = $5",
            *_conv_args(session.conversation),
            session.session_id,
        )
        return None if row is None else (int(row[0]), int(row[1]))

    @staticmethod
    async def _open_row(db: Conn, conv_id: int) -> Any:
        return await db.fetchrow(
            f"SELECT id, {cols.SESSION_COLS} FROM sessions "
            "WHERE conversation_id = $1 AND status = 'open'",
            conv_id,
        )

    @staticmethod
    async def _session_by_id(db: Conn, sid: int) -> Any:
        return await db.fetchrow(f"SELECT {cols.SESSION_COLS} FROM sessions WHERE id = $1", sid)

    @staticmethod
    async def _rotate(db: Conn, conv_id: int, now: float, reason: str | None) -> tuple[int, int]:
        """Close the open session (if ``reason``) and open the next one: (row id, number)."""
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
            "last_activity_at) SELECT $1, COALESCE(MAX(session_no), 0) + 1, 'open', $2::float8, $2 "
            "FROM sessions WHERE conversation_id = $1 RETURNING id, session_no",
            conv_id,
            now,
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

    # -- sessions -----------------------------------------------------------------------------

    async def open_session(
        self, conversation: ConversationKey, now: float, policy: SessionPolicy | None = None
    ) -> SessionInfo:
        """The open session, opening the next one when none is open or it expired."""
        async with self._tx() as db:
            conv_id = await self._lock_conv(db, conversation, now)
            assert conv_id is not None
            sid, _ = await self._ensure_open(db, conv_id, now, policy)
            row = await self._session_by_id(db, sid)
        return cols.session_info(conversation, row)

    async def current_session(self, conversation: ConversationKey) -> SessionInfo | None:
        """The open session or None."""
        async with self._conn() as db:
            row = await db.fetchrow(
                f"SELECT {cols.SESSION_COLS} FROM sessions WHERE status = 'open' "
                f"AND conversation_id = (SELECT id FROM conversations WHERE {_CONV_WHERE})",
                *_conv_args(conversation),
            )
        return None if row is None else cols.session_info(conversation, row)

    async def new_session(
        self, conversation: ConversationKey, now: float, reason: str = "new"
    ) -> SessionInfo:
        """Close the open session and open the next, atomically."""
        async with self._tx() as db:
            conv_id = await self._lock_conv(db, conversation, now)
            assert conv_id is not None
            sid, _ = await self._rotate(db, conv_id, now, reason)
            row = await self._session_by_id(db, sid)
        return cols.session_info(conversation, row)

    async def close_session(
        self, conversation: ConversationKey, now: float, reason: str = "closed"
    ) -> SessionInfo | None:
        """Close the open session, if any."""
        async with self._tx() as db:
            conv_id = await self._lock_conv(db, conversation)
            if conv_id is None:
                return None
            row = await db.fetchrow(
                "UPDATE sessions SET status = 'closed', closed_at = $1, close_reason = $2 "
                f"WHERE conversation_id = $3 AND status = 'open' RETURNING {cols.SESSION_COLS}",
                now,
                reason,
                conv_id,
            )
        return None if row is None else cols.session_info(conversation, row)

    async def get_session(self, session: SessionKey) -> SessionInfo | None:
        """A session by key."""
        async with self._conn() as db:
            found = await self._session_row(db, session)
            row = None if found is None else await self._session_by_id(db, found[0])
        return None if row is None else cols.session_info(session.conversation, row)

    async def list_sessions(self, conversation: ConversationKey) -> list[SessionInfo]:
        """All sessions, oldest first."""
        async with self._conn() as db:
            rows = await db.fetch(
                f"SELECT {cols.SESSION_COLS} FROM sessions WHERE conversation_id = "
                f"(SELECT id FROM conversations WHERE {_CONV_WHERE}) ORDER BY session_no",
                *_conv_args(conversation),
            )
        return [cols.session_info(conversation, r) for r in rows]

    # -- session scope ------------------------------------------------------------------------

    async def get_state(self, session: SessionKey, name: str) -> str | NotSet:
        """A session-scoped value or NOT_SET."""
        async with self._conn() as db:
            found = await self._session_row(db, session)
            value = (
                None
                if found is None
                else await db.fetchval(
                    "SELECT value FROM session_state WHERE session_id = $1 AND key = $2",
                    found[0],
                    name,
                )
            )
        return NOT_SET if value is None else str(value)

    async def set_state(self, session: SessionKey, name: str, value: str, now: float) -> None:
        """Set a session-scoped value."""
        async with self._tx() as db:
            found = await self._session_row(db, session)
            if found is None:
                raise StoreError(f"unknown session {session}")
            await db.execute(
                "INSERT INTO session_state (session_id, key, value, updated_at) "
                "VALUES ($1, $2, $3, $4) ON CONFLICT (session_id, key) "
                "DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at",
                found[0],
                name,
                value,
                now,
            )

    async def delete_state(self, session: SessionKey, name: str | None = None) -> int:
        """Delete one or all session-scoped values."""
        async with self._tx() as db:
            found = await self._session_row(db, session)
            if found is None:
                return 0
            if name is None:
                status = await db.execute(
                    "DELETE FROM session_state WHERE session_id = $1", found[0]
                )
            else:
                status = await db.execute(
                    "DELETE FROM session_state WHERE session_id = $1 AND key = $2", found[0], name
                )
            return _rowcount(status)

    # -- user scope ---------------------------------------------------------------------------

    async def get_user_memory(self, user: UserKey) -> str | NotSet:
        """A user's memory record or NOT_SET."""
        async with self._conn() as db:
            value = await db.fetchval(
                "SELECT record FROM user_memory WHERE platform = $1 AND user_id = $2",
                user.platform,
                user.user_id,
            )
        return NOT_SET if value is None else str(value)

    async def set_user_memory(self, user: UserKey, record: str, now: float) -> None:
        """Replace a user's memory record."""
        async with self._tx() as db:
            await db.execute(
                "INSERT INTO user_memory (platform, user_id, record, updated_at) "
                "VALUES ($1, $2, $3, $4) ON CONFLICT (platform, user_id) "
                "DO UPDATE SET record = EXCLUDED.record, updated_at = EXCLUDED.updated_at",
                user.platform,
                user.user_id,
                record,
                now,
            )

    async def delete_user_memory(self, user: UserKey) -> bool:
        """Erase a user's memory."""
        async with self._tx() as db:
            status = await db.execute(
                "DELETE FROM user_memory WHERE platform = $1 AND user_id = $2",
                user.platform,
                user.user_id,
            )
        return _rowcount(status) > 0

    # -- messages and queue -------------------------------------------------------------------

    async def ingest(
        self,
        inbound: Inbound,
        now: float,
        queue: QueuePolicy,
        sessions: SessionPolicy | None = None,
    ) -> IngestResult:
        """Store, bump the version, arm the timer: one transaction under the conversation lock.

        Common case in three statements: the lock; one read (duplicate, open session, timer),
        which must come after the lock so that it sees what a racing ingest committed; one
        write (version, turn, message and timer together).
        """
        async with self._tx() as db:
            conv_id = await self._lock_conv(db, inbound.conversation, now)
            assert conv_id is not None
            state = await db.fetchrow(
                "SELECT (SELECT s.session_no FROM messages m JOIN sessions s "
                "ON s.id = m.session_id WHERE m.conversation_id = $1 "
                "AND m.platform_message_id = $2), c.version, t.due_at, t.first_pending_at, "
                "o.id, o.session_no, o.opened_at, o.last_activity_at FROM conversations c "
                "LEFT JOIN timers t ON t.conversation_id = c.id "
                "LEFT JOIN sessions o ON o.conversation_id = c.id AND o.status = 'open' "
                "WHERE c.id = $1",
                conv_id,
                inbound.platform_message_id,
            )
            assert state is not None
            timer_due = None if state[2] is None else float(state[2])
            if state[0] is not None:  # a second delivery of a stored message: no-op
                return IngestResult(
                    stored=False,
                    message_id=None,
                    session=SessionKey(inbound.conversation, int(state[0])),
                    version=int(state[1]),
                    due_at=timer_due,
                )
            reason = (
                None
                if state[4] is None or sessions is None
                else expiry_reason(
                    sessions, opened_at=float(state[6]), last_activity_at=float(state[7]), now=now
                )
            )
            if state[4] is None or reason is not None:
                sid, number = await self._rotate(db, conv_id, now, reason)
            else:
                sid, number = int(state[4]), int(state[5])
            first_pending_at = now if state[3] is None else float(state[3])
            due_at = queue.due_at(now, first_pending_at) if inbound.triggers_reply else timer_due
            row = await db.fetchrow(
                "WITH v AS (UPDATE conversations SET version = version + 1, status = 'active', "
                "status_reason = NULL WHERE id = $1 RETURNING version), "
                "t AS (UPDATE sessions SET next_turn = next_turn + 1, last_activity_at = $3, "
                "last_user_turn = next_turn WHERE id = $2 RETURNING next_turn - 1 AS turn), "
                "m AS (INSERT INTO messages (conversation_id, session_id, turn, role, author_id, "
                "display_name, text, platform_message_id, is_private, version, pending, "
                "created_at) SELECT $1, $2, t.turn, 'user', $4::text, $5::text, $6::text, "
                "$7::text, $8::boolean, v.version, $9::boolean, $3 "
                "FROM v, t RETURNING id, version), "
                # Arm or extend the timer (only for a message that asks for a reply).
                "a AS (INSERT INTO timers (conversation_id, due_at, first_pending_at, "
                "armed_version) SELECT $1, $10::float8, $11::float8, m.version FROM m WHERE $9 "
                "ON CONFLICT (conversation_id) DO UPDATE SET due_at = EXCLUDED.due_at, "
                "armed_version = EXCLUDED.armed_version) "
                "SELECT id, version FROM m",
                conv_id,
                sid,
                now,
                inbound.author_id,
                inbound.display_name,
                inbound.text,
                inbound.platform_message_id,
                inbound.is_private,
                inbound.triggers_reply,
                due_at,
                first_pending_at,
            )
            assert row is not None
        return IngestResult(
            stored=True,
            message_id=int(row[0]),
            session=SessionKey(inbound.conversation, number),
            version=int(row[1]),
            due_at=due_at,
        )

    @staticmethod
    async def _arm(db: Conn, conv_id: int, now: float, queue: QueuePolicy, version: int) -> float:
        """Arm or extend the timer (caller holds the conversation lock)."""
        first = await db.fetchval(
            "SELECT first_pending_at FROM timers WHERE conversation_id = $1", conv_id
        )
        first_pending_at = now if first is None else float(first)
        due_at = queue.due_at(now, first_pending_at)
        await db.execute(
            "INSERT INTO timers (conversation_id, due_at, first_pending_at, armed_version) "
            "VALUES ($1, $2, $3, $4) ON CONFLICT (conversation_id) DO UPDATE SET "
            "due_at = EXCLUDED.due_at, armed_version = EXCLUDED.armed_version",
            conv_id,
            due_at,
            first_pending_at,
            version,
        )
        return due_at

    async def edit_message(
        self,
        conversation: ConversationKey,
        platform_message_id: str,
        text: str,
        now: float,
        queue: QueuePolicy,
    ) -> EditOutcome:
        """Update an unanswered user message; bump the version if it was pending."""
        async with self._tx() as db:
            conv_id = await self._lock_conv(db, conversation)
            row = (
                None
                if conv_id is None
                else await db.fetchrow(
                    "SELECT id, pending, answered_by FROM messages WHERE conversation_id = $1 "
                    "AND platform_message_id = $2 AND role = 'user'",
                    conv_id,
                    platform_message_id,
                )
            )
            if row is None or conv_id is None:
                return "unknown"
            if row[2] is not None:
                return "too_late"
            if not row[1]:
                await db.execute("UPDATE messages SET text = $1 WHERE id = $2", text, row[0])
                return "updated"
            version = int(
                await db.fetchval(
                    "UPDATE conversations SET version = version + 1 WHERE id = $1 "
                    "RETURNING version",
                    conv_id,
                )
            )
            await db.execute(
                "UPDATE messages SET text = $1, version = $2 WHERE id = $3", text, version, row[0]
            )
            await self._arm(db, conv_id, now, queue, version)
            return "updated"

    async def delete_message(
        self, conversation: ConversationKey, platform_message_id: str
    ) -> StoredMessage | None:
        """Delete a stored message by its platform id; return it."""
        async with self._tx() as db:
            row = await db.fetchrow(
                "WITH d AS (DELETE FROM messages WHERE platform_message_id = $5 AND "
                f"conversation_id = (SELECT id FROM conversations WHERE {_CONV_WHERE}) "
                "RETURNING *) "
                f"SELECT {cols.MSG_COLS} FROM d m JOIN sessions s ON s.id = m.session_id",
                *_conv_args(conversation),
                platform_message_id,
            )
        return None if row is None else cols.message(conversation, row)

    async def set_conversation_status(
        self, conversation: ConversationKey, active: bool, reason: str | None = None
    ) -> None:
        """Mark a conversation (in)active."""
        async with self._tx() as db:
            await db.execute(
                f"UPDATE conversations SET status = $5, status_reason = $6 WHERE {_CONV_WHERE}",
                *_conv_args(conversation),
                "active" if active else "inactive",
                reason,
            )

    async def conversation_active(self, conversation: ConversationKey) -> bool:
        """Whether the conversation is active."""
        async with self._conn() as db:
            status = await db.fetchval(
                f"SELECT status FROM conversations WHERE {_CONV_WHERE}", *_conv_args(conversation)
            )
        return bool(status != "inactive")

    async def conversation_version(self, conversation: ConversationKey) -> int:
        """The version counter."""
        async with self._conn() as db:
            version = await db.fetchval(
                f"SELECT version FROM conversations WHERE {_CONV_WHERE}", *_conv_args(conversation)
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
        """Non-pending messages after ``after_turn``: newest (or oldest) ``limit``."""
        order = "ASC" if oldest_first else "DESC"
        async with self._conn() as db:
            found = await self._session_row(db, session)
            if found is None:
                return []
            rows = await db.fetch(
                cols.MESSAGE_SELECT + "WHERE m.session_id = $1 AND NOT m.pending AND m.turn > $2 "
                f"ORDER BY m.turn {order} LIMIT $3",
                found[0],
                after_turn,
                limit,
            )
        if not oldest_first:
            rows.reverse()
        return [cols.message(session.conversation, r) for r in rows]

    async def count_history(self, session: SessionKey, *, after_turn: int = 0) -> int:
        """Count of non-pending messages after ``after_turn``."""
        async with self._conn() as db:
            found = await self._session_row(db, session)
            if found is None:
                return 0
            count = await db.fetchval(
                "SELECT COUNT(*) FROM messages WHERE session_id = $1 AND NOT pending AND turn > $2",
                found[0],
                after_turn,
            )
        return int(count)

    async def get_summary(self, session: SessionKey) -> StoredSummary | None:
        """The session's summary."""
        async with self._conn() as db:
            found = await self._session_row(db, session)
            row = (
                None
                if found is None
                else await db.fetchrow(
                    "SELECT body, first_turn, last_turn, updated_at FROM summaries "
                    "WHERE session_id = $1",
                    found[0],
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
    ) -> bool:
        """CAS on the covered range, one statement: two summarisers never overwrite each other."""
        async with self._tx() as db:
            found = await self._session_row(db, session)
            if found is None:
                raise StoreError(f"unknown session {session}")
            args = (found[0], body, first_turn, last_turn, now)
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
        return saved is not None

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
        """Count and record under a per-user advisory lock: two processes cannot both pass."""
        async with self._tx() as db:
            # Serializes reservations of this user (released at commit); others never wait.
            await db.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
                f"turn_usage:{user.platform}:{user.user_id}",
            )
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
        """Drop a reservation."""
        async with self._tx() as db:
            await db.execute("DELETE FROM turn_usage WHERE id = $1", reservation_id)

    async def usage_since(self, since: float, bot: str | None = None) -> UsageStats:
        """Sum the usage stored with replies."""
        where = " AND m.role = 'assistant' AND m.created_at >= $1" + (
            " AND c.bot = $2" if bot is not None else ""
        )
        args: tuple[object, ...] = (since, bot) if bot is not None else (since,)
        async with self._conn() as db:
            total = await db.fetchrow(
                "SELECT COUNT(*), COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0), "
                "COALESCE(SUM(cache_write_tokens), 0), COALESCE(SUM(cache_read_tokens), 0), "
                "COUNT(DISTINCT m.conversation_id) FROM messages m JOIN conversations c "
                f"ON c.id = m.conversation_id WHERE TRUE{where}",
                *args,
            )
            models = await db.fetch(
                "SELECT COALESCE(model, ''), COALESCE(SUM(input_tokens), 0), "
                "COALESCE(SUM(output_tokens), 0), COALESCE(SUM(cache_write_tokens), 0), "
                "COALESCE(SUM(cache_read_tokens), 0) FROM messages m JOIN conversations c "
                f"ON c.id = m.conversation_id WHERE TRUE{where} GROUP BY model",
                *args,
            )
        assert total is not None
        turns, inp, out, write, read, conversations = (int(v) for v in total)
        return UsageStats(
            turns,
            inp,
            out,
            write,
            read,
            conversations,
            by_model=tuple((str(r[0]), int(r[1]), int(r[2]), int(r[3]), int(r[4])) for r in models),
        )

    async def skip_turn(self, turn: Turn, lease: Lease, now: float, queue: QueuePolicy) -> bool:
        """Handle the turn without a reply, under the same locks and fencing as finish_turn."""
        async with self._tx() as db:
            conv_id = await self._lock_conv(db, turn.session.conversation)
            token = await db.fetchval(
                "SELECT token FROM leases WHERE name = $1 FOR UPDATE", lease.name
            )
            if token != lease.token or conv_id is None:
                return False
            await db.execute(
                "UPDATE messages SET pending = FALSE WHERE id = ANY($1::bigint[])",
                [m.id for m in turn.messages],
            )
            await self._settle_timer(db, conv_id, turn.version, queue)
            return True

    # -- retention ----------------------------------------------------------------------------

    async def session_bounds(self, session: SessionKey) -> tuple[int, int] | None:
        """First and last stored turn."""
        async with self._conn() as db:
            found = await self._session_row(db, session)
            row = (
                None
                if found is None
                else await db.fetchrow(
                    "SELECT MIN(turn), MAX(turn) FROM messages WHERE session_id = $1", found[0]
                )
            )
        if row is None or row[0] is None:
            return None
        return int(row[0]), int(row[1])

    async def sessions_page(
        self, status: str, cursor: int = 0, limit: int = 500
    ) -> tuple[list[SessionInfo], int]:
        """A page of sessions by row id."""
        async with self._conn() as db:
            rows = await db.fetch(
                "SELECT s.id, c.bot, c.platform, c.chat_id, c.thread_id, "
                f"{cols.SESSION_COLS} FROM sessions s JOIN conversations c "
                "ON c.id = s.conversation_id WHERE s.status = $1 AND s.id > $2 "
                "ORDER BY s.id LIMIT $3",
                status,
                cursor,
                limit,
            )
        infos = [
            cols.session_info(cols.conversation_key(r[1], r[2], r[3], r[4]), r[5:]) for r in rows
        ]
        return infos, (int(rows[-1][0]) if len(rows) == limit else 0)

    async def expired_sessions(self, closed_before: float, limit: int = 100) -> list[SessionKey]:
        """Closed sessions past their retention."""
        async with self._conn() as db:
            rows = await db.fetch(
                "SELECT c.bot, c.platform, c.chat_id, c.thread_id, s.session_no FROM sessions s "
                "JOIN conversations c ON c.id = s.conversation_id "
                "WHERE s.status = 'closed' AND s.closed_at <= $1 ORDER BY s.closed_at LIMIT $2",
                closed_before,
                limit,
            )
        return [SessionKey(cols.conversation_key(r[0], r[1], r[2], r[3]), int(r[4])) for r in rows]

    async def expire_session(self, session: SessionKey, now: float) -> int:
        """Delete the whole closed session's data at once."""
        async with self._tx() as db:
            found = await self._session_row(db, session)
            if found is None:
                return 0
            sid, conv_id = found
            # The row lock keeps a concurrent expiry (another process) from logging twice.
            status = await db.fetchval("SELECT status FROM sessions WHERE id = $1 FOR UPDATE", sid)
            if status != "closed":
                return 0  # reopened sessions do not exist; an open one never expires
            bounds = await db.fetchrow(
                "SELECT MIN(turn), MAX(turn), COUNT(*) FROM messages WHERE session_id = $1", sid
            )
            assert bounds is not None
            for table in ("messages", "session_state", "summaries", "outbox"):
                await db.execute(f"DELETE FROM {table} WHERE session_id = $1", sid)
            await db.execute("UPDATE sessions SET status = 'expired' WHERE id = $1", sid)
            count = int(bounds[2])
            if count:
                await self._log_deletion(
                    db, now, conv_id, session, bounds[0], bounds[1], count, "session expired"
                )
            return count

    @staticmethod
    async def _log_deletion(
        db: Conn,
        now: float,
        conv_id: int,
        session: SessionKey,
        first: int,
        last: int,
        count: int,
        reason: str,
    ) -> None:
        await db.execute(
            "INSERT INTO retention_log (at, conversation_id, session_no, first_turn, last_turn, "
            "messages, reason) VALUES ($1, $2, $3, $4, $5, $6, $7)",
            now,
            conv_id,
            session.session_id,
            int(first),
            int(last),
            count,
            reason,
        )

    async def old_messages(self, session: SessionKey, cutoff: float) -> OldMessages | None:
        """Old answered/context messages of a session."""
        async with self._conn() as db:
            found = await self._session_row(db, session)
            row = (
                None
                if found is None
                else await db.fetchrow(
                    "SELECT MIN(turn), MAX(turn), COUNT(*), MIN(created_at) FROM messages "
                    "WHERE session_id = $1 AND NOT pending AND created_at <= $2",
                    found[0],
                    cutoff,
                )
            )
        if row is None or not row[2]:
            return None
        return OldMessages(session, int(row[0]), int(row[1]), int(row[2]), float(row[3]))

    async def sessions_with_old_messages(self, cutoff: float, limit: int = 100) -> list[SessionKey]:
        """Sessions holding old messages."""
        async with self._conn() as db:
            rows = await db.fetch(
                "SELECT c.bot, c.platform, c.chat_id, c.thread_id, s.session_no FROM sessions s "
                "JOIN conversations c ON c.id = s.conversation_id WHERE s.id IN ("
                "SELECT DISTINCT session_id FROM messages WHERE created_at <= $1 AND NOT pending "
                "LIMIT $2)",
                cutoff,
                limit,
            )
        return [SessionKey(cols.conversation_key(r[0], r[1], r[2], r[3]), int(r[4])) for r in rows]

    async def delete_old_messages(
        self, session: SessionKey, through_turn: int, cutoff: float, now: float, limit: int
    ) -> int:
        """One batch of per-message deletions, logged."""
        async with self._tx() as db:
            found = await self._session_row(db, session)
            if found is None:
                return 0
            sid, conv_id = found
            # Row locks (SKIP LOCKED): two processes running retention at once delete and
            # log disjoint batches instead of logging the same range twice.
            rows = await db.fetch(
                "DELETE FROM messages WHERE id IN (SELECT id FROM messages WHERE "
                "session_id = $1 AND NOT pending AND turn <= $2 AND created_at <= $3 "
                "ORDER BY turn LIMIT $4 FOR UPDATE SKIP LOCKED) RETURNING turn",
                sid,
                through_turn,
                cutoff,
                limit,
            )
            if not rows:
                return 0
            turns = sorted(int(r[0]) for r in rows)
            await self._log_deletion(
                db, now, conv_id, session, turns[0], turns[-1], len(turns), "message age"
            )
            return len(turns)

    async def retention_log(self, limit: int = 100) -> list[RetentionEntry]:
        """Newest audit-trail entries."""
        async with self._conn() as db:
            rows = await db.fetch(
                "SELECT r.at, c.bot, c.platform, c.chat_id, c.thread_id, r.session_no, "
                "r.first_turn, r.last_turn, r.messages, r.reason FROM retention_log r "
                "JOIN conversations c ON c.id = r.conversation_id ORDER BY r.id DESC LIMIT $1",
                limit,
            )
        return [
            RetentionEntry(
                float(r[0]),
                SessionKey(cols.conversation_key(r[1], r[2], r[3], r[4]), int(r[5])),
                int(r[6]),
                int(r[7]),
                int(r[8]),
                r[9],
            )
            for r in rows
        ]

    async def delete_user_messages(self, user: UserKey, *, closed_sessions_only: bool) -> int:
        """Delete a person's messages on a platform."""
        status = "AND s.status != 'open'" if closed_sessions_only else ""
        async with self._tx() as db:
            result = await db.execute(
                "DELETE FROM messages WHERE id IN (SELECT m.id FROM messages m "
                "JOIN sessions s ON s.id = m.session_id JOIN conversations c "
                "ON c.id = m.conversation_id WHERE c.platform = $1 AND m.author_id = $2 "
                f"AND m.role = 'user' AND NOT m.pending {status})",
                user.platform,
                user.user_id,
            )
        return _rowcount(result)

    async def sessions_to_extract(
        self, quiet_before: float, limit: int = 20, bots: Sequence[str] | None = None
    ) -> list[tuple[SessionKey, int]]:
        """Closed or quiet sessions with unlearned user messages."""
        bots_filter = "" if bots is None else " AND c.bot = ANY($3::text[])"
        args: list[Any] = [quiet_before, limit] + ([] if bots is None else [list(bots)])
        async with self._conn() as db:
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
                    "UPDATE sessions SET extracted_turn = GREATEST(extracted_turn, $1) "
                    "WHERE id = $2",
                    turn,
                    found[0],
                )

    async def messages(self, session: SessionKey) -> list[StoredMessage]:
        """Every message of a session."""
        async with self._conn() as db:
            found = await self._session_row(db, session)
            rows = (
                []
                if found is None
                else await db.fetch(
                    cols.MESSAGE_SELECT + "WHERE m.session_id = $1 ORDER BY m.turn",
                    found[0],
                )
            )
        return [cols.message(session.conversation, r) for r in rows]

    async def pending_turn(self, conversation: ConversationKey) -> Turn | None:
        """Pending messages of the oldest session with some, plus v0, from one snapshot."""
        async with self._snapshot() as db:
            head = await db.fetchrow(
                "SELECT c.id, c.version, t.first_pending_at, (SELECT MIN(session_id) FROM "
                "messages WHERE conversation_id = c.id AND pending) FROM conversations c "
                "LEFT JOIN timers t ON t.conversation_id = c.id "
                "WHERE c.bot = $1 AND c.platform = $2 AND c.chat_id = $3 AND c.thread_id = $4",
                *_conv_args(conversation),
            )
            if head is None or head[3] is None:
                return None
            version, first_pending = int(head[1]), head[2]
            rows = await db.fetch(
                cols.MESSAGE_SELECT
                + "WHERE m.session_id = $1 AND m.pending AND m.version <= $2 ORDER BY m.turn",
                head[3],
                version,
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
        """Due timers, earliest first (the lease CAS decides who runs each)."""
        bots_filter = "" if bots is None else " AND c.bot = ANY($3::text[])"
        args: list[Any] = [now, limit] + ([] if bots is None else [list(bots)])
        async with self._conn() as db:
            rows = await db.fetch(
                cols.TIMER_SELECT + f"WHERE t.due_at <= $1{bots_filter} ORDER BY t.due_at LIMIT $2",
                *args,
            )
        return [cols.timer(r) for r in rows]

    async def next_due_at(self, bots: Sequence[str] | None = None) -> float | None:
        """Earliest due time."""
        async with self._conn() as db:
            if bots is None:
                value = await db.fetchval("SELECT MIN(due_at) FROM timers")
            else:
                value = await db.fetchval(
                    "SELECT MIN(t.due_at) FROM timers t JOIN conversations c "
                    "ON c.id = t.conversation_id WHERE c.bot = ANY($1::text[])",
                    list(bots),
                )
        return None if value is None else float(value)

    async def timer(self, conversation: ConversationKey) -> DueTimer | None:
        """The conversation's timer."""
        async with self._conn() as db:
            row = await db.fetchrow(
                cols.TIMER_SELECT
                + "WHERE c.bot = $1 AND c.platform = $2 AND c.chat_id = $3 AND c.thread_id = $4",
                *_conv_args(conversation),
            )
        return None if row is None else cols.timer(row)

    async def rearm_timer(self, conversation: ConversationKey, due_at: float) -> None:
        """Move (or arm) the conversation's timer."""
        async with self._tx() as db:
            conv_id = await self._lock_conv(db, conversation)
            if conv_id is None:
                return
            await db.execute(
                "INSERT INTO timers (conversation_id, due_at, first_pending_at, armed_version) "
                "SELECT id, $2::float8, $2::float8, version FROM conversations WHERE id = $1 "
                "ON CONFLICT (conversation_id) DO UPDATE SET due_at = EXCLUDED.due_at",
                conv_id,
                due_at,
            )

    async def clear_timer(
        self, conversation: ConversationKey, armed_version: int, *, only_if_idle: bool = True
    ) -> bool:
        """Remove the timer unless newer input re-armed it (or, by default, input is pending)."""
        idle = " AND NOT EXISTS (SELECT 1 FROM messages WHERE conversation_id = $1 AND pending)"
        async with self._tx() as db:
            # The lock orders this after any ingest in flight: that ingest's message and timer
            # are then visible to the checks below.
            conv_id = await self._lock_conv(db, conversation)
            if conv_id is None:
                return False
            status = await db.execute(
                "DELETE FROM timers WHERE conversation_id = $1 AND armed_version <= $2"
                + (idle if only_if_idle else ""),
                conv_id,
                armed_version,
            )
        return _rowcount(status) > 0

    # -- leases -------------------------------------------------------------------------------

    async def acquire_lease(self, name: str, holder: str, ttl: float, now: float) -> Lease | None:
        """CAS in one statement: succeeds only if free or expired; the token always grows."""
        args: list[Any] = [name, holder, ttl] + ([] if self.use_db_clock else [now])
        async with self._tx() as db:
            row = await db.fetchrow(self._acquire_sql, *args)
        if row is None:
            return None
        return Lease(name=name, holder=holder, token=int(row[0]), expires_at=float(row[1]))

    async def renew_lease(self, lease: Lease, ttl: float, now: float) -> Lease | None:
        """Extend a lease still held under the same token."""
        args: list[Any] = [lease.name, lease.token, lease.holder, ttl]
        async with self._tx() as db:
            expires = await db.fetchval(
                self._renew_sql, *args, *([] if self.use_db_clock else [now])
            )
        if expires is None:
            return None
        return Lease(lease.name, lease.holder, lease.token, float(expires))

    async def release_lease(self, lease: Lease) -> None:
        """Free the lease if still ours."""
        async with self._tx() as db:
            await db.execute(
                "UPDATE leases SET expires_at = 0 WHERE name = $1 AND token = $2 AND holder = $3",
                lease.name,
                lease.token,
                lease.holder,
            )

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
        key = turn.session.conversation
        async with self._tx() as db:
            conv_id = await self._lock_conv(db, key)
            # The lease row stays locked until commit: a takeover of an expired lease waits
            # for this transaction and then sees the messages answered.
            token = await db.fetchval(
                "SELECT token FROM leases WHERE name = $1 FOR UPDATE", lease.name
            )
            found = await self._session_row(db, turn.session)
            if token != lease.token or conv_id is None or found is None:
                return FinishResult("fenced")
            sid = found[0]
            row = await db.fetchrow(
                "SELECT c.version, (SELECT COUNT(*) FROM messages WHERE session_id = $2 "
                "AND pending AND version > $3) FROM conversations c WHERE c.id = $1",
                conv_id,
                sid,
                turn.version,
            )
            assert row is not None
            version, newer = int(row[0]), int(row[1])
            cap_passed = now >= turn.first_pending_at + queue.max_wait
            if newer and not cap_passed:
                # Newer input joined this session while we generated: the timer it armed
                # stays; the next attempt will cover everything.
                return FinishResult("discarded", current_version=version)
            reply_to = turn.messages[-1].platform_message_id if turn.messages else None
            u = usage or Usage()
            recorded = await db.fetchrow(
                "WITH t AS (UPDATE sessions SET next_turn = next_turn + 1, last_activity_at = $3 "
                "WHERE id = $2 RETURNING next_turn - 1 AS turn), "
                "r AS (INSERT INTO messages (conversation_id, session_id, turn, role, author_id, "
                "display_name, text, version, pending, created_at, input_tokens, output_tokens, "
                "cache_write_tokens, cache_read_tokens, model) "
                "SELECT $1, $2, t.turn, 'assistant', 'assistant', '', $4::text, $5::bigint, "
                "FALSE, $3, $8::integer, $9::integer, $10::integer, $11::integer, $12::text FROM t "
                "RETURNING id), "
                "a AS (UPDATE messages SET pending = FALSE, answered_by = (SELECT id FROM r) "
                "WHERE id = ANY($6::bigint[])) "
                "INSERT INTO outbox (conversation_id, session_id, reply_message_id, text, "
                "reply_to, created_at) SELECT $1, $2, r.id, $4, $7::text, $3 FROM r "
                "RETURNING id, reply_message_id",
                conv_id,
                sid,
                now,
                reply,
                turn.version,
                [m.id for m in turn.messages],
                reply_to,
                u.input_tokens,
                u.output_tokens,
                u.cache_creation_input_tokens,
                u.cache_read_input_tokens,
                model,
            )
            assert recorded is not None
            outbox_id, reply_id = int(recorded[0]), int(recorded[1])
            await self._settle_timer(db, conv_id, turn.version, queue)
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

    @staticmethod
    async def _settle_timer(db: Conn, conv_id: int, v0: int, queue: QueuePolicy) -> None:
        """After a recorded turn, the timer reflects what is still pending.

        Nothing pending: drop the timer unless input newer than v0 armed it. Something
        pending (newer input, or messages of a newer session): the timer restarts from those
        messages' own times, so a new burst gets its own debounce and its own hard cap.
        """
        remaining = await db.fetchrow(
            "SELECT MIN(created_at), MAX(created_at), MAX(version) FROM messages "
            "WHERE conversation_id = $1 AND pending",
            conv_id,
        )
        if remaining is None or remaining[0] is None:
            await db.execute(
                "DELETE FROM timers WHERE conversation_id = $1 AND armed_version <= $2",
                conv_id,
                v0,
            )
            return
        first, last = float(remaining[0]), float(remaining[1])
        await db.execute(
            "INSERT INTO timers (conversation_id, due_at, first_pending_at, armed_version) "
            "VALUES ($1, $2, $3, $4) ON CONFLICT (conversation_id) DO UPDATE SET "
            "due_at = EXCLUDED.due_at, first_pending_at = EXCLUDED.first_pending_at, "
            "armed_version = GREATEST(timers.armed_version, EXCLUDED.armed_version)",
            conv_id,
            queue.due_at(last, first),
            first,
            int(remaining[2]),
        )

    # -- outbox -------------------------------------------------------------------------------

    async def begin_send(self, item: OutboxItem, now: float) -> bool:
        """CAS on the attempt count: of two processes, one claims the attempt."""
        async with self._tx() as db:
            status = await db.execute(
                "UPDATE outbox SET attempts = attempts + 1, attempted_at = $1 "
                "WHERE id = $2 AND status = 'pending' AND attempts = $3",
                now,
                item.id,
                item.attempts,
            )
        return _rowcount(status) == 1

    async def unsent_outbox(self, older_than: float, limit: int = 50) -> list[OutboxItem]:
        """Never-attempted rows."""
        async with self._conn() as db:
            rows = await db.fetch(
                cols.OUTBOX_SELECT + "WHERE o.status = 'pending' AND o.attempts = 0 "
                "AND o.created_at <= $1 ORDER BY o.id LIMIT $2",
                older_than,
                limit,
            )
        return [cols.outbox(r) for r in rows]

    async def uncertain_outbox(self, older_than: float, limit: int = 50) -> list[OutboxItem]:
        """Attempted but unconfirmed rows."""
        async with self._conn() as db:
            rows = await db.fetch(
                cols.OUTBOX_SELECT + "WHERE o.status = 'pending' AND o.attempts > 0 "
                "AND o.attempted_at <= $1 ORDER BY o.id LIMIT $2",
                older_than,
                limit,
            )
        return [cols.outbox(r) for r in rows]

    async def mark_sent(self, outbox_id: int, now: float) -> None:
        """Confirm delivery."""
        async with self._tx() as db:
            await db.execute(
                "UPDATE outbox SET status = 'sent', finished_at = $1 WHERE id = $2",
                now,
                outbox_id,
            )

    async def mark_failed(self, outbox_id: int, now: float, reason: str) -> None:
        """Give up on a row."""
        async with self._tx() as db:
            await db.execute(
                "UPDATE outbox SET status = 'failed', finished_at = $1, failure = $2 WHERE id = $3",
                now,
                reason[:500],
                outbox_id,
            )
