"""``personabot persona export``: a V3 card (and its V2 twin in a PNG) from the persona's
TOML fields over its stored card; import -> export -> import keeps every field."""

from __future__ import annotations

import base64
import copy
import io
import json
from pathlib import Path
from typing import Any

import pytest
import tomlkit
from PIL import Image

from bot.config import PersonaSettings, load_settings
from bot.personas.png import chunks
from tests.cards.cards import EXTENSIONS, b64, personabot, png_bytes, v2_card, v3_card, write_card

SPECS = {"v2": v2_card, "v3": v3_card}


def _persona(config: Path, persona_id: str) -> PersonaSettings:
    return next(p for p in load_settings(config).personas if p.id == persona_id)


def _stored(folder: Path, persona_id: str) -> dict[str, Any]:
    return json.loads((folder / "cards" / f"{persona_id}.json").read_text(encoding="utf-8"))


def _normalised(card: dict[str, Any]) -> dict[str, Any]:
    """What the tests' cards become as normalised V3: only defaults added."""
    out = copy.deepcopy(card)
    out["spec"], out["spec_version"] = "chara_card_v3", "3.0"
    out["data"].setdefault("group_only_greetings", [])
    second = out["data"]["character_book"]["entries"][1]
    second["id"] = 0  # the entry had none: the next free integer
    for entry in out["data"]["character_book"]["entries"]:
        entry.setdefault("use_regex", False)
    return out


def _text_chunks(png: bytes) -> list[tuple[str, str]]:
    found = []
    for kind, payload in chunks(png):
        if kind == b"tEXt":
            keyword, value = payload.split(b"\0", 1)
            found.append((keyword.decode("latin-1"), value.decode("latin-1")))
    return found


@pytest.mark.parametrize("spec", sorted(SPECS))
@pytest.mark.parametrize("container", ["json", "png", "charx"])
def test_a_round_trip_keeps_every_field(tmp_path: Path, container: str, spec: str) -> None:
    original = SPECS[spec]()
    write_card(tmp_path / f"mira.{container}", original)
    assert personabot("persona", "import", f"mira.{container}", cwd=tmp_path)[0] == 0
    first = _persona(tmp_path / "personabot.toml", "mira-kell")
    stored = _stored(tmp_path, "mira-kell")
    assert stored == _normalised(original)

    for fmt in ("json", "png"):
        code, out, err = personabot(
            "persona", "export", "mira-kell", "--format", fmt, "--out", f"out.{fmt}", cwd=tmp_path
        )
        assert (code, err) == (0, ""), err
        assert f"as a Character Card V3 {fmt.upper()}" in out
        again = tmp_path / f"again-{fmt}"
        again.mkdir()
        (again / f"mira.{fmt}").write_bytes((tmp_path / f"out.{fmt}").read_bytes())
        code, _, err = personabot("persona", "import", f"mira.{fmt}", cwd=again)
        assert (code, err) == (0, "")
        # Every mapped field, every unknown one and every extension, equal in meaning.
        assert _persona(again / "personabot.toml", "mira-kell") == first
        assert _stored(again, "mira-kell") == stored
        assert _stored(again, "mira-kell")["data"]["extensions"] == EXTENSIONS
    exported = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))
    assert exported == stored
    for field in ("name", "description", "first_mes", "alternate_greetings", "tags", "creator"):
        assert exported["data"][field] == original["data"][field]


def test_a_png_export_has_chara_and_ccv3_chunks_around_the_kept_image(tmp_path: Path) -> None:
    source = png_bytes({"Software": "paint", "chara": b64(v2_card())}, size=(31, 17))
    (tmp_path / "mira.png").write_bytes(source)
    assert personabot("persona", "import", "mira.png", "--id", "mira", cwd=tmp_path)[0] == 0
    # mira.png, the default name, is the card imported: never replaced without a word
    # (issue 35: export overwrote whatever file held the name).
    code, _, err = personabot("persona", "export", "mira", cwd=tmp_path)  # png is the default
    assert code == 2 and "mira.png exists: pass --force to replace it" in err
    assert (tmp_path / "mira.png").read_bytes() == source
    code, _, err = personabot("persona", "export", "mira", "--force", cwd=tmp_path)
    assert (code, err) == (0, "")
    exported = (tmp_path / "mira.png").read_bytes()

    kinds = [kind for kind, _ in chunks(exported)]
    assert kinds[-3:] == [b"tEXt", b"tEXt", b"IEND"] and b"IDAT" in kinds
    texts = dict(_text_chunks(exported))
    assert [k for k, _ in _text_chunks(exported)] == ["Software", "chara", "ccv3"]
    v2 = json.loads(base64.b64decode(texts["chara"]).decode("utf-8"))
    v3 = json.loads(base64.b64decode(texts["ccv3"]).decode("utf-8"))
    assert (v2["spec"], v2["spec_version"]) == ("chara_card_v2", "2.0")
    assert (v3["spec"], v3["spec_version"]) == ("chara_card_v3", "3.0")
    assert v2["data"] == v3["data"]
    assert v3["data"]["extensions"] == EXTENSIONS
    # The picture and every other chunk are the original's, byte for byte.
    assert [c for c in chunks(exported) if c[0] != b"tEXt"] == [
        c for c in chunks(source) if c[0] != b"tEXt"
    ]
    with Image.open(io.BytesIO(exported)) as picture, Image.open(io.BytesIO(source)) as before:
        assert picture.size == (31, 17)
        assert picture.tobytes() == before.tobytes()
        assert picture.text["ccv3"] == texts["ccv3"]


