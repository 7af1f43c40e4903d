"""Lorebooks (world info): entries that enter the prompt when their keys come up.

A persona's lorebook (a card's ``character_book`` or ``[personas.lorebook]``,
docs/personas.md#lorebooks) is scanned against the last ``scan_depth`` messages of the
conversation, the new turn included (what was said, not the bot's own context layers).
An entry fires when it is enabled and

- it is ``constant``, or
- one of its ``keys`` occurs in the scanned text (a substring; case-insensitive unless
  ``case_sensitive``; with ``regex`` each key is a pattern, ``/pattern/flags`` or bare) and,
  when ``selective`` with ``secondary_keys``, one of those occurs too.

Fired entries go into one layer after the last cache breakpoint (memory/assemble.py), in
``insertion_order``, within ``token_budget``: over it, the lowest ``priority`` is dropped
first (between equals, the later ``insertion_order``), and each drop is reported, so the
caller logs it and ``personabot prompt`` shows it; nothing is dropped silently.

Cards come from strangers and the scanned text from anyone who writes to the bot, so both
are bounded. What a lorebook may hold (entries, keys, sizes: the ``MAX_*`` limits below) is
checked when the config loads and when a card is imported (``entry_problems``,
``book_problems``); over a limit, the book is refused, naming the limit. Matching is
compiled once per lorebook (memory/lorematch.py: one automaton over all plain keys, the
patterns compiled) and bounded per prompt: the scanned text at most ``MAX_SCAN_CHARS`` (the
newest part), each pattern's search ``REGEX_TIMEOUT``, and all the keys of a prompt, every
kind, ``MATCH_SECONDS``. A bad pattern, a runaway search or the end of that time skips the
entries concerned with that reason; it never fails the turn. Pure but for the clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal, Protocol

from memory.lorematch import MATCH_SECONDS as MATCH_SECONDS
from memory.lorematch import MAX_PATTERN_CHARS as MAX_PATTERN_CHARS
from memory.lorematch import MAX_REPEAT_COPIES as MAX_REPEAT_COPIES
from memory.lorematch import REGEX_TIMEOUT as REGEX_TIMEOUT
from memory.lorematch import Clock, KeyMatcher, Miss, kind, repeat_copies
from memory.tokens import estimate_tokens

MAX_SCAN_CHARS: Final = 20_000
LORE_HEADER: Final = (
    "World information about what was just mentioned (from the persona's author, "
    "not written by any participant):"
)

# What one lorebook may hold (docs/personas.md#lorebook-limits). Real books have hundreds to
# a few thousand entries of a few keys each, entries up to a few thousand characters; the
# limits leave room for the largest, and keep a book at them cheap: imported in seconds,
# compiled in a fraction of one, matched in milliseconds per prompt (bench/lorebook.py).
#: Entries in a lorebook.
MAX_ENTRIES: Final = 5_000
#: Keys of one entry, its ``keys`` and its ``secondary_keys`` each.
MAX_ENTRY_KEYS: Final = 50
#: Characters of a plain key (a regex key: ``MAX_PATTERN_CHARS``).
MAX_KEY_CHARS: Final = 200
#: Characters of an entry's content.
MAX_CONTENT_CHARS: Final = 20_000
#: Keys of a whole lorebook, primary and secondary, every kind.
MAX_BOOK_KEYS: Final = 20_000
#: Regex keys of a whole lorebook: each is a search of its own on every prompt.
MAX_BOOK_PATTERNS: Final = 1_000
#: Characters of all the keys of a lorebook: the automaton's size grows with them.
MAX_BOOK_KEY_CHARS: Final = 400_000
#: Characters of a whole lorebook, contents, keys and names.
MAX_BOOK_CHARS: Final = 4_000_000
#: Characters of an entry's name: reports and warnings name entries by it.
MAX_NAME_CHARS: Final = 200

SkipReason = Literal[
    "disabled",
    "no key match",
    "budget",
    "too large",
    "bad regex",
    "regex timeout",
    "time budget",
]


class LoreText(Protocol):
    """What the limits read of an entry (a LoreEntry, a config's entry, a card's)."""

    @property
    def content(self) -> str: ...
    @property
    def keys(self) -> Sequence[str]: ...
    @property
    def secondary_keys(self) -> Sequence[str]: ...
    @property
    def regex(self) -> bool: ...
    @property
    def name(self) -> str: ...


def too_many_entries(count: int) -> str | None:
    """``entries: ...`` when ``count`` entries are over ``MAX_ENTRIES`` (checked first, before
    the entries are read one by one)."""
    if count <= MAX_ENTRIES:
        return None
    return f"entries: {count:,} entries, over the lorebook limit of {MAX_ENTRIES:,} entries"


def entry_problems(entry: LoreText) -> list[str]:
    """``field: problem`` for each limit one entry is over (none: an empty list)."""
    problems: list[str] = []
    if len(entry.content) > MAX_CONTENT_CHARS:
        problems.append(
            f"content: {len(entry.content):,} characters, over the limit of "
            f"{MAX_CONTENT_CHARS:,} characters per entry"
        )
    if len(entry.name) > MAX_NAME_CHARS:
        problems.append(
            f"name: {len(entry.name):,} characters, over the limit of {MAX_NAME_CHARS} "
            "characters per entry name"
        )
    longest, what = (MAX_PATTERN_CHARS, "pattern") if entry.regex else (MAX_KEY_CHARS, "key")
    for name, keys in (("keys", entry.keys), ("secondary_keys", entry.secondary_keys)):
        if len(keys) > MAX_ENTRY_KEYS:
            problems.append(
                f"{name}: {len(keys):,} keys, over the limit of {MAX_ENTRY_KEYS} keys per entry"
            )
        long = next((i for i, key in enumerate(keys) if len(key) > longest), None)
        if long is not None:
            problems.append(
                f"{name}[{long}]: a {what} of {len(keys[long]):,} characters, over the limit "
                f"of {longest} characters per {what}"
            )
        if entry.regex and long is None:
            copies = [repeat_copies(key) for key in keys]
            bomb = next((i for i, n in enumerate(copies) if n > MAX_REPEAT_COPIES), None)
            if bomb is not None:
                problems.append(
                    f"{name}[{bomb}]: a pattern whose counted repeats make {copies[bomb]:,} "
                    f"copies of one part (nested counts multiply), over the limit of "
                    f"{MAX_REPEAT_COPIES:,}"
                )
    return problems


def book_problems(entries: Sequence[LoreText]) -> list[str]:
    """``entries: problem`` for each limit the whole lorebook is over; an entry's own limits
    are ``entry_problems``."""
    if (crowded := too_many_entries(len(entries))) is not None:
        return [crowded]
    keys = patterns = key_chars = chars = 0
    for entry in entries:
        count = len(entry.keys) + len(entry.secondary_keys)
        keys += count
        patterns += count if entry.regex else 0
        size = sum(map(len, entry.keys)) + sum(map(len, entry.secondary_keys))
        key_chars += size
        chars += size + len(entry.content) + len(entry.name)
    totals = (
        (keys, MAX_BOOK_KEYS, "keys"),
        (patterns, MAX_BOOK_PATTERNS, "regex keys"),
        (key_chars, MAX_BOOK_KEY_CHARS, "characters of keys"),
        (chars, MAX_BOOK_CHARS, "characters of contents, keys and names"),
    )
    return [
        f"entries: {total:,} {what} in all, over the lorebook limit of {limit:,} {what}"
        for total, limit, what in totals
        if total > limit
    ]


@dataclass(frozen=True, slots=True)
class LoreEntry:
    """One entry of a lorebook (the fields personabot reads)."""

    content: str
    keys: tuple[str, ...] = ()
    secondary_keys: tuple[str, ...] = ()
    selective: bool = False
    regex: bool = False
    case_sensitive: bool = False
    constant: bool = False
    enabled: bool = True
    insertion_order: int = 100
    priority: int = 10
    name: str = ""

    def label(self, index: int) -> str:
        """How reports name the entry: its name, else its first key, else its position."""
        return self.name or (self.keys[0] if self.keys else f"entry {index + 1}")


@dataclass(frozen=True, slots=True)
class Lorebook:
    """A persona's entries and how they are scanned and bounded."""

    entries: tuple[LoreEntry, ...]
    scan_depth: int = 4
    token_budget: int = 500
    # The entries compiled, once per book: ``dataclasses.replace`` passes it on, so a copy
    # with another token_budget compiles nothing. One compiled for other entries is not
    # reused (checked by identity).
    compiled: CompiledBook | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.compiled is None or self.compiled.entries is not self.entries:
            object.__setattr__(self, "compiled", CompiledBook.of(self.entries))

    @property
    def compiled_book(self) -> CompiledBook:
        """The entries compiled (always set once the book exists)."""
        compiled = self.compiled
        assert compiled is not None  # __post_init__ sets it
        return compiled

    def bad_keys(self) -> tuple[Skipped, ...]:
        """Each bad pattern (too long, or not compiling), under its entry's label: never
        searched, so the caller reports them once, when the book is loaded."""
        return tuple(
            Skipped(self.entries[i].label(i), miss.reason, miss.detail)
            for i, miss in self.compiled_book.matcher.bad
        )


