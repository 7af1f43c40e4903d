"""A TOML lorebook over a limit of memory/lorebook.py (issue 34): ``personabot config check``
refuses it in one line naming the persona's lorebook path and the limit, as the card import
does (the same limits, tests/cards/test_lorebook_limits.py); at the limits it loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bot.test_cli import _run

PERSONA = """\
[[personas]]
id = "mira"
name = "Mira"
description = "A keeper of a lighthouse."
first_message = ["Hello."]

[personas.lorebook]
"""


def _entries(
    count: int, *, keys: int = 1, key_size: int = 9, content: int = 4, **extra: object
) -> str:
    """``count`` TOML entries of ``keys`` keys of ``key_size`` characters each (no key inside
    another) and contents of ``content`` characters."""
    out = []
    for i in range(count):
        names = [f"k{i:05d}q{j:02d}z".rjust(key_size, "a") for j in range(keys)]
        fields = {"content": "x" * content, "keys": names, **extra}
        out.append(
            "[[personas.lorebook.entries]]\n"
            + "".join(f"{key} = {json.dumps(value)}\n" for key, value in fields.items())
        )
    return "".join(out)


# A lorebook one step over each limit, and the line that refuses it.
OVER = {
    "entries": (
        _entries(5001),
        "personas[0].lorebook.entries: 5,001 entries, over the lorebook limit of 5,000 entries",
    ),
    "keys of an entry": (
        _entries(1, keys=51),
        "personas[0].lorebook.entries[0].keys: 51 keys, over the limit of 50 keys per entry",
    ),
    "secondary keys of an entry": (
        _entries(1, secondary_keys=["s"] * 51),
        "personas[0].lorebook.entries[0].secondary_keys: 51 keys, over the limit of 50 keys "
        "per entry",
    ),
    "a key's size": (
        _entries(1, key_size=201),
        "personas[0].lorebook.entries[0].keys[0]: a key of 201 characters, over the limit of "
        "200 characters per key",
    ),
    "a pattern's size": (
        _entries(1, key_size=501, regex=True),
        "personas[0].lorebook.entries[0].keys[0]: a pattern of 501 characters, over the limit "
        "of 500 characters per pattern",
    ),
    "an entry's content": (
        _entries(1, content=20_001),
        "personas[0].lorebook.entries[0].content: 20,001 characters, over the limit of 20,000 "
        "characters per entry",
    ),
    "keys in all": (
        _entries(401, keys=50),
        "personas[0].lorebook.entries: 20,050 keys in all, over the lorebook limit of 20,000 keys",
    ),
    "regex keys in all": (
        _entries(21, keys=50, regex=True),
        "personas[0].lorebook.entries: 1,050 regex keys in all, over the lorebook limit of "
        "1,000 regex keys",
    ),
    "characters of keys": (
        _entries(2001, key_size=200),
        "personas[0].lorebook.entries: 400,200 characters of keys in all, over the lorebook "
        "limit of 400,000 characters of keys",
    ),
    "characters in all": (
        _entries(201, content=20_000),
        "personas[0].lorebook.entries: 4,022,010 characters of contents, keys and names in all, "
        "over the lorebook limit of 4,000,000 characters of contents, keys and names",
    ),
    # Review 34: "configuration OK", then 7.4 s and 2.25 GB at the first prompt.
    "a pattern's copies": (
        '[[personas.lorebook.entries]]\ncontent = "x"\nregex = true\n'
        'keys = ["(?:(?:(?:a{200}){200}){200})"]\n',
        "personas[0].lorebook.entries[0].keys[0]: a pattern whose counted repeats make "
        "8,000,000 copies of one part (nested counts multiply), over the limit of 10,000",
    ),
    "an entry's name": (
        _entries(1, name="n" * 201),
        "personas[0].lorebook.entries[0].name: 201 characters, over the limit of 200 "
        "characters per entry name",
    ),
}


@pytest.mark.parametrize("limit", list(OVER))
async def test_config_check_refuses_a_lorebook_over_a_limit(tmp_path: Path, limit: str) -> None:
    entries, refusal = OVER[limit]
    (tmp_path / "lore.toml").write_text(PERSONA + entries, encoding="utf-8")
    code, _out, err = await _run(
        ["config", "check", "--file-only", "--config", "lore.toml"], tmp_path
    )
    assert code == 2, err
    assert refusal in err and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


async def test_config_check_accepts_a_lorebook_at_the_limits(tmp_path: Path) -> None:
    """400 entries of 50 keys (20,000 keys) of 20 characters (400,000), 20 of them patterns
    (1,000), contents to 4,000,000 characters in all: loaded."""
    book = _entries(380, keys=50, key_size=20, content=9_000) + _entries(
        20, keys=50, key_size=20, content=9_000, regex=True
    )
    (tmp_path / "lore.toml").write_text(PERSONA + book, encoding="utf-8")
    code, out, err = await _run(
        ["config", "check", "--file-only", "--config", "lore.toml"], tmp_path
    )
    assert code == 0, err
    assert "configuration OK" in out
