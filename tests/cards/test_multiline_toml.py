"""Imported text of several lines is written as TOML multi-line strings, one source line per
line of text, and reads back exactly: CRLF line endings (SillyTavern's default card has
them), quotes, backslashes, ``\"\"\"``, trailing blanks and newlines included (issue 35).
Before, a text holding a carriage return was written as one escaped line (the default card's
2,851-character description on a single line of the TOML)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import tomlkit
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.config import load_settings
from bot.personas.importer import import_card
from bot.personas.toml_file import with_persona
from tests.cards.cards import v2_card, write_card

# Lines as a card written on Windows holds them: CRLF endings, quotes, brackets, macros.
_LINE = '[{{char}}\'s trait= "caring", "protective"] \\ *she smiles* """ '
DESCRIPTION = "\r\n".join(f"{_LINE}{i}" for i in range(40)) + "\r\n"


def test_a_crlf_description_is_a_multiline_string_that_reads_back(tmp_path: Path) -> None:
    card = v2_card(description=DESCRIPTION, first_mes='She says: "Hi."\r\n\r\nWelcome. ')
    source = write_card(tmp_path / "mira.png", card)
    import_card(source, out=tmp_path / "personabot.toml", persona_id="mira")

    text = (tmp_path / "personabot.toml").read_text(encoding="utf-8")
    # One source line per line of the description, none of them the whole text.
    assert max(len(line) for line in text.splitlines()) < 200
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('description = """'))
    assert all(line.endswith("\\r") for line in lines[start : start + 40])
    assert lines[start + 40] == '"""'
    mira = next(p for p in load_settings(tmp_path / "personabot.toml").personas)
    assert mira.description == DESCRIPTION
    assert mira.first_message == ['She says: "Hi."\r\n\r\nWelcome. ']


# Any text, with more of what is hard to write: line endings, quotes, backslashes, blanks.
_text = st.lists(
    st.text(st.characters(codec="utf-8"), max_size=8)
    | st.sampled_from(["\r\n", "\r", "\n", '"', '"""', "\\", " ", "\t"]),
    max_size=12,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=_text)
def test_every_text_reads_back_exactly_and_its_line_breaks_are_lines(text: str) -> None:
    persona = {"id": "p", "name": "P", "description": text, "first_message": [text]}
    written, _ = with_persona(None, persona, where="personabot.toml")
    for read in (tomllib.loads(written), tomlkit.parse(written).unwrap()):
        (table,) = read["personas"]
        assert table["description"] == text
        assert table["first_message"] == [text]
    # Each line break of the text is a line break of the file, never an escaped \n.
    assert "\\n" not in written.replace("\\\\", "")
    assert written.count("\n") >= 2 * text.count("\n") + 2
