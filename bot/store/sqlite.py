"""SQLite store (aiosqlite): the embedded default. One file, WAL, foreign keys on.

Every write runs in ``BEGIN IMMEDIATE``: the write lock is taken at the start of the
transaction, so two processes on one file serialize their read-modify-write sequences
(ingest, lease CAS, final check) instead of failing half-way on a lock upgrade.
"""

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


class SQLiteStore(BaseStore):
    """The BaseStore contract on one SQLite file."""

    def __init__(self, *, path: str | Path, busy_timeout_ms: int = 5000) -> None:
        self._path = str(path)
        self._busy_timeout_ms = busy_timeout_ms
        self._db: aiosqlite.Connection | None = None
        # One connection serves every coroutine of this process; the lock keeps their
        # transactions from interleaving on it.
        self._lock = asyncio.Lock()
        self._in_flight = 0

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
        await db.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
        await db.execute("PRAGMA journal_mode = WAL")
        await db.execute("PRAGMA synchronous = NORMAL")
        await db.execute("PRAGMA foreign_keys = ON")
        await self._migrate()

    async def aclose(self) -> None:
        """Close the connection."""
        if self._db is not None:
            db, self._db = self._db, None
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

    @asynccontextmanager
    async def _locked_tx(self) -> AsyncIterator[aiosqlite.Connection]:
        async with self._lock:
            db = self._conn
            try:
                await db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise StoreError(f"SQLite busy or failed: {exc}") from exc
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
            current = await self._scalar(db, "SELECT MAX(version) FROM schema_version") or 0
            latest = MIGRATIONS[-1][0]
            if current > latest:
                raise StoreError(
                    f"database schema version {current} is newer than this personabot "
                    f"({latest}); upgrade personabot"
                )
            for version, script in MIGRATIONS:
                if version > current:
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

    # -- sessions -----------------------------------------------------------------------------

    async def open_session(
        self, conversation: ConversationKey, now: float, policy: SessionPolicy | None = None
    ) -> SessionInfo:
        """The open session, opening the next one when none is open or it expired."""
        async with self._tx() as db:
            conv_id = await self._conv_id(db, conversation, now)
            assert conv_id is not None
            sid, _ = await self._ensure_open(db, conv_id, now, policy)
            row = await self._row(
                db, f"SELECT {cols.SESSION_COLS} FROM sessions WHERE id = ?", (sid,)
            )
        return cols.session_info(conversation, row)

    async def current_session(self, conversation: ConversationKey) -> SessionInfo | None:
        """The open session or None."""
        async with self._read() as db:
            conv_id = await self._conv_id(db, conversation)
            row = None if conv_id is None else await self._open_row(db, conv_id)
        return None if row is None else cols.session_info(conversation, row[1:])

    async def new_session(
        self, conversation: ConversationKey, now: float, reason: str = "new"
    ) -> SessionInfo:
        """Close the open session and open the next, atomically."""
        async with self._tx() as db:
            conv_id = await self._conv_id(db, conversation, now)
            assert conv_id is not None
            sid = await self._rotate(db, conv_id, now, reason)
            row = await self._row(
                db, f"SELECT {cols.SESSION_COLS} FROM sessions WHERE id = ?", (sid,)
            )
        return cols.session_info(conversation, row)

    async def close_session(
        self, conversation: ConversationKey, now: float, reason: str = "closed"
    ) -> SessionInfo | None:
        """Close the open session, if any."""
        async with self._tx() as db:
            conv_id = await self._conv_id(db, conversation)
            row = None if conv_id is None else await self._open_row(db, conv_id)
            if row is None:
                return None
            await db.execute(
                "UPDATE sessions SET status = 'closed', closed_at = ?, close_reason = ? "
                "WHERE id = ?",
                (now, reason, row[0]),
            )
            row = await self._row(
                db, f"SELECT {cols.SESSION_COLS} FROM sessions WHERE id = ?", (row[0],)
            )
        return cols.session_info(conversation, row)

    async def get_session(self, session: SessionKey) -> SessionInfo | None:
        """A session by key."""
        async with self._read() as db:
            found = await self._session_row(db, session)
            row = (
                None
                if found is None
                else await self._row(
                    db, f"SELECT {cols.SESSION_COLS} FROM sessions WHERE id = ?", (found[0],)
                )
            )
        return None if row is None else cols.session_info(session.conversation, row)

    async def list_sessions(self, conversation: ConversationKey) -> list[SessionInfo]:
        """All sessions, oldest first."""
        async with self._read() as db:
            conv_id = await self._conv_id(db, conversation)
            rows = (
                []
                if conv_id is None
                else await self._rows(
                    db,
                    f"SELECT {cols.SESSION_COLS} FROM sessions WHERE conversation_id = ? "
                    "ORDER BY session_no",
                    (conv_id,),
                )
            )
        return [cols.session_info(conversation, r) for r in rows]

    # -- session scope ------------------------------------------------------------------------

    async def get_state(self, session: SessionKey, name: str) -> str | NotSet:
        """A session-scoped value or NOT_SET."""
        async with self._read() as db:
            found = await self._session_row(db, session)
            value = (
                None
                if found is None
                else await self._scalar(
                    db,
                    "SELECT value FROM session_state WHERE session_id = ? AND key = ?",
                    (found[0], name),
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
                "VALUES (?, ?, ?, ?) ON CONFLICT (session_id, key) "
                "DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
                (found[0], name, value, now),
            )

    async def delete_state(self, session: SessionKey, name: str | None = None) -> int:
        """Delete one or all session-scoped values."""
        async with self._tx() as db:
            found = await self._session_row(db, session)
            if found is None:
                return 0
            if name is None:
                cur = await db.execute(
                    "DELETE FROM session_state WHERE session_id = ?", (found[0],)
                )
            else:
                cur = await db.execute(
                    "DELETE FROM session_state WHERE session_id = ? AND key = ?",
                    (found[0], name),
                )
            return int(cur.rowcount)

    # -- user scope ---------------------------------------------------------------------------

    async def get_user_memory(self, user: UserKey) -> str | NotSet:
        """A user's memory record or NOT_SET."""
        async with self._read() as db:
            value = await self._scalar(
                db,
                "SELECT record FROM user_memory WHERE platform = ? AND user_id = ?",
                (user.platform, user.user_id),
            )
        return NOT_SET if value is None else str(value)

    async def set_user_memory(self, user: UserKey, record: str, now: float) -> None:
        """Replace a user's memory record."""
        async with self._tx() as db:
            await db.execute(
                "INSERT INTO user_memory (platform, user_id, record, updated_at) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (platform, user_id) "
                "DO UPDATE SET record = excluded.record, updated_at = excluded.updated_at",
                (user.platform, user.user_id, record, now),
            )

    async def delete_user_memory(self, user: UserKey) -> bool:
        """Erase a user's memory."""
        async with self._tx() as db:
            cur = await db.execute(
                "DELETE FROM user_memory WHERE platform = ? AND user_id = ?",
                (user.platform, user.user_id),
            )
            return cur.rowcount > 0

    # -- messages and queue -------------------------------------------------------------------

    async def ingest(
        self,
        inbound: Inbound,
        now: float,
        queue: QueuePolicy,
        sessions: SessionPolicy | None = None,
    ) -> IngestResult:
        """Store, bump the version, arm the timer: one transaction, few statements."""
        key = inbound.conversation
        async with self._tx() as db:
            if inbound.platform_message_id is not None:
                dup = await self._row(
                    db,
                    "SELECT s.session_no, c.version, (SELECT due_at FROM timers t "
                    "WHERE t.conversation_id = c.id) FROM messages m "
                    "JOIN conversations c ON c.id = m.conversation_id "
                    "JOIN sessions s ON s.id = m.session_id WHERE c.bot = ? AND c.platform = ? "
                    "AND c.chat_id = ? AND c.thread_id = ? AND m.platform_message_id = ?",
                    (*_conv_args(key), inbound.platform_message_id),
                )
                if dup is not None:
                    return IngestResult(
                        stored=False,
                        message_id=None,
                        session=SessionKey(key, int(dup[0])),
                        version=int(dup[1]),
                        due_at=None if dup[2] is None else float(dup[2]),
                    )
            # Create the conversation or bump its version in one statement.
            head = await self._row(
                db,
                "INSERT INTO conversations (bot, platform, chat_id, thread_id, created_at, "
                "version) VALUES (?, ?, ?, ?, ?, 1) ON CONFLICT (bot, platform, chat_id, "
                "thread_id) DO UPDATE SET version = version + 1, status = 'active', "
                "status_reason = NULL RETURNING id, version",
                (*_conv_args(key), now),
            )
            conv_id, version = int(head[0]), int(head[1])
            sid, number = await self._ensure_open(db, conv_id, now, sessions)
            turn = int(
                await self._scalar(
                    db,
                    "UPDATE sessions SET next_turn = next_turn + 1, last_activity_at = ?, "
                    "last_user_turn = next_turn WHERE id = ? RETURNING next_turn - 1",
                    (now, sid),
                )
            )
            cur = await db.execute(
                "INSERT INTO messages (conversation_id, session_id, turn, role, author_id, "
                "display_name, text, platform_message_id, is_private, version, pending, "
                "created_at) VALUES (?, ?, ?, 'user', ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    conv_id,
                    sid,
                    turn,
                    inbound.author_id,
                    inbound.display_name,
                    inbound.text,
                    inbound.platform_message_id,
                    int(inbound.is_private),
                    version,
                    int(inbound.triggers_reply),
                    now,
                ),
            )
            message_id = int(cur.lastrowid or 0)
            due_at: float | None = None
            if inbound.triggers_reply:
                due_at = await self._arm(db, conv_id, now, queue, version)
            else:
                due = await self._scalar(
                    db, "SELECT due_at FROM timers WHERE conversation_id = ?", (conv_id,)
                )
                due_at = None if due is None else float(due)
        return IngestResult(
            stored=True,
            message_id=message_id,
            session=SessionKey(inbound.conversation, number),
            version=version,
            due_at=due_at,
        )

    async def _arm(
        self, db: aiosqlite.Connection, conv_id: int, now: float, queue: QueuePolicy, version: int
    ) -> float:
        """Arm or extend the timer: due = min(now + debounce, first_pending + max_wait)."""
        due = await self._scalar(
            db,
            "INSERT INTO timers (conversation_id, due_at, first_pending_at, armed_version) "
            "VALUES (?, ?, ?, ?) ON CONFLICT (conversation_id) DO UPDATE SET "
            "due_at = MIN(?, timers.first_pending_at + ?), "
            "armed_version = excluded.armed_version RETURNING due_at",
            (conv_id, queue.due_at(now, now), now, version, now + queue.debounce, queue.max_wait),
        )
        return float(due)

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
            conv_id = await self._conv_id(db, conversation)
            row = (
                None
                if conv_id is None
                else await self._row(
                    db,
                    "SELECT id, pending, answered_by FROM messages WHERE conversation_id = ? "
                    "AND platform_message_id = ? AND role = 'user'",
                    (conv_id, platform_message_id),
                )
            )
            if row is None or conv_id is None:
                return "unknown"
            if row[2] is not None:
                return "too_late"
            if not row[1]:
                await db.execute("UPDATE messages SET text = ? WHERE id = ?", (text, row[0]))
                return "updated"
            version = int(
                await self._scalar(
                    db,
                    "UPDATE conversations SET version = version + 1 WHERE id = ? RETURNING version",
                    (conv_id,),
                )
            )
            await db.execute(
                "UPDATE messages SET text = ?, version = ? WHERE id = ?", (text, version, row[0])
            )
            await self._arm(db, conv_id, now, queue, version)
            return "updated"

    async def delete_message(
        self, conversation: ConversationKey, platform_message_id: str
    ) -> StoredMessage | None:
        """Delete a stored message by its platform id; return it."""
        async with self._tx() as db:
            conv_id = await self._conv_id(db, conversation)
            if conv_id is None:
                return None
            row = await self._row(
                db,
                cols.MESSAGE_SELECT + "WHERE m.conversation_id = ? AND m.platform_message_id = ?",
                (conv_id, platform_message_id),
            )
            if row is None:
                return None
            await db.execute("DELETE FROM messages WHERE id = ?", (row[0],))
        return cols.message(conversation, row)

    async def set_conversation_status(
        self, conversation: ConversationKey, active: bool, reason: str | None = None
    ) -> None:
        """Mark a conversation (in)active."""
        async with self._tx() as db:
            conv_id = await self._conv_id(db, conversation)
            if conv_id is not None:
                await db.execute(
                    "UPDATE conversations SET status = ?, status_reason = ? WHERE id = ?",
                    ("active" if active else "inactive", reason, conv_id),
                )

    async def conversation_active(self, conversation: ConversationKey) -> bool:
        """Whether the conversation is active."""
        async with self._read() as db:
            conv_id = await self._conv_id(db, conversation)
            if conv_id is None:
                return True
            status = await self._scalar(
                db, "SELECT status FROM conversations WHERE id = ?", (conv_id,)
            )
        return bool(status != "inactive")

    async def conversation_version(self, conversation: ConversationKey) -> int:
        """The version counter."""
        async with self._read() as db:
            conv_id = await self._conv_id(db, conversation)
            if conv_id is None:
                return 0
            return int(
                await self._scalar(db, "SELECT version FROM conversations WHERE id = ?", (conv_id,))
            )

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
        async with self._read() as db:
            found = await self._session_row(db, session)
            if found is None:
                return []
            rows = await self._rows(
                db,
                cols.MESSAGE_SELECT + f"WHERE m.session_id = ? AND m.pending = 0 AND m.turn > ? "
                f"ORDER BY m.turn {order} LIMIT ?",
                (found[0], after_turn, limit),
            )
        if not oldest_first:
            rows.reverse()
        return [cols.message(session.conversation, r) for r in rows]

    async def count_history(self, session: SessionKey, *, after_turn: int = 0) -> int:
        """Count of non-pending messages after ``after_turn``."""
        async with self._read() as db:
            found = await self._session_row(db, session)
            if found is None:
                return 0
            return int(
                await self._scalar(
                    db,
                    "SELECT COUNT(*) FROM messages WHERE session_id = ? AND pending = 0 "
                    "AND turn > ?",
                    (found[0], after_turn),
                )
            )

    async def get_summary(self, session: SessionKey) -> StoredSummary | None:
        """The session's summary."""
        async with self._read() as db:
            found = await self._session_row(db, session)
            row = (
                None
                if found is None
                else await self._row(
                    db,
                    "SELECT body, first_turn, last_turn, updated_at FROM summaries "
                    "WHERE session_id = ?",
                    (found[0],),
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
        """CAS on the covered range: two summarisers never overwrite each other's work."""
        async with self._tx() as db:
            found = await self._session_row(db, session)
            if found is None:
                raise StoreError(f"unknown session {session}")
            current = await self._scalar(
                db, "SELECT last_turn FROM summaries WHERE session_id = ?", (found[0],)
            )
            if (None if current is None else int(current)) != expected_last_turn:
                return False
            await db.execute(
                "INSERT INTO summaries (session_id, body, first_turn, last_turn, updated_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (session_id) DO UPDATE SET "
                "body = excluded.body, first_turn = excluded.first_turn, "
                "last_turn = excluded.last_turn, updated_at = excluded.updated_at",
                (found[0], body, first_turn, last_turn, now),
            )
            return True

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
        """Count and record in one write transaction: two processes cannot both pass."""
        async with self._tx() as db:
            for limit, window in ((per_hour, 3600.0), (per_day, 86400.0)):
                if not limit:
                    continue
                rows = await self._rows(
                    db,
                    "SELECT at FROM turn_usage WHERE platform = ? AND user_id = ? AND at > ? "
                    "ORDER BY at DESC LIMIT ?",
                    (user.platform, user.user_id, now - window, limit),
                )
                if len(rows) >= limit:
                    # The oldest of the last `limit` turns leaves the window first.
                    return Reservation(None, until=float(rows[-1][0]) + window)
            cur = await db.execute(
                "INSERT INTO turn_usage (bot, platform, user_id, at) VALUES (?, ?, ?, ?)",
                (bot, user.platform, user.user_id, now),
            )
            return Reservation(int(cur.lastrowid or 0))

    async def release_turn(self, reservation_id: int) -> None:
        """Drop a reservation."""
        async with self._tx() as db:
            await db.execute("DELETE FROM turn_usage WHERE id = ?", (reservation_id,))

    async def usage_since(self, since: float, bot: str | None = None) -> UsageStats:
        """Sum the usage stored with replies."""
        where = " AND m.role = 'assistant' AND m.created_at >= ?" + (
            " AND c.bot = ?" if bot is not None else ""
        )
        args: tuple[object, ...] = (since, bot) if bot is not None else (since,)
        async with self._read() as db:
            total = await self._row(
                db,
                "SELECT COUNT(*), COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0), "
                "COALESCE(SUM(cache_write_tokens), 0), COALESCE(SUM(cache_read_tokens), 0), "
                "COUNT(DISTINCT m.conversation_id) FROM messages m JOIN conversations c "
                f"ON c.id = m.conversation_id WHERE 1 = 1{where}",
                args,
            )
            models = await self._rows(
                db,
                "SELECT COALESCE(model, ''), COALESCE(SUM(input_tokens), 0), "
                "COALESCE(SUM(output_tokens), 0), COALESCE(SUM(cache_write_tokens), 0), "
                "COALESCE(SUM(cache_read_tokens), 0) FROM messages m JOIN conversations c "
                f"ON c.id = m.conversation_id WHERE 1 = 1{where} GROUP BY model",
                args,
            )
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
        """Handle the turn without a reply, under the same fencing as finish_turn."""
        async with self._tx() as db:
            token = await self._scalar(db, "SELECT token FROM leases WHERE name = ?", (lease.name,))
            conv_id = await self._conv_id(db, turn.session.conversation)
            if token != lease.token or conv_id is None:
                return False
            ids = [m.id for m in turn.messages]
            await db.execute(
                f"UPDATE messages SET pending = 0 WHERE id IN ({','.join('?' * len(ids))})", ids
            )
            await self._settle_timer(db, conv_id, turn.version, now, queue)
            return True

    # -- retention ----------------------------------------------------------------------------

    async def session_bounds(self, session: SessionKey) -> tuple[int, int] | None:
        """First and last stored turn."""
        async with self._read() as db:
            found = await self._session_row(db, session)
            row = (
                None
                if found is None
                else await self._row(
                    db,
                    "SELECT MIN(turn), MAX(turn) FROM messages WHERE session_id = ?",
                    (found[0],),
                )
            )
        if row is None or row[0] is None:
            return None
        return int(row[0]), int(row[1])

    async def sessions_page(
        self, status: str, cursor: int = 0, limit: int = 500
    ) -> tuple[list[SessionInfo], int]:
        """A page of sessions by row id."""
        async with self._read() as db:
            rows = await self._rows(
                db,
                "SELECT s.id, c.bot, c.platform, c.chat_id, c.thread_id, "
                f"{_qualified('s', cols.SESSION_COLS)} FROM sessions s JOIN conversations c "
                "ON c.id = s.conversation_id WHERE s.status = ? AND s.id > ? "
                "ORDER BY s.id LIMIT ?",
                (status, cursor, limit),
            )
        infos = [
            cols.session_info(cols.conversation_key(r[1], r[2], r[3], r[4]), r[5:]) for r in rows
        ]
        return infos, (int(rows[-1][0]) if len(rows) == limit else 0)

    async def expired_sessions(self, closed_before: float, limit: int = 100) -> list[SessionKey]:
        """Closed sessions past their retention."""
        async with self._read() as db:
            rows = await self._rows(
                db,
                "SELECT c.bot, c.platform, c.chat_id, c.thread_id, s.session_no FROM sessions s "
                "JOIN conversations c ON c.id = s.conversation_id "
                "WHERE s.status = 'closed' AND s.closed_at <= ? ORDER BY s.closed_at LIMIT ?",
                (closed_before, limit),
            )
        return [SessionKey(cols.conversation_key(r[0], r[1], r[2], r[3]), int(r[4])) for r in rows]

    async def expire_session(self, session: SessionKey, now: float) -> int:
        """Delete the whole closed session's data at once."""
        async with self._tx() as db:
            found = await self._session_row(db, session)
            if found is None:
                return 0
            sid, conv_id = found
            status = await self._scalar(db, "SELECT status FROM sessions WHERE id = ?", (sid,))
            if status != "closed":
                return 0  # reopened sessions do not exist; an open one never expires
            bounds = await self._row(
                db,
                "SELECT MIN(turn), MAX(turn), COUNT(*) FROM messages WHERE session_id = ?",
                (sid,),
            )
            for table in ("messages", "session_state", "summaries", "outbox"):
                await db.execute(f"DELETE FROM {table} WHERE session_id = ?", (sid,))
            await db.execute("UPDATE sessions SET status = 'expired' WHERE id = ?", (sid,))
            count = int(bounds[2])
            if count:
                await self._log_deletion(
                    db, now, conv_id, session, bounds[0], bounds[1], count, "session expired"
                )
            return count

    async def _log_deletion(
        self,
        db: aiosqlite.Connection,
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
            "messages, reason) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (now, conv_id, session.session_id, int(first), int(last), count, reason),
        )

    async def old_messages(self, session: SessionKey, cutoff: float) -> OldMessages | None:
        """Old answered/context messages of a session."""
        async with self._read() as db:
            found = await self._session_row(db, session)
            row = (
                None
                if found is None
                else await self._row(
                    db,
                    "SELECT MIN(turn), MAX(turn), COUNT(*), MIN(created_at) FROM messages "
                    "WHERE session_id = ? AND pending = 0 AND created_at <= ?",
                    (found[0], cutoff),
                )
            )
        if row is None or not row[2]:
            return None
        return OldMessages(session, int(row[0]), int(row[1]), int(row[2]), float(row[3]))

    async def sessions_with_old_messages(self, cutoff: float, limit: int = 100) -> list[SessionKey]:
        """Sessions holding old messages."""
        async with self._read() as db:
            rows = await self._rows(
                db,
                "SELECT c.bot, c.platform, c.chat_id, c.thread_id, s.session_no FROM sessions s "
                "JOIN conversations c ON c.id = s.conversation_id WHERE s.id IN ("
                "SELECT DISTINCT session_id FROM messages WHERE created_at <= ? AND pending = 0 "
                "LIMIT ?)",
                (cutoff, limit),
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
            rows = await self._rows(
                db,
                "SELECT id, turn FROM messages WHERE session_id = ? AND pending = 0 "
                "AND turn <= ? AND created_at <= ? ORDER BY turn LIMIT ?",
                (sid, through_turn, cutoff, limit),
            )
            if not rows:
                return 0
            ids = [r[0] for r in rows]
            await db.execute(f"DELETE FROM messages WHERE id IN ({','.join('?' * len(ids))})", ids)
            await self._log_deletion(
                db, now, conv_id, session, rows[0][1], rows[-1][1], len(rows), "message age"
            )
            return len(rows)

    async def retention_log(self, limit: int = 100) -> list[RetentionEntry]:
        """Newest audit-trail entries."""
        async with self._read() as db:
            rows = await self._rows(
                db,
                "SELECT r.at, c.bot, c.platform, c.chat_id, c.thread_id, r.session_no, "
                "r.first_turn, r.last_turn, r.messages, r.reason FROM retention_log r "
                "JOIN conversations c ON c.id = r.conversation_id ORDER BY r.id DESC LIMIT ?",
                (limit,),
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
            cur = await db.execute(
                "DELETE FROM messages WHERE id IN (SELECT m.id FROM messages m "
                "JOIN sessions s ON s.id = m.session_id JOIN conversations c "
                "ON c.id = m.conversation_id WHERE c.platform = ? AND m.author_id = ? "
                f"AND m.role = 'user' AND m.pending = 0 {status})",
                (user.platform, user.user_id),
            )
            return int(cur.rowcount)

    async def sessions_to_extract(
        self, quiet_before: float, limit: int = 20, bots: Sequence[str] | None = None
    ) -> list[tuple[SessionKey, int]]:
        """Closed or quiet sessions with unlearned user messages."""
        where, args = self._bots_filter(bots)
        async with self._read() as db:
            rows = await self._rows(
                db,
                "SELECT c.bot, c.platform, c.chat_id, c.thread_id, s.session_no, "
                "s.extracted_turn FROM sessions s JOIN conversations c "
                "ON c.id = s.conversation_id WHERE s.extracted_turn < s.last_user_turn "
                f"AND (s.status = 'closed' OR s.last_activity_at <= ?){where} "
                "ORDER BY s.last_activity_at LIMIT ?",
                (quiet_before, *args, limit),
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
                    "UPDATE sessions SET extracted_turn = MAX(extracted_turn, ?) WHERE id = ?",
                    (turn, found[0]),
                )

    async def messages(self, session: SessionKey) -> list[StoredMessage]:
        """Every message of a session."""
        async with self._read() as db:
            found = await self._session_row(db, session)
            rows = (
                []
                if found is None
                else await self._rows(
                    db,
                    cols.MESSAGE_SELECT + "WHERE m.session_id = ? ORDER BY m.turn",
                    (found[0],),
                )
            )
        return [cols.message(session.conversation, r) for r in rows]

    async def pending_turn(self, conversation: ConversationKey) -> Turn | None:
        """Pending messages of the oldest session with some, plus v0, read together."""
        async with self._read() as db:
            conv_id = await self._conv_id(db, conversation)
            if conv_id is None:
                return None
            # Read inside one transaction so v0 and the message set are consistent.
            await db.execute("BEGIN")
            try:
                version = int(
                    await self._scalar(
                        db, "SELECT version FROM conversations WHERE id = ?", (conv_id,)
                    )
                )
                first_session = await self._scalar(
                    db,
                    "SELECT MIN(session_id) FROM messages "
                    "WHERE conversation_id = ? AND pending = 1",
                    (conv_id,),
                )
                if first_session is None:
                    return None
                rows = await self._rows(
                    db,
                    cols.MESSAGE_SELECT
                    + "WHERE m.session_id = ? AND m.pending = 1 AND m.version <= ? ORDER BY m.turn",
                    (first_session, version),
                )
                first_pending = await self._scalar(
                    db, "SELECT first_pending_at FROM timers WHERE conversation_id = ?", (conv_id,)
                )
            finally:
                await db.execute("COMMIT")
        messages = tuple(cols.message(conversation, r) for r in rows)
        started = messages[0].created_at if messages else 0.0
        return Turn(
            session=messages[0].session,
            version=version,
            messages=messages,
            first_pending_at=started if first_pending is None else float(first_pending),
        )

    @staticmethod
    def _bots_filter(bots: Sequence[str] | None) -> tuple[str, list[str]]:
        if bots is None:
            return "", []
        return f" AND c.bot IN ({','.join('?' * len(bots))})", list(bots)

    async def due_timers(
        self, now: float, limit: int = 100, bots: Sequence[str] | None = None
    ) -> list[DueTimer]:
        """Due timers, earliest first."""
        where, args = self._bots_filter(bots)
        async with self._read() as db:
            rows = await self._rows(
                db,
                cols.TIMER_SELECT + f"WHERE t.due_at <= ?{where} ORDER BY t.due_at LIMIT ?",
                (now, *args, limit),
            )
        return [cols.timer(r) for r in rows]

    async def next_due_at(self, bots: Sequence[str] | None = None) -> float | None:
        """Earliest due time."""
        where, args = self._bots_filter(bots)
        async with self._read() as db:
            value = await self._scalar(
                db,
                "SELECT MIN(t.due_at) FROM timers t JOIN conversations c "
                f"ON c.id = t.conversation_id WHERE 1 = 1{where}",
                args,
            )
        return None if value is None else float(value)

    async def timer(self, conversation: ConversationKey) -> DueTimer | None:
        """The conversation's timer."""
        async with self._read() as db:
            conv_id = await self._conv_id(db, conversation)
            row = (
                None
                if conv_id is None
                else await self._row(
                    db, cols.TIMER_SELECT + "WHERE t.conversation_id = ?", (conv_id,)
                )
            )
        return None if row is None else cols.timer(row)

    async def rearm_timer(self, conversation: ConversationKey, due_at: float) -> None:
        """Move (or arm) the conversation's timer."""
        async with self._tx() as db:
            conv_id = await self._conv_id(db, conversation)
            if conv_id is None:
                return
            version = await self._scalar(
                db, "SELECT version FROM conversations WHERE id = ?", (conv_id,)
            )
            await db.execute(
                "INSERT INTO timers (conversation_id, due_at, first_pending_at, armed_version) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (conversation_id) DO UPDATE SET "
                "due_at = excluded.due_at",
                (conv_id, due_at, due_at, version),
            )

    async def clear_timer(
        self, conversation: ConversationKey, armed_version: int, *, only_if_idle: bool = True
    ) -> bool:
        """Remove the timer unless newer input re-armed it (or, by default, input is pending)."""
        idle = " AND NOT EXISTS (SELECT 1 FROM messages WHERE conversation_id = ? AND pending)"
        async with self._tx() as db:
            conv_id = await self._conv_id(db, conversation)
            if conv_id is None:
                return False
            args: tuple[int, ...] = (conv_id, armed_version)
            cur = await db.execute(
                "DELETE FROM timers WHERE conversation_id = ? AND armed_version <= ?"
                + (idle if only_if_idle else ""),
                (*args, conv_id) if only_if_idle else args,
            )
            return cur.rowcount > 0

    # -- leases -------------------------------------------------------------------------------

    async def acquire_lease(self, name: str, holder: str, ttl: float, now: float) -> Lease | None:
        """CAS: succeeds only if the lease is free or expired; the token always grows."""
        async with self._tx() as db:
            row = await self._row(
                db,
                "INSERT INTO leases (name, holder, token, expires_at) VALUES (?, ?, 1, ?) "
                "ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, "
                "token = leases.token + 1, expires_at = excluded.expires_at "
                "WHERE leases.expires_at <= ? RETURNING token, expires_at",
                (name, holder, now + ttl, now),
            )
        if row is None:
            return None
        return Lease(name=name, holder=holder, token=int(row[0]), expires_at=float(row[1]))

    async def renew_lease(self, lease: Lease, ttl: float, now: float) -> Lease | None:
        """Extend a lease still held under the same token."""
        async with self._tx() as db:
            row = await self._row(
                db,
                "UPDATE leases SET expires_at = ? WHERE name = ? AND token = ? AND holder = ? "
                "RETURNING expires_at",
                (now + ttl, lease.name, lease.token, lease.holder),
            )
        if row is None:
            return None
        return Lease(lease.name, lease.holder, lease.token, float(row[0]))

    async def release_lease(self, lease: Lease) -> None:
        """Free the lease if still ours."""
        async with self._tx() as db:
            await db.execute(
                "UPDATE leases SET expires_at = 0 WHERE name = ? AND token = ? AND holder = ?",
                (lease.name, lease.token, lease.holder),
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
            token = await self._scalar(db, "SELECT token FROM leases WHERE name = ?", (lease.name,))
            conv_id = await self._conv_id(db, key)
            found = await self._session_row(db, turn.session)
            if token != lease.token or conv_id is None or found is None:
                return FinishResult("fenced")
            sid = found[0]
            version = int(
                await self._scalar(db, "SELECT version FROM conversations WHERE id = ?", (conv_id,))
            )
            newer = await self._scalar(
                db,
                "SELECT COUNT(*) FROM messages WHERE session_id = ? AND pending = 1 "
                "AND version > ?",
                (sid, turn.version),
            )
            cap_passed = now >= turn.first_pending_at + queue.max_wait
            if newer and not cap_passed:
                # Newer input joined this session while we generated: the timer it armed
                # stays; the next attempt will cover everything.
                return FinishResult("discarded", current_version=version)
            reply_turn = int(
                await self._scalar(
                    db,
                    "UPDATE sessions SET next_turn = next_turn + 1, last_activity_at = ? "
                    "WHERE id = ? RETURNING next_turn - 1",
                    (now, sid),
                )
            )
            u = usage or Usage()
            cur = await db.execute(
                "INSERT INTO messages (conversation_id, session_id, turn, role, author_id, "
                "display_name, text, version, pending, created_at, model, input_tokens, "
                "output_tokens, cache_write_tokens, cache_read_tokens) "
                "VALUES (?, ?, ?, 'assistant', 'assistant', '', ?, ?, 0, ?, ?, ?, ?, ?, ?)",
                (
                    conv_id,
                    sid,
                    reply_turn,
                    reply,
                    turn.version,
                    now,
                    model,
                    u.input_tokens,
                    u.output_tokens,
                    u.cache_creation_input_tokens,
                    u.cache_read_input_tokens,
                ),
            )
            reply_id = int(cur.lastrowid or 0)
            ids = [m.id for m in turn.messages]
            marks = ",".join("?" * len(ids))
            await db.execute(
                f"UPDATE messages SET pending = 0, answered_by = ? WHERE id IN ({marks})",
                (reply_id, *ids),
            )
            reply_to = turn.messages[-1].platform_message_id if turn.messages else None
            cur = await db.execute(
                "INSERT INTO outbox (conversation_id, session_id, reply_message_id, text, "
                "reply_to, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                (conv_id, sid, reply_id, reply, reply_to, now),
            )
            outbox_id = int(cur.lastrowid or 0)
            await self._settle_timer(db, conv_id, turn.version, now, queue)
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

    async def _settle_timer(
        self, db: aiosqlite.Connection, conv_id: int, v0: int, now: float, queue: QueuePolicy
    ) -> None:
        """After a recorded turn, the timer reflects what is still pending.

        Nothing pending: drop the timer unless input newer than v0 armed it. Something
        pending (newer input, or messages of a newer session): the timer restarts from those
        messages' own times, so a new burst gets its own debounce and its own hard cap.
        """
        remaining = await self._row(
            db,
            "SELECT MIN(created_at), MAX(created_at), MAX(version) FROM messages "
            "WHERE conversation_id = ? AND pending = 1",
            (conv_id,),
        )
        if remaining is None or remaining[0] is None:
            await db.execute(
                "DELETE FROM timers WHERE conversation_id = ? AND armed_version <= ?",
                (conv_id, v0),
            )
            return
        first, last = float(remaining[0]), float(remaining[1])
        await db.execute(
            "INSERT INTO timers (conversation_id, due_at, first_pending_at, armed_version) "
            "VALUES (?, ?, ?, ?) ON CONFLICT (conversation_id) DO UPDATE SET "
            "due_at = excluded.due_at, first_pending_at = excluded.first_pending_at, "
            "armed_version = MAX(timers.armed_version, excluded.armed_version)",
            (conv_id, queue.due_at(last, first), first, int(remaining[2])),
        )

    # -- outbox -------------------------------------------------------------------------------

    async def begin_send(self, item: OutboxItem, now: float) -> bool:
        """CAS on the attempt count."""
        async with self._tx() as db:
            cur = await db.execute(
                "UPDATE outbox SET attempts = attempts + 1, attempted_at = ? "
                "WHERE id = ? AND status = 'pending' AND attempts = ?",
                (now, item.id, item.attempts),
            )
            return cur.rowcount == 1

    async def unsent_outbox(self, older_than: float, limit: int = 50) -> list[OutboxItem]:
        """Never-attempted rows."""
        async with self._read() as db:
            rows = await self._rows(
                db,
                cols.OUTBOX_SELECT + "WHERE o.status = 'pending' AND o.attempts = 0 "
                "AND o.created_at <= ? ORDER BY o.id LIMIT ?",
                (older_than, limit),
            )
        return [cols.outbox(r) for r in rows]

    async def uncertain_outbox(self, older_than: float, limit: int = 50) -> list[OutboxItem]:
        """Attempted but unconfirmed rows."""
        async with self._read() as db:
            rows = await self._rows(
                db,
                cols.OUTBOX_SELECT + "WHERE o.status = 'pending' AND o.attempts > 0 "
                "AND o.attempted_at <= ? ORDER BY o.id LIMIT ?",
                (older_than, limit),
            )
        return [cols.outbox(r) for r in rows]

    async def mark_sent(self, outbox_id: int, now: float) -> None:
        """Confirm delivery."""
        async with self._tx() as db:
            await db.execute(
                "UPDATE outbox SET status = 'sent', finished_at = ? WHERE id = ?",
                (now, outbox_id),
            )

    async def mark_failed(self, outbox_id: int, now: float, reason: str) -> None:
        """Give up on a row."""
        async with self._tx() as db:
            await db.execute(
                "UPDATE outbox SET status = 'failed', finished_at = ?, failure = ? WHERE id = ?",
                (now, reason[:500], outbox_id),
            )


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
