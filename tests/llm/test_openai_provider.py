"""OpenAICompatLLM driven through the real ``openai`` SDK against the fake Chat Completions
endpoint (tests/fakes/openai_api.py), plain and streamed."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
from PIL import Image

from bot.core.errors import (
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
from bot.llm.openai import NO_KEY, OpenAICompatLLM
from tests.fakes.messages_api import tokens
from tests.fakes.openai_api import FakeOpenAIAPI

#: The key of every client made here: no error text or log line may ever show it.
KEY = "sk-openai-test-8d2f61c0a9e7b534"
MODEL = "llama3.2:3b"
REPLY = "Hello Ada, it is good to hear from you again today."
WEATHER = ToolSpec(
    "weather",
    "The weather in a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)

LLMFactory = Callable[..., OpenAICompatLLM]


def _request(**overrides: Any) -> ModelRequest:
    fields: dict[str, Any] = {
        "model": MODEL,
        "system": (TextBlock("You are Ada.", cache=True), TextBlock("Today is Monday.")),
        "messages": (
            ChatMessage.of("user", "Hi"),
            ChatMessage.of("assistant", "Hello!"),
            ChatMessage("user", (TextBlock("How are you?", cache=True),)),
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
    formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
    records = [*caplog.get_records("setup"), *caplog.get_records("call"), *caplog.records]
    leaked = [r.name for r in records if KEY in formatter.format(r)]
    assert not leaked, f"API key logged by {leaked}"


@pytest.fixture
async def api() -> AsyncIterator[FakeOpenAIAPI]:
    async with FakeOpenAIAPI(reply_text=REPLY, api_key=KEY, notice_disconnects=True) as fake:
        yield fake


@pytest.fixture
async def make_llm(api: FakeOpenAIAPI) -> AsyncIterator[LLMFactory]:
    made: list[OpenAICompatLLM] = []

    def factory(**kwargs: Any) -> OpenAICompatLLM:
        kwargs.setdefault("base_url", api.api_url)
        kwargs.setdefault("api_key", KEY)
        kwargs.setdefault("timeout_seconds", 5.0)
        kwargs.setdefault("max_retries", 0)
        llm = OpenAICompatLLM(**kwargs)
        made.append(llm)
        return llm

    yield factory
    for llm in made:
        await llm.aclose()


async def _fails(call: Awaitable[ModelResult], kind: type[ModelError]) -> ModelError:
    with pytest.raises(kind) as info:
        await call
    err = info.value
    assert KEY not in str(err) and KEY not in repr(err)
    return err


# ------------------------------------------------------------------------------ answers


async def test_a_text_answer_comes_back_with_its_model_usage_and_stop_reason(
    api: FakeOpenAIAPI, make_llm: LLMFactory
) -> None:
    api.reply_next("Fine, thanks.", model="llama3.2:3b-instruct-q4", finish_reason="stop")
    result = await make_llm().complete(_request())

    assert result == ModelResult(
        text="Fine, thanks.",
        usage=Usage(input_tokens=10, output_tokens=5),
        model="llama3.2:3b-instruct-q4",
        stop_reason="end_turn",
    )
    body = api.last_request.body
    assert api.last_request.api_key == KEY
    assert body["messages"] == [
        {"role": "system", "content": "You are Ada.\n\nToday is Monday."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "How are you?"},
    ]
    assert body["max_tokens"] == 321
    # Nothing the request does not carry: no sampling, no tools, no cache markers.
    assert not {"temperature", "top_p", "tools", "tool_choice", "stream"} & body.keys()
    assert "cache_control" not in json.dumps(body)


async def test_temperature_is_sent_when_the_request_carries_one(
    api: FakeOpenAIAPI, make_llm: LLMFactory
) -> None:
    await make_llm().complete(_request(temperature=0.3))
    assert api.last_request.body["temperature"] == 0.3


async def test_without_a_key_a_placeholder_is_sent_never_the_environments(
    api: FakeOpenAIAPI, make_llm: LLMFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local endpoint takes no key: OPENAI_API_KEY in the environment must not leak to it."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-real-openai-key-0000000000")
    api.api_key = None
    result = await make_llm(api_key=None).complete(_request())
    assert result.text == REPLY
    assert api.last_request.api_key == NO_KEY


async def test_the_environments_openai_account_never_reaches_the_endpoint(
    api: FakeOpenAIAPI, make_llm: LLMFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK would send OPENAI_ORG_ID / OPENAI_PROJECT_ID to any base_url (a local
    server, a third party's router): they are left out."""
    monkeypatch.setenv("OPENAI_ORG_ID", "org-private-0000")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj-private-0000")
    await make_llm().complete(_request())
    sent = api.last_request.headers
    assert "openai-organization" not in sent and "openai-project" not in sent


