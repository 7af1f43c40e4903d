"""The Discord adapter's ``MediaSource``: attachment bytes, bounded in size and time.

Discord's attachment URLs are signed and expire (about a day): a 403/404 on one asks Discord
for the message again (REST, through discord.py) for a fresh URL of the same attachment id, once,
and downloads that. Errors map to the media error tree (bot/core/errors.py): too large, gone
or refused for good -> ``MediaRejected``; network, 5xx, 429, timeouts -> ``MediaUnavailable``.

The bytes are read with a session of our own, not discord.py's: its ``get_from_cdn`` reads a
whole body, however large, and the session it holds is private to its HTTP client. A CDN
download needs no token, so none is ever sent.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Final

import aiohttp
import discord

from bot.core.errors import MediaRejected, MediaUnavailable, PersonabotError
from bot.core.media import MediaRef

log = logging.getLogger("personabot.discord")

#: Seconds a connection or a read may stall before the download counts as failed for now.
STALL_TIMEOUT: Final = 20.0
#: Seconds a whole download (or the message lookup for a fresh URL) may take.
TOTAL_TIMEOUT: Final = 120.0
_CHUNK: Final = 64 * 1024
#: Discord's CDN keeps an attachment under the channel it was posted in.
_ATTACHMENT_PATH: Final = re.compile(r"/(?:ephemeral-)?attachments/(?P<channel>[0-9]{1,20})/")
_EXPIRED: Final = frozenset({403, 404, 410})
_NETWORK: Final = (aiohttp.ClientError, OSError, asyncio.TimeoutError)

#: The logged-in discord.py client (logs in over REST when the gateway is not up yet).
ClientFactory = Callable[[], Awaitable[discord.Client]]


class _Expired(Exception):
    """The CDN refused a URL that may only have expired."""

    def __init__(self, status: int) -> None:
        self.status = status
        super().__init__(status)


class DiscordMedia:
    """Fetches the bytes of attachments and stickers one Discord bot received."""

    def __init__(
        self,
        *,
        client: ClientFactory,
        stall_timeout: float = STALL_TIMEOUT,
        total_timeout: float = TOTAL_TIMEOUT,
    ) -> None:
        self._client = client
        self._timeout = aiohttp.ClientTimeout(
            total=total_timeout, sock_connect=stall_timeout, sock_read=stall_timeout
        )
        self._total = total_timeout
        self._session: aiohttp.ClientSession | None = None

    async def fetch(
        self, media: MediaRef, *, chat_id: str, platform_message_id: str | None, max_bytes: int
    ) -> bytes:
        """The file's bytes (at most ``max_bytes``), asking for a fresh URL once if expired."""
        if not media.ref:
            raise MediaRejected(f"{media.label}: Discord gave no file to fetch")
        try:
            return await self._download(media.ref, max_bytes)
        except _Expired as first:
            log.debug(
                "Discord CDN answered %d for %s (attachment %s); asking for a fresh URL",
                first.status,
                media.label,
                media.unique_id,
            )
        fresh = await self._fresh_url(media, chat_id, platform_message_id)
        try:
            return await self._download(fresh, max_bytes)
        except _Expired as again:
            raise MediaRejected(
                f"{media.label}: Discord's CDN refuses it ({again.status}), also at a fresh URL"
            ) from None

    async def aclose(self) -> None:
        """Close the download session (idempotent)."""
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self._session

    async def _download(self, url: str, max_bytes: int) -> bytes:
        """GET ``url``, never reading more than ``max_bytes + 1`` bytes of its body."""
        if not url.startswith(("https://", "http://")):
            raise MediaRejected("not a web address")
        try:
            async with self._http().get(url) as response:
                if response.status in _EXPIRED:
                    raise _Expired(response.status)
                if response.status == 429 or response.status >= 500:
                    raise MediaUnavailable(f"Discord's CDN answered {response.status}; try later")
                if response.status != 200:
                    raise MediaRejected(f"Discord's CDN answered {response.status}")
                declared = response.content_length
                if declared is not None and declared > max_bytes:
                    raise MediaRejected(f"the file is {declared} bytes, over {max_bytes}")
                return await _bounded(response.content, max_bytes)
        # Never the error's text: aiohttp puts the URL in it (a connection timeout, a redirect),
        # and a signed CDN URL lets whoever reads the log or the media row download the file.
        except aiohttp.InvalidURL:
            raise MediaRejected("not a valid address") from None
        except _NETWORK as exc:
            raise MediaUnavailable(
                f"download from Discord's CDN failed ({type(exc).__name__})"
            ) from None

    async def _fresh_url(self, media: MediaRef, chat_id: str, message_id: str | None) -> str:
        """The attachment's current URL, from the message fetched again; MediaRejected if gone."""
        if message_id is None or not message_id.isdigit():
            raise MediaRejected(f"{media.label}: expired, and no message to renew it from")
        try:
            client = await self._client()
        except PersonabotError as exc:
            raise MediaUnavailable(f"Discord unreachable to renew {media.label}: {exc}") from exc
        for channel_id in _channels(media.ref, chat_id):
            try:
                async with asyncio.timeout(self._total):
                    channel = client.get_partial_messageable(channel_id)
                    message = await channel.fetch_message(int(message_id))
            except discord.NotFound:
                continue  # not in this channel (a thread's message is not in its parent)
            except discord.Forbidden as exc:
                raise MediaRejected(f"Discord no longer shows message {message_id}") from exc
            except discord.HTTPException as exc:
                if exc.status >= 500:
                    raise MediaUnavailable(f"Discord failed to renew {media.label}") from exc
                raise MediaRejected(f"Discord refused to renew {media.label}: {exc}") from exc
            except _NETWORK as exc:
                raise MediaUnavailable(f"Discord failed to renew {media.label}: {exc!r}") from exc
            url = _current_url(message, media.unique_id)
            if url is None:
                raise MediaRejected(f"{media.label} was removed from message {message_id}")
            return url
        raise MediaRejected(f"message {message_id} with {media.label} is gone")


async def _bounded(stream: aiohttp.StreamReader, max_bytes: int) -> bytes:
    """The whole body, or MediaRejected as soon as it passes ``max_bytes``."""
    body = bytearray()
    while True:
        chunk = await stream.read(min(_CHUNK, max_bytes + 1 - len(body)))
        if not chunk:
            return bytes(body)
        body += chunk
        if len(body) > max_bytes:
            raise MediaRejected(f"the file is over {max_bytes} bytes")


def _channels(url: str, chat_id: str) -> list[int]:
    """Where the message may be: the channel its CDN URL names (a thread's own id), then the
    conversation's chat (the port carries no thread id)."""
    found = _ATTACHMENT_PATH.search(url)
    candidates = [found["channel"]] if found else []
    candidates.append(chat_id)
    return list(dict.fromkeys(int(c) for c in candidates if c.isdigit()))


def _current_url(message: discord.Message, unique_id: str) -> str | None:
    """The URL the message now gives the attachment (or sticker) with id ``unique_id``."""
    attachments = [*message.attachments]
    stickers = [*message.stickers]
    for snapshot in message.message_snapshots:
        attachments += snapshot.attachments
        stickers += snapshot.stickers
    for attachment in attachments:
        if str(attachment.id) == unique_id:
            return attachment.url
    for sticker in stickers:
        if str(sticker.id) == unique_id:
            return sticker.url
    return None
