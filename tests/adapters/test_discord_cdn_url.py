"""Review 15: a failed Discord download never carries the attachment's signed CDN URL.

Discord's attachment URLs are signed (``?ex=...&is=...&hm=...``): whoever holds one can download
a person's private attachment until it expires. The reason of a failed fetch is stored on the
media row and logged at WARNING (bot/runtime/media.py), so it must not hold the URL. aiohttp
puts the URL in the text of a connection timeout, which a stalled TLS handshake gives.
"""

from __future__ import annotations

import asyncio
import contextlib
import warnings
from collections.abc import AsyncIterator

import pytest

from bot.core.errors import MediaUnavailable
from bot.core.media import MediaRef

# discord.py imports ``audioop``, deprecated on import in 3.11 (tests/adapters/test_discord.py).
with warnings.catch_warnings():
    warnings.filterwarnings(
        "ignore", message="'audioop' is deprecated", category=DeprecationWarning
    )
    import discord

    from adapters.discord.downloads import DiscordMedia

SIGNATURE = "hm=5ec2e7d0c0ffee5ec2e7d0c0ffee5ec2e7d0c0ffee"


@contextlib.asynccontextmanager
async def silent_server() -> AsyncIterator[int]:
    """A TCP server that accepts connections and never says a word (a stalled handshake)."""
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


async def no_client() -> discord.Client:
    raise AssertionError("a stalled download is no expired URL: no lookup")


async def test_a_stalled_download_fails_without_the_signed_url_in_its_reason() -> None:
    async with silent_server() as port:
        url = f"https://127.0.0.1:{port}/attachments/1/2/private.png?ex=6a0b&is=6a09&{SIGNATURE}"
        media = DiscordMedia(client=no_client, stall_timeout=0.3, total_timeout=5)
        try:
            with pytest.raises(MediaUnavailable) as caught:
                await media.fetch(
                    MediaRef("image", "image private.png", url, "2"),
                    chat_id="1",
                    platform_message_id="3",
                    max_bytes=1 << 20,
                )
        finally:
            await media.aclose()
    reason = str(caught.value)
    assert "Discord" in reason  # a reason a person can read...
    assert SIGNATURE not in reason and "private.png" not in reason  # ...without the URL
