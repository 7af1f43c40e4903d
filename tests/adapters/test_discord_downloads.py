"""``DiscordAdapter.media``: attachment bytes from the fake Discord's CDN through the real
adapter, with its size bound, the refresh of an expired URL and every fault mapped to the media
error tree (MediaRejected: never; MediaUnavailable: later)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bot.core.errors import MediaRejected, MediaUnavailable
from bot.core.events import Inbound
from bot.core.media import MediaRef
from tests.adapters.test_discord import (
    TOKEN,
    RecordingHandler,
    _endpoints_released,
    connected_to,
)
from tests.fakes.discord_api import FakeDiscord, Upload

# isort: split
# After tests.adapters.test_discord, which imports discord.py under its warning filter.
from adapters.discord.adapter import DiscordAdapter
from adapters.discord.endpoints import SharedEndpoints, endpoints_for

__all__ = ["_endpoints_released"]  # the autouse fixture applies here too

PICTURE = bytes(range(256)) * 40  # 10,240 bytes


@contextlib.asynccontextmanager
async def running(
    fake: FakeDiscord, **options: Any
) -> AsyncIterator[tuple[DiscordAdapter, RecordingHandler]]:
    """The adapter (built directly, to set its media timeouts) connected to the fake."""
    endpoints = endpoints_for(fake.api_base, fake.gateway_url, where="bots.mira")
    SharedEndpoints.acquire(endpoints, where="bots.mira")
    adapter = DiscordAdapter(bot_key="mira", token=TOKEN, **options)
    async with connected_to(fake, adapter) as handler:
        yield adapter, handler


async def _received(
    fake: FakeDiscord, handler: RecordingHandler, channel: int, *uploads: Upload
) -> tuple[dict[str, Any], Inbound]:
    """Someone posts ``uploads``; the payload and the Inbound the adapter made of it."""
    author = next(iter(fake.users.values()))
    seen = len(handler.events)
    sent = await fake.post(channel, author, "", attachments=uploads)
    events = await handler.wait(seen + 1)
    return sent, events[-1]


async def _fetch(adapter: DiscordAdapter, event: Inbound, max_bytes: int = 1 << 20) -> bytes:
    (media,) = event.media
    return await adapter.media.fetch(
        media,
        chat_id=event.conversation.chat_id,
        platform_message_id=event.platform_message_id,
        max_bytes=max_bytes,
    )


async def test_fetch_returns_the_attachments_bytes_without_sending_the_token() -> None:
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        async with running(fake) as (adapter, handler):
            sent, event = await _received(
                fake, handler, fake.dm(ada), Upload("a.png", "image/png", PICTURE)
            )
            data = await _fetch(adapter, event, max_bytes=len(PICTURE))
    assert data == PICTURE
    assert fake.downloads == [(int(sent["attachments"][0]["id"]), 200)]
    assert fake.message_fetches == []  # the URL was fresh: no lookup


async def test_a_file_over_the_limit_is_rejected_by_length_or_while_reading() -> None:
    """Content-Length over max_bytes: refused before the body; chunked: refused once over."""
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        async with running(fake) as (adapter, handler):
            dm = fake.dm(ada)
            _, declared = await _received(
                fake, handler, dm, Upload("big.png", "image/png", PICTURE)
            )
            with pytest.raises(MediaRejected, match="10240 bytes, over 10239"):
                await _fetch(adapter, declared, max_bytes=len(PICTURE) - 1)
            sent, chunked = await _received(
                fake, handler, dm, Upload("big.png", "image/png", PICTURE)
            )
            fake.serve_chunked(sent["attachments"][0]["id"])
            with pytest.raises(MediaRejected, match="over 10239 bytes"):
                await _fetch(adapter, chunked, max_bytes=len(PICTURE) - 1)
            assert await _fetch(adapter, chunked, max_bytes=len(PICTURE)) == PICTURE


async def test_an_expired_url_is_renewed_once_from_the_message() -> None:
    """404 on the old URL: the message is fetched again (in the thread its URL names, though
    the conversation's chat is the parent), and the fresh URL is downloaded."""
    async with FakeDiscord(token=TOKEN) as fake:
        fake.add_user("Ada")
        guild = fake.add_guild("Cafe")
        thread = fake.add_thread(guild, guild.general, "pictures")
        async with running(fake) as (adapter, handler):
            sent, event = await _received(
                fake, handler, thread, Upload("a.png", "image/png", PICTURE)
            )
            attachment = int(sent["attachments"][0]["id"])
            fake.expire(attachment)
            data = await _fetch(adapter, event)
    assert event.conversation.chat_id == str(guild.general)
    assert data == PICTURE
    assert fake.downloads == [(attachment, 404), (attachment, 200)]
    assert fake.message_fetches == [(thread, int(sent["id"]))]


async def test_an_expired_url_of_a_forwarded_file_is_renewed_before_the_gateway_is_up() -> None:
    """The snapshot's attachment gets its fresh URL from the forwarding message; a fetch after
    a restart, before run(), logs in over REST by itself."""
    async with FakeDiscord(token=TOKEN) as fake:
        ada, bob = fake.add_user("Ada"), fake.add_user("Bob")
        dm = fake.dm(ada)
        async with running(fake) as (_, handler):
            upload = Upload("cake.jpg", "image/jpeg", PICTURE)
            source = await fake.post(
                fake.hidden_channel(), bob, "", attachments=(upload,), dispatch=False
            )
            await fake.forward(dm, ada, source)
            (event,) = await handler.wait(1)
        fake.expire(source["attachments"][0]["id"])
        endpoints = endpoints_for(fake.api_base, fake.gateway_url, where="bots.mira")
        SharedEndpoints.acquire(endpoints, where="bots.mira")
        restarted = DiscordAdapter(bot_key="mira", token=TOKEN)
        try:
            data = await _fetch(restarted, event)
        finally:
            await restarted.aclose()
    assert data == PICTURE
    assert [status for _, status in fake.downloads] == [404, 200]
    assert fake.sessions == 1  # the second adapter never opened a gateway session


async def test_a_file_whose_message_is_gone_is_rejected() -> None:
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        async with running(fake) as (adapter, handler):
            sent, event = await _received(fake, handler, fake.dm(ada), Upload("a.png", "image/png"))
            fake.expire(sent["attachments"][0]["id"])
            await fake.delete(sent)
            with pytest.raises(MediaRejected, match="is gone"):
                await _fetch(adapter, event)
            no_message = MediaRef(
                "image", "image a.png", event.media[0].ref, event.media[0].unique_id
            )
            with pytest.raises(MediaRejected, match="no message to renew it from"):
                await adapter.media.fetch(
                    no_message,
                    chat_id=event.conversation.chat_id,
                    platform_message_id=None,
                    max_bytes=100,
                )


async def test_a_file_with_no_url_is_rejected_without_a_request() -> None:
    """A Lottie sticker has no image to fetch."""
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        async with running(fake) as (adapter, handler):
            await fake.post(fake.dm(ada), ada, "", stickers=(("dance", 3),))
            (event,) = await handler.wait(1)
            with pytest.raises(MediaRejected, match="no file to fetch"):
                await _fetch(adapter, event)
    assert fake.downloads == []


async def test_server_errors_hangs_and_refused_connections_are_unavailable_for_now() -> None:
    """A 500 or 429 maps to MediaUnavailable and the next try works; a CDN that never answers
    is given up after the stall timeout; an unreachable host is unavailable too."""
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        async with running(fake, media_stall_timeout=0.3) as (adapter, handler):
            sent, event = await _received(
                fake, handler, fake.dm(ada), Upload("a.png", "image/png", PICTURE)
            )
            attachment = sent["attachments"][0]["id"]
            for fault in (500, 503, 429):
                fake.fail_download(attachment, fault)
                with pytest.raises(MediaUnavailable, match=str(fault)):
                    await _fetch(adapter, event)
            fake.fail_download(attachment, "hang")
            loop = asyncio.get_running_loop()
            started = loop.time()
            with pytest.raises(MediaUnavailable):
                await _fetch(adapter, event)
            assert loop.time() - started < 5
            assert await _fetch(adapter, event) == PICTURE
            unreachable = MediaRef("image", "x", "http://127.0.0.1:9/x.png", "1")
            with pytest.raises(MediaUnavailable):
                await adapter.media.fetch(
                    unreachable, chat_id="1", platform_message_id="2", max_bytes=10
                )
    assert fake.message_fetches == []  # none of these is an expired URL


async def test_a_refused_file_that_stays_refused_after_renewal_is_rejected() -> None:
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        async with running(fake) as (adapter, handler):
            sent, event = await _received(fake, handler, fake.dm(ada), Upload("a.png", "image/png"))
            fake.fail_download(sent["attachments"][0]["id"], 403, times=2)
            with pytest.raises(MediaRejected, match="also at a fresh URL"):
                await _fetch(adapter, event)
    assert [status for _, status in fake.downloads] == [403, 403]
    assert len(fake.message_fetches) == 1  # renewed once, not in a loop
