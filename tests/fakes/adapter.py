"""An in-memory platform adapter: the test feeds messages; replies are recorded."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from adapters.base import BaseAdapter
from bot.core.events import ConversationKey, Inbound, Reply
from bot.core.ports import InboundHandler


class QueueAdapter(BaseAdapter):
    """Inbound messages come from ``push``; replies land in ``replies``."""

    def __init__(self, *, bot_key: str) -> None:
        super().__init__(bot_key=bot_key)
        self.inbox: asyncio.Queue[Inbound] = asyncio.Queue()
        self.replies: list[Reply] = []
        self.up = True
        self.handled = asyncio.Event()

    @property
    def connected(self) -> bool:
        """Whether the fake platform is up."""
        return self.up

    async def run(self, handler: InboundHandler) -> None:
        """Pass every pushed message to the handler."""
        while True:
            inbound = await self.inbox.get()
            await handler(inbound)
            self.inbox.task_done()

    async def send(self, reply: Reply) -> None:
        """Record the reply."""
        self.replies.append(reply)

    @contextlib.asynccontextmanager
    async def typing(self, conversation: ConversationKey) -> AsyncIterator[None]:
        """No indicator."""
        yield