@dataclass(frozen=True, slots=True)
class CompiledBook:
    """A lorebook's keys compiled, and what each entry is when its keys give no verdict."""

    entries: tuple[LoreEntry, ...]
    matcher: KeyMatcher
    # Per entry: "constant", its "disabled" record, or (an entry its keys decide) its
    # "no key match" record. Built once: a prompt over a book of 5,000 entries that fires a
    # few reuses these records instead of making thousands.
    otherwise: tuple[str | Skipped, ...]

    @classmethod
    def of(cls, entries: tuple[LoreEntry, ...]) -> CompiledBook:
        """``entries`` compiled."""
        otherwise = tuple(
            "constant"
            if (decided := kind(entry)) == "constant"
            else Skipped(
                entry.label(index), "disabled" if decided == "disabled" else "no key match"
            )
            for index, entry in enumerate(entries)
        )
        return cls(entries, KeyMatcher(entries), otherwise)


@dataclass(frozen=True, slots=True)
class Fired:
    """An entry in the layer, why it fired, and its tokens."""

    label: str
    why: str
    tokens: int


@dataclass(frozen=True, slots=True)
class Skipped:
    """An entry left out, and why (``detail`` names the key or the error)."""

    label: str
    reason: SkipReason
    detail: str = ""


@dataclass(frozen=True, slots=True)
class LoreSelection:
    """The entries chosen for one prompt, in order, and what was left out."""

    contents: tuple[str, ...]
    fired: tuple[Fired, ...]
    skipped: tuple[Skipped, ...]

    @property
    def dropped(self) -> tuple[Skipped, ...]:
        """Entries that matched but did not fit the budget."""
        return tuple(s for s in self.skipped if s.reason == "budget")

    def listed(self, quiet: int = 20) -> tuple[tuple[Skipped, ...], int]:
        """The skips a report lists one by one, and how many it only counts: every skip
        but "no key match" is listed; those (entries that simply did not come up) too while
        there are at most ``quiet``. A book of thousands of entries would otherwise print a
        line for each in ``personabot prompt`` and on the console's conversation page."""
        quiet_ones = sum(1 for s in self.skipped if s.reason == "no key match")
        if quiet_ones <= quiet:
            return self.skipped, 0
        return tuple(s for s in self.skipped if s.reason != "no key match"), quiet_ones


