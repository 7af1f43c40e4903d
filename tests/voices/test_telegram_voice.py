"""The ``sendVoice`` call of a spoken reply (adapters/telegram/voice.py): the text is its
caption only when it fits Telegram's 1024 characters, else it follows as messages; nobody is
mentioned; the duration is whole seconds, at least one."""

from __future__ import annotations

from adapters.telegram.voice import CAPTION_LIMIT, send_voice, voice_caption
from bot.core.events import VoiceMessage


def test_a_short_text_is_the_caption_rendered_and_without_mentions() -> None:
    caption, rest = voice_caption("**Hi** @ann, see you!")
    assert caption is not None and rest == ""
    assert caption.html == "<b>Hi</b> @\u2060ann, see you!"


def test_a_text_longer_than_a_caption_follows_the_voice_message() -> None:
    text = "word " * (CAPTION_LIMIT // 4)
    caption, rest = voice_caption(text)
    assert caption is None and rest == text
    assert voice_caption("   ") == (None, "")


def test_the_call_carries_the_audio_caption_duration_and_quote() -> None:
    voice = VoiceMessage(b"OggS...", "audio/ogg", duration=2.2)
    caption, _ = voice_caption("hello")
    call = send_voice(-100, 7, voice, caption, 55)
    assert call.duration == 3 and call.caption == "hello" and call.parse_mode == "HTML"
    assert call.message_thread_id == 7 and call.reply_parameters is not None
    assert call.reply_parameters.message_id == 55
    bare = send_voice(1, None, VoiceMessage(b"\xff\xfb", "audio/mpeg", 0.2), None, None)
    assert bare.caption is None and bare.parse_mode is None and bare.duration == 1
    assert getattr(bare.voice, "filename", None) == "voice.mp3"
