"""A recording outlet: the adapter side of the pipeline, in memory."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from bot.clock import Clock
from bot.events import ConversationKey, Reply


class RecordingOutlet:
    """Records every reply with the clock time it was sent, and typing start/stop."""

    def __init__(self, clock: Clock, *, idempotent_send: bool = False) -> None:
        self._clock = clock
        self._idempotent = idempotent_send
        self.replies: list[tuple[float, Reply]] = []
        self.typing_events: list[tuple[str, ConversationKey]] = []

    @property
    def idempotent_send(self) -> bool:
        """Whether re-sending the same outbox id is safe."""
        return self._idempotent

    async def send(self, reply: Reply) -> None:
        """Record the reply."""
        self.replies.append((self._clock.now(), reply))

    @contextlib.asynccontextmanager
    async def typing(self, conversation: ConversationKey) -> AsyncIterator[None]:
        """Record start and (always) stop."""
        self.typing_events.append(("start", conversation))
        try:
            yield
        finally:
            self.typing_events.append(("stop", conversation))

    def texts(self, conversation: ConversationKey | None = None) -> list[str]:
        """Reply texts, optionally of one conversation."""
        return [r.text for _, r in self.replies if conversation in (None, r.conversation)]
