"""The SQLite store's connection, its transactions and migrations."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import re
import sqlite3
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, ClassVar

import aiosqlite

from bot.core.errors import StoreError
from bot.store.migrations.sqlite import MIGRATIONS
from bot.store.sql.conn import SQLITE, Conn, Dialect, StatementTrace
from bot.store.sql.core import SQLCore

log = logging.getLogger("personabot.store")


def sqlite_path(url: str) -> str:
    """The file path in a ``sqlite:///relative`` or ``sqlite:////absolute`` URL."""
    if not url.startswith("sqlite://"):
        raise StoreError(f"not a SQLite URL: {url.split(':', 1)[0]}://...")
    path = url.removeprefix("sqlite://")
    if path in ("", "/"):
        raise StoreError("SQLite URL has no file path")
    path = path.removeprefix("/")
    return path if path == ":memory:" else str(Path(path))


_PLACEHOLDER = re.compile(r"\$(\d+)")


@functools.lru_cache(maxsize=1024)
def _sqlite_sql(sql: str) -> str:
    """PostgreSQL's ``$1`` placeholders as SQLite's numbered ``?1`` (same meaning)."""
    return _PLACEHOLDER.sub(r"?\1", sql)


class SQLiteConn(Conn):
    """The shared connection interface on the store's one aiosqlite connection."""

    __slots__ = ("_db",)

    def __init__(self, db: aiosqlite.Connection) -> None:
        self._db = db

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        """Every row (one hop to the connection's thread)."""
        return list(await self._db.execute_fetchall(_sqlite_sql(sql), args))

    async def fetchrow(self, sql: str, *args: Any) -> Any | None:
        """The first row, or None."""
        rows = await self._db.execute_fetchall(_sqlite_sql(sql), args)
        return next(iter(rows), None)

    async def fetchval(self, sql: str, *args: Any) -> Any:
        """The first column of the first row, or None."""
        row = await self.fetchrow(sql, *args)
        return None if row is None else row[0]

    async def execute(self, sql: str, *args: Any) -> int:
        """Run a statement; the rows it changed."""
        cursor = await self._db.execute(_sqlite_sql(sql), args)
        return int(cursor.rowcount)

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run a statement for every row of arguments."""
        await self._db.executemany(_sqlite_sql(sql), [tuple(r) for r in rows])

    async def fetchmany(self, sql: str, rows: Iterable[Sequence[Any]]) -> list[Any]:
        """Run a statement for every row of arguments, in order."""
        found: list[Any] = []
        for row in rows:
            found += await self._db.execute_fetchall(_sqlite_sql(sql), tuple(row))
        return found


class SQLiteCore(SQLCore):
    """The connection and its transactions under the shared parts (bot/store/sql)."""

    dialect: ClassVar[Dialect] = SQLITE

    def __init__(
        self, *, path: str | Path, busy_timeout_ms: int = 5000, trace: StatementTrace | None = None
    ) -> None:
        self._path = str(path)
        self._busy_timeout_ms = busy_timeout_ms
        #: Sees every statement from the next ``open()`` on (BEGIN and COMMIT included); None:
        #: no trace callback is installed at all.
        self.trace = trace
        self._db: aiosqlite.Connection | None = None
        # One connection writes for every coroutine of this process; the lock keeps their
        # transactions from interleaving on it.
        self._lock = asyncio.Lock()
        # A second connection, read-only, for plain reads and read snapshots: in WAL mode
        # they see every committed write and never wait for a writer, so a turn's reads are
        # not queued behind another turn's or a batch's write transaction (issue 23). Not
        # for ":memory:", where a second connection would be another database.
        self._reader: aiosqlite.Connection | None = None
        self._read_lock = asyncio.Lock()
        self._in_flight = 0
        # (st_dev, st_ino) of the file opened: see _check_file.
        self._identity: tuple[int, int] | None = None

    @property
    def path(self) -> str:
        """The database file."""
        return self._path

    async def open(self) -> None:
        """Connect, set pragmas and migrate."""
        if self._db is not None:
            return
        try:
            if self._path != ":memory:":
                Path(self._path).parent.mkdir(parents=True, exist_ok=True)
            db = await aiosqlite.connect(self._path, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open SQLite database {self._path}: {exc}") from exc
        self._db = db
        # A failed start must close what it opened: aiosqlite's worker thread is not a daemon,
        # and a half-opened connection would keep the process alive after the error.
        try:
            if self.trace is not None:
                await db.set_trace_callback(self.trace)
            await db.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
            await db.execute("PRAGMA journal_mode = WAL")
            await db.execute("PRAGMA synchronous = NORMAL")
            await db.execute("PRAGMA foreign_keys = ON")
            # Media rows (and their cached bytes) go with their message by ON DELETE CASCADE:
            # a build that ignores the pragma would keep a deleted person's photos.
            enforced = await db.execute_fetchall("PRAGMA foreign_keys")
            if [tuple(r) for r in enforced] != [(1,)]:
                raise StoreError("this SQLite build does not enforce foreign keys")
            # What is deleted (a /forget, a platform deletion, retention) is overwritten in
            # the file, not left in free pages for anyone who copies it to read.
            await db.execute("PRAGMA secure_delete = ON")
            await self._migrate()
            if self._path != ":memory:":
                st = os.stat(self._path)
                self._identity = (st.st_dev, st.st_ino)
                self._reader = await self._open_reader()
        except BaseException as exc:
            await self.aclose()
            if isinstance(exc, sqlite3.Error | StoreError):
                raise StoreError(self._open_failure(exc)) from exc
            raise

    async def _open_reader(self) -> aiosqlite.Connection:
        """The read connection (``query_only``: a write on it is refused, never done)."""
        reader = await aiosqlite.connect(self._path, isolation_level=None)
        try:
            if self.trace is not None:
                await reader.set_trace_callback(self.trace)
            await reader.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
            await reader.execute("PRAGMA query_only = ON")
        except BaseException:
            await reader.close()
            raise
        return reader

    def _open_failure(self, exc: BaseException) -> str:
        """Why the database could not be opened, for the operator."""
        text = f"cannot open SQLite database {self._path}: {exc}"
        if "locked" in str(exc) or "busy" in str(exc):
            text += (
                f" (another program held a lock longer than storage.busy_timeout_ms = "
                f"{self._busy_timeout_ms})"
            )
        return text

    async def aclose(self) -> None:
        """Close the connection."""
        if self._reader is not None:
            reader, self._reader = self._reader, None
            await reader.close()
        if self._db is not None:
            db, self._db = self._db, None
            self._identity = None
            await db.close()

    @property
    def _conn(self) -> aiosqlite.Connection:
        if self._db is None:
            raise StoreError("store is not open")
        return self._db

    @asynccontextmanager
    async def _tx(self) -> AsyncIterator[Conn]:
        """One write transaction (BEGIN IMMEDIATE: every writer of the file waits)."""
        self._in_flight += 1
        try:
            async with _as_store_errors(), self._locked_tx() as db:
                yield SQLiteConn(db)
        finally:
            self._in_flight -= 1

    def _check_file(self) -> None:
        """Refuse to write once the file was deleted or replaced under us: the open connection
        would go on writing into the unlinked file, acknowledging messages that the next
        start (which opens the path) never sees."""
        if self._identity is None:
            return
        try:
            st = os.stat(self._path)
        except FileNotFoundError:
            st = None
        if st is None or (st.st_dev, st.st_ino) != self._identity:
            log.error(
                "SQLite database %s was deleted or replaced while running; refusing writes "
                "(restart personabot to open the file now at that path)",
                self._path,
            )
            raise StoreError(
                f"SQLite database {self._path} was deleted or replaced while running; "
                "restart to open it again"
            )

    @asynccontextmanager
    async def _snapshot(self) -> AsyncIterator[Conn]:
        """A read transaction (deferred BEGIN) on the read connection: its statements see
        one snapshot."""
        self._in_flight += 1
        try:
            async with _as_store_errors(), self._locked_tx(write=False) as db:
                yield SQLiteConn(db)
        finally:
            self._in_flight -= 1

    @asynccontextmanager
    async def _locked_tx(self, *, write: bool = True) -> AsyncIterator[aiosqlite.Connection]:
        reading = not write and self._reader is not None
        async with self._read_lock if reading else self._lock:
            db = self._reader if reading and self._reader is not None else self._conn
            if write:
                self._check_file()
            # Writes take the write lock up front; a read snapshot starts deferred.
            begin = asyncio.ensure_future(db.execute("BEGIN IMMEDIATE" if write else "BEGIN"))
            try:
                await asyncio.shield(begin)
            except sqlite3.Error as exc:
                raise StoreError(f"SQLite busy or failed: {exc}") from exc
            except asyncio.CancelledError:
                # BEGIN runs in the connection's thread anyway: end what it started, or
                # every later statement on this shared connection fails.
                with contextlib.suppress(sqlite3.Error):
                    await begin
                    await db.execute("ROLLBACK")
                raise
            try:
                yield db
            except BaseException:
                await db.execute("ROLLBACK")
                raise
            else:
                await db.execute("COMMIT")

    @asynccontextmanager
    async def _read(self) -> AsyncIterator[Conn]:
        """The read connection for plain reads (autocommit): it sees what was committed and
        does not wait for the writing connection."""
        self._in_flight += 1
        try:
            if self._reader is None:  # ":memory:": the one connection
                async with _as_store_errors(), self._lock:
                    yield SQLiteConn(self._conn)
            else:
                async with _as_store_errors(), self._read_lock:
                    yield SQLiteConn(self._reader)
        finally:
            self._in_flight -= 1

    @asynccontextmanager
    async def _write(self) -> AsyncIterator[Conn]:
        """The connection for one write statement in autocommit: SQLite takes the write lock
        for the statement (waiting up to the busy timeout, as ``BEGIN IMMEDIATE`` does) and
        commits it alone, two round trips to the connection's thread fewer."""
        self._in_flight += 1
        try:
            async with _as_store_errors(), self._lock:
                self._check_file()
                yield SQLiteConn(self._conn)
        finally:
            self._in_flight -= 1

    async def _empty_log(self) -> None:
        """Checkpoint the write-ahead log into the file and truncate it (best effort: a
        checkpoint another process's reader blocks is done by a later one)."""
        async with self._lock:
            try:
                await self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error as exc:
                log.warning("SQLite checkpoint after a deletion failed: %s", exc)

    async def _migrate(self) -> None:
        async with self._tx() as db:
            await self._apply_migrations(db, MIGRATIONS)

    async def _run_script(self, db: Conn, script: str) -> None:
        """aiosqlite runs one statement per call: the script is split."""
        for statement in _statements(script):
            await db.execute(statement)

    async def backup(self, target: str | Path) -> None:
        """Copy the live database to ``target`` with SQLite's online backup API (consistent
        while the bot keeps writing); the target is replaced if it exists."""
        path = os.fspath(target)
        if await asyncio.to_thread(_same_file, path, self._path):
            raise StoreError("backup target is the database itself")
        tmp = path + ".partial"
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        async with self._lock, aiosqlite.connect(tmp) as dest:
            await self._conn.backup(dest)
        os.replace(tmp, path)  # never leave a half-written file under the final name


def _same_file(a: str, b: str) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def _statements(script: str) -> list[str]:
    """Split a migration script into statements (no semicolons inside our DDL strings)."""
    body = "\n".join(line.split("--", 1)[0] for line in script.splitlines())
    return [s.strip() for s in body.split(";") if s.strip()]


@asynccontextmanager
async def _as_store_errors() -> AsyncIterator[None]:
    """A failed statement (the disk full, a constraint, a trigger's RAISE, I/O) is a
    StoreError, as on PostgreSQL: callers that must not lose what they hold (an adapter's
    unacknowledged update) retry it, and nothing takes it for a bug of one message and skips
    it."""
    try:
        yield
    except sqlite3.Error as exc:
        raise StoreError(f"SQLite failed: {exc}") from exc
