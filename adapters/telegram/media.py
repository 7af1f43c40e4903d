"""Fetching the bytes of media a Telegram bot received: ``getFile``, then the file download.

Implements ``bot.core.media.MediaSource`` for one bot account (``TelegramAdapter.media``).
The download URL is ``<api server>/file/bot<token>/<path>``: the token is in it, so nothing
raised or logged here carries the URL or the error that names it (``from None``).
"""

from __future__ import annotations

import asyncio
import io
import math
from typing import Final

import aiohttp
from aiogram import Bot
from aiogram.exceptions import (
    ClientDecodeError,
    TelegramAPIError,
    TelegramBadRequest,
    TelegramNotFound,
)

from bot.core.errors import MediaRejected, MediaUnavailable
from bot.core.media import MediaRef

#: HTTP answers to a download that may succeed later: the rest of 4xx never will.
_TRANSIENT_STATUS: Final = frozenset({408, 425, 429})


class _TooLarge(Exception):
    """Raised by :class:`_CappedBuffer` to stop a download that outgrows its limit."""


class _CappedBuffer(io.BytesIO):
    """A download destination that refuses more than ``limit`` bytes.

    The size ``getFile`` reports may be missing or wrong (a self-hosted server, a proxy), so
    the limit is kept while the bytes arrive, not only before.
    """

    def __init__(self, limit: int) -> None:
        super().__init__()
        self._limit = limit

    def write(self, data: bytes, /) -> int:  # type: ignore[override]
        if self.tell() + len(data) > self._limit:
            raise _TooLarge
        return super().write(data)


class TelegramMedia:
    """The media source of one Telegram bot (``bot.core.media.MediaSource``).

    ``fetch`` raises ``MediaRejected`` when the file can never be had (no file id, larger
    than ``max_bytes`` or the Bot API's 20 MB, an id Telegram does not know) and
    ``MediaUnavailable`` when Telegram could not be reached, failed or took longer than
    ``timeout`` seconds (both calls together).
    """

    def __init__(self, bot: Bot, *, timeout: float = 30.0) -> None:
        self._bot = bot
        self._timeout = timeout

    async def fetch(
        self, media: MediaRef, *, chat_id: str, platform_message_id: str | None, max_bytes: int
    ) -> bytes:
        """The file's bytes (Telegram's file id alone names it: the chat is not needed)."""
        what = media.label or media.kind
        if not media.ref:
            raise MediaRejected(f"telegram {what}: nothing to download")
        if media.size is not None and media.size > max_bytes:
            raise MediaRejected(f"telegram {what}: {media.size} bytes, more than {max_bytes}")
        try:
            async with asyncio.timeout(self._timeout):
                return await self._download(media, what, max_bytes)
        except TimeoutError:
            raise MediaUnavailable(
                f"telegram {what}: no answer within {self._timeout:g}s"
            ) from None

    async def _download(self, media: MediaRef, what: str, max_bytes: int) -> bytes:
        try:
            file = await self._bot.get_file(media.ref)
        except (TelegramBadRequest, TelegramNotFound) as exc:
            # "file is too big", "invalid file_id", "wrong file_id or the file is temporarily
            # unavailable": asking again gets the same answer. The session scrubbed the token.
            raise MediaRejected(f"telegram {what}: getFile refused: {exc.message}") from None
        except (TelegramAPIError, ClientDecodeError) as exc:
            detail = getattr(exc, "message", None) or type(exc).__name__
            raise MediaUnavailable(f"telegram {what}: getFile failed: {detail}") from None
        if file.file_path is None:
            raise MediaRejected(f"telegram {what}: Telegram offers no download (too large)")
        if file.file_size is not None and file.file_size > max_bytes:
            raise MediaRejected(f"telegram {what}: {file.file_size} bytes, more than {max_bytes}")
        buffer = _CappedBuffer(max_bytes)
        try:
            # _TooLarge leaves aiogram's download stream suspended: the event loop's
            # async-generator finalizer closes it (and releases the connection) at once.

            await self._bot.download_file(
                file.file_path, destination=buffer, timeout=math.ceil(self._timeout)
            )
        except _TooLarge:
            raise MediaRejected(f"telegram {what}: more than {max_bytes} bytes") from None
        except aiohttp.ClientResponseError as exc:  # its text names the URL, token included
            message = f"telegram {what}: download answered HTTP {exc.status}"
            if exc.status >= 500 or exc.status in _TRANSIENT_STATUS:
                raise MediaUnavailable(message) from None
            raise MediaRejected(message) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise MediaUnavailable(
                f"telegram {what}: download failed ({type(exc).__name__})"
            ) from None
        return buffer.getvalue()
