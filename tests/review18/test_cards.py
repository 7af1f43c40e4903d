"""Review of issue 18: hostile and odd cards through ``personabot persona import|export``.

Breaks (fixed): a card nested a few hundred levels deep crashed the import with a RecursionError
traceback; a number too large for a float (``1e400``) was kept as ``Infinity``, which is not
JSON, so the persona could never be exported again.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.cards.cards import personabot, v3_card


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
