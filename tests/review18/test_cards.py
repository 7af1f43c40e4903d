"""Review of issue 18: hostile and odd cards through ``personabot persona import|export``.

Break (fixed): a card nested a few hundred levels deep crashed the import with a RecursionError
traceback.
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
