"""Issue 41 item 5: which prompts ask for 1-hour cache entries (docs/architecture.md#prompt).

A prompt that only appends to the previous one asks for 1-hour entries, so that a pause of 5
minutes to an hour still finds its prefix cached; a prompt whose prefix is new anyway (just
after a fold, or while the budget cuts the window's start) asks for 5-minute ones. All of a
prompt's breakpoints live alike, so a 1-hour one never follows a 5-minute one.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from bot.app.build.policies import memory_policy
from bot.config import load_settings
from bot.core.errors import ConfigError
from bot.core.llm import ModelRequest, TextBlock
from memory.assemble import Budget, Participant, assemble
from memory.records import Summary
from tests.memory.test_assemble import PIN, memory, msg, turn_of

BUDGET = Budget(window_messages=4)
ME = [Participant("11", "Sasha", memory(("occupation", "nurse")))]


def _history(count: int, words: int = 3) -> list:  # type: ignore[type-arg]
    """``count`` messages, user and assistant alternating, from turn 1."""
    text = " ".join(["word"] * words)
    return [msg(n, f"{n} {text}", "user" if n % 2 else "assistant") for n in range(1, count + 1)]


def _ttls(request: ModelRequest) -> list[str]:
    blocks = [*request.system, *(b for m in request.messages for b in m.blocks)]
    return [b.ttl for b in blocks if isinstance(b, TextBlock) and b.cache]


def _prompt(
    history: list,  # type: ignore[type-arg]
    summary: Summary | None,
    budget: Budget = BUDGET,
    pause: float = 30.0,
) -> ModelRequest:
    """The prompt of a turn pending ``pause`` seconds after the newest message."""
    last = history[-1].turn if history else 0
    turn = replace(turn_of(msg(last + 1, "and now?")), first_pending_at=float(last) + pause)
    out = assemble(
        PIN,
        turn,
        budget,
        history=history,
        participants=ME,
        summary=summary,
    )
    return out.request


def test_a_prompt_that_appends_asks_for_one_hour_entries_at_every_breakpoint() -> None:
    summary = Summary(1, 10, user_said=("my cat is called Biscuit",))
    history = [m for m in _history(16) if m.turn > 10]  # 6 after the summary: grown past 4
    request = _prompt(history, summary)
    assert _ttls(request) == ["1h", "1h", "1h"]  # memory, summary, the window's last message
    # Before the first fold too: the window only grows.
    assert _ttls(_prompt(_history(6), None)) == ["1h", "1h"]
    # 50 minutes after the newest message the previous prompt's 1-hour entries still live.
    assert _ttls(_prompt(history, summary, pause=3000.0)) == ["1h", "1h", "1h"]


def test_a_turn_over_an_hour_after_the_newest_message_asks_for_five_minute_entries() -> None:
    """Every entry has expired: the whole prefix is written again, at 1.25x rather than 2x."""
    summary = Summary(1, 10, user_said=("my cat is called Biscuit",))
    history = [m for m in _history(16) if m.turn > 10]
    assert _ttls(_prompt(history, summary, pause=3700.0)) == ["5m", "5m", "5m"]


def test_the_first_prompt_after_a_fold_asks_for_five_minute_entries() -> None:
    summary = Summary(1, 12, user_said=("my cat is called Biscuit",))
    history = [m for m in _history(16) if m.turn > 12]  # window_messages after the summary
    request = _prompt(history, summary)
    assert len(request.messages) == 5  # the 4 messages of the window, then the new turn
    assert _ttls(request) == ["5m", "5m", "5m"]


def test_a_window_the_budget_cuts_asks_for_five_minute_entries_and_keeps_what_fits() -> None:
    summary = Summary(1, 10, user_said=("my cat is called Biscuit",))
    history = [m for m in _history(18, words=60) if m.turn > 10]  # 8 long messages
    budget = Budget(window_messages=4, prompt_tokens=1000, summary_tokens=100, memory_tokens=100)
    request = _prompt(history, summary, budget)
    shown = len(request.messages) - 1
    assert 4 < shown < 8  # cut by the budget, not by the count
    assert _ttls(request) == ["5m", "5m", "5m"]


def test_cache_hour_false_in_the_config_keeps_every_entry_at_five_minutes(tmp_path: Path) -> None:
    path = tmp_path / "personabot.toml"
    path.write_text(
        '[memory]\ncache_hour = false\n[[personas]]\nid = "mira"\nname = "Mira"\n'
        'system = "You are Mira."\nfirst_message = ["Hi."]\n',
        encoding="utf-8",
    )
    settings = load_settings(path)
    budget = memory_policy(settings, settings.persona()).budget
    summary = Summary(1, 10, user_said=("my cat is called Biscuit",))
    history = [m for m in _history(16) if m.turn > 10]
    assert _ttls(_prompt(history, summary, replace(budget, window_messages=4))) == ["5m"] * 3
    assert memory_policy(load_settings(None), settings.persona()).budget.cache_hour is True


def test_window_max_messages_reaches_the_budget_and_must_exceed_the_window(
    tmp_path: Path,
) -> None:
    """[memory] window_max_messages goes into the prompt's budget; one not above
    window_messages is refused at load with what to change."""
    path = tmp_path / "personabot.toml"
    persona = (
        '[[personas]]\nid = "mira"\nname = "Mira"\nsystem = "You are Mira."\n'
        'first_message = ["Hi."]\n'
    )
    path.write_text(f"[memory]\nwindow_max_messages = 72\n{persona}", encoding="utf-8")
    settings = load_settings(path)
    assert memory_policy(settings, settings.persona()).budget.fold_at == 72
    defaults = load_settings(None)
    assert memory_policy(defaults, defaults.persona()).budget.fold_at == 48
    path.write_text(f"[memory]\nwindow_max_messages = 24\n{persona}", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"window_max_messages \(24\) must be more than"):
        load_settings(path)
