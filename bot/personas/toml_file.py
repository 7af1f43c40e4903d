"""Appending a persona (and a bot) to the operator's TOML file with tomlkit, which keeps
their comments, order and formatting; and writing files atomically."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.exceptions import TOMLKitError
from tomlkit.items import AoT, String, StringType, Table, Trivia, Whitespace

from bot.core.errors import CardError, ConfigError

_NEW_FILE = """\
# personabot configuration written by `personabot persona import`; every other key has its
# default (config.example.toml shows them all). Secrets come from the environment only.
"""

_TOKEN_VARIABLES = {"telegram": "TELEGRAM_BOT_TOKEN", "discord": "DISCORD_BOT_TOKEN"}


def multiline(value: str) -> String:
    """``value`` as a TOML multi-line basic string that reads back exactly as ``value``.

    tomlkit escapes quotes, backslashes, control characters and a lone carriage return, and
    keeps a leading newline; but it writes the CR of a CRLF line ending raw, and TOML readers
    (tomllib among them) read a raw CRLF in a multi-line string as a plain newline. So each
    CR is written as the escape ``\\r`` before its newline: a card written on Windows reads
    back with its CRLFs, one source line per line of text."""
    item = tomlkit.string(value, multiline=True)
    body = item.as_string()[3:-3]  # between the delimiters: every CR left raw is a CRLF's
    return String(StringType.MLB, value, body.replace("\r\n", "\\r\n"), Trivia())


def _text(value: str) -> Any:
    # Text of several lines reads best as a multi-line string, one source line per line.
    if "\n" in value or "\r" in value:
        return multiline(value)
    return value


def _item(value: Any) -> Any:
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, list) and any(isinstance(v, str) and _text(v) is not v for v in value):
        array = tomlkit.array()
        array.extend(_item(v) for v in value)
        if len(value) > 1:
            array.multiline(True)  # one greeting after another, each from its own line
        return array
    if isinstance(value, Mapping):
        return _table(value)
    return value


def _table(values: Mapping[str, Any]) -> Table:
    table = tomlkit.table()
    for key, value in values.items():
        if isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
            array = tomlkit.aot()
            for element in value:
                array.append(_table(element))
            table.add(key, array)
        else:
            table.add(key, _item(value))
    return table


def _entries(doc: tomlkit.TOMLDocument, key: str, where: str) -> list[Any]:
    found = doc.get(key)
    if found is None:
        return []
    if not isinstance(found, AoT | list):
        raise ConfigError([f"{key}: expected [[{key}]] tables"], source=where)
    return list(found)


def persona_ids(doc: tomlkit.TOMLDocument, where: str) -> list[str]:
    """The ids of the file's personas."""
    return [str(p.get("id")) for p in _entries(doc, "personas", where) if hasattr(p, "get")]


def parse(text: str, where: str) -> tomlkit.TOMLDocument:
    """The operator's file as a tomlkit document."""
    try:
        return tomlkit.parse(text)
    except TOMLKitError as exc:
        raise ConfigError([f"not valid TOML: {exc}"], source=where) from None


def with_persona(
    text: str | None, persona: Mapping[str, Any], *, where: str, bot: str | None = None
) -> tuple[str, str | None]:
    """``text`` (None: a new file) with ``persona`` appended to ``[[personas]]``, and with
    ``bot`` (a platform) a ``[[bots]]`` entry for it unless one names it already. Returns
    the new text and a line about the bot added, if any."""
    doc = parse(text, where) if text is not None else tomlkit.parse(_NEW_FILE)
    persona_id = str(persona["id"])
    if persona_id in persona_ids(doc, where):
        raise CardError(
            f"{where}: a persona with id {persona_id!r} exists already; choose another with --id"
        )
    table = _table(persona)
    table.add(tomlkit.nl())
    personas = doc.get("personas")
    if isinstance(personas, AoT):
        personas.append(table)
    elif personas is None:
        array = tomlkit.aot()
        array.append(table)
        doc.add("personas", array)
    else:
        raise ConfigError(
            ["personas: write them as [[personas]] tables to import into this file"], source=where
        )
    note = None
    if bot is not None:
        note = _add_bot(doc, bot, persona_id, where)
    return tomlkit.dumps(doc), note


