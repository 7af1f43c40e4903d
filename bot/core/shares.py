"""How one model call's usage is shared between the people whose messages it read."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from bot.core.events import StoredMessage
from bot.core.llm import Usage

#: What one image weighs, in characters of text: about what it costs the prompt (up to about
#: 1,600 tokens, memory/tokens.py), so its sender pays for it, not whoever wrote beside it.
IMAGE_WEIGHT: Final = 4800
#: A voice note not transcribed yet weighs what speech of its length takes as text.
_SPEECH_CHARS_PER_SECOND: Final = 15


def weights(messages: Sequence[StoredMessage]) -> dict[str, int]:
    """What each author's messages cost the prompt (characters of text, an image as
    ``IMAGE_WEIGHT``, a voice note as its transcript): how a call over them is split."""
    out: dict[str, int] = {}
    for m in messages:
        if m.role == "user":
            out[m.author_id] = out.get(m.author_id, 0) + max(1, len(m.text) + _media(m))
    return out


def _media(message: StoredMessage) -> int:
    total = 0
    for media in message.media:
        if media.ref.kind == "image":
            total += IMAGE_WEIGHT
        elif media.ref.kind in ("voice", "video_note"):
            if media.status == "ready":
                total += len(media.note)
            elif media.status == "new":  # transcribed in this turn, after the split was made
                total += int(max(0.0, media.ref.duration or 0) * _SPEECH_CHARS_PER_SECOND)
    return total


def split(usage: Usage, by: Mapping[str, int]) -> list[tuple[str | None, Usage]]:
    """Shares of ``usage`` in proportion to ``by`` that add up exactly (the bot alone when
    ``by`` is empty)."""
    total = sum(by.values())
    if not by or total <= 0:
        return [(None, usage)]
    # The 5-minute and 1-hour cache writes are split apart, so that no share holds more
    # 1-hour writes than writes (each share is then priced as its part of the call).
    long = min(usage.cache_creation_1h_input_tokens, usage.cache_creation_input_tokens)
    fields = (
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_creation_input_tokens - long,
        usage.cache_read_input_tokens,
        long,
    )
    people = sorted(by, key=lambda p: -by[p])
    shares = {p: [value * by[p] // total for value in fields] for p in people}
    for i, value in enumerate(fields):
        shares[people[0]][i] += value - sum(s[i] for s in shares.values())  # the remainder
    return [(p, _usage(*shares[p])) for p in people]


def _usage(inp: int, out: int, short: int, read: int, long: int) -> Usage:
    """A share's usage from its split fields (writes: 5-minute + 1-hour)."""
    return Usage(inp, out, short + long, read, long)
