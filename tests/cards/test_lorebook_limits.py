"""A card's lorebook against the limits of memory/lorebook.py (issue 34): a card at every limit
at once imports with ``personabot persona import`` and ``personabot prompt`` fires the entries
its message names, within the matching's time budget; a card one step over any limit is
refused, naming that limit, and nothing is written."""

from __future__ import annotations

import getpass
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bot.core.errors import CardError
from bot.personas.card import normalise
from tests.cards.cards import limit_entries, limit_key, personabot, v2_card, write_card

OPERATOR_TOML = """\
# My bots. Keep this comment!
[[personas]]
id = "orin"
name = "Orin"
system = "You are Orin, the ferryman."
first_message = ["Hop in."]
"""


def _card(entries: list[dict[str, Any]]) -> dict[str, Any]:
    card = v2_card()
    book = card["data"]["character_book"]
    book["entries"], book["token_budget"] = entries, 5000
    return card


def test_a_card_at_every_limit_imports_and_fires_what_is_named(tmp_path: Path) -> None:
    """5,000 entries, 20,000 keys of which 1,000 patterns, keys and patterns of the largest
    size, an entry of the largest content, 4,000,000 characters in all: imported, and the
    prompt for a message naming five entries' keys fires exactly those five, nothing skipped
    for time."""
    entries = limit_entries()
    write_card(tmp_path / "big.json", _card(entries))
    code, out, err = personabot("persona", "import", "big.json", "--id", "big", cwd=tmp_path)
    assert (code, err) == (0, ""), out
    assert "lorebook 'Kell Point' (5000 entries)" in out

    # A first chat (with the offline model): `prompt` previews the next turn of a session.
    code, out, err = personabot("chat", cwd=tmp_path, stdin="good evening\n")
    assert code == 0, err
    long_key = entries[1]["keys"][0]
    message = (
        f"{limit_key(0, 49)} {limit_key(0, 49, 's')} | {long_key} | "
        f"{limit_key(2, 0).upper()} {limit_key(700, 0)} | {entries[4321]['keys'][-1]}"
    )
    code, out, err = personabot(
        "prompt", "--platform", "console", "--chat", getpass.getuser(), "--message", message,
        cwd=tmp_path,
    )  # fmt: skip
    assert code == 0, err
    fired = dict(re.findall(r"^  fired    '(e\d+)': (.*) \(~\d+ tokens\)$", out, re.M))
    assert fired == {
        "e0": f"key {limit_key(0, 49)!r} and {limit_key(0, 49, 's')!r}",
        "e1": f"key {long_key!r}",
        "e2": f"key {entries[2]['keys'][0]!r}",
        "e700": f"key {limit_key(700, 0)!r}",
        "e4321": f"key {entries[4321]['keys'][-1]!r}",
    }
    # The 4,995 entries whose keys did not come up are counted, not listed one by one.
    assert re.findall(r"^  skipped  .*$", out, re.M) == [
        "  skipped  4995 more entries: no key match"
    ]
    assert "time budget" not in out and "Lore of entry 4321." in out


def _grow(text: str) -> str:
    """One character more (in front: a key's core stays whole)."""
    return "c" + text


# What to change in the entries at the limits, and the refusal's text.
OVER: dict[str, tuple[Callable[[list[dict[str, Any]]], None], str]] = {
    "entries": (
        lambda e: e.append({"keys": ["more"], "content": "more"}),
        "entries: 5,001 entries, over the lorebook limit of 5,000 entries",
    ),
    "keys of an entry": (
        lambda e: e[0]["keys"].append(limit_key(0, 50)),
        "entries[0].keys: 51 keys, over the limit of 50 keys per entry",
    ),
    "secondary keys of an entry": (
        lambda e: e[0]["secondary_keys"].append(limit_key(0, 50, "s")),
        "entries[0].secondary_keys: 51 keys, over the limit of 50 keys per entry",
    ),
    "a key's size": (
        lambda e: e[1]["keys"].__setitem__(0, _grow(e[1]["keys"][0])),
        "entries[1].keys[0]: a key of 201 characters, over the limit of 200 characters per key",
    ),
    "a pattern's size": (
        lambda e: e[2]["keys"].__setitem__(0, _grow(e[2]["keys"][0])),
        "entries[2].keys[0]: a pattern of 501 characters, over the limit of 500 characters "
        "per pattern",
    ),
    "an entry's content": (
        lambda e: e[3].__setitem__("content", _grow(e[3]["content"])),
        "entries[3].content: 20,001 characters, over the limit of 20,000 characters per entry",
    ),
    "keys in all": (
        lambda e: e[4321]["keys"].append(limit_key(4321, 60)),
        "entries: 20,001 keys in all, over the lorebook limit of 20,000 keys",
    ),
    "regex keys in all": (
        lambda e: e[4000].__setitem__("use_regex", True),
        "keys in all, over the lorebook limit of 1,000 regex keys",
    ),
    "characters of keys": (
        lambda e: e[4321]["keys"].__setitem__(0, _grow(e[4321]["keys"][0])),
        "entries: 400,001 characters of keys in all, over the lorebook limit of 400,000 "
        "characters of keys",
    ),
    "characters in all": (
        lambda e: e[5].__setitem__("content", _grow(e[5]["content"])),
        "entries: 4,000,001 characters of contents, keys and names in all, over the lorebook "
        "limit of 4,000,000 characters of contents, keys and names",
    ),
    # Review 34: 28 characters that took 7.4 s and 2.25 GB to compile.
    "a pattern's copies": (
        lambda e: e[2]["keys"].__setitem__(0, "(?:(?:(?:a{200}){200}){200})"),
        "entries[2].keys[0]: a pattern whose counted repeats make 8,000,000 copies of one part "
        "(nested counts multiply), over the limit of 10,000",
    ),
    # Review 34: names are in every report and warning about an entry.
    "an entry's name": (
        lambda e: e[6].__setitem__("name", "n" * 201),
        "entries[6].name: 201 characters, over the limit of 200 characters per entry name",
    ),
}


@pytest.mark.parametrize("limit", list(OVER))
def test_a_card_over_a_limit_is_refused_and_nothing_is_written(tmp_path: Path, limit: str) -> None:
    change, refusal = OVER[limit]
    entries = limit_entries()
    change(entries)
    write_card(tmp_path / "big.json", _card(entries))
    config = tmp_path / "personabot.toml"
    config.write_text(OPERATOR_TOML, encoding="utf-8")
    before = config.read_bytes()
    code, out, err = personabot("persona", "import", "big.json", cwd=tmp_path)
    assert code == 2, out
    assert err.startswith("personabot: card error: data.character_book.") and refusal in err
    assert len(err.strip().splitlines()) == 1
    assert config.read_bytes() == before
    assert not (tmp_path / "cards").exists()


def test_too_many_entries_are_counted_before_anything_else() -> None:
    """The review's card of 200,000 entries: refused for their number before a single entry
    is read (the first one here is not even an object)."""
    card = _card([1] * 200_000)
    with pytest.raises(CardError) as refused:
        normalise(card)
    assert str(refused.value) == (
        "data.character_book.entries: 200,000 entries, over the lorebook limit of 5,000 entries"
    )
    # At the limit, the same card is read entry by entry.
    with pytest.raises(CardError, match=r"entries\[0\]: expected an object"):
        normalise(_card([1] * 5000))
