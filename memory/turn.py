"""The new turn as the model reads it: its messages rendered (in a group each part under its
author's header), cut to fit a token room visibly, never silently (docs/architecture.md#prompt,
"Budget"), and turned into content blocks with each image in front of its own message.

Pure: no I/O. memory/assemble.py places the result after every cache breakpoint; the window's
user messages are rendered by the same functions, so a message reads the same in both.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from bot.core.events import StoredMessage
from bot.core.llm import ContentBlock, ImageBlock, TextBlock
from memory.content import spoken
from memory.quoting import data_json, indented
from memory.tokens import estimate_tokens

#: A message of the turn is never cut shorter than this; below it, the oldest messages go.
MIN_MESSAGE_CHARS: Final = 150


@dataclass(frozen=True, slots=True)
class ShownImage:
    """An image the request shows the model, and its estimated tokens."""

    block: ImageBlock
    tokens: int


def cut(text: str, limit: int) -> str:
    """A message longer than ``limit`` characters, cut with a visible marker."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]} [... cut: {len(text) - limit} more characters not shown]"


def render_turn(
    messages: Sequence[StoredMessage], limit: int = 8000, shown: Collection[int] = ()
) -> str:
    """Merge messages in order; in a group (or with several authors) each part names its author.

    A private chat's turn is the person's text as is. In a group each part is a header line
    ``"Name" (user "id"):`` (JSON-quoted, so a name cannot close it) followed by the message
    with every line indented: only our headers start at the margin, so no text can pass a
    line off as said by someone else.
    """
    return "\n".join(_parts(messages, limit, shown))


def _parts(messages: Sequence[StoredMessage], limit: int, shown: Collection[int]) -> list[str]:
    """Each message as :func:`render_turn` renders it, one string per message."""
    authors = {m.author_id for m in messages}
    if len(authors) <= 1 and all(m.is_private for m in messages):
        return [cut(spoken(m, shown), limit) for m in messages]
    return [_attributed(m, limit, shown) for m in messages]


def message_blocks(
    messages: Sequence[StoredMessage],
    images: Mapping[int, ShownImage],
    limit: int = 8000,
    marker: str | None = None,
) -> tuple[ContentBlock, ...]:
    """The messages as content blocks: each one's images right in front of its own part (in a
    group, its author's header), so every image sits with its author; text without an image
    between stays one block, as :func:`render_turn` renders it."""
    out: list[ContentBlock] = []
    lines: list[str] = [] if marker is None else [marker]
    for message, part in zip(messages, _parts(messages, limit, images), strict=True):
        shown = [images[m.id].block for m in message.media if m.id in images]
        if shown:
            if lines:
                out.append(TextBlock("\n".join(lines)))
                lines = []
            out.extend(shown)
        lines.append(part)
    if lines:
        out.append(TextBlock("\n".join(lines)))
    return tuple(out)


def attributed(message: StoredMessage, limit: int, shown: Collection[int] = ()) -> str:
    """A message under its author's header line, its lines indented (a group's rendering)."""
    return _attributed(message, limit, shown)


def _attributed(message: StoredMessage, limit: int, shown: Collection[int]) -> str:
    header = f"{data_json(message.display_name)} (user {data_json(message.author_id)}):"
    body = indented(cut(spoken(message, shown), limit))
    return f"{header}\n{body}" if body else header


def joined(blocks: Sequence[ContentBlock]) -> str:
    """The text of these blocks, as one rendering of the messages."""
    return "\n".join(b.text for b in blocks if isinstance(b, TextBlock))


def fit_turn(
    messages: Sequence[StoredMessage],
    limit: int,
    room: int,
    images: Mapping[int, ShownImage] | None = None,
) -> tuple[tuple[ContentBlock, ...], tuple[StoredMessage, ...]]:
    """The turn's blocks within ``room`` tokens, never silently shortened, and the messages
    they show.

    First every message is cut to one common length (the longest that fits, so short
    messages stay whole and only long ones are cut, each with its marker); if even
    ``MIN_MESSAGE_CHARS`` per message is too much, the oldest messages are left out and a
    marker line says how many (their images go with them: an image is never sent without
    its message).

    Both searches are binary searches over one rendering each, so n messages cost
    O(n log n) (bench/turn_fit.py): leaving the oldest out one at a time and rendering the
    rest again was O(n^2), seconds for the console's preview of a backlog of thousands.
    """
    images = images or {}
    if estimate_tokens(render_turn(messages, limit, images)) <= room:
        return message_blocks(messages, images, limit), tuple(messages)
    low, high = MIN_MESSAGE_CHARS, limit
    while low < high:
        mid = (low + high + 1) // 2
        if estimate_tokens(render_turn(messages, mid, images)) <= room:
            low = mid
        else:
            high = mid - 1
    text = render_turn(messages, low, images)
    if estimate_tokens(text) <= room or len(messages) == 1:
        return message_blocks(messages, images, low), tuple(messages)

    def fits(left_out: int) -> bool:
        rest = render_turn(messages[left_out:], MIN_MESSAGE_CHARS, images)
        return estimate_tokens(f"{_left_out_marker(left_out)}\n{rest}") <= room

    # The fewest oldest messages to leave out: fewer kept never renders longer (each message
    # adds its text and a line; one author left only drops the headers), so ``fits`` only
    # turns true as more are left out. ``high`` fits or keeps the newest message alone.
    low, high = 1, len(messages) - 1
    while low < high:
        mid = (low + high) // 2
        if fits(mid):
            high = mid
        else:
            low = mid + 1
    kept = tuple(messages[high:])
    return message_blocks(kept, images, MIN_MESSAGE_CHARS, _left_out_marker(high)), kept


def _left_out_marker(count: int) -> str:
    return f"[... {count} earlier message(s) of this turn not shown: too long for one turn]"
