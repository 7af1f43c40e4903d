"""A card as personabot keeps it: normalised Character Card V3 JSON.

``normalise`` accepts V1 (TavernAI's flat object of six text fields, no ``spec``: read as
the V2 card with those fields in ``data``), V2 (``chara_card_v2``) and V3
(``chara_card_v3``), checks the types of
the fields personabot reads and that its lorebook is within the limits a config accepts
(memory/lorebook.py; the number of entries is counted first, before the card is copied),
and returns a V3 card with every V2 and V3 field present (the defaults of the V3 spec where
the card had none or null). Everything else, top-level keys, unknown ``data`` keys and every
``extensions`` object, is kept as it was. Lorebook entries without an id (or with one used
twice) get the next free integer, so that export can merge an entry edited in the TOML with
its stored fields by id.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any, Final, TypeGuard

from bot.core.errors import CardError
from memory.lorebook import LoreEntry, book_problems, entry_problems, too_many_entries

V2: Final = "chara_card_v2"
V3: Final = "chara_card_v3"

#: The text fields of ``data`` (V2 and V3), "" when missing.
TEXT_FIELDS: Final = (
    "name",
    "description",
    "personality",
    "scenario",
    "first_mes",
    "mes_example",
    "creator_notes",
    "system_prompt",
    "post_history_instructions",
    "creator",
    "character_version",
)
#: The fields of a Character Card V1 (all text), which V2 moved into ``data`` unchanged.
V1_FIELDS: Final = ("name", "description", "personality", "scenario", "first_mes", "mes_example")
#: The list-of-text fields of ``data``, [] when missing.
LIST_FIELDS: Final = ("alternate_greetings", "tags", "group_only_greetings")


def _kind(value: object) -> str:
    return {dict: "an object", list: "a list", str: "text", bool: "true/false"}.get(
        type(value), "a number" if isinstance(value, int | float) else "null"
    )


def _text(data: dict[str, Any], key: str, where: str) -> None:
    value = data.get(key)
    if value is None:
        data[key] = ""
    elif not isinstance(value, str):
        raise CardError(f"{where}.{key}: expected text, found {_kind(value)}")


def _texts(data: dict[str, Any], key: str, where: str) -> None:
    value = data.get(key)
    if value is None:
        data[key] = []
    elif not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise CardError(f"{where}.{key}: expected a list of text")


def _object(data: dict[str, Any], key: str, where: str) -> None:
    value = data.get(key)
    if value is None:
        data[key] = {}
    elif not isinstance(value, dict):
        raise CardError(f"{where}.{key}: expected an object, found {_kind(value)}")


def _flag(entry: dict[str, Any], key: str, where: str) -> None:
    value = entry.get(key)
    if value is not None and not isinstance(value, bool):
        raise CardError(f"{where}.{key}: expected true or false, found {_kind(value)}")


def _integer(entry: dict[str, Any], key: str, where: str) -> None:
    value = entry.get(key)
    if value is None:
        return
    if isinstance(value, float) and value.is_integer():
        entry[key] = int(value)
    elif isinstance(value, bool) or not isinstance(value, int):
        raise CardError(f"{where}.{key}: expected a whole number, found {_kind(value)}")


def normalise(card: object) -> dict[str, Any]:
    """The card as normalised V3 (a new object; ``card`` is not changed)."""
    if not isinstance(card, dict):
        raise CardError("the card is not a JSON object")
    spec = card.get("spec")
    if is_v1(card):
        card = _from_v1(card)
    elif spec not in (V2, V3):
        raise CardError(f"unsupported card spec {spec!r}: expected {V2!r} or {V3!r}")
    _count_entries(card)
    out = copy.deepcopy(card)
    data = out.get("data")
    if not isinstance(data, dict):
        raise CardError("the card has no 'data' object")
    for key in TEXT_FIELDS:
        _text(data, key, "data")
    for key in LIST_FIELDS:
        _texts(data, key, "data")
    _object(data, "extensions", "data")
    if not data["name"].strip():
        raise CardError("the card has no name (data.name is empty)")
    if data.get("nickname") is not None and not isinstance(data["nickname"], str):
        raise CardError(f"data.nickname: expected text, found {_kind(data['nickname'])}")
    if data.get("character_book") is not None:
        data["character_book"] = _book(data["character_book"])
    out["spec"], out["spec_version"] = V3, "3.0"
    try:  # a lone surrogate from a \\ud800 escape parses but can never be written as UTF-8
        json.dumps(out, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise CardError("the card holds text that is not valid Unicode") from None
    return out


def is_v1(card: Mapping[str, Any]) -> bool:
    """Whether ``card`` is a Character Card V1: TavernAI's flat object of text fields, with
    no ``spec`` and no ``data``."""
    return "spec" not in card and "data" not in card and "name" in card


def _from_v1(card: dict[str, Any]) -> dict[str, Any]:
    """A V1 card as V2: its six fields are V2's ``data`` fields of the same names; any other
    key (an editor's metadata) stays at the top level, as unknown keys do."""
    for key in V1_FIELDS:
        value = card.get(key)
        if value is not None and not isinstance(value, str):
            raise CardError(f"{key}: expected text, found {_kind(value)} (a V1 card)")
    data = {key: card[key] for key in V1_FIELDS if key in card}
    rest = {key: value for key, value in card.items() if key not in V1_FIELDS}
    return {"spec": V2, "spec_version": "2.0", "data": data, **rest}


def normalise_book(book: object, where: str = "data.character_book") -> dict[str, Any]:
    """A lorebook in the cards' ``character_book`` form, checked and within the limits, with
    every entry numbered (a new object: ``book`` is not changed)."""
    entries = book.get("entries") if isinstance(book, dict) else None
    if isinstance(entries, list) and (problem := too_many_entries(len(entries))):
        raise CardError(f"{where}.{problem}")
    return _book(copy.deepcopy(book), where)


def _book(book: object, where: str = "data.character_book") -> dict[str, Any]:
    if not isinstance(book, dict):
        raise CardError(f"{where}: expected an object, found {_kind(book)}")
    _object(book, "extensions", where)
    for key in ("scan_depth", "token_budget"):
        _integer(book, key, where)
    if book.get("name") is not None and not isinstance(book["name"], str):
        raise CardError(f"{where}.name: expected text, found {_kind(book['name'])}")
    entries = book.get("entries")
    if entries is None:
        entries = book["entries"] = []
    if not isinstance(entries, list):
        raise CardError(f"{where}.entries: expected a list, found {_kind(entries)}")
    for index, entry in enumerate(entries):
        _entry(entry, f"{where}.entries[{index}]")
    _within_limits(entries, where)
    _number_entries(entries)
    return book


def _count_entries(card: dict[str, Any]) -> None:
    """Too many lorebook entries are refused before anything else is done with them (a card
    of 200,000 took 107 s and 3.1 GB to import, issue 34)."""
    data = card.get("data")
    book = data.get("character_book") if isinstance(data, dict) else None
    entries = book.get("entries") if isinstance(book, dict) else None
    if isinstance(entries, list) and (problem := too_many_entries(len(entries))):
        raise CardError(f"data.character_book.{problem}")


def _within_limits(entries: list[dict[str, Any]], where: str) -> None:
    """The limits the config applies to the imported lorebook, checked here so that nothing is
    written (the first problem, naming its limit; entries already type-checked)."""
    views = [
        LoreEntry(
            entry["content"],
            keys=tuple(entry["keys"]),
            secondary_keys=tuple(entry.get("secondary_keys") or ()),
            regex=entry["use_regex"],
            name=entry.get("name") or entry.get("comment") or "",
        )
        for entry in entries
    ]
    for index, view in enumerate(views):
        if problems := entry_problems(view):
            raise CardError(f"{where}.entries[{index}].{problems[0]}")
    if problems := book_problems(views):
        raise CardError(f"{where}.{problems[0]}")


def _entry(entry: object, where: str) -> None:
    if not isinstance(entry, dict):
        raise CardError(f"{where}: expected an object, found {_kind(entry)}")
    _text(entry, "content", where)
    _texts(entry, "keys", where)
    if entry.get("secondary_keys") is not None:
        _texts(entry, "secondary_keys", where)
    _object(entry, "extensions", where)
    for key in ("enabled", "use_regex", "selective", "constant", "case_sensitive"):
        _flag(entry, key, where)
    entry.setdefault("enabled", True)
    if entry["enabled"] is None:
        entry["enabled"] = True
    if entry.get("use_regex") is None:
        entry["use_regex"] = False
    for key in ("insertion_order", "priority"):
        _integer(entry, key, where)
    if entry.get("insertion_order") is None:
        entry["insertion_order"] = 100
    for key in ("name", "comment"):
        if entry.get(key) is not None and not isinstance(entry[key], str):
            raise CardError(f"{where}.{key}: expected text, found {_kind(entry[key])}")


def _number_entries(entries: list[dict[str, Any]]) -> None:
    """Every entry gets an id of its own: export finds an entry's stored fields by it."""

    def usable(value: object) -> TypeGuard[int | str]:
        return isinstance(value, str | int) and not isinstance(value, bool)

    taken = {e["id"] for e in entries if usable(e.get("id"))}
    seen: set[int | str] = set()
    free = 0
    for entry in entries:
        ident = entry.get("id")
        if usable(ident) and ident not in seen:
            seen.add(ident)
            continue
        while free in taken:
            free += 1
        entry["id"] = free
        taken.add(free)
        seen.add(free)


def as_v2(card: Mapping[str, Any]) -> dict[str, Any]:
    """The V2 form of a normalised card (for a PNG's ``chara`` chunk): the same data, V3's
    extra fields included (V2 readers ignore them), under ``spec`` chara_card_v2."""
    out = copy.deepcopy(dict(card))
    out["spec"], out["spec_version"] = V2, "2.0"
    return out
