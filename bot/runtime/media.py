"""Getting a turn's media ready for the model: fetch, downscale, transcribe, cache in the store
(docs/architecture.md#media).

Runs inside the turn, under its lease, before the prompt is built (``Memory.build`` calls it):

- **Images**: the newest ``max_images`` images of the window and the turn that are not ready
  yet are fetched from the platform (the bot's ``MediaSource``), prepared (bot/runtime/images.py:
  a supported format, long edge at most 1568 px, under the API's size limit) and cached in the
  store (``save_media``), so a turn retried after a crash, or run by another process, does not
  fetch them again. Older images are never fetched: the prompt keeps their text stand-in.
- **Voice and video notes** of the turn: fetched and transcribed (the ``Transcriber``); the
  transcript is kept on the media row and read as the person's words (memory/content.py).
  Without a transcriber, or for a note longer than ``transcribe_max_seconds``, the row is
  ``skipped`` and the persona is told plainly that it cannot listen to it.

A permanent failure (too large, unsupported, gone) marks the row ``failed`` with the reason; a
transient one (network, timeout) leaves it ``new`` with the reason, so a later turn tries
again while this one tells the model the image could not be loaded. Either way the turn goes
on: media never hold a conversation up for longer than the fetch timeout (plus the
transcription timeout when it has voice notes), however many files it has.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from bot.core.clock import Clock
from bot.core.errors import MediaError, MediaRejected, MediaUnavailable
from bot.core.events import StoredMessage
from bot.core.media import MediaSource, MediaStatus, StoredMedia, Transcriber
from bot.core.tasks import within
from bot.metrics import Metrics
from bot.runtime.images import MAX_INPUT_BYTES, prepare_image_async
from bot.store.contracts import MediaStore

log = logging.getLogger("personabot.media")

_MB: Final = 1024 * 1024
#: Voice notes transcribed per turn at most (the newest), and the size bound of one: bytes
#: per second of the longest note allowed, plus a floor. Voice: 256 kbit/s (Opus voice uses
#: about 32); video notes: 2 Mbit/s (Telegram's are about 1).
_VOICES_PER_TURN: Final = 10
_RATES: Final = {"voice": 32_000, "video_note": 256_000}
_VOICE_FLOOR: Final = 256 * 1024
#: Fetches and transcriptions of one turn running at once.
_PARALLEL: Final = 4
_EXTENSIONS: Final = {
    "audio/ogg": "ogg",
    "audio/mpeg": "mp3",
    "audio/mp4": "m4a",
    "audio/wav": "wav",
    "audio/webm": "webm",
    "video/mp4": "mp4",
}


@dataclass(frozen=True, slots=True)
class MediaSettings:
    """How media are fetched and used (``[media]`` in personabot.toml)."""

    max_download_bytes: int = 20 * _MB
    fetch_timeout_seconds: float = 20.0
    #: Voice notes longer than this are not transcribed (bounds the transcription bill).
    transcribe_max_seconds: float = 300.0
    transcribe_timeout_seconds: float = 60.0


@dataclass(frozen=True, slots=True)
class _Outcome:
    status: MediaStatus
    note: str = ""
    data: bytes | None = None
    media_type: str = ""
    width: int | None = None
    height: int | None = None


class MediaPreparer:
    """Prepares the media of a turn (see the module docstring); one per process."""

    def __init__(
        self,
        *,
        store: MediaStore,
        sources: Callable[[str], MediaSource | None],
        settings: MediaSettings,
        clock: Clock,
        transcriber: Transcriber | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self._store = store
        self._sources = sources
        self._settings = settings
        self._clock = clock
        self._transcriber = transcriber
        self._metrics = metrics
        self._slots = asyncio.Semaphore(_PARALLEL)

    async def __call__(
        self,
        turn: Sequence[StoredMessage],
        history: Sequence[StoredMessage],
        *,
        max_images: int,
    ) -> tuple[tuple[StoredMessage, ...], tuple[StoredMessage, ...]]:
        """The messages with every media row this turn worked on as it is now stored."""
        work = self._work(turn, history, max_images)
        if not work:
            return tuple(turn), tuple(history)
        # One deadline for the whole turn, not one per file: fetches run a few at a time, so
        # per-file timeouts would add up round after round (an album from a slow server).
        deadline = self._clock.now() + self._settings.fetch_timeout_seconds
        done = await asyncio.gather(
            *(self._one(message, media, deadline) for message, media in work)
        )
        updated = {media.id: media for media in done}

        def fresh(message: StoredMessage) -> StoredMessage:
            if not any(m.id in updated for m in message.media):
                return message
            media = tuple(updated.get(m.id, m) for m in message.media)
            return dataclasses.replace(message, media=media)

        return tuple(map(fresh, turn)), tuple(map(fresh, history))

    def _work(
        self,
        turn: Sequence[StoredMessage],
        history: Sequence[StoredMessage],
        max_images: int,
    ) -> list[tuple[StoredMessage, StoredMedia]]:
        """The images among the newest ``max_images`` and the turn's voice notes, not ready."""
        work: list[tuple[StoredMessage, StoredMedia]] = []
        images = 0
        for message in reversed((*history, *turn)):
            for media in reversed(message.media):
                if media.ref.kind == "image" and images < max_images:
                    images += 1
                    if media.status == "new":
                        work.append((message, media))
        voices = 0
        for message in reversed(turn):
            for media in message.media:
                if media.ref.kind in ("voice", "video_note") and media.status == "new":
                    # The newest few: the durations that bound the bill are the sender's
                    # claim, so the count per turn is bounded too.
                    voices += 1
                    if voices <= _VOICES_PER_TURN:
                        work.append((message, media))
        return work

    async def _one(
        self, message: StoredMessage, media: StoredMedia, deadline: float
    ) -> StoredMedia:
        async with self._slots:
            try:
                if media.ref.kind == "image":
                    outcome = await self._image(message, media, deadline)
                else:
                    outcome = await self._voice(message, media, deadline)
            except MediaRejected as exc:
                outcome = _Outcome("failed", note=_reason(exc))
            except (MediaUnavailable, TimeoutError) as exc:
                outcome = _Outcome("new", note=f"could not be loaded: {_reason(exc)}")
            except Exception:
                # A bug, or a file some library chokes on in a way nobody foresaw: never the
                # turn's failure, or every later turn of the chat would fail on it again.
                log.exception("%s of message %d: unexpected failure", media.ref.kind, message.id)
                outcome = _Outcome("failed", note="it could not be read (unexpected error)")
        if outcome.status != "ready":
            log.warning(
                "%s of message %d in %s: %s (%s)",
                media.ref.kind,
                message.id,
                message.session,
                outcome.note,
                outcome.status,
            )
        self._count(media, outcome)
        await self._store.save_media(
            media.id,
            status=outcome.status,
            data=outcome.data,
            media_type=outcome.media_type,
            width=outcome.width,
            height=outcome.height,
            note=outcome.note,
        )
        return dataclasses.replace(
            media,
            status=outcome.status,
            media_type=outcome.media_type,
            width=outcome.width,
            height=outcome.height,
            note=outcome.note,
        )

    async def _image(self, message: StoredMessage, media: StoredMedia, deadline: float) -> _Outcome:
        data = await self._fetch(message, media, deadline)
        image = await prepare_image_async(data)
        return _Outcome(
            "ready",
            data=image.data,
            media_type=image.media_type,
            width=image.width,
            height=image.height,
        )

    async def _voice(self, message: StoredMessage, media: StoredMedia, deadline: float) -> _Outcome:
        if self._transcriber is None:
            return _Outcome("skipped", note="no transcriber is configured")
        limit = self._settings.transcribe_max_seconds
        if media.ref.duration is not None and media.ref.duration > limit:
            return _Outcome("skipped", note=f"longer than {limit:g} s: not transcribed")
        data = await self._fetch(message, media, deadline)
        media_type = media.ref.media_type or "audio/ogg"
        filename = f"{media.ref.kind}.{_EXTENSIONS.get(media_type, 'ogg')}"
        text = await within(
            self._clock,
            self._left(deadline + self._settings.transcribe_timeout_seconds),
            self._transcriber.transcribe(data, filename=filename, media_type=media_type),
        )
        return _Outcome("ready", note=text.strip())

    async def _fetch(self, message: StoredMessage, media: StoredMedia, deadline: float) -> bytes:
        source = self._sources(message.session.conversation.bot)
        if source is None or not media.ref.ref:
            raise MediaRejected("this platform gives no way to fetch it")
        limit = self._settings.max_download_bytes
        if media.ref.kind == "image":
            # Never read more than the preparation reads: a bigger "image" is refused there,
            # after it was held in memory whole (max_download_mb allows 500).
            limit = min(limit, MAX_INPUT_BYTES)
        elif media.ref.kind in _RATES:
            # A note's claimed duration may lie; its size cannot: at most what
            # transcribe_max_seconds of it takes at a generous bitrate.
            seconds = self._settings.transcribe_max_seconds
            limit = min(limit, _VOICE_FLOOR + int(seconds * _RATES[media.ref.kind]))
        return await within(
            self._clock,
            self._left(deadline),
            source.fetch(
                media.ref,
                chat_id=message.session.conversation.chat_id,
                platform_message_id=message.platform_message_id,
                max_bytes=limit,
            ),
        )

    def _left(self, deadline: float) -> float:
        """Seconds until ``deadline``; a wait begun after it times out at once."""
        left = deadline - self._clock.now()
        if left <= 0:
            raise TimeoutError
        return left

    def _count(self, media: StoredMedia, outcome: _Outcome) -> None:
        if self._metrics is not None:
            result = "retry" if outcome.status == "new" else outcome.status
            self._metrics.media.labels(media.ref.kind, result).inc()


def _reason(exc: BaseException) -> str:
    """A short reason for the stored note and the log (never a URL: it may hold a token)."""
    if isinstance(exc, TimeoutError):
        return "timed out"
    text = str(exc) if isinstance(exc, MediaError) else type(exc).__name__
    return text[:200]