async def test_a_length_cut_and_a_content_filter_map_to_our_stop_reasons(
    api: FakeOpenAIAPI, make_llm: LLMFactory
) -> None:
    api.reply_next("It was a dark and", finish_reason="length")
    api.reply_next("", finish_reason="content_filter")
    llm = make_llm()
    assert (await llm.complete(_request())).stop_reason == "max_tokens"
    refused = await llm.complete(_request())
    assert (refused.text, refused.stop_reason) == ("", "refusal")


async def test_cached_tokens_count_as_cache_reads_and_not_as_input(
    api: FakeOpenAIAPI, make_llm: LLMFactory
) -> None:
    api.reply_next(usage={"prompt_tokens": 1200, "completion_tokens": 40}, cached_tokens=1024)
    result = await make_llm().complete(_request())
    assert result.usage == Usage(input_tokens=176, output_tokens=40, cache_read_input_tokens=1024)
    assert result.usage.total == 1240  # every token once, as the endpoint billed them


@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])
async def test_an_endpoint_without_usage_is_charged_by_an_estimate(
    api: FakeOpenAIAPI, make_llm: LLMFactory, streamed: bool
) -> None:
    api.reply_next(REPLY, usage=None)
    llm = make_llm()
    if streamed:
        result = await llm.stream(_request(), lambda _: None)
    else:
        result = await llm.complete(_request())
    assert result.text == REPLY
    # Never free: both sides are estimated from the texts (bytes / 3, rounded up, + 4).
    assert result.usage.input_tokens >= len("You are Ada.Today is Monday.HiHello!How are you?") // 4
    assert result.usage.output_tokens >= len(REPLY) // 4
    assert result.usage.cache_read_input_tokens == 0


async def test_an_endpoint_refusing_max_tokens_gets_max_completion_tokens_from_then_on(
    api: FakeOpenAIAPI, make_llm: LLMFactory
) -> None:
    """OpenAI's reasoning models take only max_completion_tokens; local servers max_tokens."""
    api.reject_max_tokens = True
    llm = make_llm()
    assert (await llm.complete(_request())).text == REPLY
    assert (await llm.complete(_request())).text == REPLY
    first, retried, second = api.requests
    assert first.body["max_tokens"] == 321
    assert retried.body["max_completion_tokens"] == 321 and "max_tokens" not in retried.body
    assert second.body["max_completion_tokens"] == 321  # remembered: no second refusal


# ------------------------------------------------------------------------------ streaming


async def test_a_streamed_answer_arrives_in_pieces_that_join_to_the_text(
    api: FakeOpenAIAPI, make_llm: LLMFactory
) -> None:
    api.reply_next(REPLY, usage={"prompt_tokens": 900, "completion_tokens": 12}, cached_tokens=512)
    pieces: list[str] = []
    result = await make_llm().stream(_request(), pieces.append)

    assert pieces == tokens(REPLY) and len(pieces) > 5
    assert "".join(pieces) == result.text == REPLY
    assert result.usage == Usage(input_tokens=388, output_tokens=12, cache_read_input_tokens=512)
    assert result.stop_reason == "end_turn"
    body = api.last_request.body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


async def test_pieces_reach_the_sink_while_the_answer_is_still_being_written(
    api: FakeOpenAIAPI, make_llm: LLMFactory
) -> None:
    pause = api.pause_after_tokens(3)
    pieces: list[str] = []
    three = asyncio.Event()

    def sink(piece: str) -> None:
        pieces.append(piece)
        if len(pieces) == 3:
            three.set()

    call = asyncio.create_task(make_llm().stream(_request(), sink))
    await three.wait()  # while the fake holds the rest back
    assert "".join(pieces) == "".join(tokens(REPLY)[:3])
    assert not call.done()
    pause.release()
    assert (await call).text == REPLY


@pytest.mark.parametrize("kind", ["error", "disconnect", "truncate"])
async def test_a_stream_broken_midway_is_unavailable_never_a_partial_answer(
    api: FakeOpenAIAPI, make_llm: LLMFactory, kind: Any
) -> None:
    api.fail_midstream_next(after_tokens=3, kind=kind, message=f"overloaded; key was {KEY}")
    pieces: list[str] = []
    err = await _fails(make_llm().stream(_request(), pieces.append), ModelUnavailable)
    assert not isinstance(err, RateLimited)
    assert "".join(pieces) == "".join(tokens(REPLY)[:3])  # shown, but no result came back
    assert api.call_count == 1  # a started stream is never retried


