"""Review 34b, item 2: lorebook limits and matching attacked (hostile cards and texts)."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from memory.assemble import Assembled
from memory.lorebook import MATCH_SECONDS, Lorebook, LoreEntry, select
from memory.prompting import log_lore_drops
from tests.cards.cards import personabot

# A 28-character pattern, far under the 500-character limit: the `regex` library expands
# nested counted repeats when it compiles, 8,000,000 nodes here: 5.7 s and 2.1 GB for this
# one key on the review machine; (a{100}){100}){100} 0.3 s and 290 MB. A card may hold 1,000.
BOMB = "(?:(?:(?:a{200}){200}){200})"

TOML = f"""\
[[personas]]
id = "mira"
name = "Mira"
system = "You are Mira."
first_message = ["Hi."]

[personas.lorebook]
[[personas.lorebook.entries]]
name = "bomb"
keys = ["{BOMB}"]
regex = true
content = "boom"
"""


def test_a_regex_compile_bomb_is_refused_at_config_load(tmp_path: Path) -> None:
    (tmp_path / "personabot.toml").write_text(TOML, encoding="utf-8")
    code, out, err = personabot("config", "check", cwd=tmp_path)
    assert code == 2 and "8,000,000 copies of one part" in err, (code, out, err)


def test_a_book_at_the_limits_cannot_flood_the_log_each_prompt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    entries = tuple(
        LoreEntry(content="x", constant=True, name=f"{i:05d}" + "n" * 6000) for i in range(5000)
    )
    book = Lorebook(entries=entries, token_budget=1)
    selection = select(book, ["hello"])
    assembled = Assembled(request=None, breakdown=(), lore=selection)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING):
        log_lore_drops(assembled, "chat")  # type: ignore[arg-type]
    logged = sum(len(r.getMessage()) for r in caplog.records)
    assert len(caplog.records) <= 100 and logged < 1_000_000, (len(caplog.records), logged)


def test_an_entry_name_is_bounded_by_config_load() -> None:
    """The evasion the flood test used: a 1 MB entry name loaded (the limits counted only keys
    and contents). Now refused, naming the limit."""
    from pydantic import ValidationError

    from bot.config import LorebookSettings

    with pytest.raises(ValidationError, match="over the limit of 200 characters per entry name"):
        LorebookSettings.model_validate(
            {"entries": [{"content": "c", "keys": ["k"], "name": "n" * 1_000_000}]}
        )


def test_suffix_keys_on_a_run_of_one_letter_stay_within_the_budget() -> None:
    """Keys a, aa, ..., a*200 against 20,000 a's: 4 M overlapping matches, cut by the clock."""
    keys = ["a" * i for i in range(1, 201)]
    entries = tuple(
        LoreEntry(content=f"c{i}", keys=tuple(keys[i % 150 : i % 150 + 50])) for i in range(400)
    )
    book = Lorebook(entries=entries, token_budget=100_000)
    start = time.perf_counter()
    selection = select(book, ["a" * 20_000])
    assert time.perf_counter() - start < MATCH_SECONDS + 0.5
    assert len(selection.fired) == 400
