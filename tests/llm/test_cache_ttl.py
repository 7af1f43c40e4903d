"""Issue 41 item 5: 1-hour prompt-cache entries (docs/architecture.md#prompt).

The request carries each breakpoint's TTL to Claude (``"ttl": "1h"``), every breakpoint before
the last 1-hour one is sent as 1-hour too (the API refuses a 1-hour breakpoint after a 5-minute
one: the fake answers 400 as it does), and the writes the answer reports per TTL are priced
each at its own price: 2x of input for an hour, 1.25x for 5 minutes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bot.core.llm import (
    ChatMessage,
    ModelRequest,
    Price,
    TextBlock,
    ToolResult,
    ToolSpec,
    ToolUse,
    Usage,
)
from bot.core.shares import split
from tests.fakes.messages_api import FakeMessagesAPI
from tests.llm.conftest import LLMFactory

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}
HOUR = {"type": "ephemeral", "ttl": "1h"}
FIVE = {"type": "ephemeral"}


@pytest.fixture
async def api() -> AsyncIterator[FakeMessagesAPI]:
    async with FakeMessagesAPI() as fake:
        yield fake


def _prompt(ttl: str = "1h") -> ModelRequest:
    """A prompt as memory/assemble.py builds it for an appending turn: pin + memory and the
    summary cached, the window's last message cached, the new turn after it."""
    return ModelRequest(
        model="claude-test-model",
        system=(
            TextBlock("You are Ada."),
            TextBlock("<user_memory>...</user_memory>", cache=True, ttl="1h"),
            TextBlock("<conversation_summary>...</conversation_summary>", cache=True, ttl="1h"),
        ),
        messages=(
            ChatMessage.of("user", "earlier"),
            ChatMessage("assistant", (TextBlock("reply", cache=True, ttl="1h"),)),
            ChatMessage.of("user", "How are you?"),
        ),
        tools=(ToolSpec("weather", "Weather in a city.", SCHEMA),),
    )


async def test_one_hour_breakpoints_are_sent_with_their_ttl_and_the_tools_follow_them(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    await make_llm().complete(_prompt())
    seen = api.last_request
    assert [b.get("cache_control") for b in seen.system_blocks] == [None, HOUR, HOUR]
    assert seen.messages[1]["content"][0]["cache_control"] == HOUR
    # The tools come first in the cache's order: their breakpoint must live an hour too.
    assert seen.tools[0]["cache_control"] == HOUR
    assert seen.cache_ttls == ["1h", "1h", "1h", "1h"]


async def test_a_five_minute_breakpoint_before_a_one_hour_one_is_sent_as_one_hour(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    """A tool loop's 5-minute step breakpoint, then a (hypothetical) 1-hour one after it: the
    API would refuse the request (the fake answers 400 like it), so the earlier one is lifted."""
    use = ToolUse("call-1", "weather", {"city": "Oslo"})
    request = ModelRequest(
        model="claude-test-model",
        system=(TextBlock("You are Ada.", cache=True),),
        messages=(
            ChatMessage.of("user", "Weather?"),
            ChatMessage("assistant", (use,)),
            ChatMessage("user", (ToolResult("call-1", "sunny", cache=True),)),
            ChatMessage("assistant", (TextBlock("It is sunny.", cache=True, ttl="1h"),)),
            ChatMessage.of("user", "Thanks"),
        ),
        tools=(ToolSpec("weather", "Weather in a city.", SCHEMA),),
    )
    result = await make_llm().complete(request)
    assert result.text  # answered, not refused
    assert api.last_request.cache_ttls == ["1h", "1h", "1h", "1h"]


async def test_five_minute_breakpoints_are_sent_as_they_always_were(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    request = _prompt()
    request = ModelRequest(
        model=request.model,
        system=tuple(TextBlock(b.text, cache=b.cache) for b in request.system),
        messages=(ChatMessage.of("user", "Hi"),),
        tools=request.tools,
    )
    await make_llm().complete(request)
    seen = api.last_request
    assert [b.get("cache_control") for b in seen.system_blocks] == [None, FIVE, FIVE]
    assert seen.tools[0]["cache_control"] == FIVE
    assert seen.cache_ttls == ["5m", "5m", "5m"]


async def test_the_writes_per_ttl_are_read_from_the_answer_and_priced_each_at_its_price(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    api.reply_next(
        "Fine.",
        usage={
            "input_tokens": 10,
            "output_tokens": 5,
            "cache_creation_input_tokens": 1000,
            "cache_read_input_tokens": 4000,
            "cache_creation": {"ephemeral_5m_input_tokens": 200, "ephemeral_1h_input_tokens": 800},
        },
    )
    result = await make_llm().complete(_prompt())
    assert result.usage == Usage(10, 5, 1000, 4000, 800)
    price = Price(input=3.0, output=15.0)  # Anthropic's rules: 1.25x, 2x, 0.1x of input
    expected = (10 * 3.0 + 5 * 15.0 + 200 * 3.75 + 800 * 6.0 + 4000 * 0.3) / 1_000_000
    assert price.cost(result.usage) == pytest.approx(expected)
    # A configured 1-hour price wins over the default.
    configured = Price(input=3.0, output=15.0, cache_write_1h=7.0)
    assert configured.cost(result.usage) == pytest.approx(expected + 800 * 1.0 / 1_000_000)


async def test_an_answer_without_the_split_counts_every_write_as_five_minutes(
    api: FakeMessagesAPI, make_llm: LLMFactory
) -> None:
    api.reply_next("Fine.", usage={"input_tokens": 0, "cache_creation_input_tokens": 1000})
    result = await make_llm().complete(_prompt())
    assert result.usage.cache_creation_1h_input_tokens == 0
    assert Price(input=1.0, output=0.0).cost(result.usage) == pytest.approx(1250 / 1_000_000)


def test_shares_of_a_call_keep_its_one_hour_writes_apart_and_add_up() -> None:
    usage = Usage(101, 7, 1003, 4001, 997)
    shares = split(usage, {"a": 2, "b": 1, "c": 1})
    assert sum((u for _, u in shares), Usage()) == usage
    assert all(u.cache_creation_1h_input_tokens <= u.cache_creation_input_tokens for _, u in shares)
    price = Price(input=1.0, output=2.0)
    assert sum(price.cost(u) for _, u in shares) == pytest.approx(price.cost(usage))
