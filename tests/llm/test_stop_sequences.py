"""Stop sequences (``ModelRequest.stop``) through every provider: the real SDKs against the fake
servers, which end a text answer where a real model would, and the offline model.

The scene: Ada answers, then the model goes on writing Bob's line (in the transcript's header
format) and Sasha's. Only Ada's part may come back (docs/architecture.md#prompt).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from bot.core.llm import BaseLLM, ChatMessage, ModelRequest, TextBlock
from bot.llm.anthropic import AnthropicLLM
from bot.llm.offline import OfflineLLM
from bot.llm.openai import OpenAICompatLLM
from tests.fakes.messages_api import FakeMessagesAPI
from tests.fakes.openai_api import FakeOpenAIAPI

KEY = "sk-stop-test-0b6e2d9c41a7f385"
ADA = "Sure, I will come along."
#: What the model would write without stop sequences: Ada's line, then Bob's and Sasha's.
WRITTEN = f'{ADA}\n"Bob" (character "bob"):\n  No you won\'t.\nSasha: stop it'
#: Six sequences, Bob's first: OpenAI takes the first four, which do not name Sasha.
STOP = ('\n"Bob" (', "\nBob:", "\n**Bob", '\n"Sasha" (', "\nSasha:", "\n**Sasha")


def _request(**overrides: Any) -> ModelRequest:
    fields: dict[str, Any] = {
        "model": "test-model",
        "system": (TextBlock("You are Ada."),),
        "messages": (ChatMessage.of("user", "Coming to the market?"),),
        "stop": STOP,
    }
    fields.update(overrides)
    return ModelRequest(**fields)


async def _answer(
    llm: BaseLLM, streamed: bool, stop: tuple[str, ...] = STOP
) -> tuple[str, str | None]:
    """The answer's text and stop reason; streamed, also checks that the pieces join."""
    if not streamed:
        result = await llm.complete(_request(stop=stop))
        return result.text, result.stop_reason
    pieces: list[str] = []
    result = await llm.stream(_request(stop=stop), pieces.append)
    assert "".join(pieces) == result.text
    return result.text, result.stop_reason


# ----------------------------------------------------------------------------- Anthropic


@pytest.fixture
async def claude() -> AsyncIterator[tuple[FakeMessagesAPI, AnthropicLLM]]:
    async with FakeMessagesAPI(reply_text=WRITTEN) as api:
        llm = AnthropicLLM(api_key=KEY, base_url=api.base_url, timeout_seconds=5.0)
        yield api, llm
        await llm.aclose()


@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])
async def test_claude_gets_every_stop_sequence_and_ends_before_the_next_speaker(
    claude: tuple[FakeMessagesAPI, AnthropicLLM], streamed: bool
) -> None:
    api, llm = claude
    assert await _answer(llm, streamed) == (ADA, "stop_sequence")
    assert api.last_request.streamed is streamed
    assert api.last_request.body["stop_sequences"] == list(STOP)


async def test_claude_without_stop_sequences_sends_none_and_answers_whole(
    claude: tuple[FakeMessagesAPI, AnthropicLLM],
) -> None:
    api, llm = claude
    result = await llm.complete(_request(stop=()))
    assert "stop_sequences" not in api.last_request.body
    assert result.text == WRITTEN and result.stop_reason == "end_turn"


# ------------------------------------------------------------------------ OpenAI-compatible


@pytest.fixture
async def compat() -> AsyncIterator[tuple[FakeOpenAIAPI, OpenAICompatLLM]]:
    async with FakeOpenAIAPI(reply_text=WRITTEN, api_key=KEY) as api:
        llm = OpenAICompatLLM(base_url=api.api_url, api_key=KEY, timeout_seconds=5.0, max_retries=0)
        yield api, llm
        await llm.aclose()


@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])
async def test_an_openai_endpoint_gets_the_first_four_stop_sequences(
    compat: tuple[FakeOpenAIAPI, OpenAICompatLLM], streamed: bool
) -> None:
    """The API refuses a fifth (the fake too: all six would be a RequestRejected here)."""
    api, llm = compat
    text, _ = await _answer(llm, streamed)  # finish_reason "stop" either way
    assert text == ADA
    assert api.last_request.streamed is streamed
    assert api.last_request.body["stop"] == list(STOP[:4])


async def test_what_the_first_four_leave_out_comes_back_for_the_caller_to_trim(
    compat: tuple[FakeOpenAIAPI, OpenAICompatLLM],
) -> None:
    api, llm = compat
    api.reply_text = f"{ADA}\nSasha: stop it"
    result = await llm.complete(_request())
    assert result.text == api.reply_text  # "\nSasha:" was the fifth: memory/voices.py cuts it


async def test_an_endpoint_refusing_stop_gets_the_request_without_it_from_then_on(
    compat: tuple[FakeOpenAIAPI, OpenAICompatLLM],
) -> None:
    """OpenAI's reasoning models take no stop sequences: the turn still gets its answer."""
    api, llm = compat
    api.reject_stop = True
    assert (await llm.complete(_request())).text == WRITTEN
    assert (await llm.complete(_request())).text == WRITTEN
    refused, retried, second = api.requests
    assert refused.body["stop"] == list(STOP[:4])
    assert "stop" not in retried.body and "stop" not in second.body


async def test_an_openai_request_without_stop_sequences_sends_no_stop(
    compat: tuple[FakeOpenAIAPI, OpenAICompatLLM],
) -> None:
    api, llm = compat
    assert (await llm.complete(_request(stop=()))).text == WRITTEN
    assert "stop" not in api.last_request.body


# ------------------------------------------------------------------------------- offline


@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])
async def test_the_offline_model_ends_at_the_earliest_stop_sequence(streamed: bool) -> None:
    whole = (await OfflineLLM().complete(_request(stop=()))).text
    assert "\n(prompt layers" in whole  # its answer's second line

    # The later sequence is listed first: the earliest in the text wins, not the first listed.
    text, reason = await _answer(OfflineLLM(), streamed, stop=("layers", "\n(prompt"))
    assert text == whole[: whole.index("\n(prompt")]
    assert text.startswith("[offline model] You said: Coming to the market?")
    assert reason == "stop_sequence"
