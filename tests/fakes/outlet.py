"""A recording outlet: the adapter side of the pipeline, in memory."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from bot.core.clock import Clock
from bot.core.errors import DeliveryRefused
from bot.core.events import ConversationKey, Reply


class RecordingOutlet:
    """Records every reply with the clock time it was sent, and typing start/stop."""

    def __init__(self, clock: Clock, *, idempotent_send: bool = False) -> None:
        self._clock = clock
        self._idempotent = idempotent_send
        self.replies: list[tuple[float, Reply]] = []
        self.typing_events: list[tuple[str, ConversationKey]] = []
        #: When set, a reply with a file waits for it (an export "on the wire").
        self.file_gate: asyncio.Event | None = None
        #: Users whose private chat the platform refuses (never started the bot).
        self.no_private_chat: set[str] = set()
        #: Replies the platform refused (to a chat in ``no_private_chat``), with the time.
        self.refused: list[tuple[float, Reply]] = []

    @property
    def idempotent_send(self) -> bool:
        """Whether re-sending the same outbox id is safe."""
        return self._idempotent

    async def send(self, reply: Reply) -> None:
        """Record the reply (a file waits for ``file_gate`` first, when set)."""
        if reply.attachment is not None and self.file_gate is not None:
            await self.file_gate.wait()
        if reply.conversation.chat_id in self.no_private_chat:
            self.refused.append((self._clock.now(), reply))
            raise DeliveryRefused(f"user {reply.conversation.chat_id} never started the bot")
        self.replies.append((self._clock.now(), reply))

    async def private_conversation(
        self, conversation: ConversationKey, user_id: str
    ) -> ConversationKey:
        """The private chat has the user's id, as on Telegram."""
        return ConversationKey(conversation.platform, user_id, None, conversation.bot)

    def files(self) -> list[Reply]:
        """Replies that carried a file, in order."""
        return [r for _, r in self.replies if r.attachment is not None]

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
