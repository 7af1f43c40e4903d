"""The SQLite store's connection, transactions, migrations and shared helpers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiosqlite

from bot.core.errors import StoreError
from bot.core.events import (
    ConversationKey,
    SessionKey,
    SessionPolicy,
)
from bot.core.sessions import expiry_reason
from bot.store import cols, tombstones
from bot.store.base import BaseStore
from bot.store.migrations.sqlite import MIGRATIONS

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


class SQLiteCore(BaseStore):
    """Connection, transactions, migrations and helpers shared by the store's parts."""

    def __init__(self, *, path: str | Path, busy_timeout_ms: int = 5000) -> None:
        self._path = str(path)
        self._busy_timeout_ms = busy_timeout_ms
        self._db: aiosqlite.Connection | None = None
        # One connection serves every coroutine of this process; the lock keeps their
        # transactions from interleaving on it.
        self._lock = asyncio.Lock()
        self._in_flight = 0
        # (st_dev, st_ino) of the file opened: see _check_file.
        self._identity: tuple[int, int] | None = None

    @property
    def path(self) -> str:
        """Connection, transactions, migrations and helpers shared by the store's parts."""
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
            await db.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
            await db.execute("PRAGMA journal_mode = WAL")
            await db.execute("PRAGMA synchronous = NORMAL")
            await db.execute("PRAGMA foreign_keys = ON")
            await self._migrate()
            if self._path != ":memory:":
                st = os.stat(self._path)
                self._identity = (st.st_dev, st.st_ino)
        except BaseException as exc:
            await self.aclose()
            if isinstance(exc, sqlite3.Error | StoreError):
                raise StoreError(self._open_failure(exc)) from exc
            raise

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
        if self._db is not None:
            db, self._db = self._db, None
            self._identity = None
            await db.close()

    @property
    def _conn(self) -> aiosqlite.Connection:
        if self._db is None:
            raise StoreError("store is not open")
        return self._db

    @property
    def in_flight(self) -> int:
        """Operations running or waiting for the connection (for drains and tests)."""
        return self._in_flight

    @asynccontextmanager
    async def _tx(self) -> AsyncIterator[aiosqlite.Connection]:
        self._in_flight += 1
        try:
            async with self._locked_tx() as db:
                yield db
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
    async def _snapshot(self) -> AsyncIterator[aiosqlite.Connection]:
        """A read transaction (deferred BEGIN): its statements see one snapshot."""
        self._in_flight += 1
        try:
            async with self._locked_tx(write=False) as db:
                yield db
        finally:
            self._in_flight -= 1

    @asynccontextmanager
    async def _locked_tx(self, *, write: bool = True) -> AsyncIterator[aiosqlite.Connection]:
        async with self._lock:
            db = self._conn
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
    async def _read(self) -> AsyncIterator[aiosqlite.Connection]:
        self._in_flight += 1
        try:
            async with self._lock:
                yield self._conn
        finally:
            self._in_flight -= 1

    async def _migrate(self) -> None:
        async with self._tx() as db:
            await db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            # Versions are applied by membership, not by "newer than the newest applied":
            # versions merged out of order (a 3 after a 4) are still applied once.
            applied = {
                int(r[0]) for r in await self._rows(db, "SELECT version FROM schema_version")
            }
            current = max(applied, default=0)
            latest = max(v for v, _ in MIGRATIONS)
            if current > latest:
                raise StoreError(
                    f"database schema version {current} is newer than this personabot "
                    f"({latest}); upgrade personabot"
                )
            for version, script in MIGRATIONS:
                if version not in applied:
                    for statement in _statements(script):
                        await db.execute(statement)
                    await db.execute("INSERT INTO schema_version VALUES (?)", (version,))
                    log.info("applied schema migration %d", version)

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

    async def schema_version(self) -> int:
        """The applied schema version."""
        async with self._read() as db:
            return int(await self._scalar(db, "SELECT MAX(version) FROM schema_version") or 0)

    # -- helpers ------------------------------------------------------------------------------

    @staticmethod
    async def _scalar(db: aiosqlite.Connection, sql: str, args: Iterable[Any] = ()) -> Any:
        async with db.execute(sql, tuple(args)) as cur:
            row = await cur.fetchone()
        return None if row is None else row[0]

    @staticmethod
    async def _row(db: aiosqlite.Connection, sql: str, args: Iterable[Any] = ()) -> Any:
        async with db.execute(sql, tuple(args)) as cur:
            return await cur.fetchone()

    @staticmethod
    async def _rows(db: aiosqlite.Connection, sql: str, args: Iterable[Any] = ()) -> list[Any]:
        async with db.execute(sql, tuple(args)) as cur:
            return list(await cur.fetchall())

    async def _conv_id(
        self, db: aiosqlite.Connection, key: ConversationKey, now: float | None = None
    ) -> int | None:
        """The conversation's row id; created when ``now`` is given."""
        args = (key.bot, key.platform, key.chat_id, cols.thread_value(key))
        where = "bot = ? AND platform = ? AND chat_id = ? AND thread_id = ?"
        found = await self._scalar(db, f"SELECT id FROM conversations WHERE {where}", args)
        if found is not None or now is None:
            return None if found is None else int(found)
        await db.execute(
            "INSERT INTO conversations (bot, platform, chat_id, thread_id, created_at) "
            "VALUES (?, ?, ?, ?, ?)",
            (*args, now),
        )
        return int(await self._scalar(db, f"SELECT id FROM conversations WHERE {where}", args))

    async def _session_row(
        self, db: aiosqlite.Connection, session: SessionKey
    ) -> tuple[int, int] | None:
        """(session row id, conversation row id) for a session key."""
        conv_id = await self._conv_id(db, session.conversation)
        if conv_id is None:
            return None
        sid = await self._scalar(
            db,
            "SELECT id FROM sessions WHERE conversation_id = ? AND session_no = ?",
            (conv_id, session.session_id),
        )
        return None if sid is None else (int(sid), conv_id)

    async def _open_row(self, db: aiosqlite.Connection, conv_id: int) -> Any:
        return await self._row(
            db,
            f"SELECT id, {cols.SESSION_COLS} FROM sessions "
            "WHERE conversation_id = ? AND status = 'open'",
            (conv_id,),
        )

    async def _rotate(
        self, db: aiosqlite.Connection, conv_id: int, now: float, reason: str | None
    ) -> int:
        """Close the open session (if ``reason``) and open the next one; return its row id."""
        if reason is not None:
            await db.execute(
                "UPDATE sessions SET status = 'closed', closed_at = ?, close_reason = ? "
                "WHERE conversation_id = ? AND status = 'open'",
                (now, reason, conv_id),
            )
        last = await self._scalar(
            db, "SELECT MAX(session_no) FROM sessions WHERE conversation_id = ?", (conv_id,)
        )
        cur = await db.execute(
            "INSERT INTO sessions (conversation_id, session_no, status, opened_at, "
            "last_activity_at) VALUES (?, ?, 'open', ?, ?)",
            (conv_id, int(last or 0) + 1, now, now),
        )
        return int(cur.lastrowid or 0)

    async def _ensure_open(
        self,
        db: aiosqlite.Connection,
        conv_id: int,
        now: float,
        policy: SessionPolicy | None,
    ) -> tuple[int, int]:
        """(session row id, session number) of the open session, rotating an expired one."""
        row = await self._open_row(db, conv_id)
        if row is None:
            sid = await self._rotate(db, conv_id, now, None)
        else:
            reason = (
                None
                if policy is None
                else expiry_reason(
                    policy, opened_at=float(row[3]), last_activity_at=float(row[4]), now=now
                )
            )
            if reason is None:
                return int(row[0]), int(row[1])
            sid = await self._rotate(db, conv_id, now, reason)
        number = await self._scalar(db, "SELECT session_no FROM sessions WHERE id = ?", (sid,))
        return sid, int(number)

    @staticmethod
    async def _bury(
        db: aiosqlite.Connection, rows: Iterable[tuple[int, int]], reason: str, now: float
    ) -> None:
        """Tombstone (session row id, turn) pairs about to be deleted, in the same
        transaction: the gap check then knows personabot removed them, and why."""
        await db.executemany(
            "INSERT INTO tombstones (session_id, first_turn, last_turn, reason, at) "
            "VALUES (?, ?, ?, ?, ?)",
            [(sid, first, last, reason, now) for sid, first, last in tombstones.runs(rows)],
        )

    @staticmethod
    def _bots_filter(bots: Sequence[str] | None) -> tuple[str, list[str]]:
        if bots is None:
            return "", []
        return f" AND c.bot IN ({','.join('?' * len(bots))})", list(bots)


def _conv_args(key: ConversationKey) -> tuple[str, str, str, str]:
    return (key.bot, key.platform, key.chat_id, cols.thread_value(key))


def _same_file(a: str, b: str) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def _qualified(alias: str, columns: str) -> str:
    """``a, b`` -> ``s.a, s.b``: column lists reused in joins stay unambiguous."""
    return ", ".join(f"{alias}.{c.strip()}" for c in columns.split(","))


def _statements(script: str) -> list[str]:
    """Split a migration script into statements (no semicolons inside our DDL strings)."""
    body = "\n".join(line.split("--", 1)[0] for line in script.splitlines())
    return [s.strip() for s in body.split(";") if s.strip()]
