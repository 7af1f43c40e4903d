"""The Anthropic client under test, built against each module's fake Messages API (``api``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from bot.llm.anthropic import AnthropicLLM
from tests.fakes.messages_api import FakeMessagesAPI

#: The API key of every client made here: no error text or log line may ever show it.
KEY = "sk-test-secret-4f9c2a7e1b3d5f60"
LLMFactory = Callable[..., AnthropicLLM]


@pytest.fixture
async def make_llm(api: FakeMessagesAPI) -> AsyncIterator[LLMFactory]:
    """Clients on the module's fake (closed after the test); keyword arguments override."""
    made: list[AnthropicLLM] = []

    def factory(**kwargs: Any) -> AnthropicLLM:
        kwargs.setdefault("base_url", api.base_url)
        kwargs.setdefault("timeout_seconds", 5.0)
        llm = AnthropicLLM(api_key=KEY, **kwargs)
        made.append(llm)
        return llm

    yield factory
    for llm in made:
        await llm.aclose()
