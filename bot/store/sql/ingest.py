"""Ingest's shared part: a batch of inbound messages in one transaction, and what both
stores read and decide for each message (docs/architecture.md#ingest-in-batches).

Each store writes a message its own way (SQLite: a short statement sequence,
``bot/store/sqlite/_ingest.py``; PostgreSQL: one data-modifying statement,
``bot/store/postgres/_writes.py``); the read before it is one statement on both.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bot.core.events import (
    ConversationKey,
    Inbound,
    IngestResult,
    QueuePolicy,
    SessionKey,
    SessionPolicy,
)
from bot.core.sessions import expiry_reason
from bot.store.sql.conn import Conn
from bot.store.sql.core import conv_args
from bot.store.sql.messages import MessagesPart

# A conversation's queue state and whether the message is a second delivery, in one read;
# {where} picks the conversation (by id after its lock, or by key under SQLite's write lock),
# {mid} is the platform message id's parameter.
STATE_SQL = (
    "SELECT c.id, c.version, t.due_at, t.first_pending_at, o.id, o.session_no, o.opened_at, "
    "o.last_activity_at, (SELECT s.session_no FROM messages m JOIN sessions s "
    "ON s.id = m.session_id WHERE m.conversation_id = c.id AND m.platform_message_id = {mid}) "
    "FROM conversations c LEFT JOIN timers t ON t.conversation_id = c.id "
    "LEFT JOIN sessions o ON o.conversation_id = c.id AND o.status = 'open' WHERE {where}"
)


@dataclass(frozen=True, slots=True)
class IngestState:
    """What ingest reads of a conversation before writing a message to it."""

    conv_id: int
    version: int
    timer_due: float | None
    first_pending_at: float | None
    #: (row id, number, opened_at, last_activity_at) of the open session, if any.
    open_session: tuple[int, int, float, float] | None
    #: The session number holding this platform message already (a second delivery).
    duplicate_in: int | None

    @classmethod
    def of(cls, row: Any) -> IngestState:
        """From a row of STATE_SQL."""
        return cls(
            conv_id=int(row[0]),
            version=int(row[1]),
            timer_due=None if row[2] is None else float(row[2]),
            first_pending_at=None if row[3] is None else float(row[3]),
            open_session=(
                None if row[4] is None else (int(row[4]), int(row[5]), float(row[6]), float(row[7]))
            ),
            duplicate_in=None if row[8] is None else int(row[8]),
        )

    @classmethod
    def new(cls, conv_id: int) -> IngestState:
        """A conversation created by this transaction: no timer, no session, no messages."""
        return cls(conv_id, 0, None, None, None, None)


def duplicate(key: ConversationKey, state: IngestState) -> IngestResult:
    """The no-op result of a second delivery of a stored message."""
    assert state.duplicate_in is not None
    return IngestResult(
        stored=False,
        message_id=None,
        session=SessionKey(key, state.duplicate_in),
        version=state.version,
        due_at=state.timer_due,
    )


def sort_key(key: ConversationKey) -> tuple[str, str, str, str]:
    """The order a batch locks its conversations in: one order for every process, so two
    batches that share conversations never wait on each other in a cycle."""
    return conv_args(key)


class IngestBase(MessagesPart):
    """``ingest`` is a batch of one; each store implements ``ingest_many``."""

    async def ingest(
        self,
        inbound: Inbound,
        now: float,
        queue: QueuePolicy,
        sessions: SessionPolicy | None = None,
    ) -> IngestResult:
        """Store a message, bump the version and arm the timer, in one short transaction."""
        return (await self.ingest_many([(inbound, queue)], now, sessions))[0]

    @abc.abstractmethod
    async def ingest_many(
        self,
        items: Sequence[tuple[Inbound, QueuePolicy]],
        now: float,
        sessions: SessionPolicy | None = None,
    ) -> list[IngestResult]:
        """Ingest every message in one transaction, in order; results in the same order."""

    async def _session_for(
        self, db: Conn, state: IngestState, now: float, sessions: SessionPolicy | None
    ) -> tuple[int, int]:
        """(row id, number) of the session the message joins: the open one, or a new one when
        there is none or it expired (the conversation is locked)."""
        found = state.open_session
        reason = (
            None
            if found is None or sessions is None
            else expiry_reason(sessions, opened_at=found[2], last_activity_at=found[3], now=now)
        )
        if found is None or reason is not None:
            return await self._rotate(db, state.conv_id, now, reason)
        return found[0], found[1]
