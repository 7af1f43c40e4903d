"""A Hypothesis property over generated cards: import -> export -> import keeps every field,
mapped and unknown, through the real TOML writer and settings loader."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.config import load_settings
from bot.personas.exporter import build_card
from bot.personas.importer import import_card
from tests.cards.cards import write_card

_text = st.text(max_size=40)
_words = st.text(min_size=1, max_size=20).filter(lambda s: s.strip())
_json: st.SearchStrategy[Any] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=12,
)
_extensions = st.dictionaries(_text, _json, max_size=4)

_entry = st.fixed_dictionaries(
    {"keys": st.lists(_text, max_size=3), "content": _text, "extensions": _extensions},
    optional={
        "enabled": st.booleans(),
        "insertion_order": st.integers(-1000, 1000),
        "use_regex": st.booleans(),
        "case_sensitive": st.none() | st.booleans(),
        "constant": st.booleans(),
        "selective": st.booleans(),
        "secondary_keys": st.lists(_text, max_size=2),
        "priority": st.integers(-100, 100),
        "comment": _text,
        "name": _text,
        "id": st.integers(0, 5) | st.sampled_from(["a", "b"]),
        "position": st.sampled_from(["before_char", "after_char"]),
        "unknown_entry_field": _json,
    },
)
_book = st.fixed_dictionaries(
    {"entries": st.lists(_entry, max_size=4), "extensions": _extensions},
    optional={
        "name": _text,
        "scan_depth": st.integers(0, 500),
        "token_budget": st.integers(1, 200_000),
        "description": _text,
    },
)
_data = st.fixed_dictionaries(
    {
        "name": _words,
        "description": _words,
        "personality": _text,
        "scenario": _text,
        "first_mes": _text,
        "mes_example": _text,
        "creator_notes": _text,
        "system_prompt": _text,
        "post_history_instructions": _text,
        "alternate_greetings": st.lists(_text, max_size=3),
        "tags": st.lists(_text, max_size=3),
        "creator": _text,
        "character_version": _text,
        "extensions": _extensions,
    },
    optional={
        "nickname": _words,
        "group_only_greetings": st.lists(_text, max_size=2),
        "character_book": _book,
        "unknown_data_field": _json,
    },
)
_cards = st.builds(
    lambda spec, data, extra: {"spec": spec, "spec_version": "x", "data": data, **extra},
    st.sampled_from(["chara_card_v2", "chara_card_v3"]),
    _data,
    st.dictionaries(st.sampled_from(["unknown_top", "other"]), _json, max_size=2),
)


def _import(folder: Path, card_file: Path) -> tuple[Any, dict[str, Any]]:
    config = folder / "personabot.toml"
    done = import_card(card_file, out=config, persona_id="p")
    persona = next(p for p in load_settings(config).personas if p.id == done.persona_id)
    stored = json.loads((folder / "cards" / "p.json").read_text(encoding="utf-8"))
    return persona, stored


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(card=_cards, container=st.sampled_from(["json", "png", "charx"]))
def test_import_export_import_keeps_every_field(card: dict[str, Any], container: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "a").mkdir()
        (root / "b").mkdir()
        source = write_card(root / "a" / f"card.{container}", card)
        persona, stored = _import(root / "a", source)
        # Nothing of the original is lost in the stored card.
        for key, value in card["data"].items():
            if key != "character_book":
                assert stored["data"][key] == value
        exported, _ = build_card(persona, root / "a" / "personabot.toml")
        assert exported == stored
        again = write_card(root / "b" / f"card.{container}", exported)
        persona_b, stored_b = _import(root / "b", again)
        assert persona_b == persona
        assert stored_b == stored
