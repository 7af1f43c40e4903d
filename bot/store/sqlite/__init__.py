"""SQLite store (aiosqlite): the embedded default. One file, WAL, foreign keys on (media rows
go with their message), secure_delete on (deleted rows are overwritten in the file).

Every write transaction runs in ``BEGIN IMMEDIATE``: the write lock is taken at the start of
the transaction, so two processes on one file serialize their read-modify-write sequences
(ingest, final check) instead of failing half-way on a lock upgrade. A write that is one
statement (a lease CAS, an outbox attempt, a usage row) runs alone in autocommit, which takes
the same lock for that statement. The parts are the shared ones (bot/store/sql); this package
adds the connection and ingest.
"""

from __future__ import annotations

from bot.core.events import ConversationKey, Erasure, SessionKey, StoredMessage, UserKey
from bot.store.sql.agenda import AgendaPart
from bot.store.sql.commands import CommandsPart
from bot.store.sql.conn import StatementTrace
from bot.store.sql.console import ConsolePart
from bot.store.sql.media import MediaPart
from bot.store.sql.people import PeoplePart
from bot.store.sql.queue import QueuePart
from bot.store.sql.retention import RetentionPart
from bot.store.sql.sessions import SessionsPart
from bot.store.sql.toolcalls import ToolCallsPart
from bot.store.sqlite._core import SQLiteCore, sqlite_path
from bot.store.sqlite._ingest import IngestPart


class SQLiteStore(
    SessionsPart,
    IngestPart,
    QueuePart,
    MediaPart,
    RetentionPart,
    PeoplePart,
    AgendaPart,
    ConsolePart,
    ToolCallsPart,
    CommandsPart,
    SQLiteCore,
):
    """The BaseStore contract on one SQLite file; each part holds one concern.

    Every deletion that may remove a person's content (a platform deletion, /forget,
    retention) ends with an emptied write-ahead log: secure_delete overwrites the pages of the
    main file, but the -wal file keeps the page images written earlier (a photo's bytes) until
    a checkpoint reuses them, and a copy of a running bot's files must not hold them.
    """

    async def delete_message(
        self,
        conversation: ConversationKey,
        platform_message_id: str,
        *,
        author_id: str | None = None,
        now: float | None = None,
    ) -> StoredMessage | None:
        """The shared deletion, then the log emptied when a message went."""
        deleted = await super().delete_message(
            conversation, platform_message_id, author_id=author_id, now=now
        )
        if deleted is not None:
            await self._empty_log()
        return deleted

    async def erase_user_messages(self, user: UserKey) -> Erasure:
        """The shared erasure, then the log emptied."""
        erased = await super().erase_user_messages(user)
        await self._empty_log()
        return erased

    async def expire_session(self, session: SessionKey, now: float) -> int:
        """The shared expiry, then the log emptied when messages went."""
        count = await super().expire_session(session, now)
        if count:
            await self._empty_log()
        return count

    async def delete_old_messages(
        self, session: SessionKey, through_turn: int, cutoff: float, now: float, limit: int
    ) -> int:
        """The shared batch, then the log emptied when messages went."""
        count = await super().delete_old_messages(session, through_turn, cutoff, now, limit)
        if count:
            await self._empty_log()
        return count


__all__ = ["SQLiteStore", "StatementTrace", "sqlite_path"]
