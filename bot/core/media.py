"""What people send besides text: media references, quoted messages, and the two ports that
fetch media from a platform and transcribe voice (docs/architecture.md#media).

An adapter describes media (``MediaRef``: what it is and how to fetch it, never the bytes) and
quotes (``Quote``: a reply's or forward's text and author) on the ``Inbound``. The store keeps
both with the message; the turn fetches what the model needs (bot/runtime/media.py) and caches
the prepared bytes in the store, so a turn retried after a crash or in another process has them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

#: ``image``: may be shown to the model; ``voice``/``video_note``/``audio``: may be transcribed;
#: ``video``/``file``: described only.
MediaKind = Literal["image", "voice", "video_note", "audio", "video", "file"]
#: ``new``: not fetched yet; ``ready``: prepared bytes cached (image) or transcript kept (voice);
#: ``failed``: could not be fetched or read (``note`` says why); ``skipped``: not used on purpose
#: (no transcriber, images off, too long to transcribe).
MediaStatus = Literal["new", "ready", "failed", "skipped"]
QuoteOrigin = Literal["reply", "quote", "forward"]


@dataclass(frozen=True, slots=True)
class MediaRef:
    """One piece of media of an inbound message, as the platform describes it."""

    kind: MediaKind
    #: The text stand-in the model reads when it does not get the media itself, without
    #: brackets: ``photo``, ``sticker 😀``, ``image cat.png``, ``voice message``.
    label: str
    #: How to fetch it: Telegram ``file_id``, Discord attachment URL ("" = cannot be fetched).
    ref: str = ""
    #: A stable id of the file: Telegram ``file_unique_id``, Discord attachment id.
    unique_id: str = ""
    media_type: str = ""  # as the platform says ("" unknown)
    size: int | None = None  # bytes, as the platform says
    width: int | None = None
    height: int | None = None
    duration: float | None = None  # seconds (voice, audio, video)


@dataclass(frozen=True, slots=True)
class StoredMedia:
    """Media of a stored message: the reference and what the turn made of it (no bytes)."""

    id: int
    message_id: int
    position: int  # order within the message, from 0
    ref: MediaRef
    status: MediaStatus = "new"
    #: Of the cached bytes when ``ready`` (an image after downscaling), else "".
    media_type: str = ""
    width: int | None = None
    height: int | None = None
    #: The transcript of a voice note; why it failed or was skipped; "" otherwise.
    note: str = ""


@dataclass(frozen=True, slots=True)
class Quote:
    """A message the inbound one replies to, quotes or forwards, as context for the model.

    ``reply``: the person replied to an earlier message (``text`` is that message, maybe a
    stand-in such as ``[photo]``); ``quote``: they quoted part of it (``text`` is the part);
    ``forward``: the message is a forward (``text`` is the forwarded content and ``author``
    where it came from).
    """

    origin: QuoteOrigin
    author: str  # display name or channel title; "" when the platform hides it
    text: str
    author_id: str | None = None
    from_bot: bool = False  # the quoted message is this bot's own


@dataclass(frozen=True, slots=True)
class PreparedImage:
    """Image bytes ready for the model: a supported format, within the size limits."""

    data: bytes
    media_type: str
    width: int
    height: int


class MediaSource(Protocol):
    """Fetches the bytes of media a platform account received (adapters implement it)."""

    async def fetch(
        self, media: MediaRef, *, chat_id: str, platform_message_id: str | None, max_bytes: int
    ) -> bytes:
        """The file's bytes; raise MediaRejected when it is larger than ``max_bytes`` or gone
        for good, MediaUnavailable when the platform could not be reached."""
        ...


class Transcriber(Protocol):
    """Turns a voice note into text (bot/llm/transcription.py; plugins may register more)."""

    async def transcribe(self, audio: bytes, *, filename: str, media_type: str) -> str:
        """The transcript; raise MediaUnavailable (try later) or MediaRejected (never)."""
        ...
