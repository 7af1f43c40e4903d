"""The files a Telegram message holds, as :class:`MediaRef` (what it is, a label, its file id).

A leaf reader of the Telegram intake (docs/architecture.md#media): pure functions over
aiogram's ``Message`` (and ``ExternalReplyInfo``, which carries the same content fields) that
call nothing else of personabot. The model may get the bytes later: bot/runtime/media.py
fetches them by ``file_id`` through the adapter's MediaSource (adapters/telegram/media.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final, Protocol, TypeVar

from aiogram.types import (
    Animation,
    Audio,
    Document,
    ExternalReplyInfo,
    LivePhoto,
    Message,
    PhotoSize,
    Sticker,
    Video,
    VideoNote,
    Voice,
)

from bot.core.media import MediaKind, MediaRef

#: Bots may download files up to 20 MB (``getFile``); a larger one can never be fetched.
DOWNLOAD_LIMIT: Final = 20 * 1024 * 1024
#: A long edge beyond this costs the model tokens without benefit (the image is downscaled).
USEFUL_EDGE: Final = 1568
#: A description or label is a stand-in, never a copy of a whole payload.
DESCRIPTION_LIMIT: Final = 300
_NAME_LIMIT: Final = 100
_F = TypeVar("_F")


def media_of(holder: Message | ExternalReplyInfo) -> tuple[MediaRef, ...]:
    """Media references in a fixed order (a message rarely has more than one kind)."""
    twin = holder.document if holder.animation is None else None  # a GIF comes with its document
    found = (
        _photo(holder.photo, "photo") if holder.photo else None,
        _read(_live_photo, holder.live_photo),
        _read(_sticker, holder.sticker),
        _read(_animation, holder.animation),
        _read(_document, twin),
        _read(_voice, holder.voice),
        _read(_video_note, holder.video_note),
        _read(_audio, holder.audio),
        _read(_video, holder.video),
    )
    return tuple(ref for ref in found if ref is not None)


def choose_photo(sizes: Sequence[PhotoSize]) -> PhotoSize | None:
    """The size to give the model: the smallest whose long edge reaches :data:`USEFUL_EDGE`,
    else the largest; never one the Bot API would refuse to download (None if all are)."""
    fits = [s for s in sizes if s.file_size is None or s.file_size <= DOWNLOAD_LIMIT]
    if not fits:
        return None
    big = [s for s in fits if max(s.width, s.height) >= USEFUL_EDGE]
    if big:
        return min(big, key=lambda s: s.width * s.height)
    return max(fits, key=lambda s: s.width * s.height)


def short(text: str, limit: int = DESCRIPTION_LIMIT) -> str:
    """One line (whitespace collapsed, no brackets to close ours), at most ``limit`` chars."""
    line = " ".join(text.replace("[", "(").replace("]", ")").split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


class _File(Protocol):
    """What every Telegram file object has."""

    @property
    def file_id(self) -> str: ...
    @property
    def file_unique_id(self) -> str: ...
    @property
    def file_size(self) -> int | None: ...


def _read(read: Callable[[_F], MediaRef], file: _F | None) -> MediaRef | None:
    return None if file is None else read(file)


def _file(
    kind: MediaKind,
    label: str,
    file: _File,
    media_type: str,
    *,
    width: int | None = None,
    height: int | None = None,
    duration: float | None = None,
) -> MediaRef:
    """The reference of one Telegram file (fetched by its ``file_id``)."""
    return MediaRef(
        kind,
        label,
        file.file_id,
        file.file_unique_id,
        media_type,
        file.file_size,
        width,
        height,
        None if duration is None else float(duration),
    )


def _clip(
    kind: MediaKind, label: str, clip: Video | Animation | LivePhoto, media_type: str
) -> MediaRef:
    """A file with a frame size and a duration."""
    return _file(
        kind, label, clip, media_type, width=clip.width, height=clip.height, duration=clip.duration
    )


def _photo(sizes: Sequence[PhotoSize], label: str) -> MediaRef:
    """A photo as the size :func:`choose_photo` picks (ref "" when none can be downloaded)."""
    size = choose_photo(sizes)
    if size is None:
        return MediaRef("image", label)
    # Telegram re-encodes every photo it stores as JPEG.
    return _file("image", label, size, "image/jpeg", width=size.width, height=size.height)


def _live_photo(live: LivePhoto) -> MediaRef:
    """A live photo: its still photo, else the short video."""
    if live.photo and choose_photo(live.photo) is not None:
        return _photo(live.photo, "live photo")
    return _clip("video", "live photo", live, live.mime_type or "")


def _sticker(sticker: Sticker) -> MediaRef:
    """A static sticker is its image (WebP); an animated or video one is its thumbnail."""
    emoji = f" {sticker.emoji}" if sticker.emoji else ""
    if not (sticker.is_animated or sticker.is_video):
        label, width, height = f"sticker{emoji}", sticker.width, sticker.height
        return _file("image", label, sticker, "image/webp", width=width, height=height)
    label = f"{'video' if sticker.is_video else 'animated'} sticker{emoji}"
    return _thumbnail(sticker.thumbnail, label)


def _animation(animation: Animation) -> MediaRef:
    """A GIF (Telegram sends MP4): its thumbnail shows the model what it is of."""
    if animation.thumbnail is not None:
        return _thumbnail(animation.thumbnail, "GIF")
    return _clip("video", "GIF", animation, animation.mime_type or "")


def _thumbnail(thumbnail: PhotoSize | None, label: str) -> MediaRef:
    """A still of something the model cannot watch; without one a label only (ref "")."""
    if thumbnail is None:
        return MediaRef("file", label)
    # Telegram's thumbnails are JPEG or WebP: the preparation reads the bytes.
    return _file("image", label, thumbnail, "", width=thumbnail.width, height=thumbnail.height)


def _document(document: Document) -> MediaRef:
    """A file; one whose MIME type is an image (sent "as a file", uncompressed) is an image."""
    mime = (document.mime_type or "").lower()
    kind: MediaKind = "image" if mime.startswith("image/") else "file"
    label = _labelled("image" if kind == "image" else "file", document.file_name)
    return _file(kind, label, document, mime)


def _voice(voice: Voice) -> MediaRef:
    media_type = voice.mime_type or "audio/ogg"
    return _file("voice", "voice message", voice, media_type, duration=voice.duration)


def _video_note(note: VideoNote) -> MediaRef:
    """A round video message: square, ``length`` pixels a side."""
    side, duration = note.length, note.duration
    return _file(
        "video_note", "video message", note, "video/mp4", width=side, height=side, duration=duration
    )


def _audio(audio: Audio) -> MediaRef:
    title = " - ".join(p for p in (audio.performer, audio.title) if p) or audio.file_name
    label = _labelled("audio", title)
    return _file("audio", label, audio, audio.mime_type or "", duration=audio.duration)


def _video(video: Video) -> MediaRef:
    label = _labelled("video", video.file_name)
    return _clip("video", label, video, video.mime_type or "")


def _labelled(what: str, name: str | None) -> str:
    """``file report.pdf``: a kind and the name the sender gave, on one short line."""
    name = short(name or "", _NAME_LIMIT)
    return f"{what} {name}" if name else what
