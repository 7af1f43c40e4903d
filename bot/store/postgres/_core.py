"""The PostgreSQL store's pool, its transactions and migrations."""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, ClassVar, Final, TypeAlias

import asyncpg

from bot.core.errors import StoreError
from bot.core.redact import redact_url, url_secrets
from bot.store.migrations.postgres import MIGRATION_LOCK, MIGRATIONS
from bot.store.sql.conn import POSTGRES, Conn, Dialect, StatementTrace
from bot.store.sql.core import SQLCore

log = logging.getLogger("personabot.store")

if TYPE_CHECKING:
    Raw: TypeAlias = asyncpg.pool.PoolConnectionProxy[asyncpg.Record]

_DRIVER_ERRORS: Final = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError)
_DB_NOW: Final = "CAST(extract(epoch FROM clock_timestamp()) AS DOUBLE PRECISION)"


def is_postgres_url(url: str) -> bool:
    """Whether ``url`` names a PostgreSQL database."""
    return url.startswith(("postgresql://", "postgres://"))


def _rowcount(status: str) -> int:
    """Rows touched, from a command tag such as ``UPDATE 3`` or ``DELETE 0``."""
    tail = status.rsplit(" ", 1)[-1]
    return int(tail) if tail.isdigit() else 0


class PgConn(Conn):
    """The shared connection interface on one asyncpg connection (placeholders are native)."""

    __slots__ = ("_db",)

    def __init__(self, db: Any) -> None:
        self._db = db

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        """Every row."""
        return list(await self._db.fetch(sql, *args))

    async def fetchrow(self, sql: str, *args: Any) -> Any | None:
        """The first row, or None."""
        return await self._db.fetchrow(sql, *args)

    async def fetchval(self, sql: str, *args: Any) -> Any:
        """The first column of the first row, or None."""
        return await self._db.fetchval(sql, *args)

    async def execute(self, sql: str, *args: Any) -> int:
        """Run a statement; the rows it touched (from the command tag)."""
        return _rowcount(await self._db.execute(sql, *args))

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run a statement for every row of arguments (pipelined)."""
        await self._db.executemany(sql, [tuple(r) for r in rows])

    async def fetchmany(self, sql: str, rows: Iterable[Sequence[Any]]) -> list[Any]:
        """Run a statement for every row of arguments (pipelined: one round trip)."""
        return list(await self._db.fetchmany(sql, [tuple(r) for r in rows]))


async def _keep_session_state(conn: object) -> None:
    """Pool reset hook: nothing to reset (no session state is ever set), saves a round trip."""


class PostgresCore(SQLCore):
    """The pool and its transactions under the shared parts (bot/store/sql); the whole
    contract is PostgresStore, on one database shared by any number of processes."""

    dialect: ClassVar[Dialect] = POSTGRES

    def __init__(
        self,
        *,
        dsn: str,
        min_pool: int = 1,
        max_pool: int = 10,
        use_db_clock: bool = False,
        connect_timeout: float = 10.0,
        trace: StatementTrace | None = None,
    ) -> None:
        if not is_postgres_url(dsn):
            raise StoreError(f"not a PostgreSQL URL: {redact_url(dsn)}")
        if not 0 <= min_pool <= max_pool or max_pool < 1:
            raise StoreError(
                f"pool sizes: need 0 <= min ({min_pool}) <= max ({max_pool}), max >= 1"
            )
        self._dsn = dsn
        #: Called with every statement of the pool's connections (set before ``open``); when
        #: None, no query logger is installed at all.
        self.trace = trace
        self._min_pool = min_pool
        self._max_pool = max_pool
        self._connect_timeout = connect_timeout
        self.use_db_clock = use_db_clock
        self._pool: asyncpg.Pool[asyncpg.Record] | None = None
        self._in_flight = 0
        # Lease expiry by the database server's clock (see bot/store/postgres/__init__.py).
        self._db_now = _DB_NOW if use_db_clock else None

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
                init=self._init_connection,
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

    async def _init_connection(self, conn: asyncpg.Connection[asyncpg.Record]) -> None:
        """Every new pool connection: the text codec, and the statement trace when set."""
        await _text_without_nul(conn)
        trace = self.trace
        if trace is not None:
            conn.add_query_logger(lambda logged: trace(logged.query))

    async def aclose(self) -> None:
        """Close the pool (waits for connections in use to be released)."""
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

    @asynccontextmanager
    async def _conn(self) -> AsyncIterator[Raw]:
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
            yield PgConn(conn)

    @asynccontextmanager
    async def _snapshot(self) -> AsyncIterator[Conn]:
        """A read-only transaction that sees one snapshot for all its statements."""
        async with (
            self._conn() as conn,
            conn.transaction(isolation="repeatable_read", readonly=True),
        ):
            yield PgConn(conn)

    @asynccontextmanager
    async def _read(self) -> AsyncIterator[Conn]:
        """A pooled connection for single-statement reads."""
        async with self._conn() as conn:
            yield PgConn(conn)

    @asynccontextmanager
    async def _write(self) -> AsyncIterator[Conn]:
        """A pooled connection for one write statement (autocommit: the statement is its own
        transaction, without BEGIN and COMMIT round trips)."""
        async with self._conn() as conn:
            yield PgConn(conn)

    async def _serialize(self, db: Conn, key: str) -> None:
        """A transaction-level advisory lock on ``key`` (others never wait)."""
        await db.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", key)

    async def _run_script(self, db: Conn, script: str) -> None:
        """The whole script in one call (simple query protocol)."""
        await db.execute(script)

    async def _migrate(self) -> None:
        async with self._tx() as db:
            # Held to the end of this transaction: a second process waits here, then finds
            # the migrations applied.
            await db.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK)
            await self._apply_migrations(db, MIGRATIONS)


def no_nul(text: str) -> str:
    """``text`` with U+0000 (which PostgreSQL text cannot hold) as U+FFFD."""
    return text.replace("\x00", "\ufffd")


async def _text_without_nul(conn: asyncpg.Connection[asyncpg.Record]) -> None:
    """PostgreSQL text cannot hold U+0000 (SQLite can): every text parameter has it replaced by
    U+FFFD, so a name or message with a NUL is stored (visibly marked) instead of failing the
    ingest, and lookups by such a value match what was stored. (Elements of text arrays
    bypass this codec: their writers call ``no_nul`` themselves.)"""
    await conn.set_type_codec(
        "text", schema="pg_catalog", encoder=no_nul, decoder=str, format="text"
    )
