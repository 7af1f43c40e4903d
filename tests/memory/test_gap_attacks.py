"""Review 34b, item 3: the gap sentinel after ordinary use (no false gaps) and after damage
done behind personabot's back (holes found), on both stores."""

from __future__ import annotations

from bot.core.clock import ManualClock
from bot.core.events import SessionKey, UserKey
from bot.store.base import BaseStore
from memory.retention.gaps import Gap
from tests.backends import StoreFactory
from tests.bot.test_retention import DAY as DAYS
from tests.bot.test_retention import (
    SUPPORT,
    behind_the_back,
    exchange,
    memory_for,
    retention,
)

SESSION = SessionKey(SUPPORT, 1)


async def _cycle(store: BaseStore, clock: ManualClock, start: int, count: int) -> None:
    """``count`` exchanges, two people taking turns, spread over ``4 * count`` days."""
    for n in range(start, start + count):
        await exchange(store, clock, SUPPORT, f"point {n}", n, author=f"u{n % 2 + 1}")
        await clock.advance(4 * DAYS)


async def test_group_forget_deletions_and_repeated_retention_make_no_false_gap(
    store: BaseStore, clock: ManualClock
) -> None:
    """A group: a platform deletion of a summarised message, retention, /forget by one of
    two people, more talk, retention again (compaction between), another deletion: every
    hole is personabot's own doing, so none is reported."""
    memory = memory_for(store, clock)
    await _cycle(store, clock, 0, 20)
    await memory.compact(SESSION, through_turn=30)
    assert await store.delete_message(SUPPORT, "support-1-3") is not None  # summarised
    await retention(store, clock, memory, "message").run_once()
    assert await memory.gaps(SESSION) == ()
    await store.erase_user_messages(UserKey("telegram", "u1"))
    assert await memory.gaps(SESSION) == ()
    for round_ in range(3):
        await _cycle(store, clock, 20 + 10 * round_, 10)
        assert await store.delete_message(SUPPORT, f"support-1-{20 + 10 * round_}")
        report = await retention(store, clock, memory, "message").run_once()
        assert await memory.gaps(SESSION) == (), (round_, report)
    await store.erase_user_messages(UserKey("telegram", "u2"))
    await _cycle(store, clock, 60, 6)
    await retention(store, clock, memory, "message").run_once()
    assert await memory.gaps(SESSION) == ()


async def test_holes_made_by_hand_are_found(
    store: BaseStore, stores: StoreFactory, clock: ManualClock
) -> None:
    """After folding and deleting: the MESSAGE_AGE tombstones deleted by hand are still
    covered (the summary stands for them); a stored message deleted by hand after the
    summary, at the end, and the summary's range narrowed from the front: each a hole."""
    memory = memory_for(store, clock)
    await _cycle(store, clock, 0, 20)
    await retention(store, clock, memory, "message").run_once()
    summary = await store.get_summary(SESSION)
    assert summary is not None and await memory.gaps(SESSION) == ()
    last = summary.last_turn
    await behind_the_back(stores, "DELETE FROM tombstones")
    assert await memory.gaps(SESSION) == ()
    await behind_the_back(stores, f"DELETE FROM messages WHERE turn IN ({last + 2}, 40)")
    assert await memory.gaps(SESSION) == (Gap(last + 2, last + 2), Gap(40, 40))
    await behind_the_back(stores, "UPDATE summaries SET first_turn = 3")
    assert await memory.gaps(SESSION) == (
        Gap(1, 2),
        Gap(last + 2, last + 2),
        Gap(40, 40),
    )
