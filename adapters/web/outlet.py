"""The playground's outlet: replies stay in the store's transcript, where the console's page
reads them; nothing leaves the process."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from bot.core.events import ConversationKey, Reply

#: The platform of playground conversations: their keys never meet a real chat's.
PLATFORM = "web"


class WebOutlet:
    """Accepts every reply (the transcript holds it) and counts them."""

    def __init__(self) -> None:
        self.sent = 0

    @property
    def idempotent_send(self) -> bool:
        """Sending again posts nothing anywhere."""
        return True

    async def send(self, reply: Reply) -> None:
        """Nothing to deliver: the page shows the stored transcript."""
        self.sent += 1

    async def private_conversation(
        self, conversation: ConversationKey, user_id: str
    ) -> ConversationKey:
        """The playground is already the operator's private chat."""
        return conversation

    @contextlib.asynccontextmanager
    async def typing(self, conversation: ConversationKey) -> AsyncIterator[None]:
        """No indicator: the page refreshes itself."""
        yield