async def test_a_cancelled_stream_closes_its_request_and_the_next_call_works(
    api: FakeOpenAIAPI, make_llm: LLMFactory
) -> None:
    """The stop button or a cut-off cancels the call: the endpoint must see the client go."""
    llm = make_llm()
    pause = api.pause_after_tokens(2)
    call = asyncio.create_task(llm.stream(_request(), lambda _: None))
    await pause.reached.wait()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    abandoned = api.last_request
    pause.release()  # the fake finds its client gone
    await api.abandoned.wait()
    assert abandoned.abandoned_at
    pieces: list[str] = []
    result = await llm.stream(_request(), pieces.append)
    assert "".join(pieces) == result.text == REPLY


# ------------------------------------------------------------------------------ tools


async def test_a_tool_call_round_trip_is_accepted_by_the_endpoint(
    api: FakeOpenAIAPI, make_llm: LLMFactory
) -> None:
    [call_id] = api.tool_calls_next(("weather", {"city": "Oslo"}), text="Let me look.")
    llm = make_llm()
    first = await llm.complete(_request(tools=(WEATHER,)))

    assert first.stop_reason == "tool_use"
    assert first.tool_uses == (ToolUse(call_id, "weather", {"city": "Oslo"}),)
    assert first.content[0] == TextBlock("Let me look.")
    sent = api.last_request.body
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "weather",
                "description": "The weather in a city.",
                "parameters": dict(WEATHER.input_schema),
            },
        }
    ]
    assert "tool_choice" not in sent  # "auto" is the API's default

    # The tool loop's next request: the calls, then their results; the fake checks that each
    # tool message answers a call right before it, as the real API does.
    answered = _request(
        tools=(WEATHER,),
        messages=(
            *_request().messages,
            ChatMessage("assistant", first.content),
            ChatMessage("user", (ToolResult(call_id, "Sunny, 21 °C", cache=True),)),
        ),
    )
    api.reply_next("It is sunny in Oslo.")
    second = await llm.complete(answered)
    assert second.text == "It is sunny in Oslo." and second.tool_uses == ()
    messages = api.last_request.body["messages"]
    assert messages[-2] == {
        "role": "assistant",
        "content": "Let me look.",
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
            }
        ],
    }
    assert messages[-1] == {"role": "tool", "tool_call_id": call_id, "content": "Sunny, 21 °C"}


async def test_streamed_tool_calls_are_assembled_from_their_pieces(
    api: FakeOpenAIAPI, make_llm: LLMFactory
) -> None:
    ids = api.tool_calls_next(("weather", {"city": "Oslo"}), ("weather", {"city": "Bergen"}))
    shown: list[str] = []
    result = await make_llm().stream(_request(tools=(WEATHER,)), shown.append)
    assert shown == []  # arguments are never shown as text
    assert result.tool_uses == (
        ToolUse(ids[0], "weather", {"city": "Oslo"}),
        ToolUse(ids[1], "weather", {"city": "Bergen"}),
    )
    assert result.stop_reason == "tool_use"


@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])
async def test_broken_arguments_from_a_small_model_become_bad_arguments_not_a_crash(
    api: FakeOpenAIAPI, make_llm: LLMFactory, streamed: bool
) -> None:
    [call_id] = api.tool_calls_next(("weather", '{"city": "Oslo'))
    llm = make_llm()
    request = _request(tools=(WEATHER,))
    result = await llm.stream(request, lambda _: None) if streamed else await llm.complete(request)
    # The tool loop refuses this as invalid arguments, an error result the model can fix.
    assert result.tool_uses == (
        ToolUse(call_id, "weather", {"_unreadable_arguments": '{"city": "Oslo'}),
    )


async def test_an_error_result_and_a_required_choice_are_sent_as_the_api_knows_them(
    api: FakeOpenAIAPI, make_llm: LLMFactory
) -> None:
    request = _request(
        tools=(WEATHER,),
        tool_choice="any",
        messages=(
            ChatMessage.of("user", "Weather?"),
            ChatMessage("assistant", (ToolUse("call_1", "weather", {}),)),
            ChatMessage("user", (ToolResult("call_1", "city: required", is_error=True),)),
        ),
    )
    await make_llm().complete(request)
    body = api.last_request.body
    assert body["tool_choice"] == "required"
    assert body["messages"][2]["content"] is None  # calls without text
    assert body["messages"][3] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "Error: city: required",
    }
    await make_llm().complete(_request(tools=(WEATHER,), tool_choice="none"))
    assert api.last_request.body["tool_choice"] == "none"


