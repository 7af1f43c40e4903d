"""bench/memory.py: its cost model (5-minute and 1-hour entries) and what the scripted
300-turn conversation through the real path costs (issue 41 item 5, docs/architecture.md#prompt).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import memory as bench
from bench.memory import Block, Pricing, price_conversation


def test_the_cost_model_passes_its_hand_priced_self_check() -> None:
    assert bench.self_check() == []


def test_the_self_check_catches_a_one_hour_write_priced_like_a_five_minute_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(price_conversation, "__defaults__", (Pricing(write_1h=1.25),))
    problems = bench.self_check()
    assert problems and all("1-hour" in p for p in problems)


def test_a_one_hour_prefix_outlives_a_pause_the_five_minute_one_does_not() -> None:
    """30 minutes after a 2,000-token prompt: read at 0.1x with 1-hour entries (written 2x
    once), written again at 1.25x with 5-minute ones."""

    def prompt(ttl: str, extra: int) -> list[Block]:
        return [
            Block("system", "pin", 2000, True, ttl=ttl),  # type: ignore[arg-type]
            Block("user", f"u{extra}", 100, True, ttl=ttl),  # type: ignore[arg-type]
        ]

    hour = price_conversation([(0.0, prompt("1h", 1)), (1800.0, prompt("1h", 2))])
    five = price_conversation([(0.0, prompt("5m", 1)), (1800.0, prompt("5m", 2))])
    assert [c.cost for c in hour] == [4200.0, 200.0 + 200.0]
    assert [c.cost for c in five] == [2625.0, 2625.0]
    assert hour[1].read_tokens == 2000 and hour[1].write_1h_tokens == 100


async def test_the_scripted_conversation_is_cheaper_and_the_window_keeps_the_recent_messages(
    tmp_path: Path,
) -> None:
    script = bench.make_script(bench.DEFAULT_TURNS, 7)
    run = await bench.run_personabot(script, tmp_path)
    totals = {way: bench.Totals.of(c) for way, c in bench.price_all(script, run).items()}
    ours, full = totals["personabot"], totals["full_history"]
    # Before 1-hour entries: 26.7% of full history with caching (459,934 / 1,723,987).
    assert ours.cost_cached / full.cost_cached < 0.235
    assert ours.cost_cached / full.cost_uncached <= bench.COST_TARGET_RATIO
    # Recall: every prompt still shows at least the last window_messages messages verbatim
    # (all of them while there are fewer), right before the new turn.
    said = [text for t in script for text in (t.user, t.reply)]
    window = bench.memory_policy().budget.window_messages
    for n, call in enumerate(run.calls):
        shown = [m.text for m in call.request.messages[:-1]]
        recent = said[max(0, 2 * n - window) : 2 * n]
        assert shown[len(shown) - len(recent) :] == recent, f"turn {n + 1}"


def test_the_window_and_budget_under_test_come_from_the_command_line() -> None:
    """--window-messages, --window-max and --prompt-tokens measure an operator's choice; a
    fold point not above the kept window is refused, as the config refuses it."""
    parser = bench.build_parser()
    params = bench.params_from(
        parser.parse_args(
            ["--window-messages", "12", "--window-max", "48", "--prompt-tokens", "7000"]
        )
    )
    assert (params.budget.window_messages, params.budget.fold_at) == (12, 48)
    assert params.budget.prompt_tokens == 7000
    assert bench.params_from(parser.parse_args([])).budget == bench.memory_policy().budget
    with pytest.raises(SystemExit, match="must be more than the window"):
        bench.params_from(parser.parse_args(["--window-max", "24"]))
