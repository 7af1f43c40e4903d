"""What the runtime needs from a platform adapter, as Protocols (adapters implement them)."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Protocol

from bot.core.events import ConversationKey, Inbound, Reply


class Outlet(Protocol):
    """Delivers replies to one platform account and shows typing."""

    @property
    def idempotent_send(self) -> bool:
        """True when re-sending the same outbox id cannot post twice (e.g. Discord nonce)."""
        ...

    async def send(self, reply: Reply) -> None:
        """Deliver a reply (a file too, when it has an attachment); raise AdapterError when it
        cannot be delivered (DeliveryRefused when the platform never will).

        Only bot.runtime.delivery calls it (the one outbound path); whatever the text says, it
        never notifies anyone (no @everyone, no mention of a user or role).
        """
        ...

    async def private_conversation(
        self, conversation: ConversationKey, user_id: str
    ) -> ConversationKey:
        """The private chat of ``user_id`` with the bot of ``conversation`` (for answers that
        must not appear in a group).

        Raise DeliveryRefused when the platform will not open one (the send may still be
        refused later, e.g. on Telegram before the user started the bot).
        """
        ...

    def typing(self, conversation: ConversationKey) -> AbstractAsyncContextManager[None]:
        """Keep a typing indicator alive for the body of the ``async with``."""
        ...


class InboundHandler(Protocol):
    """Receives every normalized inbound message of an adapter."""

    @property
    def commands(self) -> tuple[tuple[str, str], ...]:
        """(name, description) of every chat command, for platform command menus."""
        ...

    async def __call__(self, inbound: Inbound) -> None:
        """Handle one message (a command at once; anything else is ingested)."""
        ...

    def rejected(self, platform: str, bot: str, kind: str) -> None:
        """Count an update of ``kind`` the adapter could not read (already logged, skipped)."""
        ...
