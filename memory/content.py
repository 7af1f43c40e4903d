"""What one stored message says, as the model reads it: its quote, its media and its text.

A message is more than its text (docs/architecture.md#media): the message it replies to or
forwards (``Quote``), the photos and voice notes that came with it (``StoredMedia``). Every
place that shows a message to a model (the persona's prompt, the summary and extraction tasks)
renders it with :func:`spoken`, so all of them read the same thing:

    [replying to "Ann" (user "12"), who wrote: "the old message"]
    [photo]
    [voice message, transcribed] what they said
    the caption or text

The quoted text and author are someone else's words (or a channel's), so they are JSON-quoted
(``data_json``): they stay on one line and can never pass for the person's own words or for a
header. A transcript is the person's own words and reads like their text (a forwarded voice
note's is quoted like the forward's). Media the model does not get as an image say so
plainly, so the persona never answers a picture it cannot see as if it had seen it.

:func:`own_words` is what the person said themselves (text and transcripts, never a quote or a
forward): long-term memory learns from that only.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Final

from bot.core.events import StoredMessage
from bot.core.media import Quote, StoredMedia
from memory.quoting import data_json

#: A quoted text longer than this is cut (adapters already cut at 1,000 characters).
QUOTE_CHARS: Final = 1000


def spoken(message: StoredMessage, shown: Collection[int] = ()) -> str:
    """The message as the model reads it; ``shown``: ids of media it gets as image blocks."""
    lines = []
    if message.quote is not None:
        lines.append(quote_line(message.quote))
    forwarded = _forwarded(message)
    lines.extend(media_line(m, shown=m.id in shown, forwarded=forwarded) for m in message.media)
    if message.text:
        lines.append(message.text)
    return "\n".join(lines)


def own_words(message: StoredMessage) -> str:
    """What the person said themselves: the text and the transcripts of their voice notes
    (a forwarded voice note is its owner's words, like the forward's text)."""
    parts = [] if _forwarded(message) else [m.note for m in message.media if _transcribed(m)]
    if message.text:
        parts.append(message.text)
    return "\n".join(parts)


def quote_line(quote: Quote) -> str:
    """``[replying to "Ann" (user "12"), who wrote: "..."]`` and the like, on one line."""
    text = quote.text if len(quote.text) <= QUOTE_CHARS else f"{quote.text[:QUOTE_CHARS]} [...]"
    body = data_json(text)
    if quote.origin == "forward":
        source = f" from {data_json(quote.author)}" if quote.author else ""
        return f"[forwarded{source}: {body}]"
    verb = "quoting" if quote.origin == "quote" else "replying to"
    if quote.from_bot:
        return f"[{verb} your own message: {body}]"
    who = data_json(quote.author or "someone")
    if quote.author_id:
        who = f"{who} (user {data_json(quote.author_id)})"
    return f"[{verb} {who}, who wrote: {body}]"


def media_line(media: StoredMedia, *, shown: bool = False, forwarded: bool = False) -> str:
    """The stand-in of one piece of media (``[photo]``; what happened when it is not shown);
    ``forwarded``: it came with a forward, so a transcript is quoted as someone else's."""
    label = media.ref.label or media.ref.kind
    kind = media.ref.kind
    if kind == "image":
        if shown:
            return f"[{label}]"
        if _failed(media):
            return f"[{label}: it could not be loaded, so you cannot see it]"
        return f"[{label}: not shown to you here]"
    if kind in ("voice", "video_note"):
        if _transcribed(media):
            if forwarded:
                return f"[forwarded {label}, transcribed: {data_json(media.note)}]"
            return f"[{label}, transcribed] {media.note}"
        if media.status == "ready":
            return f"[{label}: nothing could be heard in it]"
        length = _duration(media.ref.duration)
        if _failed(media):
            return (
                f"[{label}{length}: it could not be transcribed, so you do not know what it says]"
            )
        return f"[{label}{length}: you cannot listen to it; only this note says it arrived]"
    return f"[{label}]"


def _forwarded(message: StoredMessage) -> bool:
    return message.quote is not None and message.quote.origin == "forward"


def _failed(media: StoredMedia) -> bool:
    """Failed for good, or for now (a ``new`` row with a reason: a later turn tries again)."""
    return media.status == "failed" or (media.status == "new" and bool(media.note))


def _transcribed(media: StoredMedia) -> bool:
    return (
        media.ref.kind in ("voice", "video_note") and media.status == "ready" and bool(media.note)
    )


def _duration(seconds: float | None) -> str:
    if seconds is None or seconds < 0:
        return ""
    whole = int(seconds)
    return f" ({whole // 60}:{whole % 60:02d})"
