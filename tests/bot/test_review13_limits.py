"""Review of issue 13: absurd limit values."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.clock import ManualClock
from bot.config import MAX_TOKEN_LIMIT, MAX_TURN_LIMIT, load_settings
from bot.errors import ConfigError
from bot.events import ConversationKey
from bot.limits import LimitPolicy
from bot.llm.offline import OfflineLLM
from bot.store.base import BaseStore
from tests.harness import harness

C1 = ConversationKey("telegram", "100")
KEYS = [
    "user_turns_per_hour",
    "user_turns_per_day",
    "bot_tokens_per_day",
    "user_input_tokens_per_day",
]


@pytest.mark.parametrize("key", KEYS)
def test_an_absurd_limit_is_a_config_error(tmp_path: Path, key: str) -> None:
    # 10**19 was accepted; the store could not count against it (OverflowError past a
    # 64-bit integer) and every turn of everyone failed, with no reply.
    path = tmp_path / "personabot.toml"
    path.write_text(f"[limits]\n{key} = {10**19}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=f"limits.{key}"):
        load_settings(path)


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