def test_edits_in_the_toml_win_and_the_rest_of_the_card_stays(tmp_path: Path) -> None:
    write_card(tmp_path / "mira.json", v3_card())
    assert personabot("persona", "import", "mira.json", "--id", "mira", cwd=tmp_path)[0] == 0
    config = tmp_path / "personabot.toml"
    doc = tomlkit.parse(config.read_text(encoding="utf-8"))
    persona = doc["personas"][0]
    persona["description"] = "Edited by the operator."
    persona["greetings"].append("A third greeting.")
    del persona["nickname"]
    book = persona["lorebook"]
    book["scan_depth"] = 3
    book["entries"][0]["content"] = "Edited lore."
    book["entries"][0]["name"] = "beacon"
    del book["entries"][1]  # the Orin entry is removed
    fresh = tomlkit.table()
    fresh.update({"content": "The ferry leaves at dawn.", "keys": ["ferry"], "priority": 1})
    book["entries"].append(fresh)
    config.write_text(tomlkit.dumps(doc), encoding="utf-8")

    code, _, err = personabot(
        "persona", "export", "mira", "--format", "json", "--force", cwd=tmp_path
    )  # mira.json is the card imported
    assert (code, err) == (0, "")
    data = json.loads((tmp_path / "mira.json").read_text(encoding="utf-8"))["data"]
    assert data["description"] == "Edited by the operator."
    assert data["alternate_greetings"][-1] == "A third greeting."
    assert "nickname" not in data
    assert data["personality"] == v3_card()["data"]["personality"]  # unedited: as stored
    assert data["extensions"] == EXTENSIONS and data["source"] == ["https://example.org/mira"]
    card_book = data["character_book"]
    assert card_book["scan_depth"] == 3 and card_book["token_budget"] == 700
    assert card_book["extensions"] == {"book_ext": {"x": None}}
    assert card_book["description"] == "The world"
    edited, added = card_book["entries"]
    assert edited["id"] == 7 and edited["content"] == "Edited lore."
    assert (edited["name"], edited["comment"]) == ("beacon", "beacon")
    # What personabot does not map stays with the entry (merged by id).
    assert edited["position"] == "after_char"
    assert edited["extensions"] == {"position": 1, "probability": 100, "ü": None}
    assert (edited["use_regex"], edited["secondary_keys"]) == (True, ["storm"])
    assert added["content"] == "The ferry leaves at dawn." and added["priority"] == 1
    assert isinstance(added["id"], int) and added["id"] != 7
    assert (added["use_regex"], added["enabled"], added["keys"]) == (False, True, ["ferry"])


def test_a_persona_without_a_card_exports_from_its_fields(tmp_path: Path) -> None:
    # No personabot.toml here: the bundled example's persona, which has no card.
    code, out, err = personabot("persona", "export", "companion", "--format", "png", cwd=tmp_path)
    assert (code, err) == (0, "")
    assert "PNG (a plain image)" in out and "from its TOML fields" in out
    with Image.open(tmp_path / "companion.png") as picture:
        v3 = json.loads(base64.b64decode(picture.text["ccv3"]))
    assert v3["spec"] == "chara_card_v3"
    assert v3["data"]["name"] == "Mira"
    assert v3["data"]["system_prompt"].startswith("You are Mira")
    assert v3["data"]["first_mes"] == "Hi, I'm Mira. What's on your mind today?"
    for field in ("description", "personality", "scenario", "mes_example", "creator_notes"):
        assert v3["data"][field] == ""
    assert v3["data"]["extensions"] == {} and "character_book" not in v3["data"]
    code, _, err = personabot(
        "persona", "import", "companion.png", "--out", "new.toml", cwd=tmp_path
    )
    assert (code, err) == (0, "")
    mira = _persona(tmp_path / "new.toml", "mira")
    assert mira.first_message == ["Hi, I'm Mira. What's on your mind today?"]


def test_an_unknown_persona_or_a_lost_card_is_one_error(tmp_path: Path) -> None:
    write_card(tmp_path / "mira.json", v2_card())
    assert personabot("persona", "import", "mira.json", cwd=tmp_path)[0] == 0
    code, out, err = personabot("persona", "export", "nobody", cwd=tmp_path)
    assert (code, out) == (2, "")
    assert err == "personabot: card error: no persona with id 'nobody' (known: mira-kell)\n"
    (tmp_path / "cards" / "mira-kell.json").unlink()
    code, out, err = personabot("persona", "export", "mira-kell", cwd=tmp_path)
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert "the card of persona 'mira-kell' is missing" in err
    assert not (tmp_path / "mira-kell.png").exists()
