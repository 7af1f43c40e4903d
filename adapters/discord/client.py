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
import time
from collections.abc import Callable, Coroutine
from typing import Any, Final

import discord
from discord.gateway import DiscordWebSocket, ReconnectWebSocket

log = logging.getLogger("personabot.discord")

#: Reconnects after unreadable frames wait 2**n seconds (n: such frames in the last window).
_FRAME_WINDOW: Final = 300.0
_FRAME_WAIT_MAX: Final = 30.0

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
        self._on_unreadable = on_unreadable
        self._frame_faults: list[float] = []
        super().__init__(**options)
        self._queue = queue
        # discord.py calls these parsers from its gateway loop: an exception in one (a frame
        # it cannot parse) would end ``connect()`` and the bot. Guarded, a bad frame is logged
        # and counted, and the next frame is read as usual.
        parsers = self._connection.parsers
        for name, parse in list(parsers.items()):
            parsers[name] = self._guarded(name, parse)

    # discord.py keeps its gateway connection in ``self.ws`` (a plain attribute it assigns on
    # every (re)connect): each new connection's frame reader is guarded as it is assigned.
    @property
    def ws(self) -> DiscordWebSocket:
        """The current gateway connection (its frame reader guarded)."""
        return self._guarded_ws

    @ws.setter
    def ws(self, value: DiscordWebSocket) -> None:
        if value is not None:
            value.received_message = self._guarded_frames(value)  # type: ignore[method-assign]
        self._guarded_ws = value

    def _guarded_frames(self, ws: DiscordWebSocket) -> Callable[[Any], Coroutine[Any, Any, None]]:
        """``received_message`` of ``ws``: a frame discord.py cannot read outside any parser
        (not an object, a READY without its session, a HELLO without its interval) would end
        ``connect()`` and the bot. Instead it is logged and counted, and the connection is
        re-established (resumed when the session is intact, identified anew when READY broke),
        waiting longer when such frames repeat so a broken gateway is not hammered."""
        read = ws.received_message

        @functools.wraps(read)
        async def guarded(msg: Any, /) -> None:
            try:
                await read(msg)
            except ReconnectWebSocket:
                raise  # discord.py's own control flow
            except Exception as exc:  # anything raised while reading one frame
                now = time.monotonic()
                recent = [t for t in self._frame_faults if now - t < _FRAME_WINDOW]
                self._frame_faults = [*recent, now]
                wait = min(_FRAME_WAIT_MAX, 2.0 ** (len(recent)))
                resume = ws.session_id is not None and self.user is not None
                log.warning(
                    "a Discord gateway frame discord.py cannot read (%s); %s in %.0fs",
                    type(exc).__name__,
                    "resuming" if resume else "reconnecting",
                    wait,
                )
                if self._on_unreadable is not None:
                    self._on_unreadable("gateway")
                await ws.close(code=4000)
                await asyncio.sleep(wait)
                raise ReconnectWebSocket(ws.shard_id, resume=resume) from None

        return guarded

    def _guarded(self, name: str, parse: Callable[[Any], None]) -> Callable[[Any], None]:
        @functools.wraps(parse)
        def guarded(data: Any) -> None:
            try:
                parse(data)
            except Exception as exc:  # anything discord.py raises while parsing one frame
                if name == "READY":
                    # Without READY the client has no user and would drop every message:
                    # the frame reader reconnects and identifies anew (_guarded_frames).
                    raise
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
