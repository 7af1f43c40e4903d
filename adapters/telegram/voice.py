"""A spoken reply as a Telegram voice message (docs/voices.md): ``sendVoice`` with the audio,
its duration, and the reply's text as the caption when it fits one.

A caption holds at most 1024 characters after entity parsing: a longer text goes out after
the voice message as ordinary messages (one outbox row, so a crash between them is a crash
mid-send: never re-sent on Telegram, docs/architecture.md#delivery). A chat that refuses
voice messages (a person's privacy setting, a group's member rights) refuses before anything
is sent, so the adapter sends the text instead.
"""

from __future__ import annotations

import math
from typing import Final

from aiogram.methods import SendVoice
from aiogram.types import BufferedInputFile, ReplyParameters

from adapters.telegram.format import Chunk, split_message, without_mentions
from bot.core.events import VoiceMessage

#: Telegram's limit for a caption, in characters after entity parsing.
CAPTION_LIMIT: Final = 1024
_EXTENSIONS: Final = {"audio/ogg": "ogg", "audio/mpeg": "mp3", "audio/mp4": "m4a"}


def voice_caption(text: str) -> tuple[Chunk | None, str]:
    """The caption (None: none) and the text that follows the voice message ("" none)."""
    if not text.strip():
        return None, ""
    chunks = split_message(without_mentions(text), CAPTION_LIMIT)
    if len(chunks) == 1:
        return chunks[0], ""
    return None, text


def send_voice(
    chat_id: int,
    thread_id: int | None,
    voice: VoiceMessage,
    caption: Chunk | None,
    reply_to: int | None,
) -> SendVoice:
    """The ``sendVoice`` call of a spoken reply (the caption as HTML)."""
    extension = _EXTENSIONS.get(voice.media_type, "ogg")
    duration = None if voice.duration is None else max(1, math.ceil(voice.duration))
    reply = None
    if reply_to is not None:
        reply = ReplyParameters(message_id=reply_to, allow_sending_without_reply=True)
    return SendVoice(
        chat_id=chat_id,
        voice=BufferedInputFile(voice.audio, filename=f"voice.{extension}"),
        message_thread_id=thread_id,
        caption=None if caption is None else caption.html,
        parse_mode=None if caption is None else "HTML",
        duration=duration,
        reply_parameters=reply,
    )
