"""Id lists passed as one parameter (a JSON array on SQLite, an array on PostgreSQL): the
shared store parts must handle a person with more messages than a statement may bind."""

from __future__ import annotations

from bot.core.events import ConversationKey, Inbound, QueuePolicy, UserKey
from bot.store.base import BaseStore

GROUP = ConversationKey("telegram", "-100")
MANY = 1200  # more than SQLite's historical limit of 999 bound parameters


async def _context(store: BaseStore, author: str, count: int) -> list[int]:
    """``count`` group messages stored as context only (never pending); their ids."""
    ids = []
    for i in range(count):
        result = await store.ingest(
            Inbound(
                GROUP,
                author,
                author,
                f"{author} {i}",
                f"{author}-{i}",
                is_private=False,
                triggers_reply=False,
            ),
            float(i),
            QueuePolicy(),
        )
        assert result.message_id is not None
        ids.append(result.message_id)
    return ids


async def test_a_summary_of_many_messages_checks_every_source(store: BaseStore) -> None:
    ids = await _context(store, "u1", MANY)
    session = await store.current_session(GROUP)
    assert session is not None
    assert await store.save_summary(
        session.key,
        "all of it",
        1,
        MANY,
        1.0,
        expected_last_turn=None,
        authors=["u1"],
        sources=ids,
    )
    assert not await store.save_summary(  # one source deleted meanwhile: refused
        session.key, "again", 1, MANY, 2.0, expected_last_turn=MANY, sources=[*ids, 10**9]
    )


async def test_forget_erases_more_messages_than_one_statement_binds(store: BaseStore) -> None:
    await _context(store, "u1", MANY)
    await _context(store, "u2", 3)
    erased = await store.erase_user_messages(UserKey("telegram", "u1"))
    assert erased.messages == MANY
    session = await store.current_session(GROUP)
    assert session is not None
    assert [m.author_id for m in await store.messages(session.key)] == ["u2"] * 3
    assert await store.missing_turns(session.key) == []  # every erased turn is tombstoned
