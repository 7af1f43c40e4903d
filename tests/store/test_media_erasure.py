"""Cached media bytes go with their message on every path that deletes messages (issue 15):
a platform deletion, /forget (in an open or a closed session), session expiry and message-age
retention. The rows leave the table; on SQLite the bytes leave the database file too
(secure_delete: a copy of the file never holds a photo someone had deleted)."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiosqlite
import asyncpg
import pytest

from bot.core.events import ConversationKey, Inbound, QueuePolicy, UserKey
from bot.core.media import MediaRef
from bot.store.base import BaseStore
from tests.backends import StoreFactory
from tests.store.helpers import close_session, media_of

GROUP = ConversationKey("telegram", "-100")
ADA = UserKey("telegram", "11")
POLICY = QueuePolicy()
T0 = 1_700_000_000.0


async def _platform_deletion(store: BaseStore) -> None:
    assert await store.delete_message(GROUP, "photo-msg") is not None


async def _forget(store: BaseStore) -> None:
    assert (await store.erase_user_messages(ADA)).messages == 1


async def _forget_closed_sessions(store: BaseStore) -> None:
    await close_session(store, GROUP, T0 + 10)
    assert (await store.erase_user_messages(ADA)).messages == 1


async def _session_expiry(store: BaseStore) -> None:
    closed = await close_session(store, GROUP, T0 + 10)
    assert closed is not None
    assert await store.expire_session(closed.key, T0 + 20) == 2


async def _message_age(store: BaseStore) -> None:
    session = await store.current_session(GROUP)
    assert session is not None
    # Fold before delete: retention deletes only what the stored summary covers.
    assert await store.save_summary(session.key, "{}", 1, 2, T0 + 19, expected_last_turn=None)
    assert await store.delete_old_messages(session.key, 10, T0 + 0.5, T0 + 20, 100) == 1


PATHS: dict[str, Callable[[BaseStore], Awaitable[None]]] = {
    "platform deletion": _platform_deletion,
    "/forget": _forget,
    "/forget, closed sessions": _forget_closed_sessions,
    "session expiry": _session_expiry,
    "message age": _message_age,
}


async def _raw_media(stores: StoreFactory) -> list[tuple[int, bytes | None]]:
    """Every row of the media table, read past the store (orphans included)."""
    if stores.backend.name == "sqlite":
        async with aiosqlite.connect(stores.path) as db:
            rows = await db.execute_fetchall("SELECT message_id, data FROM media")
        return [(int(r[0]), r[1]) for r in rows]
    conn = await asyncpg.connect(stores.dsn)
    try:
        return [(int(r[0]), r[1]) for r in await conn.fetch("SELECT message_id, data FROM media")]
    finally:
        await conn.close()


def _file_bytes(path: Path) -> bytes:
    """The database file and its write-ahead log, as a copy of them would hold."""
    return b"".join(p.read_bytes() for p in (path, Path(f"{path}-wal")) if p.exists())


@pytest.mark.parametrize("path", list(PATHS))
async def test_cached_bytes_go_with_their_message(stores: StoreFactory, path: str) -> None:
    marker = b"ADA-HOLIDAY-PHOTO-" + os.urandom(8).hex().encode()
    photo_bytes = marker * 300  # spans several pages, overflow pages included
    async with stores.new() as store:
        # Ada's photo, and a later message of Bo's.
        photo = MediaRef("image", "photo", ref="AgAC", unique_id="AQAD")
        ada = Inbound(
            GROUP,
            "11",
            "Ada",
            "my holiday",
            "photo-msg",
            is_private=False,
            triggers_reply=False,
            media=(photo,),
        )
        bo = Inbound(GROUP, "22", "Bo", "nice", "bo-msg", is_private=False, triggers_reply=False)
        ingested = await store.ingest(ada, T0, POLICY)
        await store.ingest(bo, T0 + 1, POLICY)
        assert ingested.message_id is not None
        [media] = (await media_of(store, [ingested.message_id]))[ingested.message_id]
        await store.save_media(media.id, status="ready", data=photo_bytes, media_type="image/jpeg")
        assert await store.media_data([media.id]) == {media.id: photo_bytes}
        assert await _raw_media(stores) == [(ingested.message_id, photo_bytes)]
        if stores.backend.name == "sqlite":
            assert marker in _file_bytes(stores.path)  # the check below can see the bytes

        await PATHS[path](store)

        assert await store.media_data([media.id]) == {}
        assert await media_of(store, [ingested.message_id]) == {}
        assert await _raw_media(stores) == []
        if stores.backend.name == "sqlite":
            # Still running: neither the file nor its write-ahead log holds the photo.
            assert marker not in _file_bytes(stores.path)
    if stores.backend.name == "sqlite":
        # Closed: the log was checkpointed into the file; deleted pages were overwritten.
        assert marker not in _file_bytes(stores.path)
