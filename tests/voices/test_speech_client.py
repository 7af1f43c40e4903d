"""The built-in synthesizer (bot/llm/speech.py) against the fake speech server, and the pure
helpers it shares: every failure is one ``SpeechFailed`` naming the server's reason, never the
key; what is not audio of the asked format is refused; an Ogg Opus file's duration is read."""

from __future__ import annotations

import pytest
from aiohttp import web

from bot.core.errors import ConfigError, SpeechFailed
from bot.core.speech import VoiceRequest, audio_problem, ogg_opus_duration
from bot.llm.speech import OpenAISpeech
from bot.runtime.voice import speakable
from tests.fakes.server import FakeServer
from tests.fakes.speech_api import FakeSpeechAPI, fake_mp3, fake_ogg

KEY = "sk-test-0123456789abcdef"
NOVA = VoiceRequest(model="tts-1", voice="nova")


async def test_speech_is_ogg_opus_with_its_duration() -> None:
    async with FakeSpeechAPI(api_key=KEY) as api, OpenAISpeech(api.url + "/", api_key=KEY) as tts:
        speech = await tts.synthesize("hello there", NOVA)
        mp3 = await tts.synthesize("hi", VoiceRequest("tts-1", "nova", format="mp3"))
    assert speech.media_type == "audio/ogg" and speech.data.startswith(b"OggS")
    assert speech.duration == pytest.approx(11 * 0.06)
    assert mp3.media_type == "audio/mpeg" and mp3.duration is None
    assert api.calls[0].body == {
        "model": "tts-1",
        "voice": "nova",
        "input": "hello there",
        "response_format": "opus",
    }


async def test_a_refused_key_is_named_but_never_shown() -> None:
    async with FakeSpeechAPI() as api:
        api.fail_next(401, f"Incorrect API key provided: {KEY}")
        async with OpenAISpeech(api.url, api_key=KEY) as tts:
            with pytest.raises(SpeechFailed) as caught:
                await tts.synthesize("hello", NOVA)
    message = str(caught.value)
    assert "speech not authorised, the API key was refused (401" in message
    assert KEY not in message and "[redacted]" in message


async def test_what_is_not_audio_is_refused() -> None:
    async with FakeSpeechAPI() as api, OpenAISpeech(api.url, api_key=None) as tts:
        api.not_audio_next()
        api.fail_next(404, "model 'tts-9' not found")
        with pytest.raises(SpeechFailed, match="not Ogg Opus audio"):
            await tts.synthesize("hello", NOVA)
        with pytest.raises(SpeechFailed, match=r"check voice\.url and voice\.model"):
            await tts.synthesize("hello", NOVA)


class _Redirecting(FakeServer):
    def _build_app(self) -> web.Application:
        app = web.Application()

        async def moved(request: web.Request) -> web.Response:
            raise web.HTTPFound("https://elsewhere.example/v1/audio/speech")

        app.router.add_post("/v1/audio/speech", moved)
        return app


async def test_a_redirect_is_not_followed() -> None:
    async with _Redirecting() as server, OpenAISpeech(server.base_url + "/v1", api_key=KEY) as t:
        with pytest.raises(SpeechFailed, match=r"redirected .*set voice\.url to the final address"):
            await t.synthesize("hello", NOVA)


def test_a_url_that_is_no_http_base_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"voice\.url"):
        OpenAISpeech("ftp://example.com/v1", api_key=None)


def test_audio_checks_and_durations() -> None:
    assert audio_problem(fake_ogg(1.0), "opus") is None
    assert audio_problem(fake_mp3(), "mp3") is None
    assert audio_problem(b'{"error": "x"}', "opus") is not None
    assert audio_problem(fake_ogg(1.0), "mp3") is not None
    assert audio_problem(b"", "opus") == "the audio is empty"
    assert ogg_opus_duration(fake_ogg(2.5)) == pytest.approx(2.5)
    assert ogg_opus_duration(b"OggS garbage") is None
    assert ogg_opus_duration(fake_mp3()) is None


def test_the_spoken_text_drops_markdown_marks() -> None:
    said = speakable("# Hi\n> **Look** at [this](https://x.example/a) `code` *smiles*")
    assert said == "Hi\nLook at this code smiles"
