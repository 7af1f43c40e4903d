"""Benchmark of lorebook matching (issue 34, item 2): what one prompt's matching costs with a
book at the limits of memory/lorebook.py, compiled once (memory/lorematch.py: one automaton
over the plain keys, patterns compiled at load), against the loop it replaced (a search per
key on every prompt, patterns compiled per prompt; kept below as ``old_select``, measured in
the same run on the same book and text).

Cases:

1. **at the limits**: ``tests/cards/cards.py`` ``limit_entries()`` (5,000 entries, 20,000
   keys of which 1,000 patterns, 400,000 characters of keys, 4,000,000 in all), matched
   against a short chat (four messages naming five entries' keys) and against the longest
   scanned text (20,000 characters of words with the same keys);
2. **overlapping keys**: ``a``, ``aa``, ... 200 of them and one ``b``, against 20,000
   ``a``: every position reports up to 200 matches; the scan is cut by its time budget;
3. **the review's book**: 100,000 entries of 10 keys. The old loop's prompt time is
   measured on it (the review found 7.4 s; here with the longest scanned text), and the
   compiled matching's on the same book built past the limits; today the book is refused, at
   config load and by ``personabot persona import``'s code on the card file (both timed).

Usage (always as a module)::

    uv run python -m bench.lorebook [--quick] [--out bench/results/lorebook.json]

Prints a table, writes every figure as JSON, and exits 1 when a check fails: at the limits
the new matching fires the same entries as the old loop, with no time-budget skip, in under
``--target-ms`` per prompt; the overlapping keys end within the time budget; the review's
book is refused by both the config and the card import.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import regex
from pydantic import ValidationError

from bench._report import (
    environment,
    format_table,
    percentile,
    positive_float,
    positive_int,
    utc_timestamp,
    write_json,
)
from bot.config import LorebookSettings
from bot.core.errors import CardError
from bot.personas.importer import import_card
from memory.lorebook import (
    MATCH_SECONDS,
    MAX_PATTERN_CHARS,
    REGEX_TIMEOUT,
    Lorebook,
    LoreEntry,
    LoreSelection,
    scanned_text,
    select,
)
from tests.cards.cards import limit_entries, limit_key, v2_card, write_card

# -- the loop before issue 34, as it was (memory/lorebook.py at ee387ed) --------------------


def old_select(book: Lorebook, texts: Sequence[str], budget: float = 0.25) -> tuple[list[str], int]:
    """The labels the old loop fired (before the token budget) and how many entries it
    skipped: a scan per entry, ``key.casefold() in folded`` per plain key, each pattern
    compiled and searched per prompt, the patterns sharing ``budget`` seconds (0.25 s)."""
    haystack = scanned_text(texts, book.scan_depth)
    folded = haystack.casefold()
    deadline = time.monotonic() + budget
    fired: list[str] = []
    skipped = 0
    for index, entry in enumerate(book.entries):
        if not entry.enabled or not entry.content.strip():
            skipped += 1
            continue
        why = "constant" if entry.constant else _triggered(entry, haystack, folded, deadline)
        if why is None:
            skipped += 1
        else:
            fired.append(entry.label(index))
    return fired, skipped


def _triggered(entry: LoreEntry, haystack: str, folded: str, deadline: float) -> str | None:
    primary = _first_match(entry, entry.keys, haystack, folded, deadline)
    if primary is None:
        return None
    needs_secondary = entry.selective and bool(entry.secondary_keys)
    if (
        needs_secondary
        and _first_match(entry, entry.secondary_keys, haystack, folded, deadline) is None
    ):
        return None
    return primary


def _first_match(
    entry: LoreEntry, keys: Sequence[str], haystack: str, folded: str, deadline: float
) -> str | None:
    for key in keys:
        if not key.strip():
            continue
        if not entry.regex:
            if (key in haystack) if entry.case_sensitive else (key.casefold() in folded):
                return key
            continue
        if _search(key, entry.case_sensitive, haystack, deadline):
            return key
    return None


def _search(key: str, case_sensitive: bool, haystack: str, deadline: float) -> bool:
    left = deadline - time.monotonic()
    if left <= 0 or len(key) > MAX_PATTERN_CHARS:
        return False
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
    except (regex.error, ValueError):
        return False
    try:
        return compiled.search(haystack, timeout=min(REGEX_TIMEOUT, left)) is not None
    except TimeoutError:
        return False


# -- the cases ---------------------------------------------------------------------------------


def _entries(card_entries: list[dict[str, Any]]) -> tuple[LoreEntry, ...]:
    return tuple(
        LoreEntry(
            e["content"],
            keys=tuple(e["keys"]),
            secondary_keys=tuple(e.get("secondary_keys", ())),
            selective=e.get("selective", False),
            regex=e.get("use_regex", False),
            name=e["name"],
        )
        for e in card_entries
    )


# Entries that the texts below fire at the limits: entry 0 by its last key and last
# secondary key, 1 by its 200-character key, 2 by its 500-character pattern, a pattern and
# a plain entry in the middle of the book.
FIRED = ("e0", "e1", "e2", "e700", "e4321")


def _mentions(book: tuple[LoreEntry, ...]) -> list[str]:
    return [
        f"the {limit_key(0, 49)} and the {limit_key(0, 49, 's')}",
        f"then {book[1].keys[0]}",
        f"{limit_key(2, 0).upper()} and {limit_key(700, 0)}",
        f"what about {book[4321].keys[-1]}?",
    ]


def _long_text(mentions: list[str], seed: int = 34) -> str:
    """20,000 characters of words with the mentions spread through them."""
    rng = random.Random(seed)
    words = ["tide", "lamp", "storm", "ferry", "the", "and", "of", "Kell", "harbour", "rope"]
    chunks = [" ".join(rng.choices(words, k=700)) for _ in range(len(mentions))]
    text = " ".join(f"{chunk} {mention}" for chunk, mention in zip(chunks, mentions, strict=True))
    return text[-20_000:].rjust(20_000, "x")


@dataclass(frozen=True)
class Timing:
    """Per-prompt seconds of one way on one case."""

    case: str
    way: str
    runs: int
    p50: float
    p95: float
    fired: tuple[str, ...]
    time_budget_skips: int


def _time(runs: int, call: Callable[[], Any]) -> tuple[list[float], Any]:
    seconds: list[float] = []
    result = None
    for _ in range(runs):
        started = time.perf_counter()
        result = call()
        seconds.append(time.perf_counter() - started)
    return seconds, result


def _timing(case: str, way: str, seconds: list[float], fired: Sequence[str], cut: int) -> Timing:
    return Timing(
        case,
        way,
        len(seconds),
        percentile(seconds, 50),
        percentile(seconds, 95),
        tuple(sorted(fired)),
        cut,
    )


def _new(book: Lorebook, texts: list[str]) -> tuple[list[str], int]:
    selection: LoreSelection = select(book, texts)
    cut = sum(1 for s in selection.skipped if s.reason == "time budget")
    return [f.label for f in selection.fired] + [d.label for d in selection.dropped], cut


def at_the_limits(runs: int) -> tuple[list[Timing], float]:
    """Both ways on the book at the limits, short chat and longest text; and the seconds the
    book takes to compile (once, at load)."""
    entries = _entries(limit_entries())
    started = time.perf_counter()
    book = Lorebook(entries, token_budget=100_000)
    compile_seconds = time.perf_counter() - started
    mentions = _mentions(entries)
    timings = []
    for case, texts in (("short chat", mentions), ("20,000 characters", [_long_text(mentions)])):
        seconds, (fired, cut) = _time(runs, lambda texts=texts: _new(book, texts))
        timings.append(_timing(f"at the limits, {case}", "compiled", seconds, fired, cut))
        # The reference: what the old loop fires when it has the time (at 0.25 s, on a
        # loaded machine, it ran out at 286 ms and fired 4 of the 5).
        seconds, (fired, _) = _time(
            max(1, runs // 5), lambda texts=texts: old_select(book, texts, budget=30.0)
        )
        timings.append(_timing(f"at the limits, {case}", "old loop", seconds, fired, 0))
    return timings, compile_seconds


def overlapping(runs: int) -> list[Timing]:
    """Keys that are suffixes of each other against the text that repeats them: all found
    (the scan stops early), and with one key more that never occurs (a hostile card: the
    scan runs into the time budget)."""
    entries = tuple(LoreEntry(f"c{n}", keys=("a" * n,), name=f"a{n}") for n in range(1, 201))
    texts = ["a" * 20_000]
    timings = []
    for case, extra in (
        ("overlapping keys, all occur", ()),
        ("overlapping keys and a 'b'", (LoreEntry("b", keys=("b",), name="b"),)),
    ):
        book = Lorebook((*entries, *extra), token_budget=100_000)
        seconds, (fired, cut) = _time(runs, lambda book=book: _new(book, texts))
        timings.append(_timing(case, "compiled", seconds, fired, cut))
        seconds, (fired, _) = _time(max(1, runs // 5), lambda book=book: old_select(book, texts))
        timings.append(_timing(case, "old loop", seconds, fired, 0))
    return timings


def review_book(count: int) -> dict[str, Any]:
    """The review's book (100,000 entries of 10 keys): the old loop's prompt, and the
    refusals."""
    card_entries = [
        {"keys": [f"w{i}x{j}" for j in range(10)], "content": f"entry {i}"} for i in range(count)
    ]
    book = Lorebook(_entries([{**e, "name": f"e{i}"} for i, e in enumerate(card_entries)]))
    text = [_long_text(["no key here"] * 4)]  # the longest scanned text, as in the review
    seconds, _ = _time(1, lambda: old_select(book, text))
    new_seconds, _ = _time(1, lambda: select(book, text))
    card = v2_card()
    card["data"]["character_book"]["entries"] = card_entries
    with tempfile.TemporaryDirectory(prefix="personabot-lorebook-") as tmp:
        source, out = write_card(Path(tmp) / "review.json", card), Path(tmp) / "personabot.toml"
        started = time.perf_counter()
        try:
            import_card(source, out=out)  # the real import: read, parse, check, write
            card_error = ""
        except CardError as exc:
            card_error = str(exc)
        card_seconds = time.perf_counter() - started
        card_size, written = source.stat().st_size, out.exists()
    started = time.perf_counter()
    try:
        LorebookSettings.model_validate({"entries": card_entries})
        config_error = ""
    except ValidationError as exc:
        config_error = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
    config_seconds = time.perf_counter() - started
    return {
        "entries": count,
        "keys": count * 10,
        "old_loop_prompt_seconds": seconds[0],
        "compiled_prompt_seconds": new_seconds[0],
        "card_bytes": card_size,
        "card_refused": card_error,
        "card_refused_seconds": card_seconds,
        "card_wrote_toml": written,
        "config_refused": config_error,
        "config_refused_seconds": config_seconds,
    }


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m bench.lorebook``."""
    p = argparse.ArgumentParser(prog="python -m bench.lorebook", description=__doc__)
    p.add_argument("--quick", action="store_true", help="10 runs, the review's book at 20%%")
    p.add_argument(
        "--review-entries", type=positive_int, default=None, help="the review's book (100,000)"
    )
    p.add_argument("--runs", type=positive_int, default=None, help="prompts per case (50)")
    p.add_argument(
        "--target-ms", type=positive_float, default=50.0, help="per-prompt p50 at the limits"
    )
    p.add_argument("--out", type=Path, default=Path("bench/results/lorebook.json"))
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m bench.lorebook``."""
    args = build_parser().parse_args(argv)
    runs = args.runs or (10 if args.quick else 50)
    limits, compile_seconds = at_the_limits(runs)
    timings = [*limits, *overlapping(runs)]
    review = review_book(args.review_entries or (20_000 if args.quick else 100_000))
    by = {(t.case, t.way): t for t in timings}
    rows = []
    for t in timings:
        old = by.get((t.case, "old loop"))
        ratio = old.p50 / t.p50 if old and t.way == "compiled" and t.p50 else float("nan")
        rows.append(
            (
                t.case,
                t.way,
                t.runs,
                t.p50 * 1000,
                t.p95 * 1000,
                ratio,
                len(t.fired),
                t.time_budget_skips,
            )
        )
    headers = ("case", "way", "runs", "p50 ms", "p95 ms", "old/new", "fired", "time-budget skips")
    print(format_table(headers, rows, "Lorebook matching per prompt"))
    print(f"\ncompiling the book at the limits (once, at load): {compile_seconds * 1000:.0f} ms")
    print(
        f"the review's book ({review['entries']:,} entries x 10 keys): old loop "
        f"{review['old_loop_prompt_seconds']:.2f} s per prompt, compiled "
        f"{review['compiled_prompt_seconds'] * 1000:.1f} ms (compiled past the limits)"
    )
    print(
        f"  refused by `persona import` ({review['card_bytes'] / 1e6:.0f} MB card) in "
        f"{review['card_refused_seconds']:.2f} s: {review['card_refused']}"
    )
    print(
        f"  refused at config load in {review['config_refused_seconds']:.2f} s: "
        f"{review['config_refused']}"
    )
    limit_cases = [t for t in limits if t.way == "compiled"]
    checks = {
        "at the limits the compiled matching fires what the old loop fired": all(
            by[(t.case, "compiled")].fired == tuple(sorted(FIRED))
            and by[(t.case, "old loop")].fired == tuple(sorted(FIRED))
            for t in limit_cases
        ),
        "at the limits no entry is skipped for time": all(
            not t.time_budget_skips for t in limit_cases
        ),
        f"at the limits p50 under {args.target_ms:g} ms": all(
            t.p50 * 1000 < args.target_ms for t in limit_cases
        ),
        # A scan that did not stop once every key was found would run to the deadline
        # (MATCH_SECONDS); a tenth of it leaves room for a loaded machine (a fixed 10 ms
        # failed a run at load 7 with 25 ms) and still tells the two apart.
        "overlapping keys stop once all are found": by[
            ("overlapping keys, all occur", "compiled")
        ].p95
        < MATCH_SECONDS / 10,
        # Within the deadline give or take the machine: the scan reads the clock every few
        # matches, but on a loaded machine (five test workers on two cores) the time slice
        # after the deadline took it to 319 ms. A scan that did not stop would take seconds
        # (the old loop: 1.4-4.7 s on the review's book).
        "overlapping keys end within the time budget": by[
            ("overlapping keys and a 'b'", "compiled")
        ].p95
        < 2 * MATCH_SECONDS,
        "the review's book is refused at import, nothing written": "over the lorebook limit "
        "of 5,000 entries"
        in review["card_refused"]
        and not review["card_wrote_toml"],
        "the review's book is refused at config load": "over the lorebook limit of 5,000"
        in review["config_refused"],
    }
    for name, ok in checks.items():
        print(f"{'PASS' if ok else 'FAIL'}: {name}")
    write_json(
        args.out,
        {
            "at": utc_timestamp(),
            "environment": environment(),
            "params": {
                "quick": args.quick,
                "runs": runs,
                "target_ms": args.target_ms,
                "review_entries": review["entries"],
            },
            "timings": [asdict(t) for t in timings],
            "compile_seconds": compile_seconds,
            "review_book": review,
            "checks": checks,
        },
    )
    print(f"\nJSON written to {args.out}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
