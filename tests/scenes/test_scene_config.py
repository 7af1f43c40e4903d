"""docs/scenes.md: a scene in the TOML, as ``personabot config check`` reads it: shown in the
summary, and every mistake a careless operator makes named on one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import load_settings
from bot.core.errors import ConfigError
from tests.bot.test_cli import _run

PERSONAS = """
[[personas]]
id = "alice"
name = "Alice"
aliases = ["Ally"]
talkativeness = 0.7
description = "A cheerful baker."
first_message = ["Morning!"]

[[personas]]
id = "bob"
name = "Bob"
description = "A grumpy blacksmith."
first_message = ["Hmph."]
"""


async def test_config_check_shows_the_scene(tmp_path: Path) -> None:
    (tmp_path / "bots.toml").write_text(
        PERSONAS
        + """
[[bots]]
id = "tavern"
platform = "telegram"
personas = ["alice", "bob"]

[bots.scene]
strategy = "pooled"
autonomous = true
max_autonomous_turns = 3
""",
        encoding="utf-8",
    )
    code, out, err = await _run(
        ["config", "check", "--file-only", "--config", "bots.toml"], tmp_path
    )
    assert code == 0, err
    assert (
        "tavern: telegram, scene of alice, bob: pooled, up to 2 speakers a turn, "
        "autonomous up to 3 lines, 60 lines an hour"
    ) in out


@pytest.mark.parametrize(
    ("bot", "needle"),
    [
        ('personas = ["alice"]\n[bots.scene]\n', "scene: the cast is personas = [...]"),
        ('persona = "alice"\n[bots.scene]\n', "scene: the cast is personas = [...]"),
        ('personas = ["alice", "bob"]\n[bots.scene]\nstrategy = "loud"\n', "strategy"),
        ('personas = ["alice", "bob"]\n[bots.scene]\nmax_speakers = 0\n', "max_speakers"),
        ('personas = ["alice", "bob"]\n[bots.scene]\nmax_lines_per_hour = -1\n', "max_lines"),
        ('personas = ["alice", "carol"]\n[bots.scene]\n', "carol"),
    ],
)
def test_a_broken_scene_is_named(tmp_path: Path, bot: str, needle: str) -> None:
    """What ``config check`` prints, one ``key: problem`` line each (the same loader)."""
    (tmp_path / "bad.toml").write_text(
        PERSONAS + f'\n[[bots]]\nid = "tavern"\nplatform = "telegram"\n{bot}', encoding="utf-8"
    )
    with pytest.raises(ConfigError) as raised:
        load_settings(tmp_path / "bad.toml")
    assert any(needle in line for line in raised.value.problems), raised.value.problems


def test_talkativeness_outside_zero_to_one_is_refused(tmp_path: Path) -> None:
    (tmp_path / "bad.toml").write_text(
        PERSONAS.replace("talkativeness = 0.7", "talkativeness = 7"), encoding="utf-8"
    )
    with pytest.raises(ConfigError) as raised:
        load_settings(tmp_path / "bad.toml")
    assert any("talkativeness" in line for line in raised.value.problems)
