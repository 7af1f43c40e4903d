"""Review of issue 13: a persona pin that leaves no room for a turn in prompt_budget_tokens."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.app.build import memory_policy, pin_for
from bot.config import load_settings
from bot.core.errors import ConfigError
from bot.core.events import ConversationKey, SessionKey, StoredMessage, Turn
from memory.assemble import assemble
from memory.fit import request_tokens

_LONG_SYSTEM = "You are Mira. " + "Stay in character and be kind. " * 1000  # ~7,500 tokens


def _config(tmp_path: Path, *, system: str, extra: str = "") -> Path:
    path = tmp_path / "personabot.toml"
    path.write_text(
        f'{extra}\n[[personas]]\nid = "mira"\nname = "Mira"\nsystem = {system!r}\n'
        'first_message = ["Hi."]\n',
        encoding="utf-8",
    )
    return path


def test_a_pin_over_the_prompt_budget_is_a_config_error(tmp_path: Path) -> None:
    # Accepted today, every request was ~7,500 tokens against a 6,000-token budget.
    with pytest.raises(ConfigError) as info:
        load_settings(_config(tmp_path, system=_LONG_SYSTEM))
    message = str(info.value)
    assert "personas[0]" in message and "prompt_budget_tokens" in message


def test_the_smallest_budget_with_a_short_pin_is_a_config_error(tmp_path: Path) -> None:
    # 256 tokens: the pin, the data note and the turn's 200-token floor do not fit.
    extra = "[memory]\nprompt_budget_tokens = 256\n"
    with pytest.raises(ConfigError, match="prompt_budget_tokens"):
        load_settings(_config(tmp_path, system="You are Mira.", extra=extra))


def test_every_accepted_config_fits_a_huge_turn_under_the_budget(tmp_path: Path) -> None:
    """The smallest budget that loads still fits a maximal turn (max_turn_tokens at its
    floor, below the pin's size) under prompt_budget_tokens."""
    system = "You are Mira. " * 200
    for budget in range(256, 4000, 37):
        extra = f"[memory]\nprompt_budget_tokens = {budget}\n[queue]\nmax_turn_tokens = 200\n"
        try:
            settings = load_settings(_config(tmp_path, system=system, extra=extra))
        except ConfigError:
            continue
        persona = settings.persona()
        policy = memory_policy(settings, persona)
        session = SessionKey(ConversationKey("telegram", "1"), 1)
        messages = tuple(
            StoredMessage(
                id=i,
                session=session,
                turn=i,
                role="user",
                author_id="u1",
                display_name="Ann",
                text="x" * 4000,
                created_at=0.0,
            )
            for i in range(1, 301)
        )
        turn = Turn(session=session, version=1, messages=messages, first_pending_at=0.0)
        assembled = assemble(pin_for(persona), turn, policy.budget)
        assert request_tokens(assembled.request) <= budget, budget
        return
    raise AssertionError("no budget loaded")
