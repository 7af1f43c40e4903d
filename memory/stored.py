"""Memory's records as the store holds them: read (an unreadable one is logged and stands for
nothing), and a person's record rewritten by compare-and-swap on its version.

Every write of a person's record is a compare-and-swap, never a blind write, except the /forget
tombstone (memory/erasure.py): /forget and a deleted message bump the version, so a writer
that read before them loses, reads again and keeps only what is still allowed
(docs/architecture.md#prompt, "Learning about people").
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from enum import Enum
from typing import Final

from bot.core.clock import Clock
from bot.core.events import NOT_SET, SessionKey, UserKey
from bot.store.contracts import MemoryStore
from memory.records import RecordError, Summary, UserMemory

log = logging.getLogger("personabot.memory")

#: Compare-and-swap attempts of one write of a person's record before it counts as busy.
CAS_ATTEMPTS: Final = 3


def load_memory(raw: str | None) -> UserMemory:
    """A stored record, or an empty one (an unreadable record is logged and not used)."""
    if raw is None:
        return UserMemory()
    try:
        return UserMemory.from_json(raw)
    except RecordError as exc:
        log.error("unreadable user memory record ignored: %s", exc)
        return UserMemory()


async def user_memory(store: MemoryStore, user: UserKey) -> UserMemory:
    """A user's record (empty when none)."""
    raw = await store.get_user_memory(user)
    return load_memory(None if raw is NOT_SET else str(raw))


async def versioned_memory(store: MemoryStore, user: UserKey) -> tuple[UserMemory, int]:
    """A user's record and the version a compare-and-swap of it must expect."""
    raw, version = await store.read_user_memory(user)
    return load_memory(raw), version


async def summary_row(store: MemoryStore, session: SessionKey) -> tuple[Summary | None, int | None]:
    """The summary (None when there is none or it is unreadable) and the last turn of the
    stored row (None: no row). An unreadable row stands for nothing: the gap check then finds
    the turns only it held, and the next compaction replaces it (it never could: its save
    expected no row and lost to the unreadable one, every time)."""
    stored = await store.get_summary(session)
    if stored is None:
        return None, None
    try:
        return Summary.from_json(stored.body, stored.first_turn, stored.last_turn), (
            stored.last_turn
        )
    except RecordError as exc:
        log.error("unreadable summary of %s ignored: %s", session, exc)
        return None, stored.last_turn


async def summary(store: MemoryStore, session: SessionKey) -> Summary | None:
    """The session's summary, or None (an unreadable one is logged and skipped)."""
    return (await summary_row(store, session))[0]


class Rewrite(Enum):
    """How a compare-and-swap rewrite of a person's record ended."""

    WRITTEN = "written"
    UNCHANGED = "unchanged"  # the change had nothing to do: nothing written
    BUSY = "busy"  # every attempt lost to another writer


async def rewrite_memory(
    store: MemoryStore,
    user: UserKey,
    change: Callable[[UserMemory], UserMemory | None],
    clock: Clock,
) -> Rewrite:
    """Apply ``change`` to the user's record as now stored and write it back if its version
    is still the one read, up to ``CAS_ATTEMPTS`` times (``change`` returns None: nothing to
    write). ``change`` runs again on each fresh read, so it never works from a stale one."""
    for _ in range(CAS_ATTEMPTS):
        record, version = await versioned_memory(store, user)
        changed = change(record)
        if changed is None:
            return Rewrite.UNCHANGED
        if await store.set_user_memory(
            user, changed.to_json(), clock.now(), expected_version=version
        ):
            return Rewrite.WRITTEN
    return Rewrite.BUSY
