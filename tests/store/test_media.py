"""Media and quotes in the store (issue 15): written by ingest with their message, returned by
every read of messages, what the turn made of them (save_media, media_data), and gone with
their message. Every test runs on SQLite and PostgreSQL."""

from __future__ import annotations

import itertools
from typing import get_args

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.core.errors import StoreError
from bot.core.events import (
    ConversationKey,
    Inbound,
    QueuePolicy,
    SessionKey,
    StoredMessage,
    UserKey,
)
from bot.core.media import MediaKind, MediaRef, Quote, QuoteOrigin
from bot.store.base import BaseStore
from bot.store.contracts import MAX_MEDIA_BYTES
from tests.store.helpers import media_of

DM = ConversationKey("telegram", "11")
GROUP = ConversationKey("telegram", "-100")
ADA = UserKey("telegram", "11")
POLICY = QueuePolicy(debounce=1.5, max_wait=8.0)
T0 = 1_700_000_000.0

PHOTO = MediaRef(
    "image",
    "photo",
    ref="AgACAgIAAxkBAAIBQ2",
    unique_id="AQADk7",
    media_type="image/jpeg",
    size=123_456,
    width=1280,
    height=960,
)
VOICE = MediaRef(
    "voice",
    "voice message",
    ref="AwACAgIAAxkBAAIBRG",
    unique_id="AgADl8",
    media_type="audio/ogg",
    size=9_000,
    duration=3.5,
)
QUOTE = Quote("reply", "Bo", "are you coming tonight?", author_id="22", from_bot=False)


def _inbound(
    text: str = "look at this",
    message_id: str = "p1",
    *,
    conversation: ConversationKey = DM,
    media: tuple[MediaRef, ...] = (PHOTO, VOICE),
    quote: Quote | None = QUOTE,
    triggers: bool = True,
) -> Inbound:
    return Inbound(
        conversation,
        "11",
        "Ada",
        text,
        message_id,
        is_private=conversation == DM,
        triggers_reply=triggers,
        media=media,
        quote=quote,
    )


def _assert_carries(
    message: StoredMessage, media: tuple[MediaRef, ...], quote: Quote | None
) -> None:
    assert tuple(m.ref for m in message.media) == media
    assert [m.position for m in message.media] == list(range(len(media)))
    assert {m.message_id for m in message.media} <= {message.id}
    assert message.quote == quote


async def _answer(store: BaseStore, conversation: ConversationKey, now: float) -> None:
    turn = await store.pending_turn(conversation)
    assert turn is not None
    lease = await store.acquire_lease(f"turn:{conversation}", "w", 30, now)
    assert lease is not None
    result = await store.finish_turn(turn, lease, "nice!", now, POLICY)
    assert result.outcome == "recorded"


async def test_ingest_keeps_media_and_quote_and_every_read_returns_them(
    store: BaseStore,
) -> None:
    """The turn, the history, the session's messages, /export's data and a deletion all see
    the photo and the voice note in order, with the quoted reply, and no bytes."""
    result = await store.ingest(_inbound(), T0, POLICY)
    await store.ingest(_inbound("and plain text", "p2", media=(), quote=None), T0 + 1, POLICY)
    assert result.message_id is not None
    turn = await store.pending_turn(DM)
    assert turn is not None
    first, plain = turn.messages
    _assert_carries(first, (PHOTO, VOICE), QUOTE)
    assert [m.status for m in first.media] == ["new", "new"]
    assert first.was_voice and first.media[0].message_id == result.message_id
    assert plain.media == () and plain.quote is None and not plain.was_voice
    assert await media_of(store, [first.id, plain.id]) == {first.id: first.media}

    await _answer(store, DM, T0 + 2)
    session = turn.session
    [old, _, _] = await store.history(session, 10)
    _assert_carries(old, (PHOTO, VOICE), QUOTE)
    assert old.media == first.media
    [oldest] = await store.history(session, 1, oldest_first=True)
    assert oldest.media == first.media
    [mine, _, reply] = await store.messages(session)
    assert mine.media == first.media and mine.quote == QUOTE
    assert reply.media == () and reply.quote is None
    data = await store.user_data(ADA)
    assert [m.media for m in data.messages] == [first.media, ()]
    assert [m.quote for m in data.messages] == [QUOTE, None]
    removed = await store.delete_message(DM, "p1")
    assert removed is not None and removed.media == first.media and removed.quote == QUOTE


async def test_a_second_delivery_stores_no_media_twice(store: BaseStore) -> None:
    first = await store.ingest(_inbound(), T0, POLICY)
    again = await store.ingest(_inbound(), T0 + 1, POLICY)
    assert first.stored and not again.stored
    session = await store.current_session(DM)
    assert session is not None
    [message] = await store.messages(session.key)
    assert len(message.media) == 2
    assert len((await media_of(store, [message.id]))[message.id]) == 2


