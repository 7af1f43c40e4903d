"""Contiguity of what the model can read (SPEC section 6): which turns are missing.

Every message has a turn number within its session. What the prompt can draw on is the
summary's turn range plus the stored messages; turns before the first stored one that no
summary covers are missing, and the prompt must never pass the rest off as complete.
"""

from __future__ import annotations

from dataclasses import dataclass

from memory.records import Summary


@dataclass(frozen=True, slots=True)
class Gap:
    """A range of turns (inclusive) that is neither stored nor summarised."""

    first: int
    last: int

    def __str__(self) -> str:
        return f"{self.first}" if self.first == self.last else f"{self.first}-{self.last}"


def missing_turns(first_stored: int | None, summary: Summary | None) -> tuple[Gap, ...]:
    """Missing turns before the first stored one, less the range a summary covers."""
    if first_stored is None or first_stored <= 1:
        return ()
    end = first_stored - 1
    if summary is None:
        return (Gap(1, end),)
    gaps = []
    if summary.first_turn > 1:
        gaps.append(Gap(1, min(end, summary.first_turn - 1)))
    if summary.last_turn < end:
        gaps.append(Gap(max(summary.last_turn + 1, summary.first_turn), end))
    return tuple(g for g in gaps if g.first <= g.last)


def describe(gaps: tuple[Gap, ...]) -> str:
    """Turn ranges for people: '1-28' or '1-3, 7-9'."""
    return ", ".join(str(g) for g in gaps)


def gap_notice(gaps: tuple[Gap, ...]) -> str:
    """The note for the model: what is missing, and not to assert what would be in it."""
    ranges = describe(gaps)
    return (
        f"Turns {ranges} of this conversation are unavailable (removed by the data retention "
        "policy) and are not in the summary. Do not state facts, numbers or agreements that "
        "would have been in them; if the user refers to them, say that you no longer have "
        "those messages and ask them to restate what matters."
    )
