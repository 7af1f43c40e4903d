"""Who may talk to a bot: allow-lists of users and chats, and admins (pure rules)."""

from __future__ import annotations

from dataclasses import dataclass

from bot.core.events import Inbound


@dataclass(frozen=True, slots=True)
class AccessPolicy:
    """One bot's access rules; empty allow-lists mean everyone."""

    allow_users: frozenset[str] = frozenset()
    allow_chats: frozenset[str] = frozenset()
    admins: frozenset[str] = frozenset()
    denied_reply: str = ""

    def allows(self, inbound: Inbound) -> bool:
        """Whether this message may be stored and answered (admins always may)."""
        if inbound.author_id in self.admins:
            return True
        if self.allow_users and inbound.author_id not in self.allow_users:
            return False
        return not self.allow_chats or inbound.conversation.chat_id in self.allow_chats

    def is_admin(self, user_id: str) -> bool:
        """Whether the user may run admin commands."""
        return user_id in self.admins
