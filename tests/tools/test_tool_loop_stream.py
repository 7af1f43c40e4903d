"""The tool loop streamed: every model call streams through the real anthropic SDK against the
fake Messages API, its pieces tagged with the index of the call they belong to."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

import pytest

from bot.core.clock import ManualClock
from bot.core.errors import ModelUnavailable
from bot.core.events import ConversationKey, SessionKey
from bot.core.llm import ChatMessage, ModelRequest, ModelResult, TextBlock
from bot.llm.anthropic import AnthropicLLM
from bot.runtime.extensions import TurnContext
from bot.runtime.tools import Tool, ToolLoop, ToolPolicy, ToolRegistry
from tests.fakes.messages_api import FakeMessagesAPI

C1 = ConversationKey("telegram", "100")
REQUEST = ModelRequest(
    model="claude-test-model",
    system=(TextBlock("You are Ada."),),
    messages=(ChatMessage.of("user", "what's the weather in Oslo?"),),
)


class Weather:
    """A read-only tool and a side-effecting one, recording their calls."""

    def __init__(self) -> None:
        self.looked_up: list[str] = []
        self.saved: list[str] = []

    def registry(self) -> ToolRegistry:
        async def weather(city: str) -> dict[str, Any]:
            """The weather in a city now."""
            self.looked_up.append(city)
            return {"city": city, "sky": "sunny", "celsius": 21}

        async def save_note(text: str) -> None:
            """Save a note."""
            self.saved.append(text)

        return ToolRegistry(
            (Tool.from_function(weather), Tool.from_function(save_note, side_effects=True))
        )


def loop(llm: AnthropicLLM, clock: ManualClock, registry: ToolRegistry, **policy: Any) -> ToolLoop:
    charged: list[ModelResult] = []

    async def charge(result: ModelResult) -> None:
        charged.append(result)

    context = TurnContext(C1, SessionKey(C1, 1), "default", "p", (), clock.now())
    return ToolLoop(
        llm=llm,
        clock=clock,
        registry=registry,
        policy=ToolPolicy(**policy),
        context=context,
        charge=charge,
    )


async def test_each_step_streams_under_its_own_index_and_the_last_is_the_reply(
    api: FakeMessagesAPI, llm: AnthropicLLM, clock: ManualClock
) -> None:
    tools = Weather()
    api.tool_use_next("weather", {"city": "Oslo"}, text="Let me look that up.")
    api.reply_next("It's sunny in Oslo, 21 degrees.", usage={"output_tokens": 9})
    by_step: dict[int, list[str]] = defaultdict(list)
    order: list[int] = []

    def stream(step: int, piece: str) -> None:
        by_step[step].append(piece)
        order.append(step)

    done = await loop(llm, clock, tools.registry()).run(REQUEST, stream=stream)

    assert tools.looked_up == ["Oslo"]
    assert done.steps == 1 and done.calls == 1
    assert done.result.text == "It's sunny in Oslo, 21 degrees."
    assert {s: "".join(p) for s, p in by_step.items()} == {
        0: "Let me look that up.",
        1: done.result.text,
    }
    assert all(len(p) > 1 for p in by_step.values())  # really streamed, not one piece each
    assert order == sorted(order)  # a step's pieces all come before the next step's
    assert all(r.streamed for r in api.requests) and api.call_count == 2
    assert done.usage.output_tokens == 5 + 9


async def test_the_answer_forced_by_a_bound_streams_as_the_next_index(
    api: FakeMessagesAPI, llm: AnthropicLLM, clock: ManualClock
) -> None:
    tools = Weather()
    api.tool_use_next("weather", {"city": "Oslo"})  # a step of tool calls only: no text
    api.reply_next("Sunny, from what I have.")
    seen: list[tuple[int, str]] = []

    done = await loop(llm, clock, tools.registry(), max_steps=1).run(
        REQUEST, stream=lambda step, piece: seen.append((step, piece))
    )

    assert done.bound == "steps"
    assert api.last_request.body["tool_choice"] == {"type": "none"}
    assert {step for step, _ in seen} == {1}  # step 0 had no text to stream
    assert "".join(p for _, p in seen) == done.result.text == "Sunny, from what I have."


async def test_without_a_sink_every_call_is_a_plain_request(
    api: FakeMessagesAPI, llm: AnthropicLLM, clock: ManualClock
) -> None:
    tools = Weather()
    api.tool_use_next("weather", {"city": "Oslo"}, text="Let me look.")
    api.reply_next("Sunny.")
    done = await loop(llm, clock, tools.registry()).run(REQUEST)
    assert done.result.text == "Sunny." and tools.looked_up == ["Oslo"]
    assert [r.streamed for r in api.requests] == [False, False]
    assert all(r.token_times == [] for r in api.requests)


async def test_a_stream_breaking_in_a_later_step_fails_the_loop_and_keeps_no_effect(
    api: FakeMessagesAPI, llm: AnthropicLLM, clock: ManualClock
) -> None:
    tools = Weather()
    api.tool_use_next("save_note", {"text": "buy milk"}, text="Noting it now.")
    api.reply_next("Noted: buy milk, and a few more words to stream.")
    seen: list[tuple[int, str]] = []
    running = asyncio.create_task(
        loop(llm, clock, tools.registry()).run(
            REQUEST, stream=lambda step, piece: seen.append((step, piece))
        )
    )
    # Hold step 0 while scripting the break, so that it is step 1's stream that breaks.
    first = api.pause_after_tokens(1)
    await first.reached.wait()
    api.fail_midstream_next(after_tokens=2, kind="disconnect")
    first.release()
    with pytest.raises(ModelUnavailable):
        await running
    assert tools.saved == []  # the deferred effect is dropped with the failed loop
    assert "".join(p for s, p in seen if s == 0) == "Noting it now."
    assert [p for s, p in seen if s == 1] == ["Noted:", " buy"]  # shown, then failed
    assert api.call_count == 2
