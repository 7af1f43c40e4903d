"""Ingest's shared part: a batch of inbound messages in one transaction, and what both
stores read and decide for each message (docs/architecture.md#ingest-in-batches).

Each store writes a message its own way (SQLite: a short statement sequence,
``bot/store/sqlite/_ingest.py``; PostgreSQL: one data-modifying statement,
``bot/store/postgres/_writes.py``); the read before it is one statement on both.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from bot.core.events import (
    ConversationKey,
    Inbound,
    IngestResult,
    QueuePolicy,
    SessionKey,
    SessionPolicy,
)
from bot.core.queue_rules import arm
from bot.core.sessions import expiry_reason
from bot.store.sql.conn import Conn
from bot.store.sql.core import conv_args
from bot.store.sql.messages import MessagesPart

# The queue state of a batch's conversations, read after their locks (SQLite: under its write
# lock): version, timer, open session (with its next turn), and which of the batch's platform
# message ids each holds already, with the session number (a JSON object: {agg} is the
# dialect's JSON object aggregate). {where} picks the conversations, {mids} lists the ids.
BATCH_STATE_SQL = (
    "SELECT c.id, c.version, t.due_at, t.first_pending_at, o.id, o.session_no, o.opened_at, "
    "o.last_activity_at, o.next_turn, (SELECT {agg}(m.platform_message_id, s.session_no) "
    "FROM messages m JOIN sessions s ON s.id = m.session_id WHERE m.conversation_id = c.id "
    "AND m.platform_message_id {mids}), c.bot, c.platform, c.chat_id, c.thread_id "
    "FROM conversations c LEFT JOIN timers t ON t.conversation_id = c.id "
    "LEFT JOIN sessions o ON o.conversation_id = c.id AND o.status = 'open' WHERE {where}"
)


@dataclass(frozen=True, slots=True)
class IngestState:
    """What ingest knows of a conversation before writing a message to it."""

    conv_id: int
    version: int
    timer_due: float | None
    first_pending_at: float | None
    #: (row id, number, opened_at, last_activity_at, next_turn) of the open session, if any.
    open_session: tuple[int, int, float, float, int] | None
    #: Platform message id -> number of the session that holds it (second deliveries).
    stored: Mapping[str, int]

    @classmethod
    def of(cls, row: Any) -> IngestState:
        """From a row of BATCH_STATE_SQL."""
        return cls(
            conv_id=int(row[0]),
            version=int(row[1]),
            timer_due=None if row[2] is None else float(row[2]),
            first_pending_at=None if row[3] is None else float(row[3]),
            open_session=(
                None
                if row[4] is None
                else (int(row[4]), int(row[5]), float(row[6]), float(row[7]), int(row[8]))
            ),
            stored={str(k): int(v) for k, v in json.loads(row[9] or "{}").items()},
        )

    @classmethod
    def new(cls, conv_id: int) -> IngestState:
        """A conversation created by this transaction: no timer, no session, no messages."""
        return cls(conv_id, 0, None, None, None, {})


@dataclass(frozen=True, slots=True)
class Planned:
    """A message of a batch to be written: where it goes and what it is numbered."""

    inbound: Inbound
    conv_id: int
    sid: int
    session_no: int
    turn: int
    version: int
    #: The timer this message arms (due, first pending), or None (context only).
    armed: tuple[float, float] | None
    #: The conversation's due time after this message (its own, or the one already armed).
    due_at: float | None


def duplicate(key: ConversationKey, state: IngestState, session_no: int) -> IngestResult:
    """The no-op result of a second delivery of a stored message."""
    return IngestResult(
        stored=False,
        message_id=None,
        session=SessionKey(key, session_no),
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
        return (await self.ingest_many([(inbound, queue)], now, sessions))[0]

    async def _plan(
        self,
        db: Conn,
        items: Sequence[tuple[Inbound, QueuePolicy]],
        ids: Mapping[ConversationKey, int],
        states: dict[int, IngestState],
        now: float,
        sessions: SessionPolicy | None,
    ) -> list[IngestResult | Planned]:
        """Number the batch's messages in order from the states read under the locks: a second
        delivery becomes its no-op result, every other message a ``Planned`` row. What each
        message changes (version, turn, timer, open session, ids stored) is carried forward to
        the next; ``states`` ends as the conversations' states after the batch.

        Only the first message of a conversation can open a session (an expired or missing
        one: ``_rotate`` writes at once); after it the session was active ``now``.
        """
        out: list[IngestResult | Planned] = []
        for inbound, queue in items:
            key = inbound.conversation
            state = states[ids[key]]
            mid = inbound.platform_message_id
            if mid is not None and mid in state.stored:
                out.append(duplicate(key, state, state.stored[mid]))
                continue
            sid, number, opened_at, turn = await self._session_for(db, state, now, sessions)
            version = state.version + 1
            armed = None
            due_at = state.timer_due
            first_pending_at = state.first_pending_at
            if inbound.triggers_reply:
                timer = arm(queue, now, state.first_pending_at, version)
                armed = (timer.due_at, timer.first_pending_at)
                due_at, first_pending_at = timer.due_at, timer.first_pending_at
            out.append(Planned(inbound, state.conv_id, sid, number, turn, version, armed, due_at))
            states[state.conv_id] = replace(
                state,
                version=version,
                timer_due=due_at,
                first_pending_at=first_pending_at,
                open_session=(sid, number, opened_at, now, turn + 1),
                stored={**state.stored, mid: number} if mid is not None else state.stored,
            )
        return out

    async def _session_for(
        self, db: Conn, state: IngestState, now: float, sessions: SessionPolicy | None
    ) -> tuple[int, int, float, int]:
        """(row id, number, opened_at, next turn) of the session the message joins: the open
        one, or a new one when there is none or it expired (the conversation is locked)."""
        found = state.open_session
        reason = (
            None
            if found is None or sessions is None
            else expiry_reason(sessions, opened_at=found[2], last_activity_at=found[3], now=now)
        )
        if found is None or reason is not None:
            sid, number = await self._rotate(db, state.conv_id, now, reason)
            return sid, number, now, 1
        return found[0], found[1], found[2], found[4]


def results(
    planned: Sequence[IngestResult | Planned], message_ids: Sequence[int]
) -> list[IngestResult]:
    """The batch's results in order: ``message_ids`` are the planned rows' ids, in order."""
    ids = iter(message_ids)
    return [
        p
        if isinstance(p, IngestResult)
        else IngestResult(
            stored=True,
            message_id=next(ids),
            session=SessionKey(p.inbound.conversation, p.session_no),
            version=p.version,
            due_at=p.due_at,
        )
        for p in planned
    ]
