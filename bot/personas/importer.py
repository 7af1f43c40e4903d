"""``personabot persona import``: a card file to a ``[[personas]]`` table in the operator's
TOML file, the whole card kept beside it (``cards/<id>.json``, and ``cards/<id>.png`` from a
PNG card).

Nothing is written until everything is known to be good: the card parsed and mapped, the id
free, the new TOML loading with the real settings loader. Then the card files are created
(never over an existing file) and the TOML replaces the old one by an atomic rename; a
failure on the way removes what this import created.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from bot.config import LorebookSettings, load_settings
from bot.core.errors import CardError, ConfigError
from bot.personas.card import normalise
from bot.personas.containers import CardFile, read_card_file
from bot.personas.mapping import persona_table
from bot.personas.toml_file import temporary_beside, with_persona
from bot.personas.worldinfo import lorebook_kind
from memory.lorebook import LoreEntry, oversized, oversized_text
from memory.macros import MacroContext, expand

#: The ``token_budget`` of a lorebook that sets none.
DEFAULT_TOKEN_BUDGET: Final[int] = LorebookSettings.model_fields["token_budget"].default
_ID: Final = re.compile(r"^[A-Za-z0-9_.-]+$")
Platform = Literal["telegram", "discord"]


def slug(name: str) -> str:
    """A persona id from a name: lower-case ASCII letters and digits joined by ``-``."""
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    text = re.sub(r"[^a-z0-9]+", "-", ascii_name.lower()).strip("-")
    return text[:40].strip("-") or "persona"


@dataclass(frozen=True)
class Imported:
    """What an import did, for the operator."""

    persona_id: str
    lines: tuple[str, ...]


def import_card(
    source: Path, *, out: Path, persona_id: str | None = None, bot: Platform | None = None
) -> Imported:
    """Import the card in ``source`` into the TOML file ``out`` (created when missing)."""
    found = read_card_file(source)
    if (kind := lorebook_kind(found.card)) is not None:
        raise CardError(
            f"{source} is {kind}, not a character card. To give its entries to a persona of "
            f"your TOML: personabot persona import-lorebook {source} --persona ID"
        )
    card = normalise(found.card)
    data = card["data"]
    ident = persona_id or slug(data["name"])
    if not _ID.match(ident):
        raise CardError(f"--id {ident!r}: use letters, digits, '_', '.' and '-' only")
    card_rel = f"cards/{ident}.json"
    card_path = out.parent / card_rel
    image_path = card_path.with_suffix(".png")
    mapped = persona_table(card, persona_id=ident, card_path=card_rel)
    old_text = read_config(out)
    new_text, bot_line = with_persona(old_text, mapped.table, where=str(out), bot=bot)
    for path in (card_path, image_path if found.image is not None else None):
        if path is not None and path.exists():
            raise CardError(f"{path} exists already; remove it or choose another --id")
    files: list[tuple[Path, bytes]] = [(card_path, _card_json(card))]
    if found.image is not None:
        files.append((image_path, found.image))
    commit(out, new_text.encode("utf-8"), files)
    lines = _summary(found, card, mapped.table, ident, out, card_rel, files)
    lines += [f"  {note}" for note in mapped.notes]
    if "lorebook" in mapped.table and (warning := budget_warning(mapped.table)):
        lines.append(f"  warning: {warning}")
    if persona_id is None and ident == "persona":
        lines.append("  the name gives no id of letters or digits: 'persona' (--id sets one)")
    if bot_line:
        lines.append(f"  {bot_line}")
    return Imported(ident, tuple(lines))


def budget_warning(persona: Mapping[str, Any]) -> str | None:
    """What to tell the operator when entries of the persona's lorebook (a ``[[personas]]``
    table, plain values) are larger than its ``token_budget`` by themselves: they could never
    be sent. Counted as a prompt counts them (memory/lorebook.py), macros expanded."""
    book = persona.get("lorebook") or {}
    budget = book.get("token_budget", DEFAULT_TOKEN_BUDGET)
    context = MacroContext(persona.get("nickname") or persona["name"], "User", "size")
    entries = [
        LoreEntry(
            e["content"],
            keys=tuple(e.get("keys") or ()),
            enabled=e.get("enabled", True),
            name=e.get("name") or "",
        )
        for e in book.get("entries") or ()
    ]
    large = oversized(entries, budget, lambda text: expand(text, context))
    return oversized_text(large, budget) if large else None


def read_config(out: Path) -> str | None:
    """The text of the operator's TOML file; None when there is none."""
    try:
        return out.read_bytes().decode("utf-8")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError:
        raise ConfigError(["not a TOML file (not UTF-8 text)"], source=str(out)) from None
    except OSError as exc:
        raise ConfigError([f"cannot read {out}: {exc.strerror}"]) from None


