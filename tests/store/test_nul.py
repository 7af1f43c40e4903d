"""Review 12: a NUL character (U+0000) in what a person sends or is called."""

from __future__ import annotations

from bot.core.events import ConversationKey, Inbound, QueuePolicy
from bot.core.media import MediaRef, Quote
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


async def test_a_nul_in_media_or_a_quote_never_loses_the_message(store: BaseStore) -> None:
    """PostgreSQL's text codec does not reach the elements of the media arrays ingest binds:
    a NUL in a label failed the whole ingest there."""
    photo = MediaRef("image", "sticker \x00😀", ref="file\x00id", media_type="image/\x00webp")
    quote = Quote("forward", "Chan\x00nel", "forwarded\x00text", author_id="c\x001")
    inbound = Inbound(C1, "u1", "Eve", "", "p2", is_private=False, media=(photo,), quote=quote)
    assert (await store.ingest(inbound, 1_700_000_000.0, POLICY)).stored
    turn = await store.pending_turn(C1)
    assert turn is not None
    [message] = turn.messages
    [media] = message.media
    assert media.ref.label.startswith("sticker ") and media.ref.label.endswith("😀")
    assert "id" in media.ref.ref and media.ref.media_type.endswith("webp")
    assert message.quote is not None and message.quote.text.endswith("text")
