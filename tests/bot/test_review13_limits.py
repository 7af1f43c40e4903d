"""Review of issue 13: absurd limit values."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import MAX_TOKEN_LIMIT, MAX_TURN_LIMIT, load_settings
from bot.core.clock import ManualClock
from bot.core.errors import ConfigError
from bot.core.events import ConversationKey
from bot.llm.offline import OfflineLLM
from bot.runtime.limits import LimitPolicy
from bot.store.base import BaseStore
from memory.assemble import Budget
from memory.service import MemoryPolicy
from tests.harness import harness

C1 = ConversationKey("telegram", "100")
KEYS = [
    "limits.user_turns_per_hour",
    "limits.user_turns_per_day",
    "limits.bot_tokens_per_day",
    "limits.user_input_tokens_per_day",
    "memory.window_messages",  # the window's SELECT ... LIMIT failed the same way
    "retention.batch_size",
]


@pytest.mark.parametrize("key", KEYS)
def test_an_absurd_limit_is_a_config_error(tmp_path: Path, key: str) -> None:
    # 10**19 was accepted; the store could not count against it (OverflowError past a
    # 64-bit integer) and every turn of everyone failed, with no reply.
    path = tmp_path / "personabot.toml"
    section, name = key.split(".")
    path.write_text(f"[{section}]\n{name} = {10**19}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=key):
        load_settings(path)


async def test_the_largest_accepted_window_still_answers(
    store: BaseStore, clock: ManualClock
) -> None:
    policy = MemoryPolicy(budget=Budget(window_messages=10_000), summary_model="test-model")
    async with harness(store, clock, OfflineLLM(), memory_policy=policy) as h:
        await h.say(C1, "hello")
        await h.advance(2)
    assert len(h.outlet.texts()) == 1


async def test_the_largest_accepted_limits_still_answer(
    store: BaseStore, clock: ManualClock
) -> None:
    policy = LimitPolicy(
        MAX_TURN_LIMIT, MAX_TURN_LIMIT, MAX_TOKEN_LIMIT, user_input_tokens_per_day=MAX_TOKEN_LIMIT
    )
    async with harness(store, clock, OfflineLLM(), limits=policy) as h:
        await h.say(C1, "hello")
        await h.advance(2)
    assert len(h.outlet.texts()) == 1