def _card_json(card: dict[str, Any]) -> bytes:
    return (json.dumps(card, ensure_ascii=False, indent=2) + "\n").encode("utf-8")


def commit(out: Path, toml: bytes, files: list[tuple[Path, bytes]]) -> None:
    """Check the new TOML loads, create the card files, then rename the TOML into place.

    A symlinked TOML (kept in a dotfiles repository, say) is replaced where it points: the
    rename over the link itself would leave the real file unchanged and the link a copy."""
    target = Path(os.path.realpath(out))
    staged = temporary_beside(target, toml)
    created: list[Path] = []
    try:
        try:
            load_settings(staged)
        except ConfigError as exc:
            raise ConfigError(list(exc.problems), source=f"{out} after the import") from None
        for path, data in files:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("xb") as handle:  # never over a file that appeared meanwhile
                created.append(path)
                handle.write(data)
        os.replace(staged, target)
    except BaseException:
        for path in (staged, *created):
            with contextlib.suppress(OSError):
                path.unlink()
        raise


def _chars(text: str) -> str:
    return f"{len(text)} chars" if text.strip() else "empty"


def _summary(
    found: CardFile,
    card: dict[str, Any],
    table: dict[str, Any],
    ident: str,
    out: Path,
    card_rel: str,
    files: list[tuple[Path, bytes]],
) -> list[str]:
    data = card["data"]
    container = found.container.upper() + (f", {found.chunk!r} chunk" if found.chunk else "")
    spec = {"chara_card_v3": "V3", "chara_card_v2": "V2"}.get(found.card.get("spec"), "V1")
    mapped = [
        f"name {table['name']!r}"
        + (f" (nickname {table['nickname']!r})" if "nickname" in table else ""),
        f"description ({_chars(table['description'])})",
        f"personality ({_chars(table['personality'])})",
        f"scenario ({_chars(table['scenario'])})",
        "system ("
        + (
            "empty: personabot's default framing"
            if not table["system"].strip()
            else _chars(table["system"])
        )
        + ")",
        f"post_history ({_chars(table['post_history'])})",
        "first_message",
        f"greetings ({len(table['greetings'])})",
        f"group_greetings ({len(table['group_greetings'])})",
        f"example_dialogue ({_chars(table['example_dialogue'])})",
    ]
    if "lorebook" in table:
        book = table["lorebook"]
        count = len(book["entries"])
        mapped.append(f"lorebook {book['name']!r} ({count} entr{'y' if count == 1 else 'ies'})")
    kept = " + ".join(str(Path(card_rel).parent / p.name) for p, _ in files)
    unmapped = [k for k in sorted(data) if k not in _MAPPED and data[k] not in ("", [], {}, None)]
    lines = [
        f"imported {data['name']!r} (Character Card {spec}, {container}) as persona "
        f"{ident!r} into {out}",
        "  mapped: " + ", ".join(mapped),
        f"  card kept: {kept} (what is not mapped stays there for `personabot persona export`)",
    ]
    if data["creator_notes"].strip():
        lines.append("  not used: creator_notes (never part of a prompt)")
    if rest := [k for k in unmapped if k != "creator_notes"]:
        lines.append("  kept in the card only: " + ", ".join(rest))
    return lines


_MAPPED: Final = frozenset(
    {
        "name",
        "nickname",
        "description",
        "personality",
        "scenario",
        "system_prompt",
        "post_history_instructions",
        "first_mes",
        "alternate_greetings",
        "group_only_greetings",
        "mes_example",
        "character_book",
    }
)
