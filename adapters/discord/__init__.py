"""Discord through discord.py 2: guild channels, threads and DMs (see docs/discord.md)."""

from adapters.discord.adapter import DiscordAdapter, create_adapter

__all__ = ["DiscordAdapter", "create_adapter"]
