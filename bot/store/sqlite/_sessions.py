"""SQLite: sessions and the session and user scopes (docs/architecture.md#keys)."""

from __future__ import annotations

from bot.core.errors import StoreError
from bot.core.events import (
    NOT_SET,
    ConversationKey,
    NotSet,
    SessionInfo,
    SessionKey,
    SessionPolicy,
    UserKey,
)
from bot.store import cols
from bot.store.sqlite._core import (
    SQLiteCore,
)


class SessionsPart(SQLiteCore):
    """Sessions and the session and user scopes (docs/architecture.md#keys)."""

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

    async def read_user_memory(self, user: UserKey) -> tuple[str | None, int]:
        """A user's memory record and its version."""
        async with self._read() as db:
            row = await self._row(
                db,
                "SELECT record, version FROM user_memory WHERE platform = ? AND user_id = ?",
                (user.platform, user.user_id),
            )
        return (None, 0) if row is None else (str(row[0]), int(row[1]))

    async def set_user_memory(
        self, user: UserKey, record: str, now: float, *, expected_version: int | None = None
    ) -> bool:
        """Replace a user's memory record (compare-and-swap with ``expected_version``)."""
        args = (user.platform, user.user_id)
        async with self._tx() as db:
            # BEGIN IMMEDIATE holds the write lock: the read and the write below are one step
            # for every process on the file.
            if expected_version is not None:
                current = await self._scalar(
                    db, "SELECT version FROM user_memory WHERE platform = ? AND user_id = ?", args
                )
                if int(current or 0) != expected_version:
                    return False
            await db.execute(
                "INSERT INTO user_memory (platform, user_id, record, updated_at, version) "
                "VALUES (?, ?, ?, ?, 1) ON CONFLICT (platform, user_id) "
                "DO UPDATE SET record = excluded.record, updated_at = excluded.updated_at, "
                "version = user_memory.version + 1",
                (*args, record, now),
            )
            return True

    async def delete_user_memory(self, user: UserKey) -> bool:
        """Erase a user's memory."""
        async with self._tx() as db:
            cur = await db.execute(
                "DELETE FROM user_memory WHERE platform = ? AND user_id = ?",
                (user.platform, user.user_id),
            )
            return cur.rowcount > 0
