"""Character Card V1 (TavernAI's flat object, no ``spec``), as JSON and in a PNG's ``chara``
chunk, imports like V2: its six fields map one-to-one (issue 35; before, V1 was refused with
a message sending people to SillyTavern)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bot.config import load_settings
from tests.cards.cards import b64, personabot, png_bytes

V1: dict[str, Any] = {
    "name": "Mira Kell",
    "description": "{{char}} keeps the lighthouse on Kell Point.",
    "personality": "warm, stubborn",
    "scenario": "A stormy night.",
    "first_mes": "Oh! Come in, {{user}}.",
    "mes_example": "<START>\n{{user}}: Hi\n{{char}}: Hello there.",
    "metadata": {"version": 1, "tool": "an old editor"},
}


@pytest.mark.parametrize("container", ["json", "png"])
def test_a_v1_card_imports_field_for_field(tmp_path: Path, container: str) -> None:
    source = tmp_path / f"mira.{container}"
    if container == "json":
        source.write_text(json.dumps(V1), encoding="utf-8")
    else:
        source.write_bytes(png_bytes({"chara": b64(V1)}))
    code, out, err = personabot("persona", "import", source.name, cwd=tmp_path)
    assert (code, err) == (0, "")
    assert out.startswith(f"imported 'Mira Kell' (Character Card V1, {container.upper()}"), out
    (mira,) = load_settings(tmp_path / "personabot.toml").personas
    assert (mira.id, mira.name) == ("mira-kell", "Mira Kell")
    assert mira.description == V1["description"]
    assert mira.personality == V1["personality"]
    assert mira.scenario == V1["scenario"]
    assert mira.first_message == [V1["first_mes"]]
    assert mira.example_dialogue == V1["mes_example"]
    # The stored card is V3; what V1 had besides its six fields is kept for export.
    stored = json.loads((tmp_path / "cards" / "mira-kell.json").read_text(encoding="utf-8"))
    assert stored["spec"] == "chara_card_v3"
    assert stored["data"]["first_mes"] == V1["first_mes"]
    assert stored["metadata"] == V1["metadata"]
