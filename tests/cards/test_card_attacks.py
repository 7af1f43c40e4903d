"""Review of issue 18: hostile and odd cards through ``personabot persona import|export``.

Breaks (fixed): a card nested a few hundred levels deep crashed the import with a RecursionError
traceback; a number too large for a float (``1e400``) was kept as ``Infinity``, which is not
JSON, so the persona could never be exported again. What held is tested below them.
"""

from __future__ import annotations

import io
import json
import struct
import zipfile
import zlib
from pathlib import Path
from typing import Any

import pytest

from bot.config import load_settings
from bot.core.errors import CardError
from bot.personas.card import normalise
from bot.personas.exporter import export_persona
from bot.personas.importer import import_card
from bot.personas.png import chunks
from tests.cards.cards import b64, personabot, png_bytes, v2_card, v3_card, write_card


def _nothing_written(folder: Path) -> None:
    assert sorted(p.name for p in folder.iterdir()) == ["card.json"]


def _one_error(code: int, out: str, err: str) -> str:
    assert (code, out) == (2, "")
    assert err.startswith("personabot: card error: ") and err.count("\n") == 1, err
    return err


def test_a_deeply_nested_card_is_one_clear_error(tmp_path: Path) -> None:
    """Nesting Python's JSON parser accepts (600 levels) but copying the card cannot: one
    error line and nothing written, not a RecursionError traceback."""
    text = json.dumps(v3_card())
    deep = '{"a": ' * 600 + "{}" + "}" * 600
    text = text.replace('"extensions": {', f'"extensions": {{"deep": {deep}, ', 1)
    (tmp_path / "card.json").write_text(text, encoding="utf-8")
    err = _one_error(*personabot("persona", "import", "card.json", cwd=tmp_path))
    assert "nested more than 100 levels deep" in err
    _nothing_written(tmp_path)


def test_a_number_too_large_for_json_is_refused_at_import(tmp_path: Path) -> None:
    """``1e400`` parses as infinity; stored, it became ``Infinity`` (not JSON) and every later
    export of the persona failed. Refused at the import, with the number named."""
    text = json.dumps(v3_card()).replace('"talkativeness": "0.5"', '"talkativeness": 1e400')
    (tmp_path / "card.json").write_text(text, encoding="utf-8")
    err = _one_error(*personabot("persona", "import", "card.json", cwd=tmp_path))
    assert "the number 1e400 is too large" in err
    _nothing_written(tmp_path)


# -- what held ------------------------------------------------------------------------------


def _png(before_iend: list[tuple[bytes, bytes]], after_iend: list[tuple[bytes, bytes]]) -> bytes:
    def chunk(kind: bytes, payload: bytes) -> bytes:
        crc = zlib.crc32(kind + payload) & 0xFFFFFFFF
        return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", crc)

    parts = chunks(png_bytes({}))
    body = [*parts[:-1], *before_iend, parts[-1]]
    return b"\x89PNG\r\n\x1a\n" + b"".join(chunk(k, p) for k, p in [*body, *after_iend])


def _imported(tmp_path: Path, name: str, data: bytes) -> str:
    source = tmp_path / name
    source.write_bytes(data)
    out = tmp_path / f"{name}.toml"
    import_card(source, out=out, persona_id=source.stem.replace(".", "-"))
    return load_settings(out).personas[-1].description


def test_png_chunk_tricks_are_read_as_sillytavern_reads_them(tmp_path: Path) -> None:
    v2 = b64(v2_card(description="from chara"))
    v3 = b64(v3_card(description="from ccv3"))
    chara = (b"tEXt", b"chara\0" + v2.encode())
    # A ccv3 chunk after IEND is not part of the image: the chara chunk is the card.
    assert _imported(tmp_path, "a.png", _png([chara], [(b"tEXt", b"ccv3\0" + v3.encode())])) == (
        "from chara"
    )
    # Compressed (zTXt) and international (iTXt) ccv3 chunks still win over chara.
    ztxt = (b"zTXt", b"ccv3\0\0" + zlib.compress(v3.encode()))
    itxt = (b"iTXt", b"ccv3\0\0\0\0\0" + v3.encode())
    assert _imported(tmp_path, "b.png", _png([chara, ztxt], [])) == "from ccv3"
    assert _imported(tmp_path, "c.png", _png([chara, itxt], [])) == "from ccv3"
    # Thousands of other text chunks around the card change nothing.
    noise = [(b"tEXt", f"k{i}\0v".encode()) for i in range(5000)]
    assert _imported(tmp_path, "d.png", _png([*noise, chara, *noise], [])) == "from chara"
    # A zTXt bomb (200 MB of text in 200 KB) is one error; nothing is unpacked or written.
    bomb = (b"zTXt", b"ccv3\0\0" + zlib.compress(b"A" * (200 * 1024 * 1024), 9))
    (tmp_path / "bomb.png").write_bytes(_png([chara, bomb], []))
    with pytest.raises(CardError, match="not a readable PNG image"):
        import_card(tmp_path / "bomb.png", out=tmp_path / "bomb.toml")
    assert not (tmp_path / "bomb.toml").exists()


