"""Review of issue 13: replies that look like text but show nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.config import load_settings
from bot.core.clock import ManualClock
from bot.core.errors import ConfigError
from bot.core.events import ConversationKey, SessionKey
from bot.llm.anthropic import AnthropicLLM
from bot.store.base import BaseStore
from tests.fakes.messages_api import FakeMessagesAPI
from tests.harness import harness

C1 = ConversationKey("telegram", "100")


@pytest.mark.parametrize(
    "invisible", ["\u200b", "\u200b\u200c\u200d\u2060\ufeff", " \u200b\n\u2060 "]
)
async def test_an_invisible_reply_gets_the_refusal_line(
    store: BaseStore, clock: ManualClock, invisible: str
) -> None:
    async with FakeMessagesAPI() as api:
        llm = AnthropicLLM(api_key="sk-test", base_url=api.base_url, max_retries=0)
        api.reply_next(invisible)
        async with harness(store, clock, llm) as h:
            await h.say(C1, "hello?")
            await h.advance(2)
        await llm.aclose()
    refusal = h.pipeline.profile("default").refusal_message
    # The person would see an empty bubble (or the platform refuses the send).
    assert h.outlet.texts() == [refusal]
    stored = await store.messages(SessionKey(C1, 1))
    assert [m.text for m in stored if m.role == "assistant"] == [refusal]


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ("llm", "trouble_notice"),
        ("llm", "rejected_notice"),
        ("llm", "refusal_message"),
        ("limits", "limit_message"),
        ("access", "denied_reply"),
    ],
)
@pytest.mark.parametrize("blank", ["   ", "\u200b", "\n\u2060"])
def test_a_blank_or_invisible_bot_message_is_a_config_error(
    tmp_path: Path, section: str, key: str, blank: str
) -> None:
    # Accepted before: the bot would send an empty-looking message (or the platform refuses
    # it: "message text is empty"); "" still means "say nothing" where that is allowed.
    path = tmp_path / "personabot.toml"
    path.write_text(f"[{section}]\n{key} = {json.dumps(blank)}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=f"{section}.{key}"):
        load_settings(path)
