"""Routes each inbound message: commands are answered at once, everything else is ingested."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from bot.commands import Commands, parse_command
from bot.events import Inbound, Reply, UserKey
from bot.ports import Outlet
from bot.queue import Ingestor
from memory.service import Memory

log = logging.getLogger("personabot.router")


class Router:
    """The InboundHandler every adapter of this process calls."""

    def __init__(
        self,
        *,
        ingestor: Ingestor,
        commands: Commands,
        outlets: Mapping[str, Outlet],
        usernames: Mapping[str, str] | None = None,
        memory: Memory | None = None,
    ) -> None:
        self._ingestor = ingestor
        self._commands = commands
        self._outlets = dict(outlets)
        self._usernames = dict(usernames or {})
        self._memory = memory

    @property
    def commands(self) -> tuple[tuple[str, str], ...]:
        """(name, description) of every chat command."""
        return tuple((spec.name, spec.description) for spec in self._commands.specs)

    async def __call__(self, inbound: Inbound) -> None:
        """Handle one message in arrival order."""
        if inbound.kind == "edit":
            await self._ingestor.edit(inbound)
            return
        if inbound.kind == "delete":
            removed = await self._ingestor.delete(inbound)
            if removed is not None and removed.role == "user" and self._memory is not None:
                user = UserKey(inbound.conversation.platform, removed.author_id)
                await self._memory.drop_sources(user, [removed.id])
            return
        command = parse_command(inbound.text) if inbound.triggers_reply else None
        if command is not None:
            bot = inbound.conversation.bot
            addressed = command.addressed_to
            own = self._usernames.get(bot)
            if addressed is not None and own is not None and addressed.lower() != own.lower():
                return  # a command for another bot in the same group
            answer = await self._commands.handle(inbound, command)
            await self._outlets[bot].send(Reply(inbound.conversation, answer))
            return
        await self._ingestor.ingest(inbound)
