"""Lorebook files, read as a card's ``character_book``: SillyTavern's World Info JSON
(``{"entries": {"0": {"key": [...], "content": ...}}}``), the V3 spec's standalone
``{"spec": "lorebook_v3", "data": {...}}`` and a bare ``character_book`` object
(``{"entries": [...]}``, as some editors save one).

A World Info entry's fields map as SillyTavern maps them when it embeds a world in a card
(``uid`` -> ``id``, ``key`` -> ``keys``, ``keysecondary`` -> ``secondary_keys``, ``order``
-> ``insertion_order``, ``disable`` -> not ``enabled``, ``comment``, ``content``,
``constant``, ``selective``, ``caseSensitive``); its other fields (position, depth,
probability, groups, timed effects) have no meaning here and are not kept. SillyTavern
reads a key written ``/pattern/flags`` as a pattern and any other as text, so an entry with
such a key gets ``use_regex``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from bot.core.errors import CardError
from memory.lorebook import too_many_entries

WORLD_INFO: Final = "a SillyTavern World Info file"
LOREBOOK_V3: Final = "a Character Card V3 lorebook file (spec lorebook_v3)"
CHARACTER_BOOK: Final = "a lorebook file (a character_book)"

_FIELDS: Final = (
    ("uid", "id"),
    ("key", "keys"),
    ("keysecondary", "secondary_keys"),
    ("comment", "comment"),
    ("content", "content"),
    ("constant", "constant"),
    ("selective", "selective"),
    ("order", "insertion_order"),
    ("caseSensitive", "case_sensitive"),
)
_PATTERN_KEY: Final = re.compile(r"^/.+/[a-z]*$", re.DOTALL)


@dataclass(frozen=True)
class LorebookFile:
    """What a lorebook file held: its kind (for the operator) and the book as a card's
    ``character_book`` (not yet checked: ``card.normalise_book`` does that)."""

    kind: str
    book: dict[str, Any]


def lorebook_kind(value: object) -> str | None:
    """What kind of lorebook file ``value`` (parsed JSON) is; None when it is none."""
    if not isinstance(value, dict):
        return None
    if value.get("spec") == "lorebook_v3":
        return LOREBOOK_V3
    if "spec" in value or "data" in value:
        return None
    entries = value.get("entries")
    if isinstance(entries, dict):
        return WORLD_INFO
    return CHARACTER_BOOK if isinstance(entries, list) else None


def read_lorebook(value: object, where: str, default_name: str) -> LorebookFile:
    """The lorebook in ``value`` (a lorebook file's JSON) as a ``character_book``; a World
    Info file, which has no name of its own, is named ``default_name`` (its file's name, as
    SillyTavern names it)."""
    kind = lorebook_kind(value)
    if kind is None or not isinstance(value, dict):
        if isinstance(value, dict) and value.get("spec") in ("chara_card_v2", "chara_card_v3"):
            raise CardError(
                f"{where}: a character card, not a lorebook file: import it with "
                "`personabot persona import`"
            )
        raise CardError(
            f"{where}: not a lorebook file (expected SillyTavern World Info, a lorebook_v3 "
            "file or a character_book object)"
        )
    if kind == LOREBOOK_V3:
        book = value.get("data")
        if not isinstance(book, dict):
            raise CardError(f"{where}: the lorebook_v3 file has no 'data' object")
        return LorebookFile(kind, book)
    if kind == CHARACTER_BOOK:
        return LorebookFile(kind, value)
    entries: dict[str, Any] = value["entries"]
    if problem := too_many_entries(len(entries)):
        raise CardError(f"{where}: {problem}")
    converted = []
    for uid, entry in entries.items():
        if not isinstance(entry, dict):
            raise CardError(f"{where}: entries.{uid}: expected an object")
        converted.append(_entry(entry))
    name = value.get("name") if isinstance(value.get("name"), str) else default_name
    return LorebookFile(kind, {"name": name, "entries": converted})


def _entry(entry: dict[str, Any]) -> dict[str, Any]:
    out = {new: entry[old] for old, new in _FIELDS if entry.get(old) is not None}
    if isinstance(entry.get("disable"), bool):
        out["enabled"] = not entry["disable"]
    keys = [
        *(out["keys"] if isinstance(out.get("keys"), list) else []),
        *(out["secondary_keys"] if isinstance(out.get("secondary_keys"), list) else []),
    ]
    out["use_regex"] = any(isinstance(key, str) and _PATTERN_KEY.match(key) for key in keys)
    return out
