"""The commands each bot registered on its platform itself (migration 22,
docs/discord.md#sync): what a command sync may delete."""

from __future__ import annotations

from collections.abc import Mapping

from bot.store.sql.core import SQLCore


class CommandsPart(SQLCore):
    """registered_commands, command_scopes, record_commands."""

    async def registered_commands(self, bot: str, scope: str) -> dict[str, str]:
        async with self._read() as db:
            rows = await db.fetch(
                "SELECT name, command_id FROM platform_commands WHERE bot = $1 AND scope = $2",
                bot,
                scope,
            )
        return {str(r[0]): str(r[1]) for r in rows}

    async def command_scopes(self, bot: str) -> tuple[str, ...]:
        async with self._read() as db:
            rows = await db.fetch(
                "SELECT DISTINCT scope FROM platform_commands WHERE bot = $1 ORDER BY scope", bot
            )
        return tuple(str(r[0]) for r in rows)

    async def record_commands(self, bot: str, scope: str, commands: Mapping[str, str]) -> None:
        """One transaction: a process that reads meanwhile sees the old record or the new."""
        async with self._tx() as db:
            await db.execute(
                "DELETE FROM platform_commands WHERE bot = $1 AND scope = $2", bot, scope
            )
            for name, command_id in sorted(commands.items()):
                await db.execute(
                    "INSERT INTO platform_commands (bot, scope, name, command_id) "
                    "VALUES ($1, $2, $3, $4)",
                    bot,
                    scope,
                    name,
                    command_id,
                )
