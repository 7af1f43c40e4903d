"""The discord.py client personabot runs: it queues message events in gateway order.

discord.py calls ``dispatch`` synchronously while it parses each gateway event; overriding it
(as discord.py's own ``commands.Bot`` does) is how events are captured in order, before the
next event is parsed.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import logging
from collections.abc import Callable
from typing import Any, Final

import discord

log = logging.getLogger("personabot.discord")

Event = (
    discord.Message
    | discord.RawMessageUpdateEvent
    | discord.RawMessageDeleteEvent
    | discord.RawBulkMessageDeleteEvent
)


def default_intents(*, message_content: bool = True) -> discord.Intents:
    """Guilds, guild messages, DMs and (privileged) message content; nothing else."""
    return discord.Intents(
        guilds=True, guild_messages=True, dm_messages=True, message_content=message_content
    )


class _QuietVoiceNotes(logging.Filter):
    """Drops discord.py's start-up notes that voice is unsupported: this bot never uses voice."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Keep every record except the voice-support notes."""
        return not str(record.msg).endswith("voice will NOT be supported")


_VOICE_NOTES: Final = _QuietVoiceNotes()


def quiet_voice_notes() -> None:
    """Install the filter on discord.py's client logger (idempotent: one filter object)."""
    logging.getLogger("discord.client").addFilter(_VOICE_NOTES)


class QueueingClient(discord.Client):
    """A discord.py client that queues the events personabot uses, in gateway order."""

    _QUEUED: Final = frozenset(
        {"raw_message_edit", "raw_message_delete", "raw_bulk_message_delete"}
    )

    def __init__(
        self,
        *,
        queue: asyncio.Queue[Event],
        on_unreadable: Callable[[str], None] | None = None,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        self._queue = queue
        self._on_unreadable = on_unreadable
        # discord.py calls these parsers from its gateway loop: an exception in one (a frame
        # it cannot parse) would end ``connect()`` and the bot. Guarded, a bad frame is logged
        # and counted, and the next frame is read as usual.
        parsers = self._connection.parsers
        for name, parse in list(parsers.items()):
            parsers[name] = self._guarded(name, parse)

    def _guarded(self, name: str, parse: Callable[[Any], None]) -> Callable[[Any], None]:
        @functools.wraps(parse)
        def guarded(data: Any) -> None:
            try:
                parse(data)
            except Exception as exc:  # anything discord.py raises while parsing one frame
                log.warning(
                    "skipped a Discord %s event discord.py cannot read (%s)",
                    name,
                    type(exc).__name__,
                )
                if self._on_unreadable is not None:
                    self._on_unreadable(name)

        return guarded

    def dispatch(self, event: str, /, *args: Any, **kwargs: Any) -> None:
        """Queue message events as the gateway parses them (as ``commands.Bot`` hooks in).

        This runs synchronously while discord.py parses each gateway event, so the queue holds
        events in gateway order. A new message is copied here because discord.py updates its
        cached message in place when an edit is parsed, possibly before any handler ran: the
        message must be stored as first written, and the edit follows as its own event.
        """
        if self.is_closed():
            # discord.py may still finish parsing (e.g. its delayed READY) after close(), when it
            # can no longer schedule handlers; nothing after close() is for us either.
            return
        super().dispatch(event, *args, **kwargs)
        if event == "message":
            self._queue.put_nowait(copy.copy(args[0]))
        elif event in self._QUEUED:
            self._queue.put_nowait(args[0])

    async def on_ready(self) -> None:
        """Log the connection (guild count only: names are the operators' business)."""
        log.info("connected to Discord as %s (%d guilds)", self.user, len(self.guilds))
