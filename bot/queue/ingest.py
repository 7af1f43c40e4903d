"""Ingest: store an inbound message, bump the conversation's version and arm its timer.

Ingest returns at once and never calls the model; the scheduler runs the turn later. The rules
are in docs/architecture.md ("The coalescing queue"). Pending input stored here, and an edit of
an unanswered message, is announced to this process's running generations of the conversation
(bot/queue/cutoff.py, rule 9) right after its transaction committed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bot.core.clock import Clock
from bot.core.events import (
    Inbound,
    IngestResult,
    QueuePolicy,
    SessionPolicy,
    StoredMessage,
)
from bot.queue.cutoff import Cutoffs, Edited, Stored
from bot.store.contracts import MessageStore

log = logging.getLogger("personabot.queue")


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Ingestor:
    """Stores inbound messages and arms timers; wakes the local scheduler."""

    store: MessageStore
    clock: Clock
    policy_for: Callable[[str], QueuePolicy]
    sessions: SessionPolicy | None = None
    wake: Callable[[float], None] | None = None
    #: The running generations told of newer input (None: ``[queue] cut_stale = false``).
    cutoffs: Cutoffs | None = None

    async def ingest(self, inbound: Inbound) -> IngestResult:
        """One short transaction; a duplicate delivery is a no-op."""
        policy = self.policy_for(inbound.conversation.bot)
        now = self.clock.now()
        result = await self.store.ingest(inbound, now, policy, self.sessions)
        if not result.stored:
            log.debug("duplicate delivery %s ignored", inbound.platform_message_id)
            return result
        if result.due_at is not None and self.wake is not None:
            self.wake(result.due_at)
        self._stored(inbound, result, now)
        return result

    async def ingest_many(self, inbounds: Sequence[Inbound]) -> list[IngestResult]:
        """Several messages in one transaction (a platform's batch): all stored or, raising
        StoreError, none; the local scheduler is woken once, for the earliest due time."""
        if not inbounds:
            return []
        items = [(i, self.policy_for(i.conversation.bot)) for i in inbounds]
        now = self.clock.now()
        results = await self.store.ingest_many(items, now, self.sessions)
        due = [r.due_at for r in results if r.stored and r.due_at is not None]
        if due and self.wake is not None:
            self.wake(min(due))
        for inbound, result in zip(inbounds, results, strict=True):
            if result.stored:
                self._stored(inbound, result, now)
        return results

    async def edit(self, inbound: Inbound) -> bool:
        """Apply an edit of an unanswered message; False if unknown or already answered.

        An edit that now addresses the bot (``triggers_reply``) of a message kept as context
        only makes it pending and arms the timer, like a new message that addressed it
        (docs/architecture.md#queue rule 1).
        """
        if inbound.platform_message_id is None:
            return False
        policy = self.policy_for(inbound.conversation.bot)
        now = self.clock.now()
        outcome = await self.store.edit_message(
            inbound.conversation,
            inbound.platform_message_id,
            inbound.text,
            now,
            policy,
            author_id=inbound.author_id or None,
            triggers_reply=inbound.triggers_reply,
            sessions=self.sessions,
        )
        log.debug("edit of %s: %s", inbound.platform_message_id, outcome)
        if outcome != "updated":
            return False
        if self.wake is not None:
            self.wake(self.clock.now())
        if self.cutoffs is not None:
            # The store does not say whether the edit re-armed the message (a pending one
            # with new text) or only changed a context message: each running generation of
            # the conversation asks it (bot/runtime/reply.py ``cut_by``, ``stale``).
            edited = Edited(inbound.platform_message_id, now)
            self.cutoffs.notify(inbound.conversation, edited)
        return True

    def _stored(self, inbound: Inbound, result: IngestResult, now: float) -> None:
        """Tell the conversation's running generations of a stored message that asks for a
        reply (stored pending); context-only messages make no reply stale (rule 5)."""
        if self.cutoffs is not None and inbound.triggers_reply:
            newer = Stored(result.session, result.version, now)
            self.cutoffs.notify(inbound.conversation, newer)

    async def delete(self, inbound: Inbound) -> StoredMessage | None:
        """Remove a message the user deleted on the platform; return what was removed."""
        if inbound.platform_message_id is None:
            return None
        # Discord's delete events name no author (None: the platform removed it, whoever did).
        return await self.store.delete_message(
            inbound.conversation,
            inbound.platform_message_id,
            author_id=inbound.author_id or None,
            now=self.clock.now(),
        )
