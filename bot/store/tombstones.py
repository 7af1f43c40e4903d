"""Tombstones and the gap query shared by both store backends (docs/architecture.md#retention).

A tombstone is a range of a session's turns that personabot itself deleted, with the reason.
Most reasons explain the turns by themselves: a platform deletion, /forget, a rejected message
gone by age (never in a prompt), folded turns whose summary /forget dropped. ``MESSAGE_AGE``
does not: it says "folded into the summary", a claim only the summary stored now can make
good. The gap check expects every turn from 1 to ``sessions.next_turn - 1`` to be stored,
inside the summary's range, or tombstoned for a reason that explains it alone; what is none of
these (a ``MESSAGE_AGE`` turn whose summary was lost or narrowed included) is a hole the
person and the model may be told of, and goes to the gap policy.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

#: Reasons recorded with tombstones.
PLATFORM_DELETION: Final = "deleted on the platform"
FORGET: Final = "/forget"
#: Retention in message mode deleted turns the summary folded in: they are explained only
#: while a stored summary's range covers them (the gap query never counts these alone).
MESSAGE_AGE: Final = "message age"
#: Retention in message mode deleted a message the model rejected: history leaves those out,
#: so no summary ever folds them, and no prompt showed them.
REJECTED_AGE: Final = "message age (rejected, never in a prompt)"
#: /forget dropped the summary that held these ``MESSAGE_AGE`` turns (they are re-tagged in
#: the erasure's transaction): personabot removed what covered them, knowingly.
SUMMARY_FORGOTTEN: Final = "message age (its summary dropped by /forget)"
#: Migration 16 (only): ``MESSAGE_AGE`` tombstones that no stored summary covered when the
#: gap check began to require one; personabot's own deletions or not, nothing tells.
UNCHECKED_AGE: Final = "message age (no summary covered it at upgrade)"


def runs(rows: Iterable[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """(session row id, turn) pairs as (session row id, first turn, last turn) runs."""
    out: list[tuple[int, int, int]] = []
    for sid, turn in sorted(set(rows)):
        if out and out[-1][0] == sid and out[-1][2] == turn - 1:
            out[-1] = (sid, out[-1][1], turn)
        else:
            out.append((sid, turn, turn))
    return out


def gap_sql(placeholders: Iterable[str]) -> str:
    """The gap query: turn ranges of one session neither stored, tombstoned nor covered.

    One statement, index range scans only: the session by its key, its messages and
    tombstones outside the covered range (the summary), which stays a window's worth on the
    reply path. Placeholders, in order: bot, platform, chat, thread, session number, covered
    first turn, covered last turn (use 1 and 0 when nothing is covered).

    ``MESSAGE_AGE`` tombstones cover nothing here: what they claim (folded into the summary)
    holds exactly inside the covered range, which counts already. Outside it (no summary, one
    restored from an older backup, one narrowed) their turns are holes.

    Every covered interval (a, b) is sorted by a; a hole is where an interval starts after
    the running maximum of the previous ones' ends, plus one. (0, 0) and (next_turn,
    next_turn) frame the expected range, so holes at the start and at the end count too.
    """
    bot, platform, chat, thread, number, first, last = placeholders
    return f"""
        WITH s AS (
            SELECT s.id, s.next_turn FROM sessions s
            JOIN conversations c ON c.id = s.conversation_id
            WHERE c.bot = {bot} AND c.platform = {platform} AND c.chat_id = {chat}
            AND c.thread_id = {thread} AND s.session_no = {number}
        ),
        covered (a, b) AS (
            SELECT 0, 0
            UNION ALL SELECT next_turn, next_turn FROM s
            UNION ALL SELECT {first}, {last} FROM s
            UNION ALL SELECT m.turn, m.turn FROM messages m JOIN s ON m.session_id = s.id
                WHERE m.turn > {last}
            UNION ALL SELECT m.turn, m.turn FROM messages m JOIN s ON m.session_id = s.id
                WHERE m.turn < {first}
            UNION ALL SELECT t.first_turn, t.last_turn FROM tombstones t
                JOIN s ON t.session_id = s.id WHERE t.reason <> '{MESSAGE_AGE}'
                AND (t.last_turn > {last} OR t.first_turn < {first})
        ),
        ordered AS (
            SELECT a, MAX(b) OVER (ORDER BY a ROWS BETWEEN UNBOUNDED PRECEDING
                AND 1 PRECEDING) AS prev FROM covered
        )
        SELECT prev + 1, a - 1 FROM ordered WHERE a > prev + 1 AND EXISTS (SELECT 1 FROM s)
        ORDER BY a
    """
