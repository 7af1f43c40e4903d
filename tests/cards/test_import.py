"""``personabot persona import``: cards written by the tests in all three containers and both
spec versions land in a ``[[personas]]`` table that the real settings loader reads."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

from bot.config import PersonaSettings, load_settings
from tests.cards.cards import EXTENSIONS, b64, personabot, png_bytes, v2_card, v3_card, write_card

CONTAINERS = ["json", "png", "charx"]
SPECS = {"v2": v2_card, "v3": v3_card}

OPERATOR_TOML = """\
# My bots. Keep this comment!
[storage]
url = "sqlite:///mine.sqlite3"  # where my data lives

# The persona I wrote myself.
[[personas]]
id = "orin"
name = "Orin"
system = "You are Orin, the ferryman."  # short on purpose
first_message = ["Hop in."]

[[bots]]
platform = "telegram"
persona = "orin"
"""


def _persona(config: Path, persona_id: str) -> PersonaSettings:
    settings = load_settings(config)
    return next(p for p in settings.personas if p.id == persona_id)


@pytest.mark.parametrize("spec", sorted(SPECS))
@pytest.mark.parametrize("container", CONTAINERS)
def test_every_mapped_field_lands_in_the_persona(tmp_path: Path, container: str, spec: str) -> None:
    card = SPECS[spec]()
    source = write_card(tmp_path / f"mira.{container}", card)
    code, out, err = personabot("persona", "import", source.name, cwd=tmp_path)
    assert (code, err) == (0, "")
    assert "as persona 'mira-kell' into personabot.toml" in out

    mira = _persona(tmp_path / "personabot.toml", "mira-kell")
    data = card["data"]
    assert mira.name == "Mira Kell"
    assert mira.nickname == ("Mimi" if spec == "v3" else None)
    assert mira.description == data["description"]  # macros kept verbatim
    assert mira.personality == data["personality"]
    assert mira.scenario == data["scenario"]
    assert mira.system == data["system_prompt"]
    assert mira.post_history == data["post_history_instructions"]
    assert mira.first_message == [data["first_mes"]]
    assert mira.greetings == data["alternate_greetings"]
    assert mira.group_greetings == (["Hello, all of you."] if spec == "v3" else [])
    assert mira.example_dialogue == data["mes_example"]
    assert mira.card == "cards/mira-kell.json"
    book = mira.lorebook
    assert book is not None
    assert (book.name, book.scan_depth, book.token_budget) == ("Kell Point", 6, 700)
    first, second = book.entries
    assert first.content == "The lighthouse has been dark since the storm of '09."
    assert first.keys == ["lighthouse", "lamp"]
    assert first.secondary_keys == ["storm"]
    assert (first.selective, first.case_sensitive, first.constant, first.enabled) == (
        True,
        True,
        False,
        True,
    )
    assert first.regex is (spec == "v3")
    assert (first.insertion_order, first.priority, first.name, first.id) == (
        50,
        3,
        "lighthouse",
        7,
    )
    # No name: the comment is the label; no id: the next free integer; no priority: default.
    assert (second.name, second.id, second.enabled, second.priority) == ("orin", 0, False, 10)
    assert second.keys == ["Orin"]

    toml = (tmp_path / "personabot.toml").read_text(encoding="utf-8")
    assert "creator_notes" not in toml and "Never shown" not in toml
    assert "depth_prompt" not in toml  # unmapped fields live in the stored card only

    stored = json.loads((tmp_path / "cards" / "mira-kell.json").read_text(encoding="utf-8"))
    assert (stored["spec"], stored["spec_version"]) == ("chara_card_v3", "3.0")
    assert stored["data"]["extensions"] == EXTENSIONS
    assert stored["data"]["creator_notes"] == data["creator_notes"]
    assert stored["data"]["character_book"]["entries"][0]["position"] == "after_char"
    assert stored["data"]["character_book"]["extensions"] == {"book_ext": {"x": None}}
    if spec == "v3":
        assert stored["top_level_unknown"] == {"kept": [1, None]}
        assert stored["data"]["source"] == ["https://example.org/mira"]
    image = tmp_path / "cards" / "mira-kell.png"
    assert image.is_file() is (container == "png")

    assert "mapped: name 'Mira Kell'" in out
    assert "lorebook 'Kell Point' (2 entries)" in out
    assert "not used: creator_notes (never part of a prompt)" in out


def test_the_result_passes_config_check_and_gets_a_telegram_bot(tmp_path: Path) -> None:
    write_card(tmp_path / "mira.png", v3_card())
    code, out, err = personabot(
        "persona",
        "import",
        "mira.png",
        "--id",
        "mira",
        "--out",
        "bot.toml",
        "--bot",
        "telegram",
        cwd=tmp_path,
    )
    assert (code, err) == (0, "")
    assert "added a [[bots]] entry: telegram, persona mira, token from $TELEGRAM_BOT_TOKEN" in out
    code, out, err = personabot(
        "config", "check", "--file-only", "--config", "bot.toml", cwd=tmp_path
    )
    assert (code, err) == (0, "")
    assert "mira: Mira Kell" in out
    assert "telegram-mira: telegram, persona mira" in out


def test_comments_of_an_existing_file_survive_the_import(tmp_path: Path) -> None:
    config = tmp_path / "personabot.toml"
    config.write_text(OPERATOR_TOML, encoding="utf-8")
    write_card(tmp_path / "mira.json", v2_card())
    code, out, err = personabot("persona", "import", "mira.json", "--bot", "telegram", cwd=tmp_path)
    assert (code, err) == (0, "")
    text = config.read_text(encoding="utf-8")
    assert text.startswith(OPERATOR_TOML.split("[[bots]]")[0])  # untouched, comments and all
    for line in OPERATOR_TOML.splitlines():
        assert line in text
    settings = load_settings(config)
    assert [p.id for p in settings.personas] == ["orin", "mira-kell"]
    assert settings.storage.url == "sqlite:///mine.sqlite3"
    # The file's telegram bot uses the default token: the new one gets a variable of its own.
    assert [(b.persona, b.token_variable) for b in settings.bots] == [
        ("orin", "TELEGRAM_BOT_TOKEN"),
        ("mira-kell", "TELEGRAM_BOT_TOKEN_MIRA_KELL"),
    ]
    assert "token from $TELEGRAM_BOT_TOKEN_MIRA_KELL" in out


def _unchanged(tmp_path: Path, config: Path) -> None:
    assert config.read_text(encoding="utf-8") == OPERATOR_TOML
    assert not (tmp_path / "cards").exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_an_id_that_exists_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    config = tmp_path / "personabot.toml"
    config.write_text(OPERATOR_TOML, encoding="utf-8")
    write_card(tmp_path / "orin.json", v2_card(name="Orin"))
    code, out, err = personabot("persona", "import", "orin.json", cwd=tmp_path)
    assert code == 2 and out == ""
    assert err == (
        "personabot: card error: personabot.toml: a persona with id 'orin' exists already; "
        "choose another with --id\n"
    )
    _unchanged(tmp_path, config)


def _zip_bomb(path: Path) -> None:
    """A small CHARX whose card.json unpacks to 40 MB."""
    with (
        zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive,
        archive.open("card.json", "w", force_zip64=True) as member,
    ):
        member.write(b'{"spec": "chara_card_v3", "data": {"name": "x", "description": "')
        for _ in range(40):
            member.write(b"a" * (1024 * 1024))
        member.write(b'"}}')


def _big_file(path: Path) -> None:
    with path.open("wb") as handle:  # sparse: 50 MB on paper, nothing to read first
        handle.truncate(50 * 1024 * 1024)


def _no_card_json(path: Path) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("x/card.json", "{}")


def _write(name: str, content: bytes) -> Any:
    return lambda path: path.write_bytes(content)


MALFORMED: dict[str, tuple[str, Any, str]] = {
    "bad base64": (
        "card.png",
        _write("", png_bytes({"chara": "not base64 at all!!"})),
        "card.png: the PNG's 'chara' chunk is not base64",
    ),
    "base64 of no JSON": (
        "card.png",
        _write("", png_bytes({"ccv3": b64("{not json")})),
        "card.png ('ccv3' chunk): the card is not valid JSON",
    ),
    "wrong spec": (
        "card.json",
        _write("", json.dumps({**v2_card(), "spec": "chara_card_v9"}).encode()),
        "unsupported card spec 'chara_card_v9': expected 'chara_card_v2' or 'chara_card_v3'",
    ),
    "V1 card with a field of the wrong type": (
        "card.json",
        _write("", json.dumps({"name": "Mira", "description": 5}).encode()),
        "description: expected text, found a number (a V1 card)",
    ),
    "missing name": (
        "card.charx",
        lambda path: write_card(
            path, {"spec": "chara_card_v3", "data": {"description": "nameless"}}
        ),
        "the card has no name (data.name is empty)",
    ),
    "empty name": (
        "card.json",
        _write("", json.dumps(v3_card(name="   ")).encode()),
        "the card has no name (data.name is empty)",
    ),
    "a 50 MB file": (
        "card.json",
        _big_file,
        "card.json: the card file is 50.0 MB, over the 32.0 MB limit",
    ),
    "zip bomb": (
        "card.charx",
        _zip_bomb,
        "card.charx: card.json unpacks to 40.0 MB, over the 32.0 MB limit",
    ),
    "not a PNG": ("card.png", _write("", b"GIF89a not a png"), "card.png: not a PNG image"),
    "truncated PNG": (
        "card.png",
        _write("", png_bytes({"chara": b64(v2_card())})[:60]),
        "card.png: not a readable PNG image",
    ),
    "PNG without a card": (
        "card.png",
        _write("", png_bytes({"Software": "paint"})),
        "card.png: the PNG holds no card (no 'chara' or 'ccv3' text chunk)",
    ),
    "CHARX without card.json": (
        "card.charx",
        _no_card_json,
        "card.charx: the CHARX has no card.json at its root",
    ),
    "not a zip": ("card.charx", _write("", b"PK nonsense"), "card.charx: not a readable CHARX"),
    "bad JSON": ("card.json", _write("", b'{"spec": "chara_card_v2", '), "not valid JSON"),
    "NaN": (
        "card.json",
        _write("", json.dumps(v2_card(personality=float("nan"))).encode()),
        "NaN is not a JSON value",
    ),
    "wrong type": (
        "card.json",
        _write("", json.dumps(v2_card(alternate_greetings="Hi")).encode()),
        "data.alternate_greetings: expected a list of text",
    ),
    "entry without keys list": (
        "card.json",
        _write(
            "",
            json.dumps(
                v2_card(character_book={"entries": [{"keys": "a", "content": "b"}]})
            ).encode(),
        ),
        "data.character_book.entries[0].keys: expected a list of text",
    ),
    "no framing": (
        "card.json",
        _write("", json.dumps(v2_card(description="", personality="", system_prompt="")).encode()),
        "the card has no description, personality or system_prompt",
    ),
    "lone surrogate": (
        "card.json",
        _write("", b'{"spec": "chara_card_v2", "data": {"name": "x\\ud800", "description": "d"}}'),
        "the card holds text that is not valid Unicode",
    ),
    "unknown container": ("card.txt", _write("", b"{}"), "not a card file (.json, .png or .charx)"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_card_gives_one_error_and_writes_nothing(tmp_path: Path, case: str) -> None:
    name, make, message = MALFORMED[case]
    make(tmp_path / name)
    config = tmp_path / "personabot.toml"
    config.write_text(OPERATOR_TOML, encoding="utf-8")
    code, out, err = personabot("persona", "import", name, "--bot", "telegram", cwd=tmp_path)
    assert code == 2
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("personabot: card error: ")
    assert message in lines[0]
    _unchanged(tmp_path, config)


def test_a_missing_output_file_stays_missing_on_error(tmp_path: Path) -> None:
    (tmp_path / "card.json").write_text('{"spec": "nope"}', encoding="utf-8")
    code, _, err = personabot("persona", "import", "card.json", cwd=tmp_path)
    assert code == 2 and err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["card.json"]


def test_a_png_with_both_chunks_uses_ccv3(tmp_path: Path) -> None:
    old, new = v2_card(name="Old Name"), v3_card(name="New Name")
    (tmp_path / "both.png").write_bytes(png_bytes({"chara": b64(old), "ccv3": b64(new)}))
    code, out, err = personabot("persona", "import", "both.png", cwd=tmp_path)
    assert (code, err) == (0, "")
    assert "(Character Card V3, PNG, 'ccv3' chunk)" in out
    assert _persona(tmp_path / "personabot.toml", "new-name").name == "New Name"
    # The kept image holds no stale card: it is the picture alone.
    kept = (tmp_path / "cards" / "new-name.png").read_bytes()
    assert b"chara" not in kept and b"ccv3" not in kept


def test_an_empty_first_message_falls_back_and_says_so(tmp_path: Path) -> None:
    write_card(tmp_path / "a.json", v2_card(first_mes=""))
    write_card(tmp_path / "b.json", v2_card(name="Bo", first_mes=" ", alternate_greetings=[]))
    code, out_a, _ = personabot("persona", "import", "a.json", "--id", "a", cwd=tmp_path)
    assert code == 0
    code, out_b, _ = personabot("persona", "import", "b.json", cwd=tmp_path)
    assert code == 0
    config = tmp_path / "personabot.toml"
    assert _persona(config, "a").first_message == ["The lamp flickers. Who's there?"]
    assert _persona(config, "bo").first_message == ["Hi, I'm Bo."]
    assert "first_mes is empty: first_message is the first alternate greeting" in out_a
    assert 'first_message = "Hi, I\'m Bo."' in out_b


@pytest.mark.parametrize(
    ("where", "card"),
    [
        ("creator_notes: temperature 0.85", v2_card(creator_notes="Use Temp: 0.85 and top_p 1")),
        (
            "data.extensions.sampling.temperature = 1.2",
            v2_card(extensions={"sampling": {"temperature": 1.2}}),
        ),
    ],
)
def test_a_recommended_temperature_is_ignored_and_the_import_says_so(
    tmp_path: Path, where: str, card: dict[str, Any]
) -> None:
    write_card(tmp_path / "t.json", card)
    code, out, err = personabot("persona", "import", "t.json", cwd=tmp_path)
    assert (code, err) == (0, "")
    assert f"ignored: the card recommends a sampling temperature ({where})" in out
    assert _persona(tmp_path / "personabot.toml", "mira-kell").temperature is None


def test_an_empty_system_prompt_leaves_the_default_framing(tmp_path: Path) -> None:
    write_card(tmp_path / "s.json", v2_card(system_prompt="", post_history_instructions=""))
    code, out, _ = personabot("persona", "import", "s.json", cwd=tmp_path)
    assert code == 0
    mira = _persona(tmp_path / "personabot.toml", "mira-kell")
    assert (mira.system, mira.post_history) == ("", "")
    assert "system (empty: personabot's default framing)" in out
