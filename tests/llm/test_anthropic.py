"""AnthropicLLM driven through the real ``anthropic`` SDK against the local fake Messages API."""

from __future__ import annotations

import base64
import io
import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Iterator
from typing import Any

import pytest
from PIL import Image

from bot.core.errors import (
    ConfigError,
    ModelError,
    ModelRejected,
    ModelUnavailable,
    RateLimited,
    RequestRejected,
)
from bot.core.llm import (
    ChatMessage,
    ImageBlock,
    ModelRequest,
    ModelResult,
    TextBlock,
    ToolResult,
    ToolSpec,
    ToolUse,
    Usage,
)
from bot.core.media import PreparedImage
from bot.llm.anthropic import AnthropicLLM
from bot.runtime.images import prepare_image
from bot.runtime.initiatives import SEND, SKIP
from memory.tokens import image_tokens
from tests.fakes.messages_api import FakeMessagesAPI
from tests.llm.conftest import KEY, LLMFactory

MODEL = "claude-test-model"


def _request(**overrides: Any) -> ModelRequest:
    fields: dict[str, Any] = {
        "model": MODEL,
        "system": (TextBlock("You are Ada.", cache=True), TextBlock("Today is Monday.")),
        "messages": (
            ChatMessage("user", (TextBlock("earlier talk", cache=True), TextBlock("more"))),
            ChatMessage.of("assistant", "Noted."),
            ChatMessage.of("user", "How are you?"),
        ),
        "max_tokens": 321,
    }
    fields.update(overrides)
    return ModelRequest(**fields)


