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
from tomlkit.items import AoT, Table

from bot.core.errors import CardError, ConfigError

_NEW_FILE = """\
# personabot configuration written by `personabot persona import`; every other key has its
# default (config.example.toml shows them all). Secrets come from the environment only.
"""

_TOKEN_VARIABLES = {"telegram": "TELEGRAM_BOT_TOKEN", "discord": "DISCORD_BOT_TOKEN"}


def _text(value: str) -> Any:
    # Multi-line text reads best as a multi-line string; a carriage return would be read back
    # as a plain newline there, so such text stays one escaped line.
    if "\n" in value and "\r" not in value:
        return tomlkit.string(value, multiline=True)
    return value


def _item(value: Any) -> Any:
    if isinstance(value, str):
        return _text(value)
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
