"""OpenAITranscriber driven through the real aiohttp client against the local fake server."""

from __future__ import annotations

import logging
import socket
import time
import traceback
from collections.abc import AsyncIterator, Callable, Iterator

import aiohttp
import pytest

from bot.core.errors import ConfigError, MediaError, MediaRejected, MediaUnavailable
from bot.core.media import Transcriber
from bot.llm.transcription import (
    DEFAULT_MAX_BYTES,
    OpenAITranscriber,
    TranscriptionRateLimited,
    TranscriptionSettings,
    transcriber_from,
)
from tests.fakes.transcription_api import FakeTranscriptionAPI

KEY = "sk-stt-secret-9d2e7a41c05b8f36"
MODEL = "whisper-1"
OGG = "audio/ogg"

Factory = Callable[..., OpenAITranscriber]


@pytest.fixture(autouse=True)
def no_secret_in_logs(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Every test runs with DEBUG logging captured, and the key must appear in no record."""
    caplog.set_level(logging.DEBUG)
    yield
    formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
    text = "\n".join(formatter.format(r) for r in caplog.records)
    assert KEY not in text


@pytest.fixture
async def api() -> AsyncIterator[FakeTranscriptionAPI]:
    async with FakeTranscriptionAPI(api_key=KEY) as server:
        yield server


@pytest.fixture
async def make(api: FakeTranscriptionAPI) -> AsyncIterator[Factory]:
    """Transcribers on the fake (any argument may be overridden), closed after the test."""
    made: list[OpenAITranscriber] = []

    def factory(**overrides: object) -> OpenAITranscriber:
        kwargs: dict[str, object] = {"model": MODEL, "api_key": KEY, "timeout_seconds": 5}
        kwargs |= overrides
        base_url = str(kwargs.pop("base_url", api.base_url))
        transcriber = OpenAITranscriber(base_url, **kwargs)  # type: ignore[arg-type]
        made.append(transcriber)
        return transcriber

    yield factory
    for transcriber in made:
        await transcriber.aclose()


def _no_key_anywhere(exc: BaseException) -> None:
    """Neither the error, its repr, nor its whole traceback (causes included) holds the key."""
    assert KEY not in str(exc)
    assert KEY not in repr(exc)
    assert KEY not in "".join(traceback.format_exception(exc))


# --------------------------------------------------------------------------- happy path


async def test_voice_note_is_uploaded_as_openai_form_and_transcript_returned(
    api: FakeTranscriptionAPI, make: Factory
) -> None:
    api.transcript = "  Hello, see you at noon.  "
    stt: Transcriber = make(language="de", prompt="Names: Ada, Grace.")  # mypy: the port

    text = await stt.transcribe(b"OggS\x00opus-bytes", filename="voice.ogg", media_type=OGG)

    assert text == "Hello, see you at noon."
    [call] = api.calls
    assert call.path == "/v1/audio/transcriptions"
    assert call.content_type == "multipart/form-data"
    assert (call.filename, call.file_type, call.audio) == ("voice.ogg", OGG, b"OggS\x00opus-bytes")
    assert call.fields == {
        "model": MODEL,
        "response_format": "json",
        "language": "de",
        "prompt": "Names: Ada, Grace.",
    }
    assert call.authorization == f"Bearer {KEY}"


async def test_calls_are_told_apart_and_optional_fields_left_out(
    api: FakeTranscriptionAPI, make: Factory
) -> None:
    stt = make()
    first = await stt.transcribe(b"first note", filename="a.ogg", media_type=OGG)
    second = await stt.transcribe(b"second note", filename="b.mp3", media_type="audio/mpeg")

    assert (first, second) == ("first note", "second note")
    assert [c.filename for c in api.calls] == ["a.ogg", "b.mp3"]
    assert all(set(c.fields) == {"model", "response_format"} for c in api.calls)


async def test_no_key_sends_no_authorization_header(make: Factory) -> None:
    async with FakeTranscriptionAPI() as server:  # a self-hosted server without auth
        stt = make(base_url=server.base_url, api_key=None)
        assert await stt.transcribe(b"hi", filename="v.ogg", media_type=OGG) == "hi"
        assert server.calls[0].authorization is None


@pytest.mark.parametrize("suffix", ["/", "", "//"])
async def test_base_url_with_or_without_trailing_slash(
    api: FakeTranscriptionAPI, make: Factory, suffix: str
) -> None:
    stt = make(base_url=api.base_url.rstrip("/") + suffix)
    assert await stt.transcribe(b"slash", filename="v.ogg", media_type=OGG) == "slash"
    assert api.calls[0].path == "/v1/audio/transcriptions"


async def test_plain_text_body_is_the_transcript(api: FakeTranscriptionAPI, make: Factory) -> None:
    """A server that ignores ``response_format`` and answers text/plain still works."""
    api.plain_text_next(" Plain words, no JSON.\n")
    api.plain_text_next("{curly start, not JSON}", content_type="text/plain")
    stt = make()
    assert await stt.transcribe(b"x", filename="v.ogg", media_type=OGG) == "Plain words, no JSON."
    assert await stt.transcribe(b"x", filename="v.ogg", media_type=OGG) == "{curly start, not JSON}"


async def test_json_sent_as_text_plain_is_still_parsed(
    api: FakeTranscriptionAPI, make: Factory
) -> None:
    api.plain_text_next('{"text": " from json "}')
    stt = make()
    assert await stt.transcribe(b"x", filename="v.ogg", media_type=OGG) == "from json"


@pytest.mark.parametrize("heard", ["", "   \n\t "])
async def test_silence_is_an_empty_transcript(
    api: FakeTranscriptionAPI, make: Factory, heard: str
) -> None:
    api.transcript = heard
    stt = make()
    assert await stt.transcribe(b"...", filename="v.ogg", media_type=OGG) == ""


@pytest.mark.parametrize(
    ("filename", "media_type", "sent"),
    [
        ("", OGG, "audio.ogg"),
        ("voice", "audio/ogg; codecs=opus", "voice.ogg"),
        ("file_17", "video/mp4", "file_17.mp4"),  # a Telegram video note
        ("../../etc/voice.oga", OGG, "voice.oga"),
        ("note.m4a", "audio/mp4", "note.m4a"),
    ],
)
async def test_file_name_gets_an_extension_the_server_decodes_by(
    api: FakeTranscriptionAPI, make: Factory, filename: str, media_type: str, sent: str
) -> None:
    stt = make()
    assert await stt.transcribe(b"ok", filename=filename, media_type=media_type) == "ok"
    assert api.calls[0].filename == sent


# ----------------------------------------------------------------------- fault mapping


async def test_rate_limit_is_transient_and_carries_retry_after(
    api: FakeTranscriptionAPI, make: Factory
) -> None:
    api.fail_next(status=429, message="Rate limit reached for whisper-1", retry_after=7)
    api.fail_next(status=429, message="slow down")
    stt = make()

    with pytest.raises(TranscriptionRateLimited) as first:
        await stt.transcribe(b"x", filename="v.ogg", media_type=OGG)
    with pytest.raises(TranscriptionRateLimited) as second:
        await stt.transcribe(b"x", filename="v.ogg", media_type=OGG)

    assert isinstance(first.value, MediaUnavailable)
    assert first.value.retry_after == 7
    assert "429" in str(first.value) and "Rate limit reached for whisper-1" in str(first.value)
    assert "retry after 7 s" in str(first.value)
    assert second.value.retry_after is None
    assert "slow down" in str(second.value)


async def test_retry_after_as_http_date(api: FakeTranscriptionAPI, make: Factory) -> None:
    when = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 120))
    api.fail_next(status=429, retry_after=when)
    with pytest.raises(TranscriptionRateLimited) as caught:
        await make().transcribe(b"x", filename="v.ogg", media_type=OGG)
    assert caught.value.retry_after is not None
    assert 100 < caught.value.retry_after <= 120


@pytest.mark.parametrize("status", [500, 502, 503, 504, 408])
async def test_server_errors_are_transient(
    api: FakeTranscriptionAPI, make: Factory, status: int
) -> None:
    api.fail_next(status=status, message="model is loading")
    with pytest.raises(MediaUnavailable) as caught:
        await make().transcribe(b"x", filename="v.ogg", media_type=OGG)
    assert not isinstance(caught.value, MediaRejected)
    assert str(status) in str(caught.value) and "model is loading" in str(caught.value)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 415, 422])
async def test_client_errors_are_permanent_and_name_status_and_message(
    api: FakeTranscriptionAPI, make: Factory, status: int
) -> None:
    api.fail_next(status=status, message=f"server says no ({status})")
    with pytest.raises(MediaRejected) as caught:
        await make().transcribe(b"x", filename="v.ogg", media_type=OGG)
    assert f"{status} " in str(caught.value)
    assert f"server says no ({status})" in str(caught.value)


async def test_real_validation_errors_of_the_server(
    api: FakeTranscriptionAPI, make: Factory
) -> None:
    """The fake's own checks (as OpenAI's) come back as clear permanent errors."""
    api.models = {"whisper-1"}
    api.max_bytes = 10
    with pytest.raises(MediaRejected, match=r"404 Not Found: The model `tiny` does not exist"):
        await make(model="tiny").transcribe(b"x", filename="v.ogg", media_type=OGG)
    with pytest.raises(MediaRejected, match=r"413 .*Maximum content size limit \(10\) exceeded"):
        await make().transcribe(b"x" * 11, filename="v.ogg", media_type=OGG)
    with pytest.raises(MediaRejected, match=r"400 Bad Request: Invalid file format"):
        await make().transcribe(b"x", filename="v.txt", media_type="text/plain")


async def test_wrong_key_is_rejected_and_says_so(api: FakeTranscriptionAPI, make: Factory) -> None:
    with pytest.raises(MediaRejected, match="API key was refused") as wrong:
        await make(api_key="sk-wrong").transcribe(b"x", filename="v.ogg", media_type=OGG)
    with pytest.raises(MediaRejected, match="no API key is configured") as missing:
        await make(api_key=None).transcribe(b"x", filename="v.ogg", media_type=OGG)
    assert "401" in str(wrong.value) and "Incorrect API key provided" in str(missing.value)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"error": "whisper.cpp style error"}', "whisper.cpp style error"),
        (b'{"detail": "FastAPI style detail"}', "FastAPI style detail"),
        (b'{"detail": [{"loc": ["body", "file"], "msg": "field required"}]}', "field required"),
        (b"<html><body>  Bad\n\n gateway </body></html>", "<html><body> Bad gateway"),
    ],
)
async def test_error_message_of_other_server_shapes(
    api: FakeTranscriptionAPI, make: Factory, body: bytes, expected: str
) -> None:
    api.fail_next(status=400, raw_body=body)
    with pytest.raises(MediaRejected) as caught:
        await make().transcribe(b"x", filename="v.ogg", media_type=OGG)
    assert expected in str(caught.value)


async def test_error_message_is_cut_to_200_characters(
    api: FakeTranscriptionAPI, make: Factory
) -> None:
    api.fail_next(status=400, message="A" * 150 + "B" * 5000)
    with pytest.raises(MediaRejected) as caught:
        await make().transcribe(b"x", filename="v.ogg", media_type=OGG)
    detail = str(caught.value).split(": ", 1)[1].rstrip(")")
    assert detail.startswith("A" * 150 + "B")
    assert len(detail) == 200


async def test_key_echoed_by_the_server_never_reaches_errors_or_logs(
    api: FakeTranscriptionAPI, make: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    """A careless server puts the Authorization header into its error text."""
    stt = make()
    for status in (400, 401, 429, 500):
        # 195 characters first: a key cut in half at the 200th would slip past a replace.
        api.fail_next(status=status, message="x" * 195, echo_authorization=True)
        with pytest.raises(MediaError) as caught:
            await stt.transcribe(b"x", filename="v.ogg", media_type=OGG)
        _no_key_anywhere(caught.value)
    api.fail_next(status=400, message="oops", echo_authorization=True)
    with pytest.raises(MediaRejected) as caught:
        await stt.transcribe(b"x", filename="v.ogg", media_type=OGG)
    assert "Bearer [redacted]" in str(caught.value)  # the echo was there, and was masked
    assert "transcription failed" in caplog.text  # the failures were logged (without the key)


async def test_timeout_is_honoured(api: FakeTranscriptionAPI, make: Factory) -> None:
    api.hang_next()
    stt = make(timeout_seconds=0.3)
    started = time.monotonic()
    with pytest.raises(MediaUnavailable, match=r"did not answer within 0.3 s") as caught:
        await stt.transcribe(b"x", filename="v.ogg", media_type=OGG)
    elapsed = time.monotonic() - started
    assert 0.25 <= elapsed < 3
    _no_key_anywhere(caught.value)
    # The session survives a timeout: the next call works.
    assert await stt.transcribe(b"after", filename="v.ogg", media_type=OGG) == "after"


async def test_disconnect_mid_response_is_transient(
    api: FakeTranscriptionAPI, make: Factory
) -> None:
    api.disconnect_next()
    stt = make()
    with pytest.raises(MediaUnavailable, match="could not reach the transcription server") as exc:
        await stt.transcribe(b"x", filename="v.ogg", media_type=OGG)
    _no_key_anywhere(exc.value)
    assert await stt.transcribe(b"again", filename="v.ogg", media_type=OGG) == "again"


async def test_connection_refused_is_transient(make: Factory) -> None:
    with socket.socket() as sock:  # a port nobody listens on once the socket closes
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    stt = make(base_url=f"http://127.0.0.1:{port}/v1")
    with pytest.raises(MediaUnavailable, match=f"127.0.0.1:{port}") as caught:
        await stt.transcribe(b"x", filename="v.ogg", media_type=OGG)
    _no_key_anywhere(caught.value)


@pytest.mark.parametrize(
    ("content_type", "body", "expected"),
    [
        ("text/html", "<html>login page</html>", "HTML page"),
        ("application/json", '{"text": "unterminated', "unreadable JSON"),
        ("application/json", '{"transcript": "wrong key"}', "without a text field"),
    ],
)
async def test_unusable_success_answers_are_transient(
    api: FakeTranscriptionAPI, make: Factory, content_type: str, body: str, expected: str
) -> None:
    api.plain_text_next(body, content_type=content_type)
    with pytest.raises(MediaUnavailable, match=expected):
        await make().transcribe(b"x", filename="v.ogg", media_type=OGG)


# ------------------------------------------------------------------------------ bounds


async def test_audio_over_max_bytes_is_refused_without_a_request(
    api: FakeTranscriptionAPI, make: Factory
) -> None:
    stt = make(max_bytes=1000)
    with pytest.raises(MediaRejected, match=r"1001 bytes, more than .* 1000 bytes"):
        await stt.transcribe(b"x" * 1001, filename="v.ogg", media_type=OGG)
    with pytest.raises(MediaRejected, match="empty"):
        await stt.transcribe(b"", filename="v.ogg", media_type=OGG)
    assert api.calls == []
    assert await stt.transcribe(b"y" * 1000, filename="v.ogg", media_type=OGG) == "y" * 1000


async def test_closed_transcriber_is_unavailable(api: FakeTranscriptionAPI, make: Factory) -> None:
    stt = make()
    assert await stt.transcribe(b"one", filename="v.ogg", media_type=OGG) == "one"
    await stt.aclose()
    with pytest.raises(MediaUnavailable, match="closed"):
        await stt.transcribe(b"two", filename="v.ogg", media_type=OGG)
    assert len(api.calls) == 1


async def test_injected_session_is_used_and_left_open(api: FakeTranscriptionAPI) -> None:
    async with aiohttp.ClientSession(headers={"X-Shared-Pool": "yes"}) as session:
        stt = OpenAITranscriber(api.base_url, model=MODEL, api_key=KEY, session=session)
        assert await stt.transcribe(b"pooled", filename="v.ogg", media_type=OGG) == "pooled"
        await stt.aclose()
        assert not session.closed  # the owner closes it
    assert api.calls[0].authorization == f"Bearer {KEY}"


# ---------------------------------------------------------------------------- settings


async def test_factory_builds_from_settings(api: FakeTranscriptionAPI) -> None:
    settings = TranscriptionSettings(
        url=api.base_url + "/", model="Systran/faster-whisper-small", language="fr"
    )
    assert settings.max_bytes == DEFAULT_MAX_BYTES == 25 * 1024 * 1024
    async with transcriber_from(settings, KEY) as stt:
        assert await stt.transcribe(b"bonjour", filename="v.ogg", media_type=OGG) == "bonjour"
    call = api.calls[0]
    assert (call.model, call.language, call.authorization) == (
        "Systran/faster-whisper-small",
        "fr",
        f"Bearer {KEY}",
    )


@pytest.mark.parametrize(
    ("url", "kwargs", "problem"),
    [
        ("ftp://host/v1", {}, "transcription.url"),
        ("not a url", {}, "transcription.url"),
        ("http://host/v1?key=1", {}, "transcription.url"),
        ("http://host/v1", {"model": " "}, "transcription.model"),
        ("http://host/v1", {"timeout_seconds": 0}, "transcription.timeout_seconds"),
        ("http://host/v1", {"max_bytes": 0}, "transcription.max_bytes"),
    ],
)
def test_bad_settings_are_config_errors(url: str, kwargs: dict[str, object], problem: str) -> None:
    arguments: dict[str, object] = {"model": MODEL, "api_key": None} | kwargs
    with pytest.raises(ConfigError, match=problem):
        OpenAITranscriber(url, **arguments)  # type: ignore[arg-type]