@pytest.fixture(autouse=True)
def no_secret_in_logs(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Every test runs with DEBUG logging captured, and the key must appear in no record."""
    caplog.set_level(logging.DEBUG)
    yield
    records = [*caplog.get_records("setup"), *caplog.get_records("call"), *caplog.records]
    formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
    leaked = [r.name for r in records if KEY in formatter.format(r)]  # message + traceback
    assert not leaked, f"API key logged by {leaked}"


@pytest.fixture
async def api() -> AsyncIterator[FakeMessagesAPI]:
    async with FakeMessagesAPI() as fake:
        yield fake


async def _fails(call: Awaitable[ModelResult], kind: type[ModelError]) -> ModelError:
    """Await ``call``, expect ``kind``, and check the error leaks no secret."""
    with pytest.raises(kind) as info:
        await call
    err = info.value
    assert KEY not in str(err)
    assert KEY not in repr(err)
    assert err.__cause__ is not None, "SDK errors are translated with `raise ... from`"
    return err


# ------------------------------------------------------------------------------ success


async def test_success_maps_result_and_sends_cache_breakpoints(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    api.reply_next(
        "Fine, thanks.",
        usage={
            "input_tokens": 120,
            "output_tokens": 7,
            "cache_creation_input_tokens": 100,
            "cache_read_input_tokens": 20,
        },
        model="claude-test-model-20990101",
    )
    result = await make_llm().complete(_request())

    assert result == ModelResult(
        text="Fine, thanks.",
        usage=Usage(
            input_tokens=120,
            output_tokens=7,
            cache_creation_input_tokens=100,
            cache_read_input_tokens=20,
        ),
        model="claude-test-model-20990101",
        stop_reason="end_turn",
    )
    assert api.call_count == 1
    seen = api.last_request
    assert seen.api_key == KEY
    assert seen.body["model"] == MODEL
    assert seen.body["max_tokens"] == 321
    assert seen.body["system"] == [
        {"type": "text", "text": "You are Ada.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "Today is Monday."},
    ]
    assert seen.body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "earlier talk", "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "more"},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "Noted."}]},
        {"role": "user", "content": [{"type": "text", "text": "How are you?"}]},
    ]
    assert seen.cache_breakpoints == [("system", 0), ("messages", 0, 0)]
    assert not {"temperature", "stream", "cache_control"} & seen.body.keys()


async def test_default_reply_echoes_and_none_cache_counts_become_zero(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    api.reply_next(usage={"cache_creation_input_tokens": None, "cache_read_input_tokens": None})
    result = await make_llm().complete(_request())
    assert result.text == "How are you?"
    assert result.usage == Usage(input_tokens=10, output_tokens=5)


async def test_text_blocks_are_concatenated_and_other_blocks_skipped(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    api.reply_next(
        content=[
            {"type": "thinking", "thinking": "hmm", "signature": "sig"},
            {"type": "text", "text": "Hel"},
            {"type": "text", "text": "lo"},
        ],
        stop_reason="max_tokens",
    )
    result = await make_llm().complete(_request())
    assert result.text == "Hello"
    assert result.stop_reason == "max_tokens"


async def test_empty_system_is_omitted_and_temperature_is_not_sent(
    api: FakeMessagesAPI, make_llm: LLMFactory, caplog: pytest.LogCaptureFixture
) -> None:
    llm = make_llm()
    request = _request(system=(), temperature=0.7)
    await llm.complete(request)
    await llm.complete(request)

    assert api.call_count == 2
    for seen in api.requests:
        assert "system" not in seen.body
        assert "temperature" not in seen.body
        assert seen.cache_breakpoints == [("messages", 0, 0)]
    warnings = [r for r in caplog.records if "temperature" in r.getMessage()]
    assert len(warnings) == 1, "the ignored temperature is reported once, not per call"
    assert warnings[0].name == "personabot.llm"


async def test_base_url_none_uses_anthropic_base_url_env(
    api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", api.base_url)
    llm = AnthropicLLM(api_key=KEY, timeout_seconds=5.0)
    try:
        result = await llm.complete(_request())
    finally:
        await llm.aclose()
    assert result.text == "How are you?"
    assert api.call_count == 1


def test_empty_api_key_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="api_key"):
        AnthropicLLM(api_key="  ")


# ------------------------------------------------------------------------------ rate limits


async def test_429_then_success_is_retried_by_the_sdk(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    api.fail_next(status=429, retry_after_ms=10)
    result = await make_llm(max_retries=2).complete(_request())

    assert result.text == "How are you?"
    assert api.call_count == 2
    assert [r.headers["x-stainless-retry-count"] for r in api.requests] == ["0", "1"]
    assert api.requests[0].body == api.requests[1].body


async def test_429_after_retries_raises_rate_limited(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    api.fail_next(status=429, retry_after_ms=10, times=2)
    err = await _fails(make_llm(max_retries=1).complete(_request()), RateLimited)

    assert isinstance(err, RateLimited)
    assert err.status == 429
    assert err.retry_after == pytest.approx(0.01)
    assert api.call_count == 2
    assert "429" in str(err)
    assert "rate_limit_error" in str(err)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after-ms": "1500"}, 1.5),
        ({"retry-after": "3"}, 3.0),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"retry-after": "Thu, 01 Jan 1970 00:00:00 GMT"}, 0.0),
        ({}, None),
    ],
)
async def test_rate_limited_retry_after_is_parsed(
    api: FakeMessagesAPI,
    make_llm: LLMFactory,
    headers: dict[str, str],
    expected: float | None,
) -> None:
    api.fail_next(status=429, headers=headers, message="slow down")
    err = await _fails(make_llm(max_retries=0).complete(_request()), RateLimited)

    assert isinstance(err, RateLimited)
    assert err.retry_after == (None if expected is None else pytest.approx(expected))
    assert "slow down" in str(err)
    assert api.call_count == 1


# ------------------------------------------------------------------------------ transient


async def test_529_overloaded_without_retries_is_unavailable(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    api.fail_next(status=529, error_type="overloaded_error", message="Overloaded")
    err = await _fails(make_llm(max_retries=0).complete(_request()), ModelUnavailable)

    assert not isinstance(err, RateLimited)
    assert err.status == 529
    assert "overloaded" in str(err).lower()
    assert api.call_count == 1


async def test_529_overloaded_then_success_with_retries(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    api.fail_next(status=529, error_type="overloaded_error", retry_after_ms=10)
    result = await make_llm(max_retries=2).complete(_request())
    assert result.text == "How are you?"
    assert api.call_count == 2


@pytest.mark.parametrize("status", [500, 503, 504, 408])
async def test_5xx_and_408_are_unavailable(
    api: FakeMessagesAPI, make_llm: LLMFactory, status: int
) -> None:
    api.fail_next(status=status, message="Internal server error")
    err = await _fails(make_llm(max_retries=0).complete(_request()), ModelUnavailable)

    assert not isinstance(err, RateLimited)
    assert err.status == status
    assert str(status) in str(err)
    assert "Internal server error" in str(err)


async def test_connection_refused_is_unavailable(make_llm: LLMFactory) -> None:
    with socket.socket() as sock:  # a port that was free a moment ago and has no listener now
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    llm = make_llm(base_url=f"http://127.0.0.1:{port}", max_retries=0)
    err = await _fails(llm.complete(_request()), ModelUnavailable)

    assert err.status is None
    assert "connect" in str(err).lower()


async def test_timeout_is_unavailable(api: FakeMessagesAPI, make_llm: LLMFactory) -> None:
    api.latency = 0.3
    llm = make_llm(timeout_seconds=0.05, max_retries=0)
    err = await _fails(llm.complete(_request()), ModelUnavailable)

    assert err.status is None
    assert "timeout" in str(err).lower()


# ------------------------------------------------------------------------------ permanent


@pytest.mark.parametrize(
    ("status", "error_type"),
    [
        (400, "invalid_request_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (413, "request_too_large"),
    ],
)
async def test_4xx_is_rejected_with_provider_message(
    api: FakeMessagesAPI, make_llm: LLMFactory, status: int, error_type: str
) -> None:
    api.fail_next(status=status, error_type=error_type, message="messages.0: bad block")
    err = await _fails(make_llm(max_retries=2).complete(_request()), ModelRejected)

    assert err.status == status
    assert f"({status} {error_type})" in str(err)
    assert "messages.0: bad block" in str(err)
    assert api.call_count == 1, "permanent errors are not retried"


async def test_401_is_rejected_and_points_at_the_key(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    api.fail_next(status=401, message="invalid x-api-key")
    err = await _fails(make_llm(max_retries=2).complete(_request()), ModelRejected)

    assert err.status == 401
    assert "authentication failed (401)" in str(err)
    assert "ANTHROPIC_API_KEY" in str(err)
    assert api.call_count == 1


async def test_provider_text_echoing_the_key_is_redacted(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    api.fail_next(status=400, message=f"key {KEY} is not allowed here")
    err = await _fails(make_llm(max_retries=0).complete(_request()), ModelRejected)
    assert "[redacted]" in str(err)


@pytest.mark.parametrize(
    ("status", "turn_fault"), [(400, True), (413, True), (401, False), (404, False)]
)
async def test_only_request_faults_are_request_rejected(
    api: FakeMessagesAPI, make_llm: LLMFactory, status: int, turn_fault: bool
) -> None:
    """400/413 are about the request (close the turn out); 401/404 are the operator's to fix."""
    api.fail_next(status=status, message="prompt is too long")
    err = await _fails(make_llm(max_retries=0).complete(_request()), ModelRejected)
    assert isinstance(err, RequestRejected) is turn_fault


async def test_a_refusal_comes_back_as_empty_text_with_its_stop_reason(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    api.reply_next(content=[], stop_reason="refusal")
    result = await make_llm().complete(_request())
    assert (result.text, result.stop_reason) == ("", "refusal")


# ----------------------------------------------------------------------------- tool use

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}


async def test_a_text_request_sends_no_tool_fields(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    await make_llm().complete(_request())
    assert not {"tools", "tool_choice"} & api.last_request.body.keys()


async def test_tools_are_offered_and_a_tool_use_answer_is_returned(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    [call_id] = api.tool_use_next("weather", {"city": "Oslo"}, text="Let me look.")
    request = _request(tools=(ToolSpec("weather", "Weather in a city.", SCHEMA),))
    result = await make_llm().complete(request)
    seen = api.last_request
    assert seen.tools == [
        {
            "name": "weather",
            "description": "Weather in a city.",
            "input_schema": SCHEMA,
            "cache_control": {"type": "ephemeral"},  # the definitions are cached first
        }
    ]
    assert "tool_choice" not in seen.body  # "auto" is the API's default
    assert result.stop_reason == "tool_use"
    assert result.text == "Let me look."
    assert result.tool_uses == (ToolUse(call_id, "weather", {"city": "Oslo"}),)
    assert result.content == (TextBlock("Let me look."), result.tool_uses[0])


async def test_tool_blocks_go_back_in_order_and_none_forbids_calls(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    base = _request()
    request = _request(
        tools=(ToolSpec("weather", "Weather in a city.", SCHEMA),),
        tool_choice="none",
        messages=(
            *base.messages,
            ChatMessage("assistant", (TextBlock("Let me look."), ToolUse("t1", "weather", {}))),
            ChatMessage("user", (ToolResult("t1", "city: Field required", is_error=True),)),
        ),
    )
    api.reply_next("It is sunny.")
    result = await make_llm().complete(request)
    seen = api.last_request
    assert seen.body["tool_choice"] == {"type": "none"}
    assert seen.messages[-2]["content"] == [
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "t1", "name": "weather", "input": {}},
    ]
    assert seen.messages[-1]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "t1",
            "content": "city: Field required",
            "is_error": True,
        }
    ]
    assert result.text == "It is sunny." and result.tool_uses == () and result.content == ()


async def test_a_thinking_block_is_not_sent_back(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    api.reply_next(
        content=[
            {"type": "thinking", "thinking": "hmm", "signature": "sig"},
            {"type": "tool_use", "id": "t9", "name": "weather", "input": {"city": "Rome"}},
        ],
        stop_reason="tool_use",
    )
    request = _request(tools=(ToolSpec("weather", "Weather in a city.", SCHEMA),))
    result = await make_llm().complete(request)
    assert result.content == (ToolUse("t9", "weather", {"city": "Rome"}),)


# -------------------------------------------------------------------------------- images


def _png(width: int, height: int, color: str = "teal") -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), color).save(out, "PNG")
    return out.getvalue()


