"""A lorebook's keys compiled once, and matched against one prompt's text within a deadline.

Plain keys go into Aho-Corasick automata (``pyahocorasick``): one of the case-insensitive
keys, casefolded, searched in the casefolded text, and one of the case-sensitive keys. A
prompt then scans its text once per automaton, however many keys the book has, instead of
once per key (100,000 entries of 10 keys took 7.4 s per prompt that way). Regex keys are
compiled here, once: a pattern that does not compile, or is longer than
``MAX_PATTERN_CHARS``, is a known bad key (listed in ``bad``), never retried; the others
are searched one by one with the ``regex`` library's timeout.

Invariants:

- A plain key is found exactly when ``key in text`` (``key.casefold() in text.casefold()``
  unless case-sensitive) holds: the automata report every occurrence, overlapping ones too.
- That is also their cost: keys that are suffixes of each other (``a``, ``aa``, ``aaa``...)
  report up to the longest key's length of matches per character of ``aaaa...``. A scan
  stops as soon as every word of its automaton has been found, and reads the clock every
  ``_CLOCK_EVERY`` matches, so it ends by the deadline whatever the text.
- All the key kinds of one prompt share ``MATCH_SECONDS``. Every keyed entry gets a
  verdict; one that the deadline left undecided says so ("time budget"), never
  "no key match".
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final, Literal, Protocol, cast

import ahocorasick
import regex

#: The longest regex key; a longer one is a bad key (and refused by the lorebook limits).
MAX_PATTERN_CHARS: Final = 500
#: The most copies of one part a pattern's counted repeats may make: the ``regex`` library
#: unrolls ``{n}`` when it compiles, nested ones multiplied, so the 28-character key
#: ``(?:(?:(?:a{200}){200}){200})`` took 7.4 s and 2.25 GB to compile (review 34); 10,000
#: copies compile in about 2 ms.
MAX_REPEAT_COPIES: Final = 10_000
#: Seconds one pattern may search the scanned text.
REGEX_TIMEOUT: Final = 0.05
#: Seconds all the keys of one prompt may take together, every kind. Matching runs on the
#: event loop: without a total, a card of 1,000 runaway patterns held every chat 50 s per
#: prompt.
MATCH_SECONDS: Final = 0.25
# Matches an automaton reports between two readings of the clock.
_CLOCK_EVERY: Final = 256

MissReason = Literal["no key match", "bad regex", "regex timeout", "time budget"]
Clock = Callable[[], float]


class Keyed(Protocol):
    """What the matcher reads of an entry (memory/lorebook.py's LoreEntry)."""

    @property
    def content(self) -> str: ...
    @property
    def keys(self) -> tuple[str, ...]: ...
    @property
    def secondary_keys(self) -> tuple[str, ...]: ...
    @property
    def selective(self) -> bool: ...
    @property
    def regex(self) -> bool: ...
    @property
    def case_sensitive(self) -> bool: ...
    @property
    def constant(self) -> bool: ...
    @property
    def enabled(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class Miss:
    """Why an entry's keys did not fire it (``detail`` names the key or the error)."""

    reason: MissReason
    detail: str = ""


def kind(entry: Keyed) -> Literal["disabled", "constant", "keyed"]:
    """What decides whether the entry fires: nothing (disabled, or blank), nothing but the
    budget (``constant``), or its keys."""
    if not entry.enabled or not entry.content.strip():
        return "disabled"
    return "constant" if entry.constant else "keyed"


#: The verdict of an entry none of whose keys occur (``match`` leaves plain ones out).
NO_MATCH: Final = Miss("no key match")
_UNDECIDED: Final = Miss("time budget", f"the {MATCH_SECONDS}s for matching this prompt ran out")

# A regex key as compiled: the pattern, a bad key's Miss, or None for a blank key.
_Pattern = regex.Pattern[str] | Miss | None
# An entry's keys as compiled, primary then secondary (None when no secondary key is needed).
_Slots = tuple[tuple[int | None, ...], tuple[int | None, ...] | None]
_PatternSlots = tuple[tuple[_Pattern, ...], tuple[_Pattern, ...] | None]


class KeyMatcher:
    """The keys of a lorebook's entries, compiled once (``Lorebook`` builds one)."""

    __slots__ = ("_folded", "_patterns", "_postings", "_sensitive", "_words", "bad", "entries")

    def __init__(self, entries: Sequence[Keyed]) -> None:
        #: The entries compiled (a verdict names their keys).
        self.entries = entries
        ids: dict[tuple[str, bool], int] = {}
        self._words: dict[int, _Slots] = {}
        self._patterns: dict[int, _PatternSlots] = {}
        for index, entry in enumerate(entries):
            if kind(entry) != "keyed":
                continue
            secondary = entry.selective and bool(entry.secondary_keys)
            if entry.regex:
                sensitive = entry.case_sensitive
                self._patterns[index] = (
                    tuple(_compile(key, sensitive) for key in entry.keys),
                    tuple(_compile(key, sensitive) for key in entry.secondary_keys)
                    if secondary
                    else None,
                )
            else:
                self._words[index] = (
                    _word_ids(entry.keys, entry.case_sensitive, ids),
                    _word_ids(entry.secondary_keys, entry.case_sensitive, ids)
                    if secondary
                    else None,
                )
        # A word (a key as matched) has one id however many entries share it; postings[id]
        # lists the (entry, slot, position) of each key it stands for.
        self._postings: list[list[tuple[int, int, int]]] = [[] for _ in ids]
        for index, slots in self._words.items():
            for slot, word_ids in enumerate(slots):
                for position, word_id in enumerate(word_ids or ()):
                    if word_id is not None:
                        self._postings[word_id].append((index, slot, position))
        self._folded = _Scanner({i: w for (w, sensitive), i in ids.items() if not sensitive})
        self._sensitive = _Scanner({i: w for (w, sensitive), i in ids.items() if sensitive})
        #: Each bad key, by entry index (the caller reports them once, at load).
        self.bad: tuple[tuple[int, Miss], ...] = tuple(
            (index, miss)
            for index, slots in self._patterns.items()
            for patterns in slots
            for miss in patterns or ()
            if isinstance(miss, Miss)
        )

    def match(self, text: str, clock: Clock) -> dict[int, str | Miss]:
        """The keyed entries' verdicts on ``text``, by index: why one fires (``key 'x'``), or
        why not; an entry left out is ``NO_MATCH`` (most of a big book: not listed, so the
        work is per key found). Plain keys go first (well under a millisecond at the
        lorebook limits), then patterns in entry order, all within ``MATCH_SECONDS`` by
        ``clock``."""
        deadline = clock() + MATCH_SECONDS
        folded, folded_done = self._folded.scan(text.casefold(), deadline, clock)
        sensitive, sensitive_done = self._sensitive.scan(text, deadline, clock)
        verdicts = self._plain(folded | sensitive, complete=folded_done and sensitive_done)
        for index, (primary, secondary) in self._patterns.items():
            entry = self.entries[index]
            first = _first_pattern(entry.keys, primary, text, deadline, clock)
            if not isinstance(first, int):
                verdicts[index] = first or NO_MATCH
                continue
            if secondary is None:
                verdicts[index] = f"key {entry.keys[first]!r}"
                continue
            also = _first_pattern(entry.secondary_keys, secondary, text, deadline, clock)
            verdicts[index] = (
                f"key {entry.keys[first]!r} and {entry.secondary_keys[also]!r}"
                if isinstance(also, int)
                else also or Miss("no key match", f"key {entry.keys[first]!r}, no secondary key")
            )
        return verdicts

    def _plain(self, found: set[int], *, complete: bool) -> dict[int, str | Miss]:
        """The verdicts of the plain entries that a key was found for, or that a cut scan
        (not ``complete``: the deadline came first) left undecided; the others have none."""
        # The first key of each entry and slot (in the entry's order) among those found: the
        # work is per word found, not per key of the book.
        first: dict[tuple[int, int], int] = {}
        for word_id in found:
            for index, slot, position in self._postings[word_id]:
                if position < first.get((index, slot), position + 1):
                    first[(index, slot)] = position
        verdicts: dict[int, str | Miss] = {}
        if not complete:
            for index, (primary, _) in self._words.items():
                if any(w is not None for w in primary):
                    verdicts[index] = _UNDECIDED
        for (index, slot), position in first.items():
            if slot:
                continue
            entry, secondary = self.entries[index], self._words[index][1]
            key = entry.keys[position]
            if secondary is None:
                verdicts[index] = f"key {key!r}"
            elif (also := first.get((index, 1))) is not None:
                verdicts[index] = f"key {key!r} and {entry.secondary_keys[also]!r}"
            elif not complete and any(w is not None for w in secondary):
                verdicts[index] = _UNDECIDED
            else:
                verdicts[index] = Miss("no key match", f"key {key!r}, no secondary key")
        return verdicts


class _Automaton(Protocol):
    """The part of ``ahocorasick.Automaton`` used here (the library ships no types)."""

    def iter(self, text: str) -> Iterator[tuple[int, int]]: ...


class _Scanner:
    """One automaton over some words, each reported under its id."""

    __slots__ = ("_automaton", "_count")

    def __init__(self, words: dict[int, str]) -> None:
        self._count = len(words)
        automaton = ahocorasick.Automaton(ahocorasick.STORE_INTS)
        for word_id, word in words.items():
            automaton.add_word(word, word_id)
        if words:
            automaton.make_automaton()  # an empty one can be neither made nor scanned
        self._automaton = cast(_Automaton, automaton)

    def scan(self, text: str, deadline: float, clock: Clock) -> tuple[set[int], bool]:
        """The ids of the words found in ``text``, and whether the scan went to the end (or
        to the last word): it stops at ``deadline``."""
        found: set[int] = set()
        if not self._count:
            return found, True
        if clock() >= deadline:
            return found, False
        for seen, (_, word_id) in enumerate(self._automaton.iter(text), 1):
            found.add(word_id)
            if len(found) == self._count:
                return found, True
            if not seen % _CLOCK_EVERY and clock() >= deadline:
                return found, False
        return found, True


def _word_ids(
    keys: Sequence[str], case_sensitive: bool, ids: dict[tuple[str, bool], int]
) -> tuple[int | None, ...]:
    """Each key's word id (a new word gets the next one); None for a blank key, which never
    matches."""
    return tuple(
        ids.setdefault((key if case_sensitive else key.casefold(), case_sensitive), len(ids))
        if key.strip()
        else None
        for key in keys
    )


def _compile(key: str, case_sensitive: bool) -> _Pattern:
    """A regex key compiled: ``/pattern/flags`` (``i``, ``m``, ``s`` read; without ``i`` it
    is case-sensitive) or a bare pattern (case as the entry says); a Miss when it is too
    long or does not compile, None when blank."""
    if not key.strip():
        return None
    if len(key) > MAX_PATTERN_CHARS:
        return Miss("bad regex", f"pattern over {MAX_PATTERN_CHARS} characters")
    if (copies := repeat_copies(key)) > MAX_REPEAT_COPIES:
        return Miss("bad regex", f"repeats a part {copies:,} times, over {MAX_REPEAT_COPIES:,}")
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
        return regex.compile(pattern, flags)
    except (regex.error, ValueError) as exc:
        return Miss("bad regex", f"{key!r}: {exc}")


def _first_pattern(
    keys: tuple[str, ...],
    patterns: tuple[_Pattern, ...],
    text: str,
    deadline: float,
    clock: Clock,
) -> int | Miss | None:
    """The position of the first of ``keys`` (compiled: ``patterns``) that occurs in
    ``text``; else the first bad or runaway pattern's Miss, or None. Each search gets
    ``REGEX_TIMEOUT``, or what is left until ``deadline`` when less; when nothing is left,
    the entry is undecided."""
    error: Miss | None = None
    for position, pattern in enumerate(patterns):
        if pattern is None:
            continue
        if isinstance(pattern, Miss):
            error = error or pattern
            continue
        left = deadline - clock()
        if left <= 0:
            return _UNDECIDED
        timeout = min(REGEX_TIMEOUT, left)
        try:
            if pattern.search(text, timeout=timeout) is not None:
                return position
        except TimeoutError:
            error = error or Miss("regex timeout", f"{keys[position]!r} took over {timeout:.2g}s")
    return error


_COUNT = regex.compile(r"\{(\d*)(?:,(\d*))?\}")


def repeat_copies(pattern: str) -> int:
    """The most copies of any one part of ``pattern`` that its counted repeats ask for
    (``{n}``, ``{m,n}``: the larger bound; nested ones multiplied), read without compiling.

    A scan of the text, not a parser: escapes and character sets are atoms, a group is an
    atom as large as the largest thing in it, and a count multiplies the atom before it.
    ``*``, ``+`` and ``?`` are loops, never copies; a ``{`` that is no count (a fuzzy
    constraint, a literal) counts nothing. It can only overstate, never miss a count."""
    frames: list[tuple[int, int]] = []  # the enclosing groups' (largest, last atom)
    largest = last = 1
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            # \p{..} and \N{..} carry their braces with them.
            end = pattern.find("}", i) if pattern[i + 1 : i + 3] in ("p{", "P{", "N{") else -1
            i, last = (end + 1 if end > 0 else i + 2), 1
        elif char == "[":
            i, last = _set_end(pattern, i), 1
        elif char == "(":
            frames.append((largest, last))
            largest = last = 1
            i += 1
        elif char == ")" and frames:
            inner = largest
            largest, last = frames.pop()
            last = inner
            largest = max(largest, last)
            i += 1
        elif char == "{" and (count := _COUNT.match(pattern, i)) and count[0] != "{}":
            low, high = count[1], count[2]
            last *= max(int(low or 0), int(high or 0), 1)
            largest = max(largest, last)
            i = count.end()
        else:
            last = 1 if char not in "*+?|" else last
            i += 1
    for outer, _ in reversed(frames):  # an unclosed group (it will not compile anyway)
        largest = max(largest, outer)
    return largest


def _set_end(pattern: str, start: int) -> int:
    """Where the character set opening at ``start`` ends (nested sets of the regex
    library's V1 syntax included; the end of the pattern when it never closes)."""
    depth, i = 0, start
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            i += 2
            continue
        if char == "[":
            depth += 1
            if pattern[i + 1 : i + 2] == "^":
                i += 1
            if pattern[i + 1 : i + 2] == "]":  # a leading ] is a member
                i += 1
        elif char == "]":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return i
