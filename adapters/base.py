"""The adapter interface: a platform account that produces Inbound events and sends replies.

Platform objects (aiogram, discord.py) never leave ``adapters/``: the runtime sees only the
plain types of ``bot.core.events``.
"""

from __future__ import annotations

import abc
from contextlib import AbstractAsyncContextManager

from bot.config import Secrets
from bot.core.errors import ConfigError, DeliveryRefused
from bot.core.events import ConversationKey, PlatformProblem, Reply
from bot.core.ports import InboundHandler


class BaseAdapter(abc.ABC):
    """One platform account (a bot entry)."""

    #: Re-sending the same outbox id cannot post twice on this platform.
    idempotent_send: bool = False

    def __init__(self, *, bot_key: str) -> None:
        self.bot_key = bot_key

    @abc.abstractmethod
    async def run(self, handler: InboundHandler) -> None:
        """Receive messages and pass each to ``handler`` until stopped or input ends."""

    async def prepare(self, handler: InboundHandler) -> None:  # noqa: B027 - optional hook
        """Connect and identify without receiving yet (run before an election, so that a
        standby process can take over at once)."""

    @abc.abstractmethod
    async def send(self, reply: Reply) -> None:
        """Deliver a reply (split as the platform requires)."""

    async def private_conversation(
        self, conversation: ConversationKey, user_id: str
    ) -> ConversationKey:
        """The user's private chat with this bot; platforms that have one override this."""
        raise DeliveryRefused(f"{self.bot_key}: no private chat with user {user_id}")

    @abc.abstractmethod
    def typing(self, conversation: ConversationKey) -> AbstractAsyncContextManager[None]:
        """A typing indicator kept alive for the body of the ``async with``."""

    @property
    def exclusive(self) -> bool:
        """True when only one process may receive for this account (e.g. Telegram polling):
        ``personabot run`` then elects that process with a lease in the store."""
        return False

    @property
    def connected(self) -> bool:
        """Whether the platform connection is up (for /readyz); adapters override it."""
        return True

    @property
    def last_problem(self) -> PlatformProblem | None:
        """The connection's last failure, secrets scrubbed (the console's bot state and
        /readyz say it beside "not connected"); adapters that can tell override it."""
        return None

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release platform connections."""


def required_secret(secrets: Secrets, variable: str, what: str) -> str:
    """The value of environment variable ``variable``; a ConfigError saying it is not set,
    and what it is (``what``: "token of bot 'mira'"), when it is not."""
    value = secrets.get(variable)
    if value is None:
        raise ConfigError([f"{variable}: not set in the environment ({what})"])
    return value
