"""Review 12: a NUL character (U+0000) in what a person sends or is called."""

from __future__ import annotations

from bot.core.events import ConversationKey, Inbound, QueuePolicy
from bot.store.base import BaseStore

C1 = ConversationKey("telegram", "-100")
POLICY = QueuePolicy(debounce=1.5, max_wait=8.0)


async def test_a_nul_in_a_message_or_a_display_name_is_stored(store: BaseStore) -> None:
    """PostgreSQL refused the row (text cannot hold U+0000): the message was lost with a
    StoreError, on every redelivery; SQLite stored it."""
    result = await store.ingest(
        Inbound(C1, "u1", "Eve\x00Admin", "hi\x00there", "p1", is_private=False),
        1_700_000_000.0,
        POLICY,
    )
    assert result.stored
    session = await store.current_session(C1)
    assert session is not None
    [message] = await store.messages(session.key)
    assert "there" in message.text and "Eve" in message.display_name
