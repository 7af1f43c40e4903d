"""Personas that speak (docs/voices.md): the text-to-speech port and its plain types.

A ``Synthesizer`` turns a reply's text into audio: the built-in one speaks an OpenAI-compatible
``POST /audio/speech`` (bot/llm/speech.py), a plugin registers others (``app.synthesizer``).
When a reply is spoken, and what happens when synthesis fails, is the runtime's
(bot/runtime/voice.py); an outlet that can send voice messages says so (``VoiceOutlet``), and
gets the audio on ``Reply.voice_message`` (bot/core/events.py).

Also here, pure: whether bytes are the format that was asked for (a server may answer an
error page or another format with 200), and an Ogg Opus file's duration (Telegram and Discord
show it on the voice message).
"""

from __future__ import annotations

import struct
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Final, Literal, Protocol, runtime_checkable

from bot.core.events import ConversationKey

#: The audio formats a voice message may have: Ogg Opus (Telegram's and Discord's voice
#: messages) or MP3 (Telegram plays it as a voice message too).
SpeechFormat = Literal["opus", "mp3"]
#: The media type of each format.
MEDIA_TYPES: Final[dict[str, str]] = {"opus": "audio/ogg", "mp3": "audio/mpeg"}
#: The file name extension of each format.
EXTENSIONS: Final[dict[str, str]] = {"opus": "ogg", "mp3": "mp3"}
#: Opus granule positions count 48 kHz samples, whatever the input rate (RFC 7845).
_OPUS_RATE: Final = 48_000


@dataclass(frozen=True, slots=True)
class VoiceRequest:
    """How a persona speaks: what a synthesizer is asked for besides the text."""

    model: str
    voice: str
    format: SpeechFormat = "opus"
    speed: float | None = None  # 0.25-4 (OpenAI); None: the server's default
    instructions: str | None = None  # tone and style, for models that take them


@dataclass(frozen=True, slots=True)
class Speech:
    """Audio a synthesizer made: its bytes, media type and duration in seconds (if known)."""

    data: bytes = field(repr=False)
    media_type: str
    duration: float | None = None


class Synthesizer(Protocol):
    """Text to speech; an ``async aclose()`` it has is called when the process stops."""

    async def synthesize(self, text: str, voice: VoiceRequest) -> Speech:
        """The spoken ``text``; raise ``bot.core.errors.SpeechFailed`` when there is none
        (the reply then goes out as text)."""
        ...


@runtime_checkable
class VoiceOutlet(Protocol):
    """An outlet that sends ``Reply.voice_message`` as a voice message (or an audio file);
    others get the text only, so nothing is synthesised for them."""

    def sends_voice(self, conversation: ConversationKey) -> bool:
        """Whether a reply into ``conversation`` can go out as a voice message."""
        ...

    def recording(self, conversation: ConversationKey) -> AbstractAsyncContextManager[None]:
        """The indicator shown while a voice message is made (Telegram: "recording a voice
        message"; elsewhere the typing indicator), for the body of the ``async with``."""
        ...


def audio_problem(data: bytes, format: SpeechFormat) -> str | None:
    """Why ``data`` is not audio of ``format`` (None: it looks like it is). Only the
    container is checked: a server that answered JSON, HTML or another format with 200."""
    if not data:
        return "the audio is empty"
    if format == "opus":
        if not data.startswith(b"OggS") or b"OpusHead" not in data[:512]:
            return "the answer is not Ogg Opus audio (no OggS/OpusHead header)"
        return None
    if data.startswith(b"ID3") or (len(data) > 1 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0):
        return None
    return "the answer is not MP3 audio"


def ogg_opus_duration(data: bytes) -> float | None:
    """Seconds of an Ogg Opus file: the last page's granule position less the pre-skip, at
    48 kHz (RFC 7845); None when the file does not say (not Ogg Opus, damaged)."""
    head = data.find(b"OpusHead")
    if head < 0 or len(data) < head + 12:
        return None
    pre_skip: int = struct.unpack_from("<H", data, head + 10)[0]
    page = len(data)
    # The capture pattern may also occur inside audio data: the last real page is the last
    # "OggS" followed by stream structure version 0 and a sane granule position.
    for _ in range(8):
        page = data.rfind(b"OggS", 0, page)
        if page < 0 or len(data) < page + 14:
            return None
        granule: int = struct.unpack_from("<q", data, page + 6)[0]
        if data[page + 4] == 0 and granule >= pre_skip:
            return float(granule - pre_skip) / _OPUS_RATE
    return None