def scanned_text(texts: Sequence[str], depth: int) -> str:
    """The last ``depth`` texts, newest last, bounded to ``MAX_SCAN_CHARS`` (newest kept)."""
    joined = "\n".join(texts[-depth:]) if depth else ""
    return joined[-MAX_SCAN_CHARS:]


def select(
    book: Lorebook,
    texts: Sequence[str],
    render: Callable[[str], str] = str,
    *,
    room: int | None = None,
    clock: Clock = time.monotonic,
) -> LoreSelection:
    """The entries of ``book`` that fire on the last ``scan_depth`` of ``texts``, within its
    ``token_budget`` and ``room`` (what the prompt leaves); each content as ``render`` makes
    it (macros expanded), counted as sent. An entry larger than the whole ``token_budget`` is
    skipped as "too large", not "budget": it can never be sent, which is said once when the
    book is loaded (``oversized``), not on every prompt. Matching takes at most
    ``MATCH_SECONDS`` by ``clock``."""
    budget = book.token_budget if room is None else max(0, min(book.token_budget, room))
    compiled = book.compiled_book
    verdicts = compiled.matcher.match(scanned_text(texts, book.scan_depth), clock)
    candidates: list[tuple[int, LoreEntry, str, str]] = []
    skipped: list[Skipped] = []
    for index, entry in enumerate(book.entries):
        why = verdicts.get(index) or compiled.otherwise[index]
        if isinstance(why, Skipped):
            skipped.append(why)
        elif isinstance(why, Miss):
            skipped.append(Skipped(entry.label(index), why.reason, why.detail))
        else:
            candidates.append((index, entry, why, render(entry.content)))
    # Over budget: drop the lowest priority first, among equals the later insertion_order.
    by_keep = sorted(candidates, key=lambda c: (-c[1].priority, c[1].insertion_order, c[0]))
    kept: list[tuple[int, LoreEntry, str, str, int]] = []
    used = 0
    for index, entry, why, content in by_keep:
        tokens = estimate_tokens(content)
        if tokens > book.token_budget:
            skipped.append(Skipped(entry.label(index), "too large", _too_large(tokens, book)))
        elif used + tokens <= budget:
            kept.append((index, entry, why, content, tokens))
            used += tokens
        else:
            left = f"{tokens} tokens, {budget - used} of {budget} left"
            skipped.append(Skipped(entry.label(index), "budget", left))
    kept.sort(key=lambda c: (c[1].insertion_order, c[0]))
    return LoreSelection(
        contents=tuple(content for _, _, _, content, _ in kept),
        fired=tuple(Fired(entry.label(i), why, tokens) for i, entry, why, _, tokens in kept),
        skipped=tuple(skipped),
    )