def _charx(members: list[tuple[str, bytes | None]]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members:
            archive.writestr(zipfile.ZipInfo(name) if data is None else name, data or b"")
    return buffer.getvalue()


def test_charx_member_names_never_reach_the_file_system(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    card = json.dumps(v3_card(description="the real one")).encode()
    traversal = _charx(
        [("../../escaped.txt", b"x"), ("/abs/escaped.txt", b"x"), ("card.json", card)]
    )
    assert _imported(work, "t.charx", traversal) == "the real one"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]
    assert sorted(p.name for p in (work / "cards").iterdir()) == ["t.json"]
    # card.json as a folder, or only below the root: one error, nothing written.
    cases: list[tuple[str, list[tuple[str, bytes | None]]]] = [
        ("dir.charx", [("card.json/", None), ("card.json/x", card)]),
        ("sub.charx", [("sub/card.json", card)]),
    ]
    for name, members in cases:
        (work / name).write_bytes(_charx(members))
        with pytest.raises(CardError, match=r"the CHARX has no card\.json at its root"):
            import_card(work / name, out=work / "other.toml")
    assert not (work / "other.toml").exists()


TOML_BREAKERS = [
    'He said """hi""" and \'\'\'yo\'\'\'\nends with a quote "',
    'multi\nline ending ""',
    "C:\\path\\to\nnext \\n \\u0041 literal",
    "a\x00b\nc",
    "bell\x07 esc\x1b del\x7f\nx\x0b\x0c",
    "a\r\nb",
    "a\rb",
    "a\u2028b\u2029c\nd",
    "\ufeffhello\nx",
    '"\n"',
    '""""""\n"""',
]


@pytest.mark.parametrize("text", TOML_BREAKERS, ids=range(len(TOML_BREAKERS)))
def test_text_that_breaks_naive_toml_round_trips(tmp_path: Path, text: str) -> None:
    card = v3_card(description=text, mes_example=text, alternate_greetings=[text])
    card["data"]["post_history_instructions"] = text
    entry: dict[str, Any] = card["data"]["character_book"]["entries"][0]
    entry["content"], entry["keys"] = text, [text, "x"]
    write_card(tmp_path / "card.json", card)
    import_card(tmp_path / "card.json", out=tmp_path / "personabot.toml")
    mira = load_settings(tmp_path / "personabot.toml").personas[-1]
    assert mira.lorebook is not None
    got = (mira.description, mira.example_dialogue, mira.greetings[0], mira.post_history)
    assert got == (text,) * 4
    assert (mira.lorebook.entries[0].content, mira.lorebook.entries[0].keys[0]) == (text, text)
    export_persona("mira-kell", config=tmp_path / "personabot.toml", fmt="json", out=tmp_path / "x")
    assert json.loads((tmp_path / "x").read_text(encoding="utf-8")) == normalise(card)


def test_an_emoji_name_gets_an_id_and_a_second_one_is_refused_untouched(tmp_path: Path) -> None:
    write_card(tmp_path / "a.json", v3_card(name="🌙✨"))
    write_card(tmp_path / "b.json", v3_card(name="🔥"))
    code, out, err = personabot("persona", "import", "a.json", cwd=tmp_path)
    assert (code, err) == (0, "") and "as persona 'persona'" in out and "--id sets one" in out
    before = (tmp_path / "personabot.toml").read_bytes()
    err = _one_error(*personabot("persona", "import", "b.json", cwd=tmp_path))
    assert "a persona with id 'persona' exists already; choose another with --id" in err
    assert (tmp_path / "personabot.toml").read_bytes() == before
    assert sorted(p.name for p in (tmp_path / "cards").iterdir()) == ["persona.json"]


def test_a_stored_card_edited_into_garbage_is_one_export_error(tmp_path: Path) -> None:
    write_card(tmp_path / "card.json", v3_card())
    import_card(tmp_path / "card.json", out=tmp_path / "personabot.toml")
    stored = tmp_path / "cards" / "mira-kell.json"
    for garbage in ("{not json", json.dumps({"spec": "nope"}), '{"a": ' * 300 + "1" + "}" * 300):
        stored.write_text(garbage, encoding="utf-8")
        with pytest.raises(CardError):
            export_persona(
                "mira-kell", config=tmp_path / "personabot.toml", fmt="png", out=tmp_path / "o.png"
            )
        assert not (tmp_path / "o.png").exists()


def test_a_symlinked_toml_is_updated_where_it_points(tmp_path: Path) -> None:
    """Break (fixed): the atomic rename replaced the link itself, so the operator's real file
    (kept elsewhere, e.g. in a dotfiles repository) never got the persona and the link
    became a stray copy."""
    (tmp_path / "dotfiles").mkdir()
    (tmp_path / "bot").mkdir()
    real = tmp_path / "dotfiles" / "personabot.toml"
    real.write_text(
        '[[personas]]\nid = "orin"\nname = "Orin"\nsystem = "You are Orin."\n'
        'first_message = ["Hm."]\n',
        encoding="utf-8",
    )
    link = tmp_path / "bot" / "personabot.toml"
    link.symlink_to(Path("..") / "dotfiles" / "personabot.toml")
    write_card(tmp_path / "bot" / "card.json", v3_card())
    code, _, err = personabot("persona", "import", "card.json", cwd=tmp_path / "bot")
    assert (code, err) == (0, "")
    assert link.is_symlink()
    assert [p.id for p in load_settings(real).personas] == ["orin", "mira-kell"]
    assert (tmp_path / "bot" / "cards" / "mira-kell.json").is_file()  # beside the path used
    assert sorted(p.name for p in (tmp_path / "dotfiles").iterdir()) == ["personabot.toml"]
