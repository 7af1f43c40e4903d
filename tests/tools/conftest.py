"""Fixtures of the tool tests: the fake Messages API and the real Anthropic client on it
(the tool loop's model; no retries, so a scripted failure is the failure the loop sees)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bot.llm.anthropic import AnthropicLLM
from tests.fakes.messages_api import FakeMessagesAPI


@pytest.fixture
async def api() -> AsyncIterator[FakeMessagesAPI]:
    async with FakeMessagesAPI() as fake:
        yield fake


@pytest.fixture
async def llm(api: FakeMessagesAPI) -> AsyncIterator[AnthropicLLM]:
    client = AnthropicLLM(api_key="sk-test", base_url=api.base_url, max_retries=0)
    yield client
    await client.aclose()
