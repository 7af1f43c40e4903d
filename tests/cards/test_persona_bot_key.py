"""Review of issue 18: the bot's key when its default persona changes.

A bot's conversations, sessions, check-ins and reminders are stored under its key, which
without ``id`` is ``<platform>-<default persona>``. With several personas, choosing another
default for new chats would change the key and orphan every chat of the bot; so a bot with
several personas must name its ``id`` (the error says which one keeps its chats), and with it
the key stays whatever the default.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import load_settings
from bot.core.errors import ConfigError

BASE = """
[[personas]]
id = "mira"
name = "Mira"
system = "You are Mira."
first_message = ["Hi."]

[[personas]]
id = "orin"
name = "Orin"
system = "You are Orin."
first_message = ["Hm."]

[[bots]]
platform = "telegram"
"""


def test_a_bot_with_several_personas_names_its_id_and_keeps_it(tmp_path: Path) -> None:
    path = tmp_path / "no-id.toml"
    path.write_text(BASE + 'personas = ["mira", "orin"]\n', encoding="utf-8")
    with pytest.raises(ConfigError, match='set id = "telegram-mira"'):
        load_settings(path)
    keys = []
    for n, bot in enumerate(
        ('personas = ["mira", "orin"]', 'personas = ["orin", "mira"]\npersona = "orin"')
    ):
        path = tmp_path / f"{n}.toml"
        path.write_text(BASE + bot + '\nid = "telegram-mira"\n', encoding="utf-8")
        keys.append(load_settings(path).bots[0].key)
    assert keys == ["telegram-mira", "telegram-mira"]
