"""The discord.py client personabot runs: it queues message events in gateway order.

discord.py calls ``dispatch`` synchronously while it parses each gateway event; overriding it
(as discord.py's own ``commands.Bot`` does) is how events are captured in order, before the
next event is parsed. Its parsers are guarded: a frame discord.py cannot read is logged once
(its kind, its ids and the error, never its content) and skipped. A message event is first
brought to today's shape (:func:`modernized`): discord.py reads a message's stickers only
from ``sticker_items``, and older payloads name them ``stickers``.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import logging
import re
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, Final

import discord
from discord.gateway import DiscordWebSocket, ReconnectWebSocket

log = logging.getLogger("personabot.discord")

#: Reconnects after unreadable frames wait 2**n seconds (n: such frames in the last window).
_FRAME_WINDOW: Final = 300.0
_FRAME_WAIT_MAX: Final = 30.0
#: The ids a skipped frame is named by (whichever its ``d`` has), as ``(key, word)``.
_FRAME_IDS: Final = (
    ("id", "id"),
    ("message_id", "message"),
    ("channel_id", "channel"),
    ("guild_id", "guild"),
)
#: A logged error is one short line.
_ERROR_LIMIT: Final = 200
#: A value an error message quotes (Python's repr), and a name such a value may be.
_QUOTED: Final = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
#: Message events whose payload :func:`modernized` brings to today's shape.
_MESSAGE_EVENTS: Final = frozenset({"MESSAGE_CREATE", "MESSAGE_UPDATE"})

Event = (
    discord.Message
    | discord.RawMessageUpdateEvent
    | discord.RawMessageDeleteEvent
    | discord.RawBulkMessageDeleteEvent
    | discord.Interaction[Any]
)
#: Told of each interaction as it is parsed; True: queue it (an application command).
OnInteraction = Callable[[discord.Interaction[Any]], bool]


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
        on_interaction: OnInteraction | None = None,
        **options: Any,
    ) -> None:
        self._on_unreadable = on_unreadable
        self._on_interaction = on_interaction
        self._frame_faults: list[float] = []
        self._failed_event: tuple[str, Any] | None = None
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
                event, self._failed_event = self._failed_event, None
                what = error_text(exc, event[1] if event else None)
                if event is not None:  # a READY its parser could not read
                    what = f"{event_name(*event)}: {what}"
                log.warning(
                    "a Discord gateway frame discord.py cannot read (%s); %s in %.0fs",
                    what,
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
                parse(modernized(data) if name in _MESSAGE_EVENTS else data)
            except Exception as exc:  # anything discord.py raises while parsing one frame
                if name == "READY":
                    # Without READY the client has no user and would drop every message:
                    # the frame reader reconnects and identifies anew (_guarded_frames),
                    # and logs it (once) with this event's name and ids.
                    self._failed_event = (name, data)
                    raise
                log.warning(
                    "skipped a Discord %s discord.py cannot read (%s)",
                    event_name(name, data),
                    error_text(exc, data),
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
        elif event in self._QUEUED or (
            event == "interaction" and self._queues_interaction(args[0])
        ):
            self._queue.put_nowait(args[0])

    def _queues_interaction(self, interaction: discord.Interaction[Any]) -> bool:
        """Its 3 s start now: the deferral timer starts here, and an application command
        queues in gateway order behind the messages before it (docs/discord.md#7-commands)."""
        return self._on_interaction is not None and self._on_interaction(interaction)

    async def on_ready(self) -> None:
        """Log the connection (guild count only: names are the operators' business)."""
        log.info("connected to Discord as %s (%d guilds)", self.user, len(self.guilds))


# ---------------------------------------------------------------------------- payloads


def modernized(data: Any) -> Any:
    """A message payload as discord.py reads it today: ``stickers`` (sticker objects, before
    Discord sent ``sticker_items``) become ``sticker_items``, in the message, its replied-to
    message and its forwarded snapshots. ``data`` itself when nothing is to change (it is
    never changed); an entry without a readable id is left out, one without a known format
    becomes a sticker of an unknown format (told by name, never fetched)."""
    if not isinstance(data, dict):
        return data
    changed: dict[str, Any] = {}
    stickers = data.get("stickers")
    if "sticker_items" not in data and isinstance(stickers, list):
        changed["sticker_items"] = list(_sticker_items(stickers))
    replied = data.get("referenced_message")
    if isinstance(replied, dict) and (new := modernized(replied)) is not replied:
        changed["referenced_message"] = new
    snapshots = data.get("message_snapshots")
    if isinstance(snapshots, list):
        fresh = [_snapshot_modernized(s) for s in snapshots]
        if any(new is not old for new, old in zip(fresh, snapshots, strict=True)):
            changed["message_snapshots"] = fresh
    return {**data, **changed} if changed else data


def _snapshot_modernized(snapshot: Any) -> Any:
    if not isinstance(snapshot, dict) or not isinstance(snapshot.get("message"), dict):
        return snapshot
    message = modernized(snapshot["message"])
    return snapshot if message is snapshot["message"] else {**snapshot, "message": message}


def _sticker_items(stickers: list[Any]) -> Iterator[dict[str, Any]]:
    for sticker in stickers:
        if not isinstance(sticker, dict) or not _snowflake(sticker.get("id")):
            continue
        name = sticker.get("name")
        fmt = sticker.get("format_type")
        yield {
            "id": str(sticker["id"]),
            "name": name if isinstance(name, str) else "",
            "format_type": fmt if isinstance(fmt, int) and not isinstance(fmt, bool) else 0,
        }


def event_name(name: str, data: Any) -> str:
    """``MESSAGE_UPDATE event (id 1, channel 2, guild 3)``: the kind and whichever ids ``d``
    has (no content; an id that is no id is left out)."""
    ids = []
    if isinstance(data, dict):
        ids = [f"{word} {data[key]}" for key, word in _FRAME_IDS if _snowflake(data.get(key))]
    return f"{name} event ({', '.join(ids)})" if ids else f"{name} event"


def error_text(exc: BaseException, data: Any) -> str:
    """``KeyError: 'author'``: the error's kind and message on one short line, never the
    frame's words. An error may quote the value it failed on: a quoted value is kept only when
    it is a name (a missing key) that is no text of the frame, and any text of the frame left
    in the message is taken out."""
    texts = set(_texts(data))

    def quoted(match: re.Match[str]) -> str:
        inner, mark = match[0][1:-1], match[0][0]
        return match[0] if _NAME.fullmatch(inner) and inner not in texts else f"{mark}…{mark}"

    message = _QUOTED.sub(quoted, " ".join(str(exc).split()))
    for text in sorted(texts, key=len, reverse=True):
        message = message.replace(text, "…")
    message = message if len(message) <= _ERROR_LIMIT else message[: _ERROR_LIMIT - 1] + "…"
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def _texts(value: Any, depth: int = 0) -> Iterator[str]:
    """The frame's strings that could be someone's words (ids and tiny tokens are not)."""
    if depth > 8:
        return
    if isinstance(value, dict):
        for item in value.values():
            yield from _texts(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            yield from _texts(item, depth + 1)
    elif isinstance(value, str):
        line = " ".join(value.split())  # as the error's message is read: one line
        if len(line) >= 3 and not line.isdigit():
            yield line


def _snowflake(value: Any) -> bool:
    """A Discord id as a payload carries it (a string of digits, or an int)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return 0 <= value < 2**64
    return isinstance(value, str) and value.isdigit() and len(value) <= 20