# ------------------------------------------------------------------------------ images


def _png(color: str) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 48), color).save(out, "PNG")
    return out.getvalue()


async def test_an_image_is_sent_as_a_data_url_with_the_same_bytes(
    api: FakeOpenAIAPI, make_llm: LLMFactory
) -> None:
    red, blue = _png("red"), _png("blue")
    turn = ChatMessage(
        "user",
        (ImageBlock("image/png", red, cache=True), ImageBlock("image/png", blue), TextBlock("?")),
    )
    await make_llm().complete(_request(messages=(turn,)))
    assert api.last_request.images == [red, blue]
    parts = api.last_request.body["messages"][-1]["content"]
    assert [p["type"] for p in parts] == ["image_url", "image_url", "text"]
    assert parts[0]["image_url"]["url"].startswith("data:image/png;base64,iVBOR")


async def test_an_image_the_endpoint_cannot_read_is_request_rejected(
    api: FakeOpenAIAPI, make_llm: LLMFactory
) -> None:
    turn = ChatMessage("user", (ImageBlock("image/jpeg", _png("red")), TextBlock("?")))
    err = await _fails(make_llm().complete(_request(messages=(turn,))), RequestRejected)
    assert err.status == 400 and "unsupported image" in str(err)


# ------------------------------------------------------------------------------ errors


async def test_429_with_retry_after_is_rate_limited_with_that_delay(
    api: FakeOpenAIAPI, make_llm: LLMFactory
) -> None:
    api.fail_next(status=429, retry_after=7, message="Rate limit reached for requests")
    err = await _fails(make_llm().complete(_request()), RateLimited)
    assert isinstance(err, RateLimited) and err.retry_after == 7.0 and err.status == 429
    api.fail_next(status=429)
    err = await _fails(make_llm().stream(_request(), lambda _: None), RateLimited)
    assert isinstance(err, RateLimited) and err.retry_after is None


async def test_a_429_is_retried_by_the_sdk_when_retries_are_allowed(
    api: FakeOpenAIAPI, make_llm: LLMFactory
) -> None:
    api.fail_next(status=429, retry_after=0)
    assert (await make_llm(max_retries=1).complete(_request())).text == REPLY
    assert api.call_count == 2


@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])
async def test_a_400_rejects_this_request_only(
    api: FakeOpenAIAPI, make_llm: LLMFactory, streamed: bool
) -> None:
    api.fail_next(status=400, message="This model's maximum context length is 8192 tokens.")
    llm = make_llm()
    call = llm.stream(_request(), lambda _: None) if streamed else llm.complete(_request())
    err = await _fails(call, RequestRejected)
    assert err.status == 400 and "maximum context length" in str(err)


async def test_an_unknown_model_rejects_every_request_not_just_this_one(
    api: FakeOpenAIAPI, make_llm: LLMFactory
) -> None:
    api.fail_next(status=404, message='model "llama9" not found, try pulling it first')
    err = await _fails(make_llm().complete(_request()), ModelRejected)
    assert not isinstance(err, RequestRejected) and "llama9" in str(err)


async def test_a_wrong_key_is_the_authentication_rejection_and_is_never_echoed(
    api: FakeOpenAIAPI, make_llm: LLMFactory
) -> None:
    api.fail_next(status=401, message=f"Incorrect API key provided: {KEY}.")
    err = await _fails(make_llm().complete(_request()), ModelRejected)
    assert not isinstance(err, RequestRejected) and err.status == 401
    assert "llm.api_key_env" in str(err) and "[redacted]" in str(err)
    api.api_key = "sk-another-key-entirely-123456"
    err = await _fails(make_llm().complete(_request()), ModelRejected)
    assert err.status == 401


async def test_server_errors_and_a_dead_endpoint_are_unavailable(
    api: FakeOpenAIAPI, make_llm: LLMFactory
) -> None:
    api.fail_next(status=500, message=f"boom {KEY}")
    err = await _fails(make_llm().complete(_request()), ModelUnavailable)
    assert err.status == 500 and "[redacted]" in str(err)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens there once closed
    dead = make_llm(base_url=f"http://127.0.0.1:{port}/v1")
    err = await _fails(dead.complete(_request()), ModelUnavailable)
    assert f"127.0.0.1:{port}" in str(err)