def with_lorebook(
    text: str, persona_id: str, book: Mapping[str, Any], *, where: str
) -> tuple[str, dict[str, Any], int]:
    """``text`` with the entries of ``book`` (a ``[personas.lorebook]`` table, plain values)
    given to the persona ``persona_id``: as its lorebook when it has none, else appended to
    its entries, where an id it uses already gets the next free integer and an entry with the
    same keys and content as one it has is left out. Returns the new text, the persona as
    it now is (plain values) and how many entries were left out as duplicates."""
    doc = parse(text, where)
    persona = next(
        (
            p
            for p in _entries(doc, "personas", where)
            if hasattr(p, "get") and p.get("id") == persona_id
        ),
        None,
    )
    if persona is None:
        known = ", ".join(repr(i) for i in persona_ids(doc, where)) or "none"
        raise CardError(f"{where}: no persona with id {persona_id!r} (its personas: {known})")
    if not isinstance(persona, Table):
        raise ConfigError(
            [f"personas: write persona {persona_id!r} as a [[personas]] table to add a lorebook"],
            source=where,
        )
    current = persona.get("lorebook")
    if current is None:
        persona.add("lorebook", _table(book))
        return tomlkit.dumps(doc), persona.unwrap(), 0
    entries = current.get("entries") if isinstance(current, Table) else None
    if not isinstance(current, Table) or not isinstance(entries, AoT | None):
        raise ConfigError(
            [
                f"persona {persona_id!r}: write its lorebook as [personas.lorebook] with "
                "[[personas.lorebook.entries]] tables to add entries to it"
            ],
            source=where,
        )
    have = {_same(e) for e in entries or ()}
    fresh = [e for e in book["entries"] if _same(e) not in have]
    taken = {e.get("id") for e in entries or ()}
    free = 0
    tables = tomlkit.aot() if entries is None else entries
    if fresh and len(tables) and not _ends_blank(tables[-1]):
        tables[-1].add(tomlkit.nl())  # a blank line between it and the first new entry
    for entry in fresh:
        values = dict(entry)
        if values.get("id") in taken:  # export finds an entry's stored fields by its id
            while free in taken:
                free += 1
            values["id"] = free
        taken.add(values["id"])
        table = _table(values)
        table.add(tomlkit.nl())
        tables.append(table)
    if entries is None:
        current.add("entries", tables)
    return tomlkit.dumps(doc), persona.unwrap(), len(book["entries"]) - len(fresh)


def _ends_blank(table: Table) -> bool:
    body = table.value.body
    return bool(body) and isinstance(body[-1][1], Whitespace)


def _same(entry: Mapping[str, Any]) -> tuple[tuple[str, ...], str]:
    return tuple(entry.get("keys") or ()), str(entry.get("content", ""))


def _add_bot(doc: tomlkit.TOMLDocument, platform: str, persona_id: str, where: str) -> str | None:
    bots = _entries(doc, "bots", where)
    for entry in bots:
        names = [entry.get("persona"), *(entry.get("personas") or [])]
        if persona_id in names:
            return None
    default = _TOKEN_VARIABLES[platform]
    bot: dict[str, Any] = {"platform": platform, "persona": persona_id}
    sharing = [
        b for b in bots if b.get("platform") == platform and b.get("token_env", default) == default
    ]
    if sharing:  # two bots of one platform need two tokens
        bot["token_env"] = f"{default}_{persona_id.upper().replace('-', '_').replace('.', '_')}"
    table = _table(bot)
    table.add(tomlkit.nl())
    found = doc.get("bots")
    if isinstance(found, AoT):
        found.append(table)
    else:
        array = tomlkit.aot()
        array.append(table)
        doc.add("bots", array)
    variable = bot.get("token_env", default)
    return f"added a [[bots]] entry: {platform}, persona {persona_id}, token from ${variable}"


def temporary_beside(path: Path, data: bytes) -> Path:
    """``data`` written and flushed to a new temporary file in ``path``'s folder (to be
    renamed over ``path``: a rename within one file system is atomic)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
        os.chmod(name, mode)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name)
        raise
    return Path(name)


def write_atomically(path: Path, data: bytes) -> None:
    """Replace (or create) ``path`` with ``data``: readers see the old file or the new one."""
    temporary = temporary_beside(path, data)
    try:
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