def _photo() -> PreparedImage:
    """A real photo-like JPEG made ready by prepare_image, as the turn would make it."""
    out = io.BytesIO()
    Image.effect_noise((2400, 1600), 40).convert("RGB").save(out, "JPEG")
    return prepare_image(out.getvalue())


def _with_images(*images: ImageBlock, text: str = "What is in the picture?") -> ModelRequest:
    base = _request()
    turn = ChatMessage("user", (*images, TextBlock(text)))
    return _request(messages=(*base.messages[:-1], turn))


async def test_an_image_block_arrives_with_the_same_pixels(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    photo = _photo()
    block = ImageBlock(photo.media_type, photo.data, cache=True)
    result = await make_llm().complete(_with_images(block))

    seen = api.last_request
    assert seen.messages[-1]["content"][0] == {
        "type": "image",
        "source": {
            "type": "base64",
            "media_type": "image/jpeg",
            "data": base64.b64encode(photo.data).decode("ascii"),
        },
        "cache_control": {"type": "ephemeral"},
    }
    assert seen.messages[-1]["content"][1] == {"type": "text", "text": "What is in the picture?"}
    assert ("messages", 2, 0) in seen.cache_breakpoints
    [got] = seen.images
    assert (got.message, got.block, got.media_type) == (2, 0, "image/jpeg")
    assert got.data == photo.data
    assert got.size == (photo.width, photo.height)
    # The fake bills images as the API does: 10 scripted input tokens plus the picture.
    assert result.usage.input_tokens == 10 + image_tokens(photo.width, photo.height)
    assert result.text == "What is in the picture?"


async def test_an_uncached_image_has_no_breakpoint_and_several_keep_their_order(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    first, second = _png(40, 30, "red"), _png(30, 40, "blue")
    await make_llm().complete(
        _with_images(ImageBlock("image/png", first), ImageBlock("image/png", second))
    )
    seen = api.last_request
    assert [i.data for i in seen.images] == [first, second]
    assert [i.size for i in seen.images] == [(40, 30), (30, 40)]
    assert all("cache_control" not in b for b in seen.messages[-1]["content"][:2])


async def test_an_image_of_another_type_than_stated_is_rejected_by_the_api(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    photo = _photo()  # JPEG bytes
    request = _with_images(ImageBlock("image/png", photo.data))
    err = await _fails(make_llm(max_retries=2).complete(request), RequestRejected)
    assert err.status == 400
    assert "(400 invalid_request_error)" in str(err)
    assert "Image does not match the provided media type image/png" in str(err)
    assert api.call_count == 1, "a request the API refused is not sent again"


@pytest.mark.parametrize(
    ("images", "message"),
    [
        ([ImageBlock("image/bmp", b"BM" + bytes(64))], "Input should be 'image/jpeg'"),
        ([ImageBlock("image/jpeg", b"\xff\xd8\xff" + bytes(4_000_000))], "exceeds 5 MB maximum"),
        ([ImageBlock("image/png", _png(8001, 1))], "exceed max allowed size: 8000 pixels"),
        (
            [ImageBlock("image/png", _png(2001, 1)), *[ImageBlock("image/png", _png(4, 4))] * 20],
            "exceed max allowed size for many-image requests: 2000 pixels",
        ),
        ([ImageBlock("image/png", _png(4, 4))] * 101, "too many images and documents: 101"),
        ([ImageBlock("image/gif", b"GIF89a" + bytes(20))], "Could not process image"),
    ],
)
async def test_images_outside_the_api_limits_are_request_rejected(
    api: FakeMessagesAPI, make_llm: LLMFactory, images: list[ImageBlock], message: str
) -> None:
    err = await _fails(make_llm(max_retries=0).complete(_with_images(*images)), RequestRejected)
    assert message in str(err)
    assert err.status == 400


async def test_an_image_in_an_assistant_message_is_a_bug_and_nothing_is_sent(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    base = _request()
    picture = ImageBlock("image/png", _png(4, 4))
    request = _request(
        messages=(base.messages[0], ChatMessage("assistant", (picture,)), base.messages[2])
    )
    with pytest.raises(ValueError, match="assistant message"):
        await make_llm().complete(request)
    assert api.call_count == 0


async def test_tool_blocks_still_work_next_to_an_image(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    picture = ImageBlock("image/png", _png(64, 64))
    tools = (ToolSpec("weather", "Weather in a city.", SCHEMA),)
    asked = ChatMessage("user", (picture, TextBlock("Weather where this was taken?")))
    [call_id] = api.tool_use_next("weather", {"city": "Oslo"})
    llm = make_llm()
    first = await llm.complete(_request(tools=tools, messages=(asked,)))
    assert first.tool_uses == (ToolUse(call_id, "weather", {"city": "Oslo"}),)

    api.reply_next("Sunny in Oslo.")
    request = _request(
        tools=tools,
        messages=(
            asked,
            ChatMessage("assistant", first.content),
            ChatMessage("user", (ToolResult(call_id, "sunny"),)),
        ),
    )
    result = await llm.complete(request)
    assert result.text == "Sunny in Oslo."
    assert [(i.message, i.data) for i in api.last_request.images] == [(0, picture.data)]


async def test_any_requires_one_tool_call_for_a_check_in_decision(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    """Issue 17: a check-in's send/skip choice is sent as tool_choice "any"; the call comes back."""
    [call_id] = api.tool_use_next("skip", {"reason": "they said they were busy"})
    result = await make_llm().complete(_request(tools=(SEND, SKIP), tool_choice="any"))
    seen = api.last_request
    assert seen.body["tool_choice"] == {"type": "any"}
    assert [t["name"] for t in seen.tools] == ["send", "skip"]
    assert result.tool_uses == (ToolUse(call_id, "skip", {"reason": "they said they were busy"}),)


async def test_rules_answer_each_kind_of_request_whatever_the_order(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    """The fake's rules (answer_when): a check-in decision gets a ``send`` call with fresh ids
    each time, slowly; a plain turn falls through to the FIFO script, then the echo."""
    decision = api.answer_when(
        lambda r: r.tool_choice == "any" and "send" in r.tool_names,
        lambda r: api.tool_use_reply("send", {"text": f"{len(r.messages)} messages above"}),
        delay=0.2,
    )
    api.reply_next("scripted")
    llm = make_llm()
    check_in = _request(tools=(SEND, SKIP), tool_choice="any")
    first = await llm.complete(check_in)
    assert api.pending == 1  # the rule answered; the script waits for another request
    assert await llm.complete(_request()) == ModelResult("scripted", first.usage, MODEL, "end_turn")
    assert (await llm.complete(_request())).text == "How are you?"
    second = await llm.complete(check_in)
    assert first.tool_uses[0].input == second.tool_uses[0].input == {"text": "3 messages above"}
    assert first.tool_uses[0].id != second.tool_uses[0].id
    assert [r.tool_choice for r in api.requests] == ["any", "auto", "auto", "any"]
    took = api.requests[1].received_at - api.requests[0].received_at
    assert took >= decision.delay
    api.clear_rules()
    assert (await llm.complete(check_in)).text == api.requests[-1].last_user_text
