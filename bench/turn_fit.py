"""Benchmark of fitting a long turn into its token budget (memory/turn.py ``fit_turn``).

A turn of n group messages, too long for ``room`` even at the shortest cut, so the oldest are
left out: the case of a console preview or ``personabot prompt`` over a backlog, and of a turn
of ``max_turn_messages`` long messages. ``fit_turn`` is timed against the way it was before
issue 34 (leave the oldest out one at a time and render the rest again, kept below as the
baseline), in the same run, and both must choose the same messages.

Usage::

    uv run python -m bench.turn_fit [--sizes 250,500,1000,2000] [--repeat 3]
        [--out bench/results/turn_fit.json]

Prints a table (ms per fit, the ratio to the baseline, and how each grows when n doubles:
about 2 for O(n log n), 4 for O(n^2)) and writes JSON. Exits 1 when the two disagree.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench._report import environment, format_table, utc_timestamp, write_json
from bot.core.events import ConversationKey, SessionKey, StoredMessage
from memory.tokens import estimate_tokens
from memory.turn import MIN_MESSAGE_CHARS, fit_turn, message_blocks, render_turn

ROOM = 4000
KEY = SessionKey(ConversationKey("telegram", "-100", None, "bench"), 1)

Fit = Callable[[Sequence[StoredMessage], int, int], tuple[Any, tuple[StoredMessage, ...]]]


def quadratic_fit(
    messages: Sequence[StoredMessage], limit: int, room: int
) -> tuple[Any, tuple[StoredMessage, ...]]:
    """The leave-out loop as it was before issue 34 (for turns that need it): one message
    left out per step, everything left rendered again each time."""
    kept = list(messages)
    marker = ""
    while len(kept) > 1:
        kept.pop(0)
        marker = (
            f"[... {len(messages) - len(kept)} earlier message(s) of this turn not shown: "
            "too long for one turn]"
        )
        text = f"{marker}\n{render_turn(kept, MIN_MESSAGE_CHARS)}"
        if estimate_tokens(text) <= room:
            break
    return message_blocks(kept, {}, MIN_MESSAGE_CHARS, marker), tuple(kept)


def turn(n: int) -> list[StoredMessage]:
    """n messages of three people in a group, 400 characters each."""
    return [
        StoredMessage(i, KEY, i, "user", str(i % 3), f"Person {i % 3}", "word " * 80, float(i))
        for i in range(1, n + 1)
    ]


def timed(fit: Fit, messages: Sequence[StoredMessage], repeat: int) -> tuple[float, int]:
    """Best wall time of ``repeat`` fits, in ms, and how many messages were kept."""
    best, kept = float("inf"), 0
    for _ in range(repeat):
        start = time.perf_counter()
        _, shown = fit(messages, 8000, ROOM)
        best = min(best, (time.perf_counter() - start) * 1000)
        kept = len(shown)
    return best, kept


def run(sizes: Sequence[int], repeat: int, out: Path) -> int:
    """Time both ways at each size; print, write JSON; 1 when they disagree."""
    rows: list[list[object]] = []
    results: list[dict[str, Any]] = []
    failures: list[str] = []
    previous: tuple[float, float] | None = None
    for n in sizes:
        messages = turn(n)
        new_ms, new_kept = timed(fit_turn, messages, repeat)
        old_ms, old_kept = timed(quadratic_fit, messages, repeat)
        if new_kept != old_kept:
            failures.append(f"n={n}: fit_turn kept {new_kept}, the baseline {old_kept}")
        growth = (
            (float("nan"), float("nan"))
            if previous is None
            else (new_ms / previous[0], old_ms / previous[1])
        )
        previous = (new_ms, old_ms)
        rows.append([n, new_kept, new_ms, old_ms, old_ms / new_ms, growth[0], growth[1]])
        results.append(
            {"messages": n, "kept": new_kept, "fit_turn_ms": new_ms, "baseline_ms": old_ms}
        )
    print(
        format_table(
            [
                "messages",
                "kept",
                "fit_turn ms",
                "one-by-one ms",
                "x faster",
                "growth",
                "growth (old)",
            ],
            rows,
            title=f"fit_turn: a group turn over {ROOM} tokens (best of {repeat})",
        )
    )
    for failure in failures:
        print(f"FAILED: {failure}")
    write_json(
        out,
        {
            "at": utc_timestamp(),
            "environment": environment(),
            "room_tokens": ROOM,
            "results": results,
            "failures": failures,
        },
    )
    return 1 if failures else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m bench.turn_fit``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="250,500,1000,2000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("bench/results/turn_fit.json"))
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    return run(sizes, max(1, args.repeat), args.out)


if __name__ == "__main__":
    sys.exit(main())
