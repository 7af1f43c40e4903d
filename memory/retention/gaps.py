"""Contiguity of what the model can read (docs/architecture.md#retention): which turns are missing.

Every message has a turn number within its session, from 1 to the session's last. What the
prompt can draw on is the summary's turn range plus the stored messages. Turns that
personabot deleted itself (a platform deletion, /forget, retention) are tombstoned with the
reason and are not gaps, except that turns retention folded into the summary are explained
by that summary alone: lost or narrowed, it leaves them missing. Any other turn, at the
start, in the middle or at the end, is missing, and the prompt must never pass the rest off
as complete.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from bot.core.events import SessionKey
from bot.store.contracts import RetentionStore
from memory.records import Summary


@dataclass(frozen=True, slots=True)
class Gap:
    """A range of turns (inclusive) that is neither stored nor summarised."""

    first: int
    last: int

    def __str__(self) -> str:
        return f"{self.first}" if self.first == self.last else f"{self.first}-{self.last}"


def covered_range(summary: Summary | None) -> tuple[int, int] | None:
    """The turns a summary stands for (what the gap check need not find stored)."""
    return None if summary is None else (summary.first_turn, summary.last_turn)


def as_gaps(ranges: Iterable[tuple[int, int]]) -> tuple[Gap, ...]:
    """Gaps from the store's (first, last) ranges."""
    return tuple(Gap(first, last) for first, last in ranges if first <= last)


async def find_gaps(
    store: RetentionStore, session: SessionKey, summary: Summary | None
) -> tuple[Gap, ...]:
    """Turns of the session (first to last) neither stored, covered by ``summary`` (the one
    the prompt carries), nor deleted by personabot itself (tombstoned; turns retention folded
    into a summary count only inside this one's range). One indexed query over the turns
    after the summary (bot/store/tombstones.py), so it stays flat however long the session."""
    return as_gaps(await store.missing_turns(session, covered_range(summary)))


def describe(gaps: tuple[Gap, ...]) -> str:
    """Turn ranges for people: '1-28' or '1-3, 7-9'."""
    return ", ".join(str(g) for g in gaps)


def gap_notice(gaps: tuple[Gap, ...]) -> str:
    """The note for the model: what is missing, and not to assert what would be in it."""
    ranges = describe(gaps)
    one = len(gaps) == 1 and gaps[0].first == gaps[0].last
    subject = (
        f"Turn {ranges} of this conversation is"
        if one
        else f"Turns {ranges} of this conversation are"
    )
    return (
        f"{subject} unavailable (deleted from the store) and "
        "not in the summary. Do not state facts, numbers or agreements that "
        "would have been in them; if the user refers to them, say that you no longer have "
        "those messages and ask them to restate what matters."
    )
