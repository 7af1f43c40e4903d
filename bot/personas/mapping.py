"""Card fields to a ``[[personas]]`` table (docs/personas.md has the table of the mapping).

Import writes the mapped fields into the TOML and keeps the whole card beside it: what is not
mapped (creator notes, tags, ``extensions``, a lorebook entry's unmapped fields such as
``position``) stays only in the stored card, and export merges it back (bot/personas/merge.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from bot.core.errors import CardError

# The config's bounds on a lorebook (bot/config/personas.py LorebookSettings).
_SCAN_DEPTH: Final = (1, 200)
_TOKEN_BUDGET: Final = (1, 100_000)

_TEMPERATURE_TEXT: Final = re.compile(
    r"\btemp(?:erature)?\b[^0-9\n]{0,12}?(\d+(?:[.,]\d+)?)", re.IGNORECASE
)


@dataclass(frozen=True)
class Mapped:
    """A card as a ``[[personas]]`` table (plain TOML values), and what to tell the operator."""

    table: dict[str, Any]
    notes: tuple[str, ...]


def persona_table(card: Mapping[str, Any], *, persona_id: str, card_path: str) -> Mapped:
    """The ``[[personas]]`` table of a normalised card."""
    data = card["data"]
    notes: list[str] = []
    name = data["name"].strip()
    framing = (data["system_prompt"], data["description"], data["personality"])
    if not any(text.strip() for text in framing):
        raise CardError(
            "the card has no description, personality or system_prompt: nothing tells "
            f"the model who {name} is"
        )
    first = data["first_mes"]
    if not first.strip():
        if data["alternate_greetings"]:
            first = data["alternate_greetings"][0]
            notes.append("first_mes is empty: first_message is the first alternate greeting")
        else:
            first = f"Hi, I'm {name}."
            notes.append(
                f"first_mes is empty and there are no alternate greetings: "
                f"first_message = {first!r} (edit it in the TOML)"
            )
    table: dict[str, Any] = {"id": persona_id, "name": name}
    if data.get("nickname"):
        table["nickname"] = data["nickname"]
    table |= {
        "description": data["description"],
        "personality": data["personality"],
        "scenario": data["scenario"],
        # "" = personabot's default framing, as a card's empty system_prompt means.
        "system": data["system_prompt"],
        "post_history": data["post_history_instructions"],
        "first_message": [first],
        "greetings": list(data["alternate_greetings"]),
        "group_greetings": list(data["group_only_greetings"]),
        "example_dialogue": data["mes_example"],
        "card": card_path,
    }
    book = data.get("character_book")
    if book is not None:
        table["lorebook"] = book_table(book, notes)
    if found := recommended_temperature(data):
        notes.append(
            f"ignored: the card recommends a sampling temperature ({found}); personabot sets "
            "none from a card (current Claude models take none)"
        )
    return Mapped(table, tuple(notes))


def _clamped(value: int, bounds: tuple[int, int], what: str, notes: list[str]) -> int:
    low, high = bounds
    if low <= value <= high:
        return value
    kept = min(max(value, low), high)
    notes.append(
        f"character_book.{what} {value} is outside {low}-{high}: {kept} (the card keeps its value)"
    )
    return kept


def book_table(book: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    """The ``[personas.lorebook]`` table of a normalised ``character_book``; what was
    clamped to the config's bounds is added to ``notes``."""
    table: dict[str, Any] = {"name": book.get("name") or ""}
    if book.get("scan_depth") is not None:
        table["scan_depth"] = _clamped(book["scan_depth"], _SCAN_DEPTH, "scan_depth", notes)
    if book.get("token_budget") is not None:
        table["token_budget"] = _clamped(book["token_budget"], _TOKEN_BUDGET, "token_budget", notes)
    table["entries"] = [_entry_table(entry) for entry in book["entries"]]
    return table


def _entry_table(entry: Mapping[str, Any]) -> dict[str, Any]:
    table: dict[str, Any] = {
        "id": entry["id"],
        "name": entry.get("name") or entry.get("comment") or "",
        "content": entry["content"],
        "keys": list(entry["keys"]),
        "secondary_keys": list(entry.get("secondary_keys") or []),
        "selective": bool(entry.get("selective")),
        "regex": bool(entry.get("use_regex")),
        "case_sensitive": bool(entry.get("case_sensitive")),
        "constant": bool(entry.get("constant")),
        "enabled": entry["enabled"],
        "insertion_order": entry["insertion_order"],
    }
    if entry.get("priority") is not None:
        table["priority"] = entry["priority"]
    return table


def _walk(value: Any, path: str = "extensions") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield f"{path}.{key}", item
            yield from _walk(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _walk(item, f"{path}[{index}]")


def recommended_temperature(data: Mapping[str, Any]) -> str | None:
    """Where the card recommends a sampling temperature (creator notes or extensions)."""
    notes = [("creator_notes", data.get("creator_notes") or "")]
    multilingual = data.get("creator_notes_multilingual")
    if isinstance(multilingual, dict):
        notes += [(f"creator_notes_multilingual.{k}", v) for k, v in multilingual.items()]
    for where, text in notes:
        if isinstance(text, str) and (match := _TEMPERATURE_TEXT.search(text)):
            return f"{where}: temperature {match[1]}"
    for where, item in _walk(data.get("extensions")):
        key = where.rsplit(".", 1)[-1].lower()
        numeric = isinstance(item, int | float) and not isinstance(item, bool)
        if ("temperature" in key or key == "temp") and numeric:
            return f"data.{where} = {item}"
    return None
