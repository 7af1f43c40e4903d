"""The console adapter of ``personabot chat``: one local person, stdin and stdout."""

from adapters.console.adapter import ConsoleAdapter

__all__ = ["ConsoleAdapter"]
