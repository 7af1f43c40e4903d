"""Discord attachments and stickers -> ``MediaRef`` (what they are and where to fetch them).

An attachment's ``ref`` is its CDN URL (signed: it expires, and the adapter's MediaSource asks
for a fresh one, adapters/discord/downloads.py), its ``unique_id`` the attachment id. A
sticker's ``ref`` is its (permanent) sticker URL and its ``unique_id`` the sticker id; a Lottie
sticker is vector JSON no model reads, so it is a ``file`` with no ref.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import discord

from bot.core.media import MediaKind, MediaRef

#: Extensions that make an attachment an image when Discord gave no content type.
_IMAGE_EXTENSIONS: Final = frozenset(
    {"png", "jpg", "jpeg", "gif", "webp", "bmp", "tif", "tiff", "heic", "heif", "avif"}
)
_KINDS: Final[dict[str, MediaKind]] = {"image": "image", "audio": "audio", "video": "video"}
_LABEL_LIMIT: Final = 200


def media_type(content_type: str | None) -> str:
    """``image/png`` from ``image/png; charset=...`` ("" when unknown)."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def attachment_ref(attachment: discord.Attachment) -> MediaRef:
    """One attachment: image, voice message, audio, video or other file."""
    kind_type = media_type(attachment.content_type)
    filename = attachment.filename or "unnamed"
    extension = filename.rsplit(".", 1)[-1].lower() if "." in filename else ""
    kind: MediaKind | None = "voice" if attachment.is_voice_message() else None
    kind = kind or _KINDS.get(kind_type.split("/", 1)[0])
    if kind is None:
        kind = "image" if extension in _IMAGE_EXTENSIONS else "file"
    label = "voice message" if kind == "voice" else f"{kind} {filename.removeprefix('SPOILER_')}"
    if attachment.is_spoiler():
        label += " (spoiler)"
    visual = kind in ("image", "video")
    return MediaRef(
        kind,
        label[:_LABEL_LIMIT],
        ref=attachment.url or "",
        unique_id=str(attachment.id),
        media_type=kind_type,
        size=_count(attachment.size),
        width=_count(attachment.width) if visual else None,
        height=_count(attachment.height) if visual else None,
        duration=_seconds(attachment.duration) if kind in ("voice", "audio", "video") else None,
    )


def sticker_ref(sticker: discord.StickerItem) -> MediaRef:
    """PNG -> image; APNG and GIF -> image (the model sees the first frame); Lottie -> file."""
    name = (sticker.name or "").strip()[:_LABEL_LIMIT] or "unnamed"
    fmt = sticker.format
    if fmt is discord.StickerFormatType.png:
        return MediaRef("image", f"sticker {name}", sticker.url, str(sticker.id), "image/png")
    if fmt is discord.StickerFormatType.apng:
        label = f"animated sticker {name}"
        return MediaRef("image", label, sticker.url, str(sticker.id), "image/png")
    if fmt is discord.StickerFormatType.gif:
        label = f"animated sticker {name}"
        return MediaRef("image", label, sticker.url, str(sticker.id), "image/gif")
    # Lottie (vector animation JSON) or a format this discord.py does not know.
    return MediaRef("file", f"sticker {name}", "", str(sticker.id))


def media_of(
    attachments: Iterable[discord.Attachment], stickers: Iterable[discord.StickerItem]
) -> tuple[MediaRef, ...]:
    """The media of a message (or forwarded snapshot), in Discord's order."""
    return (*(attachment_ref(a) for a in attachments), *(sticker_ref(s) for s in stickers))


def stand_ins(media: Iterable[MediaRef]) -> str:
    """``[image cat.png] [voice message]``: media in words, for a quoted message."""
    return " ".join(f"[{m.label}]" for m in media)


def _count(value: object) -> int | None:
    """A non-negative integer the payload claims, else None (payloads are not trusted)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _seconds(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    seconds = float(value)
    return seconds if 0 <= seconds < float("inf") else None
