"""Review 15: the images of one request stay under the Messages API's 32 MB body limit.

Each prepared image may be up to 3.75 MB (5 MB of base64) and ``[media] max_images`` allows
up to 100, so the count alone does not bound the request: a few large, incompressible PNGs
sent as files made every turn of the conversation a 413 (the window keeps re-sending them).
Driven through the App's runtime with the real anthropic SDK against the fake Messages API,
which refuses bodies over 32 MB as the real one does.
"""

from __future__ import annotations

import io
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from PIL import Image

from bot.config import MediaConfig
from bot.core.clock import ManualClock
from bot.core.events import ConversationKey, Inbound
from bot.core.media import MediaRef
from bot.llm.anthropic import AnthropicLLM
from bot.store.sqlite import SQLiteStore
from tests.fakes.media_source import FakeFiles, MediaOutlet
from tests.fakes.messages_api import MAX_REQUEST_BYTES, FakeMessagesAPI
from tests.harness import BOT, harness, settle

DM = ConversationKey("telegram", "42", None, BOT)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    async with SQLiteStore(path=tmp_path / "store.sqlite3") as opened:
        yield opened


def noise_png() -> bytes:
    """A 1072x1072 PNG of random pixels: within every image limit, ~3.45 MB, kept as is."""
    side = 1072
    image = Image.frombytes("RGB", (side, side), os.urandom(side * side * 3))
    out = io.BytesIO()
    image.save(out, "PNG", compress_level=1)
    return out.getvalue()


async def test_many_large_images_never_make_a_request_over_the_body_limit(
    store: SQLiteStore, clock: ManualClock
) -> None:
    files = FakeFiles(clock)
    data = noise_png()
    assert 3_300_000 < len(data) <= 3_750_000  # kept unchanged by the preparation
    refs = [f"doc{n}" for n in range(8)]
    for ref in refs:
        files.files[ref] = data
    async with FakeMessagesAPI(reply_text="what a lot of noise") as api:
        llm = AnthropicLLM(api_key="sk-test", base_url=api.base_url, max_retries=0)
        outlet = MediaOutlet(clock, files)
        async with harness(store, clock, llm, outlet=outlet, media=MediaConfig(max_images=8)) as h:
            for n, ref in enumerate(refs):
                media = MediaRef("image", f"image n{n}.png", ref=ref, media_type="image/png")
                await h.router(
                    Inbound(DM, "42", "Ann", "", platform_message_id=f"p{n}", media=(media,))
                )
            await settle(store)
            await h.advance(10, step=0.5)
            # The next message (the images still in its window) is answered too.
            await h.router(Inbound(DM, "42", "Ann", "and?", platform_message_id="p-next"))
            await settle(store)
            await h.advance(10, step=0.5)
        await llm.aclose()
        # The persona answered; the requests that reached the API were within its limit.
        assert h.outlet.texts(DM) == ["what a lot of noise"] * 2
        request = api.requests[0]
        assert 0 < len(request.images) < 8
        assert sum(len(i.data) * 4 / 3 for i in request.images) < MAX_REQUEST_BYTES
        # The images left out say so, never passing for seen.
        assert request.last_user_text.count("not shown to you here") == 8 - len(request.images)
