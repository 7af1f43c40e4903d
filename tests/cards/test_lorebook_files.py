"""Lorebook files (issue 35): SillyTavern World Info given to ``persona import`` is named for
what it is, with the command that imports it; ``persona import-lorebook`` gives a World Info,
``lorebook_v3`` or ``character_book`` file to a persona of the operator's TOML (comments
kept), with the limits and the size warning of a card's lorebook; bad input leaves the TOML
untouched byte for byte."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bot.config import PersonaSettings, load_settings
from bot.core.errors import CardError, ConfigError
from bot.personas.lorebook_import import import_lorebook
from tests.cards.cards import personabot, v2_card

OPERATOR_TOML = """\
# My bots. Keep this comment!
[[personas]]
id = "orin"
name = "Orin"
system = "You are Orin, the ferryman."  # short on purpose
first_message = ["Hop in."]

[[personas]]
id = "mira"
name = "Mira"
system = "You are Mira."
first_message = ["Hi."]

[personas.lorebook]
token_budget = 800  # mine

[[personas.lorebook.entries]]
id = 0
keys = ["lamp"]
content = "The lamp is old."

[[bots]]
platform = "telegram"
persona = "orin"
"""

# SillyTavern World Info as it saves it: entries by uid, its own field names and extras.
WORLD_INFO: dict[str, Any] = {
    "entries": {
        "0": {
            "uid": 0,
            "key": ["lighthouse", "lamp"],
            "keysecondary": ["storm"],
            "comment": "the lighthouse",
            "content": "The lighthouse has been dark since the storm of '09.",
            "constant": False,
            "selective": True,
            "order": 50,
            "position": 0,
            "disable": False,
            "depth": 4,
            "probability": 100,
            "caseSensitive": None,
        },
        "1": {
            "uid": 1,
            "key": ["/\\bOrin\\b/i"],
            "keysecondary": [],
            "comment": "",
            "content": "Orin is the ferryman.",
            "constant": False,
            "selective": False,
            "order": 100,
            "position": 1,
            "disable": True,
            "caseSensitive": True,
        },
        "2": {
            "uid": 2,
            "key": ["tide"],
            "comment": "the tides",
            "content": "y" * 1845,  # 615 + 4 = 619 tokens: over the default 500
            "order": 10,
        },
    }
}


def _persona(config: Path, persona_id: str) -> PersonaSettings:
    return next(p for p in load_settings(config).personas if p.id == persona_id)


def test_persona_import_of_a_world_info_file_says_what_it_is(tmp_path: Path) -> None:
    (tmp_path / "world.json").write_text(json.dumps(WORLD_INFO), encoding="utf-8")
    config = tmp_path / "personabot.toml"
    config.write_text(OPERATOR_TOML, encoding="utf-8")
    code, out, err = personabot("persona", "import", "world.json", cwd=tmp_path)
    assert (code, out) == (2, "")
    assert err == (
        "personabot: card error: world.json is a SillyTavern World Info file, not a character "
        "card. To give its entries to a persona of your TOML: personabot persona "
        "import-lorebook world.json --persona ID\n"
    )
    assert config.read_text(encoding="utf-8") == OPERATOR_TOML
    assert not (tmp_path / "cards").exists()


def test_import_lorebook_gives_world_info_to_a_persona(tmp_path: Path) -> None:
    (tmp_path / "world.json").write_text(json.dumps(WORLD_INFO), encoding="utf-8")
    config = tmp_path / "personabot.toml"
    config.write_text(OPERATOR_TOML, encoding="utf-8")
    code, out, err = personabot(
        "persona", "import-lorebook", "world.json", "--persona", "orin", cwd=tmp_path
    )
    assert (code, err) == (0, "")
    assert out == (
        "imported a SillyTavern World Info file 'world' into the lorebook of persona 'orin' "
        "in personabot.toml: 3 entries\n"
        "  warning: lorebook entry 'the tides' (~619 tokens) is larger than the token_budget "
        "of 500 and never sent: raise it under [personas.lorebook], token_budget = 700\n"
    )
    text = config.read_text(encoding="utf-8")
    assert text.startswith(OPERATOR_TOML.split('\n\n[[personas]]\nid = "mira"')[0])
    assert "# My bots. Keep this comment!" in text and "# short on purpose" in text
    orin = _persona(config, "orin")
    assert orin.lorebook is not None
    assert orin.lorebook.name == "world"
    first, second, third = orin.lorebook.entries
    assert (first.id, first.name, first.keys, first.secondary_keys) == (
        0,
        "the lighthouse",
        ["lighthouse", "lamp"],
        ["storm"],
    )
    assert (first.selective, first.insertion_order, first.enabled, first.regex) == (
        True,
        50,
        True,
        False,
    )
    # A /pattern/flags key is a pattern, as in SillyTavern; "disable" turns the entry off.
    assert (second.keys, second.regex, second.enabled, second.case_sensitive) == (
        ["/\\bOrin\\b/i"],
        True,
        False,
        True,
    )
    assert (third.name, third.insertion_order, third.enabled) == ("the tides", 10, True)
    # The other persona and the bot are as they were.
    assert _persona(config, "mira").lorebook is not None
    assert load_settings(config).bots[0].persona == "orin"

    # The same file again: nothing new, said so, the file as it was.
    done = import_lorebook(tmp_path / "world.json", persona_id="orin", config=config)
    assert "left out: 3 entries the persona's lorebook has already" in done.lines[1]
    assert config.read_text(encoding="utf-8") == text


@pytest.mark.parametrize("shape", ["lorebook_v3", "character_book"])
def test_a_card_style_lorebook_is_appended_to_a_persona_s_own(tmp_path: Path, shape: str) -> None:
    book = v2_card()["data"]["character_book"]
    book["entries"][1]["id"] = 0  # an id Mira's lorebook uses already
    source = tmp_path / "book.json"
    data = {"spec": "lorebook_v3", "data": book} if shape == "lorebook_v3" else book
    source.write_text(json.dumps(data), encoding="utf-8")
    config = tmp_path / "personabot.toml"
    config.write_text(OPERATOR_TOML, encoding="utf-8")

    done = import_lorebook(source, persona_id="mira", config=config)
    assert done.lines[0].endswith(f"into the lorebook of persona 'mira' in {config}: 2 entries")
    text = config.read_text(encoding="utf-8")
    assert "token_budget = 800  # mine" in text
    mira = _persona(config, "mira")
    assert mira.lorebook is not None and mira.lorebook.token_budget == 800
    assert [(e.id, e.keys) for e in mira.lorebook.entries] == [
        (0, ["lamp"]),
        (7, ["lighthouse", "lamp"]),
        (1, ["Orin"]),  # its id 0 was taken: the next free one
    ]


def _over_limit(path: Path) -> None:
    entry = {"uid": 0, "key": [f"k{i}" for i in range(51)], "content": "c"}
    path.write_text(json.dumps({"entries": {"0": entry}}), encoding="utf-8")


BAD: dict[str, tuple[Any, str, str]] = {
    "no such persona": (
        lambda path: path.write_text(json.dumps(WORLD_INFO), encoding="utf-8"),
        "nobody",
        "no persona with id 'nobody' (its personas: 'orin', 'mira')",
    ),
    "over a limit": (_over_limit, "orin", "keys: 51 keys, over the limit of 50 keys per entry"),
    "not JSON": (lambda path: path.write_text("{nope", encoding="utf-8"), "orin", "not valid JSON"),
    "a card": (
        lambda path: path.write_text(json.dumps(v2_card()), encoding="utf-8"),
        "orin",
        "a character card, not a lorebook file: import it with `personabot persona import`",
    ),
    "content not text": (
        lambda path: path.write_text(
            json.dumps({"entries": {"0": {"key": ["a"], "content": 5}}}), encoding="utf-8"
        ),
        "orin",
        "content: expected text, found a number",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_one_error_and_the_toml_is_untouched(tmp_path: Path, case: str) -> None:
    make, persona_id, message = BAD[case]
    make(tmp_path / "book.json")
    config = tmp_path / "personabot.toml"
    config.write_text(OPERATOR_TOML, encoding="utf-8")
    with pytest.raises((CardError, ConfigError)) as caught:
        import_lorebook(tmp_path / "book.json", persona_id=persona_id, config=config)
    assert message in str(caught.value)
    assert config.read_text(encoding="utf-8") == OPERATOR_TOML
    assert sorted(p.name for p in tmp_path.iterdir()) == ["book.json", "personabot.toml"]


def test_the_command_line_gives_one_error_line_for_an_unknown_persona(tmp_path: Path) -> None:
    (tmp_path / "world.json").write_text(json.dumps(WORLD_INFO), encoding="utf-8")
    config = tmp_path / "personabot.toml"
    config.write_text(OPERATOR_TOML, encoding="utf-8")
    code, out, err = personabot(
        "persona", "import-lorebook", "world.json", "--persona", "seraphina", cwd=tmp_path
    )
    assert (code, out) == (2, "")
    assert err == (
        "personabot: card error: personabot.toml: no persona with id 'seraphina' (its "
        "personas: 'orin', 'mira')\n"
    )
    assert config.read_text(encoding="utf-8") == OPERATOR_TOML
