"""``personabot persona import-lorebook``: a lorebook file (SillyTavern World Info, a
``lorebook_v3`` file, a ``character_book``) given to a persona of the operator's TOML file.

The same checks as a card's lorebook (types, the limits of memory/lorebook.py), the same
mapping to ``[[personas.lorebook.entries]]`` and the same commit: nothing is written unless
the new TOML loads with the real settings loader, and then by an atomic rename, the
operator's comments and formatting kept (tomlkit).
"""

from __future__ import annotations

from pathlib import Path

from bot.core.errors import CardError
from bot.personas.card import normalise_book
from bot.personas.containers import parse_json, read_bounded
from bot.personas.importer import Imported, budget_warning, commit, read_config
from bot.personas.mapping import book_table
from bot.personas.toml_file import with_lorebook
from bot.personas.worldinfo import read_lorebook


def import_lorebook(source: Path, *, persona_id: str, config: Path) -> Imported:
    """Give the lorebook in ``source`` to the persona ``persona_id`` of the TOML ``config``."""
    if source.suffix.lower() != ".json":
        raise CardError(f"{source}: not a lorebook file (.json)")
    value = parse_json(read_bounded(source, "lorebook file"), str(source))
    found = read_lorebook(value, str(source), source.stem)
    book = normalise_book(found.book, "the lorebook")
    notes: list[str] = []
    table = book_table(book, notes)
    old_text = read_config(config)
    if old_text is None:
        raise CardError(f"{config}: no such file (import the persona's card first)")
    new_text, persona, duplicates = with_lorebook(old_text, persona_id, table, where=str(config))
    commit(config, new_text.encode("utf-8"), [])
    count = len(table["entries"]) - duplicates
    lines = [
        f"imported {found.kind} {table['name']!r} into the lorebook of persona "
        f"{persona_id!r} in {config}: {count} entr{'y' if count == 1 else 'ies'}"
    ]
    if duplicates:
        lines.append(
            f"  left out: {duplicates} entr{'y' if duplicates == 1 else 'ies'} the persona's "
            "lorebook has already (the same keys and content)"
        )
    lines += [f"  {note}" for note in notes]
    if warning := budget_warning(persona):
        lines.append(f"  warning: {warning}")
    return Imported(persona_id, tuple(lines))
