"""Message-age tombstones lean on the summary (docs/architecture.md#retention rule 3): deletion
by age takes only what the stored summary covers, the gap query trusts such a tombstone only
inside that summary's range, and /forget re-tags the ones whose summary it drops."""

from __future__ import annotations

import itertools

from bot.core.events import ConversationKey, Inbound, QueuePolicy, SessionKey, UserKey
from bot.store.base import BaseStore

GROUP = ConversationKey("telegram", "-200")
OTHER = ConversationKey("telegram", "-300")
LATER = 100.0  # when retention runs: every message below is older
_ids = itertools.count(1)


async def _context(store: BaseStore, conv: ConversationKey, author: str, count: int) -> list[int]:
    """``count`` group messages by ``author``, stored as context (never pending); their ids."""
    ids = []
    for _ in range(count):
        inbound = Inbound(
            conv, author, author, "hello", f"m{next(_ids)}", is_private=False, triggers_reply=False
        )
        result = await store.ingest(inbound, 1.0, QueuePolicy())
        assert result.message_id is not None
        ids.append(result.message_id)
    return ids


async def _session(store: BaseStore, conv: ConversationKey) -> SessionKey:
    session = await store.current_session(conv)
    assert session is not None
    return session.key


async def _folded(
    store: BaseStore,
    session: SessionKey,
    ids: list[int],
    first: int,
    last: int,
    authors: tuple[str, ...] = ("u1",),
) -> None:
    """A summary of turns ``first``-``last`` (of the messages ``ids``, in turn order)."""
    assert await store.save_summary(
        session,
        "{}",
        first,
        last,
        1.0,
        expected_last_turn=None,
        authors=list(authors),
        sources=ids[first - 1 : last],
    )


async def test_deletion_by_age_takes_only_what_the_stored_summary_covers(
    store: BaseStore,
) -> None:
    ids = await _context(store, GROUP, "u1", 12)
    session = await _session(store, GROUP)
    assert await store.delete_old_messages(session, 12, LATER, LATER, 500) == 0  # no summary
    await _folded(store, session, ids, 3, 8)
    # Asked for turns up to 10: turns 1-2 (below the summary) and 9-10 (after it) stay.
    assert await store.delete_old_messages(session, 10, LATER, LATER, 500) == 6
    assert [m.turn for m in await store.messages(session)] == [1, 2, 9, 10, 11, 12]
    assert [(t.first_turn, t.last_turn, t.reason) for t in await store.tombstones(session)] == [
        (3, 8, "message age")
    ]
    assert await store.missing_turns(session, (3, 8)) == []
    assert await store.missing_turns(session, (3, 5)) == [(6, 8)]  # a narrower summary
    assert await store.missing_turns(session) == [(3, 8)]  # no summary: folded into nothing


async def test_forget_re_tags_the_tombstones_of_the_summary_it_drops(store: BaseStore) -> None:
    ids = await _context(store, GROUP, "u1", 4) + await _context(store, GROUP, "u2", 4)
    kept = await _context(store, OTHER, "u1", 4)
    group, other = await _session(store, GROUP), await _session(store, OTHER)
    await _folded(store, group, ids, 1, 8, ("u1", "u2"))
    await _folded(store, other, kept, 1, 4)
    assert await store.delete_old_messages(group, 6, LATER, LATER, 500) == 6
    assert await store.delete_old_messages(other, 4, LATER, LATER, 500) == 4
    erased = await store.erase_user_messages(UserKey("telegram", "u2"))
    assert erased.summaries == 1 and await store.get_summary(group) is None
    assert [(t.first_turn, t.last_turn, t.reason) for t in await store.tombstones(group)] == [
        (1, 6, "message age (its summary dropped by /forget)"),
        (7, 8, "/forget"),
    ]
    assert await store.missing_turns(group) == []
    # A summary /forget leaves alone keeps its tombstones leaning on it.
    assert [t.reason for t in await store.tombstones(other)] == ["message age"]
    assert await store.missing_turns(other, (1, 4)) == []