def _too_large(tokens: int, book: Lorebook) -> str:
    return f"{tokens} tokens, over the token_budget of {book.token_budget}"


@dataclass(frozen=True, slots=True)
class Oversized:
    """An enabled entry whose content alone is over the lorebook's ``token_budget``."""

    label: str
    tokens: int


def oversized(
    entries: Sequence[LoreEntry], token_budget: int, render: Callable[[str], str] = str
) -> tuple[Oversized, ...]:
    """The enabled entries of ``entries`` that can never be sent under ``token_budget``: their
    content, as ``render`` makes it, is estimated over it by the count ``select`` uses."""
    found = []
    for index, entry in enumerate(entries):
        if entry.enabled and (tokens := estimate_tokens(render(entry.content))) > token_budget:
            found.append(Oversized(entry.label(index), tokens))
    return tuple(found)


def oversized_text(found: Sequence[Oversized], budget: int) -> str:
    """One sentence naming the oversized entries (the first three) and the budget to set."""
    names = ", ".join(f"{e.label!r} (~{e.tokens} tokens)" for e in found[:3])
    if len(found) > 3:
        names += f" and {len(found) - 3} more"
    one = len(found) == 1
    return (
        f"lorebook entr{'y' if one else 'ies'} {names} {'is' if one else 'are'} larger than "
        f"the token_budget of {budget} and never sent: raise it under [personas.lorebook], "
        f"token_budget = {budget_for(max(e.tokens for e in found))}"
    )


#: The largest ``token_budget`` a config accepts (bot/config.py LorebookSettings).
MAX_TOKEN_BUDGET: Final = 100_000


def budget_for(tokens: int) -> int:
    """A ``token_budget`` to suggest for an entry of ``tokens``: the next hundred above it
    (an entry of 521 tokens: 600), so that it fits with a little room."""
    return min(MAX_TOKEN_BUDGET, (tokens // 100 + 1) * 100)
