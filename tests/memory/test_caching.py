"""Prompt caching against a fake Messages API driven by the real anthropic SDK."""

from __future__ import annotations

from typing import Any

from bot.core.clock import ManualClock
from bot.core.events import ConversationKey
from bot.llm.anthropic import AnthropicLLM
from bot.store.base import BaseStore
from tests.fakes.messages_api import FakeMessagesAPI, RecordedRequest
from tests.harness import eventually, harness

DM = ConversationKey("telegram", "700")


def _prefix(request: RecordedRequest) -> list[tuple[str, str]]:
    """The content (without cache markers) up to and including the last breakpoint."""
    blocks: list[tuple[str, str, bool]] = [
        ("system", b["text"], "cache_control" in b) for b in request.system_blocks
    ]
    for message in request.messages:
        blocks += [(message["role"], b["text"], "cache_control" in b) for b in message["content"]]
    last = max(i for i, (_, _, cached) in enumerate(blocks) if cached)
    return [(role, text) for role, text, _ in blocks[: last + 1]]


def _content(request: RecordedRequest) -> list[tuple[str, str]]:
    out = [("system", b["text"]) for b in request.system_blocks]
    for message in request.messages:
        out += [(message["role"], b["text"]) for b in message["content"]]
    return out


async def test_breakpoints_are_sent_and_the_prefix_is_stable(
    store: BaseStore, clock: ManualClock
) -> None:
    async with FakeMessagesAPI(reply_text="A calm answer.") as api:
        api.usage = {
            "input_tokens": 50,
            "output_tokens": 5,
            "cache_creation_input_tokens": 40,
            "cache_read_input_tokens": 0,
        }
        llm = AnthropicLLM(api_key="sk-test-cache", base_url=api.base_url, max_retries=0)
        async with harness(store, clock, llm) as h:
            for n, text in enumerate(("first question", "second question", "third question")):
                await h.say(DM, text)
                await h.advance(2, step=1.0)
                # The model call is HTTP to the fake, off the manual clock: the next question
                # must come after this reply, or the two merge into one turn.
                await eventually(lambda n=n: len(h.outlet.texts()) == n + 1, f"reply {n + 1}")
            await llm.aclose()
        assert api.call_count == 3
        first, second, third = api.requests
        assert first.cache_breakpoints == [("system", 0)]
        assert ("system", 0) in second.cache_breakpoints
        assert second.cache_breakpoints[-1][0] == "messages"  # the conversation prefix
        # Each turn's content begins with the previous turn's cached prefix, byte for byte.
        for before, after in ((first, second), (second, third)):
            prefix: list[Any] = _prefix(before)
            assert _content(after)[: len(prefix)] == prefix
        # Usage, including the cache fields, is recorded with each reply.
        session = await store.current_session(DM)
        assert session is not None
        db_rows = await store.messages(session.key)
        assert [m.role for m in db_rows].count("assistant") == 3
