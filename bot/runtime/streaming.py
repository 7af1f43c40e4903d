"""Streaming a reply while it is written (docs/architecture.md#streaming).

Stop requests: a person pressing a Telegram draft's stop button reaches the process that
receives the update, which may not be the one writing the reply. The request is therefore a
lease named after the conversation and the draft (held for an hour, so the store forgets it
by itself), checked by the writing turn at every preview update; a turn in the same process
is told at once through an in-process event as well.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from bot.core.clock import Clock
from bot.core.events import ConversationKey
from bot.store.contracts import LeaseStore

log = logging.getLogger("personabot.streaming")

#: How long a stop request is kept: far longer than any generation.
STOP_SECONDS: Final = 3600.0


def stop_lease(conversation: ConversationKey, draft_id: int) -> str:
    """The lease that records a stop request for one draft."""
    return f"stop:{conversation}:{draft_id}"


class StopSignals:
    """Stop requests for drafts being written, across processes."""

    def __init__(self, *, store: LeaseStore, clock: Clock) -> None:
        self._store = store
        self._clock = clock
        self._local: dict[tuple[ConversationKey, int], asyncio.Event] = {}

    def watch(self, conversation: ConversationKey, draft_id: int) -> asyncio.Event:
        """An event set when this process hears of a stop of the draft (``forget`` after)."""
        return self._local.setdefault((conversation, draft_id), asyncio.Event())

    def forget(self, conversation: ConversationKey, draft_id: int) -> None:
        """The draft's generation is over."""
        self._local.pop((conversation, draft_id), None)

    async def request(self, conversation: ConversationKey, draft_id: int) -> None:
        """Record a stop (the store, for any process), and tell a local turn at once."""
        event = self._local.get((conversation, draft_id))
        if event is not None:
            event.set()
        await self._store.acquire_lease(
            stop_lease(conversation, draft_id), "stop-button", STOP_SECONDS, self._clock.now()
        )
        log.info("%s: stop of draft %d requested", conversation, draft_id)

    async def requested(self, conversation: ConversationKey, draft_id: int) -> bool:
        """Whether a stop of the draft was requested, here or in another process."""
        event = self._local.get((conversation, draft_id))
        if event is not None and event.is_set():
            return True
        expires = await self._store.lease_expires_at(stop_lease(conversation, draft_id))
        return expires is not None and expires > self._clock.now()
