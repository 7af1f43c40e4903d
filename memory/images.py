"""The images one request shows the model: the newest few that are ready, with their bytes,
within a byte bound (docs/architecture.md#media). A prompt and a summary request choose alike."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

from bot.core.events import StoredMessage
from bot.core.llm import ImageBlock
from bot.store.contracts import MediaStore
from memory.tokens import MAX_IMAGE_TOKENS, image_tokens
from memory.turn import ShownImage

#: Image bytes of one request at most, as base64: the Messages API refuses a body over 32 MB,
#: and a few prepared images of up to 5 MB each would pass it whatever ``max_images`` says.
IMAGE_REQUEST_BYTES: Final = 24 * 1024 * 1024


async def shown_images(
    store: MediaStore, messages: Sequence[StoredMessage], limit: int
) -> dict[int, ShownImage]:
    """The newest ``limit`` images of these messages that are ready, with their bytes, by
    media id (fewer when their bytes would pass ``IMAGE_REQUEST_BYTES``)."""
    chosen = [
        media
        for message in reversed(messages)
        for media in reversed(message.media)
        if media.ref.kind == "image" and media.status == "ready" and media.media_type
    ][: max(0, limit)]
    if not chosen:
        return {}
    data = await store.media_data([m.id for m in chosen])
    shown: dict[int, ShownImage] = {}
    room = IMAGE_REQUEST_BYTES
    for m in chosen:  # newest first: older ones go first when the bytes run out
        if m.id not in data:
            continue
        room -= 4 * math.ceil(len(data[m.id]) / 3)  # base64 of the bytes
        if room < 0:
            break
        tokens = image_tokens(m.width, m.height) if m.width and m.height else MAX_IMAGE_TOKENS
        shown[m.id] = ShownImage(ImageBlock(m.media_type, data[m.id]), tokens)
    return shown
