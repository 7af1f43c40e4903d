"""A persona back to a card: its TOML fields over the stored card.

Export starts from the stored card and writes back only what the operator changed: a field
whose TOML value differs from what the stored card maps to (bot/personas/mapping.py). So an
unedited persona exports exactly its stored card (unknown fields, ``extensions``, nulls and
all), and an edited one changes only the edited fields. Lorebook entries are matched by id:
the stored entry keeps the fields personabot does not map (``position``, ``extensions``,
...), the TOML decides the rest; an entry removed from the TOML is gone from the card.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any, Final

from pydantic import ValidationError

from bot.config import LorebookSettings, LoreEntrySettings, PersonaSettings
from bot.core.errors import CardError
from bot.personas.card import LIST_FIELDS, TEXT_FIELDS, V3
from bot.personas.mapping import persona_table


def _stored_view(card: Mapping[str, Any], persona_id: str) -> PersonaSettings:
    """What import made (or would make) of the stored card, as settings to compare with."""
    mapped = persona_table(card, persona_id=persona_id, card_path="")
    try:
        return PersonaSettings.model_validate(mapped.table)
    except ValidationError as exc:
        raise CardError(f"the stored card does not map to a valid persona: {exc}") from None


def _set_text(key: str) -> Callable[[dict[str, Any], Any], None]:
    def write(data: dict[str, Any], value: Any) -> None:
        data[key] = value

    return write


def _set_list(key: str) -> Callable[[dict[str, Any], Any], None]:
    def write(data: dict[str, Any], value: Any) -> None:
        data[key] = list(value)

    return write


def _set_nickname(data: dict[str, Any], value: Any) -> None:
    if value:
        data["nickname"] = value
    else:
        data.pop("nickname", None)


def _set_first(data: dict[str, Any], value: Any) -> None:
    # V3 has one first_mes; several opening lines go as one message, as they are sent.
    data["first_mes"] = "\n\n".join(value)


_WRITERS: Final[dict[str, Callable[[dict[str, Any], Any], None]]] = {
    "name": _set_text("name"),
    "nickname": _set_nickname,
    "description": _set_text("description"),
    "personality": _set_text("personality"),
    "scenario": _set_text("scenario"),
    "system": _set_text("system_prompt"),
    "post_history": _set_text("post_history_instructions"),
    "first_message": _set_first,
    "greetings": _set_list("alternate_greetings"),
    "group_greetings": _set_list("group_only_greetings"),
    "example_dialogue": _set_text("mes_example"),
}


def blank_card() -> dict[str, Any]:
    """A V3 card with every field empty (a persona without a stored card starts here)."""
    data: dict[str, Any] = dict.fromkeys(TEXT_FIELDS, "")
    data |= {key: [] for key in LIST_FIELDS}
    data["extensions"] = {}
    return {"spec": V3, "spec_version": "3.0", "data": data}


def card_from_persona(persona: PersonaSettings, stored: Mapping[str, Any] | None) -> dict[str, Any]:
    """The V3 card of ``persona``: its TOML fields over the stored (normalised) card."""
    card = copy.deepcopy(dict(stored)) if stored is not None else blank_card()
    old = _stored_view(card, persona.id) if stored is not None else None
    data = card["data"]
    for field, write in _WRITERS.items():
        value = getattr(persona, field)
        if old is None or getattr(old, field) != value:
            write(data, value)
    if old is None or old.lorebook != persona.lorebook:
        if persona.lorebook is None:
            data.pop("character_book", None)
        else:
            base = data.get("character_book")
            old_book = old.lorebook if old is not None else None
            data["character_book"] = _book_card(persona.lorebook, base, old_book)
    return card


def _book_card(
    book: LorebookSettings, base: Mapping[str, Any] | None, old: LorebookSettings | None
) -> dict[str, Any]:
    out = copy.deepcopy(dict(base)) if base is not None and old is not None else {}
    out.setdefault("extensions", {})
    for key in ("name", "scan_depth", "token_budget"):
        if old is None or getattr(old, key) != getattr(book, key):
            out[key] = getattr(book, key)
    # TOML extensions (import writes none) add to the stored ones.
    out["extensions"] = {**out["extensions"], **book.extensions}
    stored = {e["id"]: e for e in (out.get("entries") or [])}
    before = {e.id: e for e in old.entries} if old is not None else {}
    entries: list[dict[str, Any]] = []
    taken = {e.id for e in book.entries if e.id is not None} | set(stored)
    fresh = 0
    for entry in book.entries:
        ident = entry.id
        if ident is None:  # a new entry of the TOML: the next free integer id
            while fresh in taken:
                fresh += 1
            ident = fresh
            taken.add(fresh)
        entries.append(_entry_card(entry, ident, stored.get(ident), before.get(ident)))
    out["entries"] = entries
    return out


_ENTRY_KEYS: Final = (
    ("content", "content"),
    ("keys", "keys"),
    ("secondary_keys", "secondary_keys"),
    ("selective", "selective"),
    ("regex", "use_regex"),
    ("case_sensitive", "case_sensitive"),
    ("constant", "constant"),
    ("enabled", "enabled"),
    ("insertion_order", "insertion_order"),
    ("priority", "priority"),
)


def _entry_card(
    entry: LoreEntrySettings,
    ident: int | str,
    base: Mapping[str, Any] | None,
    old: LoreEntrySettings | None,
) -> dict[str, Any]:
    if base is None or old is None:
        base, old = {}, None
    out = copy.deepcopy(dict(base))
    out["id"] = ident
    out.setdefault("extensions", {})
    for ours, theirs in _ENTRY_KEYS:
        value = getattr(entry, ours)
        if old is None or getattr(old, ours) != value:
            out[theirs] = list(value) if isinstance(value, list) else value
    if old is None or old.name != entry.name:
        # SillyTavern shows an entry's comment as its title; V3 also has name.
        out["name"] = out["comment"] = entry.name
    out["extensions"] = {**out["extensions"], **entry.extensions}
    return out
