"""AnthropicLLM.stream driven through the real ``anthropic`` SDK against the fake Messages API,
which streams like the real API (server-sent events) when the body asks for it."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from bot.core.errors import ModelError, ModelRejected, ModelUnavailable, RequestRejected
from bot.core.llm import ChatMessage, ModelRequest, ModelResult, TextBlock, ToolSpec, ToolUse, Usage
from bot.llm.anthropic import AnthropicLLM
from tests.fakes.messages_api import FakeMessagesAPI, tokens
from tests.llm.conftest import KEY, LLMFactory

MODEL = "claude-test-model"
REPLY = "Hello Ada, it is good to hear from you again today."


def _request(**overrides: Any) -> ModelRequest:
    fields: dict[str, Any] = {
        "model": MODEL,
        "system": (TextBlock("You are Ada.", cache=True),),
        "messages": (ChatMessage.of("user", "How are you?"),),
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
    leaked = [r.name for r in records if KEY in formatter.format(r)]  # message + traceback
    assert not leaked, f"API key logged by {leaked}"


@pytest.fixture
async def api() -> AsyncIterator[FakeMessagesAPI]:
    async with FakeMessagesAPI(reply_text=REPLY) as fake:
        yield fake


async def _stream_fails(
    llm: AnthropicLLM, kind: type[ModelError], request: ModelRequest | None = None
) -> tuple[ModelError, list[str]]:
    """Stream, expect ``kind`` (no result), check the error leaks no secret; the pieces seen."""
    pieces: list[str] = []
    with pytest.raises(kind) as info:
        await llm.stream(request or _request(), pieces.append)
    err = info.value
    assert KEY not in str(err) and KEY not in repr(err)
    assert err.__cause__ is not None or "message_stop" in str(err)  # the one error of ours
    return err, pieces


# ------------------------------------------------------------------------------ success


async def test_a_streamed_reply_arrives_in_pieces_that_join_to_the_text(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    api.reply_next(
        usage={"input_tokens": 42, "output_tokens": 13, "cache_read_input_tokens": 7},
        stop_reason="max_tokens",
    )
    pieces: list[str] = []
    result = await make_llm().stream(_request(), pieces.append)

    assert len(pieces) == len(tokens(REPLY)) > 5
    assert "".join(pieces) == result.text == REPLY
    assert result.usage == Usage(42, 13, 0, 7)
    assert result.stop_reason == "max_tokens"
    assert result.model == MODEL and result.content == ()
    seen = api.last_request
    assert seen.streamed and len(seen.token_times) == len(pieces)


async def test_a_stream_sends_the_same_request_as_complete(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    llm = make_llm()
    request = _request(tools=(ToolSpec("weather", "Weather in a city.", {"type": "object"}),))
    plain = await llm.complete(request)
    streamed = await llm.stream(request, lambda _: None)

    first, second = api.requests
    assert not first.streamed and second.streamed
    assert {k: v for k, v in second.body.items() if k != "stream"} == first.body
    assert streamed == plain  # the same answer, whichever way it came


async def test_pieces_reach_the_sink_while_the_answer_is_still_being_written(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    pause = api.pause_after_tokens(3)
    pieces: list[str] = []
    three = asyncio.Event()

    def sink(piece: str) -> None:
        pieces.append(piece)
        if len(pieces) == 3:
            three.set()

    call = asyncio.create_task(make_llm().stream(_request(), sink))
    await pause.reached.wait()
    await asyncio.wait_for(three.wait(), 5)
    assert not call.done()  # the person sees the start of the reply before its end exists
    assert "".join(pieces) == "".join(tokens(REPLY)[:3])
    pause.release()
    result = await call
    assert "".join(pieces) == result.text == REPLY


async def test_a_tool_use_answer_streams_its_text_and_returns_its_calls(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    arguments = {"city": 'Oslo, "the capital"', "days": 3, "units": ["metric"]}
    [call_id] = api.tool_use_next("weather", arguments, text="Let me look that up.")
    request = _request(tools=(ToolSpec("weather", "Weather in a city.", {"type": "object"}),))
    pieces: list[str] = []
    result = await make_llm().stream(request, pieces.append)

    assert "".join(pieces) == result.text == "Let me look that up."
    assert len(pieces) > 1
    assert result.stop_reason == "tool_use"
    assert result.tool_uses == (ToolUse(call_id, "weather", arguments),)
    assert result.content == (TextBlock("Let me look that up."), result.tool_uses[0])


async def test_a_streamed_thinking_block_is_neither_shown_nor_sent_back(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    api.reply_next(
        content=[
            {"type": "thinking", "thinking": "the user wants Rome", "signature": "sig"},
            {"type": "text", "text": "Checking Rome."},
            {"type": "tool_use", "id": "t9", "name": "weather", "input": {"city": "Rome"}},
        ],
        stop_reason="tool_use",
    )
    request = _request(tools=(ToolSpec("weather", "Weather in a city.", {"type": "object"}),))
    pieces: list[str] = []
    result = await make_llm().stream(request, pieces.append)
    assert "".join(pieces) == "Checking Rome."  # the model's thinking is not the reply
    assert result.content == (
        TextBlock("Checking Rome."),
        ToolUse("t9", "weather", {"city": "Rome"}),
    )


async def test_a_refusal_streams_nothing_and_comes_back_empty(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    api.reply_next(content=[], stop_reason="refusal")
    pieces: list[str] = []
    result = await make_llm().stream(_request(), pieces.append)
    assert pieces == [] and (result.text, result.stop_reason) == ("", "refusal")


async def test_tokens_are_spaced_by_the_fakes_token_interval(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    api.token_interval = 0.02
    await make_llm().stream(_request(), lambda _: None)
    times = api.last_request.token_times
    assert len(times) == len(tokens(REPLY))
    assert times[0] >= api.last_request.received_at
    assert all(b - a >= 0.015 for a, b in itertools.pairwise(times))


# ------------------------------------------------------------------- failures mid-stream


async def test_an_overloaded_error_mid_stream_is_unavailable_and_not_retried(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    api.fail_midstream_next(after_tokens=2, kind="overloaded_error")
    err, pieces = await _stream_fails(make_llm(max_retries=2), ModelUnavailable)

    assert not isinstance(err, ModelRejected)  # the SDK saw it with the 200 status
    assert "overloaded_error" in str(err)
    assert pieces == tokens(REPLY)[:2]
    assert api.call_count == 1  # a started stream is the caller's to retry, not the SDK's


async def test_a_connection_dropped_mid_stream_is_unavailable(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    api.fail_midstream_next(after_tokens=4, kind="disconnect")
    err, pieces = await _stream_fails(make_llm(max_retries=2), ModelUnavailable)

    assert "cut off" in str(err)
    assert pieces == tokens(REPLY)[:4]
    assert api.call_count == 1


async def test_a_stream_that_stalls_past_the_timeout_is_unavailable(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    api.pause_after_tokens(1)  # never released: the fake releases it when it closes
    err, pieces = await _stream_fails(make_llm(timeout_seconds=0.2), ModelUnavailable)

    assert "timeout" in str(err)
    assert pieces == tokens(REPLY)[:1]


async def test_a_body_that_ends_before_message_stop_is_unavailable_not_a_partial_answer(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    api.fail_midstream_next(after_tokens=3, kind="truncate")
    err, pieces = await _stream_fails(make_llm(), ModelUnavailable)
    assert "message_stop" in str(err)
    assert pieces == tokens(REPLY)[:3]


async def test_a_failure_before_any_token_is_unavailable_too(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    api.fail_midstream_next(after_tokens=0, kind="disconnect")
    _, pieces = await _stream_fails(make_llm(), ModelUnavailable)
    assert pieces == []


async def test_a_mid_stream_error_echoing_the_key_is_redacted(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    api.fail_midstream_next(after_tokens=1, message=f"bad credential {KEY}")
    err, _ = await _stream_fails(make_llm(), ModelUnavailable)
    assert "[redacted]" in str(err)


async def test_a_failing_sink_is_the_callers_error_not_a_model_outage(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    class ConsumerBug(Exception):
        pass

    def sink(piece: str) -> None:
        raise ConsumerBug(piece)

    with pytest.raises(ConsumerBug):
        await make_llm().stream(_request(), sink)


async def test_a_cancelled_stream_closes_its_connection_and_the_next_call_works(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    """A stop button cancels the model call: the stream must end there, not linger."""
    llm = make_llm()
    pause = api.pause_after_tokens(2)
    call = asyncio.create_task(llm.stream(_request(), lambda _: None))
    await pause.reached.wait()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    pause.release()  # the fake finds the client gone and stops sending
    pieces: list[str] = []
    result = await llm.stream(_request(), pieces.append)
    assert "".join(pieces) == result.text == REPLY


# ---------------------------------------------------------------- failures before the stream


async def test_a_429_before_the_stream_is_retried_by_the_sdk(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    api.fail_next(status=429, retry_after_ms=5)
    pieces: list[str] = []
    result = await make_llm(max_retries=1).stream(_request(), pieces.append)

    assert api.call_count == 2 and all(r.streamed for r in api.requests)
    assert "".join(pieces) == result.text == REPLY  # nothing of the failed try was streamed


async def test_a_400_before_the_stream_is_request_rejected(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    api.fail_next(status=400, message="prompt is too long")
    err, pieces = await _stream_fails(make_llm(), RequestRejected)
    assert "prompt is too long" in str(err) and err.status == 400
    assert pieces == []


async def test_a_5xx_before_the_stream_echoing_the_key_is_unavailable_and_redacted(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    api.fail_next(status=500, message=f"upstream said {KEY}")
    err, _ = await _stream_fails(make_llm(max_retries=0), ModelUnavailable)
    assert err.status == 500 and "[redacted]" in str(err)


async def test_sampling_parameters_are_not_sent_on_a_stream_either(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    result: ModelResult = await make_llm().stream(_request(temperature=0.7), lambda _: None)
    assert result.text == REPLY and "temperature" not in api.last_request.body
