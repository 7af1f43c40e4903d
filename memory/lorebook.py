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

Patterns come from cards people download, and the scanned text from anyone who writes to
the bot, so matching is bounded: patterns of at most ``MAX_PATTERN_CHARS``, the scanned text
at most ``MAX_SCAN_CHARS`` (the newest part), and each search has a time limit (the
``regex`` library's timeout; Python's ``re`` has none), all of a prompt's searches together
``REGEX_TOTAL_SECONDS``. A pattern that does not compile or runs out of time skips its entry
with that reason; it never fails the turn. Pure but for that clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Literal

import regex

from memory.tokens import estimate_tokens

MAX_PATTERN_CHARS: Final = 500
MAX_SCAN_CHARS: Final = 20_000
#: Seconds one pattern may search the scanned text.
REGEX_TIMEOUT: Final = 0.05
#: Seconds all the patterns of one prompt may search together. Matching runs on the event
#: loop: without a total, a card of 1,000 runaway patterns held every chat 50 s per prompt.
REGEX_TOTAL_SECONDS: Final = 0.25
LORE_HEADER: Final = (
    "World information about what was just mentioned (from the persona's author, "
    "not written by any participant):"
)

SkipReason = Literal["disabled", "no key match", "budget", "bad regex", "regex timeout"]


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


def scanned_text(texts: Sequence[str], depth: int) -> str:
    """The last ``depth`` texts, newest last, bounded to ``MAX_SCAN_CHARS`` (newest kept)."""
    joined = "\n".join(texts[-depth:]) if depth else ""
    return joined[-MAX_SCAN_CHARS:]


def select(
    book: Lorebook, texts: Sequence[str], render: Callable[[str], str] = str
) -> LoreSelection:
    """The entries of ``book`` that fire on the last ``scan_depth`` of ``texts``, within the
    budget; each content as ``render`` makes it (macros expanded), counted as sent."""
    haystack = scanned_text(texts, book.scan_depth)
    folded = haystack.casefold()
    deadline = time.monotonic() + REGEX_TOTAL_SECONDS
    candidates: list[tuple[int, LoreEntry, str, str]] = []
    skipped: list[Skipped] = []
    for index, entry in enumerate(book.entries):
        label = entry.label(index)
        if not entry.enabled or not entry.content.strip():
            skipped.append(Skipped(label, "disabled"))
            continue
        if entry.constant:
            why: str | Skipped = "constant"
        else:
            why = _triggered(entry, label, haystack, folded, deadline)
        if isinstance(why, Skipped):
            skipped.append(why)
            continue
        content = render(entry.content)
        candidates.append((index, entry, why, content))
    # Over budget: drop the lowest priority first, among equals the later insertion_order.
    by_keep = sorted(candidates, key=lambda c: (-c[1].priority, c[1].insertion_order, c[0]))
    kept: list[tuple[int, LoreEntry, str, str, int]] = []
    used = 0
    for index, entry, why, content in by_keep:
        tokens = estimate_tokens(content)
        if used + tokens <= book.token_budget:
            kept.append((index, entry, why, content, tokens))
            used += tokens
        else:
            skipped.append(
                Skipped(
                    entry.label(index),
                    "budget",
                    f"{tokens} tokens, {book.token_budget - used} of {book.token_budget} left",
                )
            )
    kept.sort(key=lambda c: (c[1].insertion_order, c[0]))
    return LoreSelection(
        contents=tuple(content for _, _, _, content, _ in kept),
        fired=tuple(Fired(entry.label(i), why, tokens) for i, entry, why, _, tokens in kept),
        skipped=tuple(skipped),
    )


def _triggered(
    entry: LoreEntry, label: str, haystack: str, folded: str, deadline: float
) -> str | Skipped:
    """Why the entry fires (``key "x"``), or why it does not."""
    primary = _first_match(entry, entry.keys, label, haystack, folded, deadline)
    if not isinstance(primary, str):
        return primary or Skipped(label, "no key match")
    if entry.selective and entry.secondary_keys:
        secondary = _first_match(entry, entry.secondary_keys, label, haystack, folded, deadline)
        if not isinstance(secondary, str):
            return secondary or Skipped(label, "no key match", f"key {primary!r}, no secondary key")
        return f"key {primary!r} and {secondary!r}"
    return f"key {primary!r}"


def _first_match(
    entry: LoreEntry,
    keys: Sequence[str],
    label: str,
    haystack: str,
    folded: str,
    deadline: float,
) -> str | Skipped | None:
    """The first key found; else the first bad or runaway pattern's Skipped, or None."""
    error: Skipped | None = None
    for key in keys:
        if not key.strip():
            continue
        if not entry.regex:
            if (key in haystack) if entry.case_sensitive else (key.casefold() in folded):
                return key
            continue
        found = _search(key, entry.case_sensitive, haystack, label, deadline)
        if found is True:
            return key
        if isinstance(found, Skipped):
            error = error or found
    return error


def _search(
    key: str, case_sensitive: bool, haystack: str, label: str, deadline: float
) -> bool | Skipped:
    """Whether the pattern ``key`` occurs: ``/pattern/flags`` (``i``, ``m``, ``s`` read;
    without ``i`` it is case-sensitive) or a bare pattern (case as the entry says), within
    ``REGEX_TIMEOUT`` and what is left until ``deadline``."""
    left = deadline - time.monotonic()
    if left <= 0:
        return Skipped(
            label, "regex timeout", f"the {REGEX_TOTAL_SECONDS}s for all patterns ran out"
        )
    if len(key) > MAX_PATTERN_CHARS:
        return Skipped(label, "bad regex", f"pattern over {MAX_PATTERN_CHARS} characters")
    pattern, flags = key, 0 if case_sensitive else regex.IGNORECASE
    end = key.rfind("/")
    if key.startswith("/") and end > 0 and set(key[end + 1 :]) <= set("gimsuy"):
        suffix = key[end + 1 :]
        pattern = key[1:end]
        flags = (
            (regex.IGNORECASE if "i" in suffix else 0)
            | (regex.MULTILINE if "m" in suffix else 0)
            | (regex.DOTALL if "s" in suffix else 0)
        )
    try:
        compiled = regex.compile(pattern, flags)
    except (regex.error, ValueError) as exc:
        return Skipped(label, "bad regex", f"{key!r}: {exc}")
    try:
        return compiled.search(haystack, timeout=min(REGEX_TIMEOUT, left)) is not None
    except TimeoutError:
        return Skipped(label, "regex timeout", f"{key!r} took over {min(REGEX_TIMEOUT, left):.2g}s")