async def test_what_the_turn_made_of_media_is_kept_and_read_back(store: BaseStore) -> None:
    await store.ingest(_inbound(), T0, POLICY)
    turn = await store.pending_turn(DM)
    assert turn is not None
    photo, voice = turn.messages[0].media
    jpeg = b"\xff\xd8\xff\xe0" + bytes(range(256)) * 40
    await store.save_media(
        photo.id, status="ready", data=jpeg, media_type="image/webp", width=800, height=600
    )
    await store.save_media(voice.id, status="ready", note="see you at eight")
    turn = await store.pending_turn(DM)
    assert turn is not None
    photo, voice = turn.messages[0].media
    assert (photo.status, photo.media_type, photo.width, photo.height) == (
        "ready",
        "image/webp",
        800,
        600,
    )
    assert photo.ref == PHOTO  # the platform's description is untouched
    assert (voice.status, voice.note, voice.media_type) == ("ready", "see you at eight", "")
    assert await store.media_data([photo.id, voice.id, 10**9]) == {photo.id: jpeg}
    assert await store.media_data([]) == {}

    # Every field is replaced: a later failure drops the cached bytes.
    await store.save_media(photo.id, status="failed", note="file is gone")
    assert await store.media_data([photo.id]) == {}
    [message] = (await media_of(store, [photo.message_id])).values()
    assert (message[0].status, message[0].note, message[0].width) == (
        "failed",
        "file is gone",
        None,
    )


async def test_save_media_of_a_deleted_message_is_no_error_and_bad_input_is_refused(
    store: BaseStore,
) -> None:
    await store.ingest(_inbound(), T0, POLICY)
    turn = await store.pending_turn(DM)
    assert turn is not None
    photo = turn.messages[0].media[0]
    assert await store.delete_message(DM, "p1") is not None
    # The turn was preparing the photo while the person deleted the message.
    await store.save_media(photo.id, status="ready", data=b"late bytes", media_type="image/png")
    assert await store.media_data([photo.id]) == {}
    with pytest.raises(StoreError, match="status"):
        await store.save_media(photo.id, status="done")  # type: ignore[arg-type]
    with pytest.raises(StoreError, match="bytes of media"):
        await store.save_media(photo.id, status="ready", data=bytes(MAX_MEDIA_BYTES + 1))


async def test_absurd_numbers_from_a_platform_never_lose_the_message(store: BaseStore) -> None:
    """Sizes beyond what a BIGINT holds, and a NaN duration, are stored as unknown."""
    odd = MediaRef("video", "video", size=2**70, width=-(2**64), height=7, duration=float("nan"))
    inf = MediaRef("audio", "audio song.mp3", duration=float("inf"))
    assert (await store.ingest(_inbound(media=(odd, inf)), T0, POLICY)).stored
    turn = await store.pending_turn(DM)
    assert turn is not None
    stored_odd, stored_inf = (m.ref for m in turn.messages[0].media)
    assert (stored_odd.size, stored_odd.width, stored_odd.height, stored_odd.duration) == (
        None,
        None,
        7,
        None,
    )
    assert stored_inf.duration is None and stored_inf.label == "audio song.mp3"


async def test_an_edit_replaces_the_text_and_keeps_media_and_quote(store: BaseStore) -> None:
    await store.ingest(_inbound("lok at this"), T0, POLICY)
    assert await store.edit_message(DM, "p1", "look at this", T0 + 1, POLICY) == "updated"
    turn = await store.pending_turn(DM)
    assert turn is not None
    [message] = turn.messages
    assert message.text == "look at this"
    _assert_carries(message, (PHOTO, VOICE), QUOTE)


# -- a property: whatever an adapter describes comes back exactly -------------------------------

_TEXT = st.text(st.characters(exclude_characters="\x00"), max_size=80)
_INT64 = st.none() | st.integers(-(2**63), 2**63 - 1)
_MEDIA = st.builds(
    MediaRef,
    kind=st.sampled_from(get_args(MediaKind)),
    label=_TEXT,
    ref=_TEXT,
    unique_id=_TEXT,
    media_type=_TEXT,
    size=_INT64,
    width=_INT64,
    height=_INT64,
    duration=st.none() | st.floats(allow_nan=False, allow_infinity=False),
)
_QUOTES = st.none() | st.builds(
    Quote,
    origin=st.sampled_from(get_args(QuoteOrigin)),
    author=_TEXT,
    text=st.text(st.characters(exclude_characters="\x00"), max_size=1000),
    author_id=st.none() | _TEXT,
    from_bot=st.booleans(),
)
_EXAMPLES = itertools.count(1)


@settings(
    max_examples=40,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(media=st.lists(_MEDIA, max_size=4).map(tuple), quote=_QUOTES)
async def test_any_media_and_quote_round_trip_exactly(
    store: BaseStore, media: tuple[MediaRef, ...], quote: Quote | None
) -> None:
    """Arbitrary unicode, 64-bit sizes, missing fields: ingest -> read gives back exactly
    what the adapter described (the turn, and the session's messages)."""
    n = next(_EXAMPLES)
    conversation = ConversationKey("telegram", f"prop-{n}")
    inbound = _inbound("", f"m{n}", conversation=conversation, media=media, quote=quote)
    await store.ingest(inbound, T0 + n, POLICY)
    turn = await store.pending_turn(conversation)
    assert turn is not None
    _assert_carries(turn.messages[0], media, quote)
    [stored] = await store.messages(SessionKey(conversation, 1))
    assert stored.media == turn.messages[0].media and stored.quote == quote
