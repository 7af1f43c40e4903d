"""Media of stored messages: what the turn made of them and their cached bytes (the rows are
written by ingest with their message and go with it: ON DELETE CASCADE)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Final, get_args

from bot.core.errors import StoreError
from bot.core.media import MediaStatus
from bot.store.contracts import MAX_MEDIA_BYTES
from bot.store.sql.core import SQLCore

_STATUSES: Final = frozenset(get_args(MediaStatus))


class MediaPart(SQLCore):
    """save_media, media_data."""

    async def save_media(
        self,
        media_id: int,
        *,
        status: MediaStatus,
        data: bytes | None = None,
        media_type: str = "",
        width: int | None = None,
        height: int | None = None,
        note: str = "",
    ) -> None:
        """One UPDATE; a row deleted meanwhile (with its message) matches nothing."""
        if status not in _STATUSES:
            raise StoreError(f"unknown media status {status!r}")
        if data is not None and len(data) > MAX_MEDIA_BYTES:
            raise StoreError(
                f"refusing to cache {len(data)} bytes of media (at most {MAX_MEDIA_BYTES})"
            )
        async with self._tx() as db:
            await db.execute(
                "UPDATE media SET status = $2, data = $3, prepared_type = $4, "
                "prepared_width = $5, prepared_height = $6, note = $7, updated_at = $8 "
                "WHERE id = $1",
                media_id,
                status,
                None if data is None else bytes(data),
                media_type,
                width,
                height,
                note,
                time.time(),
            )

    async def media_data(self, ids: Sequence[int]) -> dict[int, bytes]:
        wanted = sorted(set(ids))
        if not wanted:
            return {}
        d = self.dialect
        async with self._read() as db:
            rows = await db.fetch(
                "SELECT id, data FROM media WHERE data IS NOT NULL AND id" + d.any_of("$1"),
                d.list_arg(wanted),
            )
        return {int(r[0]): bytes(r[1]) for r in rows}
