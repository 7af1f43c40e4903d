"""The PostgreSQL store's pool, transactions, migrations and shared helpers."""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Final, TypeAlias

import asyncpg

from bot.core.errors import StoreError
from bot.core.events import (
    ConversationKey,
    SessionKey,
    SessionPolicy,
)
from bot.core.redact import redact_url, url_secrets
from bot.core.sessions import expiry_reason
from bot.store import cols, tombstones
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


def _conv_args(key: ConversationKey) -> tuple[str, str, str, str]:
    return (key.bot, key.platform, key.chat_id, cols.thread_value(key))


def _rowcount(status: str) -> int:
    """Rows touched, from a command tag such as ``UPDATE 3`` or ``DELETE 0``."""
    tail = status.rsplit(" ", 1)[-1]
    return int(tail) if tail.isdigit() else 0


async def _keep_session_state(conn: object) -> None:
    """Pool reset hook: nothing to reset (no session state is ever set), saves a round trip."""


class PostgresCore(BaseStore):
    """Pool, transactions, migrations and helpers shared by the store's parts (the whole
    contract is PostgresStore, on one database shared by any number of processes)."""

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
        """``text`` with every known secret (URL password or ``?password=``, PGPASSWORD) masked."""
        secrets = [*url_secrets(self._dsn), os.environ.get("PGPASSWORD", "")]
        for secret in sorted(secrets, key=len, reverse=True):
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
                init=_text_without_nul,
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
            # Applied by membership (see the SQLite store): out-of-order versions still run.
            applied = {int(r[0]) for r in await db.fetch("SELECT version FROM schema_version")}
            current = max(applied, default=0)
            latest = max(v for v, _ in MIGRATIONS)
            if current > latest:
                raise StoreError(
                    f"database schema version {current} is newer than this personabot "
                    f"({latest}); upgrade personabot"
                )
            for version, script in MIGRATIONS:
                if version not in applied:
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

    @staticmethod
    async def _bury(db: Conn, rows: Iterable[tuple[int, int]], reason: str, now: float) -> None:
        """Tombstone (session row id, turn) pairs deleted in this transaction: the gap check
        then knows personabot removed them, and why."""
        await db.executemany(
            "INSERT INTO tombstones (session_id, first_turn, last_turn, reason, at) "
            "VALUES ($1, $2, $3, $4, $5)",
            [(sid, first, last, reason, now) for sid, first, last in tombstones.runs(rows)],
        )

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


def _no_nul(text: str) -> str:
    return text.replace("\x00", "\ufffd")


async def _text_without_nul(conn: asyncpg.Connection[asyncpg.Record]) -> None:
    """PostgreSQL text cannot hold U+0000 (SQLite can): every text parameter has it replaced by
    U+FFFD, so a name or message with a NUL is stored (visibly marked) instead of failing the
    ingest, and lookups by such a value match what was stored."""
    await conn.set_type_codec(
        "text", schema="pg_catalog", encoder=_no_nul, decoder=str, format="text"
    )
