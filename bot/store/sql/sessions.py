"""Sessions and the session and user scopes (docs/architecture.md#keys)."""

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
from bot.store.sql.core import (
    CONV_WHERE,
    CONV_WHERE_C,
    SESSION_ID,
    SQLCore,
    conv_args,
    session_args,
)


class SessionsPart(SQLCore):
    """Sessions and the session and user scopes (docs/architecture.md#keys)."""

    # -- sessions -----------------------------------------------------------------------------

    async def open_session(
        self, conversation: ConversationKey, now: float, policy: SessionPolicy | None = None
    ) -> SessionInfo:
        async with self._tx() as db:
            conv_id = await self._conv_id(db, conversation, now)
            assert conv_id is not None
            sid, _ = await self._ensure_open(db, conv_id, now, policy)
            row = await self._session_by_id(db, sid)
        return cols.session_info(conversation, row)

    async def current_session(self, conversation: ConversationKey) -> SessionInfo | None:
        async with self._read() as db:
            row = await db.fetchrow(
                f"SELECT {cols.SESSION_COLS} FROM sessions WHERE status = 'open' "
                f"AND conversation_id = (SELECT id FROM conversations WHERE {CONV_WHERE})",
                *conv_args(conversation),
            )
        return None if row is None else cols.session_info(conversation, row)

    async def new_session(
        self,
        conversation: ConversationKey,
        now: float,
        reason: str = "new",
        persona: str | None = None,
    ) -> SessionInfo:
        async with self._tx() as db:
            conv_id = await self._conv_id(db, conversation, now)
            assert conv_id is not None
            sid, _ = await self._rotate(db, conv_id, now, reason, persona)
            row = await self._session_by_id(db, sid)
        return cols.session_info(conversation, row)

    # -- session scope ------------------------------------------------------------------------

    async def get_state(self, session: SessionKey, name: str) -> str | NotSet:
        async with self._read() as db:
            value = await db.fetchval(
                f"SELECT value FROM session_state WHERE session_id = {SESSION_ID} AND key = $6",
                *session_args(session),
                name,
            )
        return NOT_SET if value is None else str(value)

    async def set_state(self, session: SessionKey, name: str, value: str, now: float) -> None:
        """Set a session-scoped value (one statement: the session found by its key)."""
        async with self._write() as db:
            written = await db.execute(
                "INSERT INTO session_state (session_id, key, value, updated_at) "
                f"SELECT s.id, $6, $7, $8 FROM sessions s JOIN conversations c "
                f"ON c.id = s.conversation_id WHERE {CONV_WHERE_C} AND s.session_no = $5 "
                "ON CONFLICT (session_id, key) "
                "DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
                *session_args(session),
                name,
                value,
                now,
            )
        if not written:
            raise StoreError(f"unknown session {session}")

    async def delete_state(self, session: SessionKey, name: str | None = None) -> int:
        async with self._write() as db:
            if name is None:
                return await db.execute(
                    f"DELETE FROM session_state WHERE session_id = {SESSION_ID}",
                    *session_args(session),
                )
            return await db.execute(
                f"DELETE FROM session_state WHERE session_id = {SESSION_ID} AND key = $6",
                *session_args(session),
                name,
            )

    # -- user scope ---------------------------------------------------------------------------

    async def get_user_memory(self, user: UserKey) -> str | NotSet:
        async with self._read() as db:
            value = await db.fetchval(
                "SELECT record FROM user_memory WHERE platform = $1 AND user_id = $2",
                user.platform,
                user.user_id,
            )
        return NOT_SET if value is None else str(value)

    async def read_user_memory(self, user: UserKey) -> tuple[str | None, int]:
        async with self._read() as db:
            row = await db.fetchrow(
                "SELECT record, version FROM user_memory WHERE platform = $1 AND user_id = $2",
                user.platform,
                user.user_id,
            )
        return (None, 0) if row is None else (str(row[0]), int(row[1]))

    async def set_user_memory(
        self, user: UserKey, record: str, now: float, *, expected_version: int | None = None
    ) -> bool:
        """Replace a user's memory record (compare-and-swap with ``expected_version``).

        One statement each: the UPDATE's row lock (SQLite: the write transaction) makes the
        version check and the write atomic across processes; a racing first INSERT loses on
        the primary key.
        """
        args = (user.platform, user.user_id, record, now)
        async with self._tx() as db:
            if expected_version is None:
                await db.execute(
                    "INSERT INTO user_memory (platform, user_id, record, updated_at, version) "
                    "VALUES ($1, $2, $3, $4, 1) ON CONFLICT (platform, user_id) "
                    "DO UPDATE SET record = excluded.record, updated_at = excluded.updated_at, "
                    "version = user_memory.version + 1",
                    *args,
                )
                return True
            if expected_version == 0:
                won = await db.fetchval(
                    "INSERT INTO user_memory (platform, user_id, record, updated_at, version) "
                    "VALUES ($1, $2, $3, $4, 1) ON CONFLICT (platform, user_id) DO NOTHING "
                    "RETURNING version",
                    *args,
                )
            else:
                won = await db.fetchval(
                    "UPDATE user_memory SET record = $3, updated_at = $4, version = version + 1 "
                    "WHERE platform = $1 AND user_id = $2 AND version = $5 RETURNING version",
                    *args,
                    expected_version,
                )
        return won is not None
