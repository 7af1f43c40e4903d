"""Review 15: a slow file server holds a turn up for at most ``fetch_timeout_seconds``.

docs/architecture.md#media: "The turn never waits longer than fetch_timeout_seconds for
media." Fetches run four at a time, so with more images than that (an album of eight, with
``max_images = 8``) each round waited its own timeout, and the reply came after two or three.
Driven through the App's runtime on the manual clock, the platform's files slow.
"""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from PIL import Image

from bot.config import MediaConfig
from bot.core.clock import ManualClock
from bot.core.events import ConversationKey, Inbound
from bot.core.llm import ImageBlock
from bot.core.media import MediaRef
from bot.store.sqlite import SQLiteStore
from tests.fakes.llm import GatedLLM
from tests.fakes.media_source import FakeFiles, MediaOutlet
from tests.harness import BOT, harness, settle

DM = ConversationKey("telegram", "42", None, BOT)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    async with SQLiteStore(path=tmp_path / "store.sqlite3") as opened:
        yield opened


def jpeg() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 48), "red").save(out, "JPEG")
    return out.getvalue()


async def test_an_album_from_a_slow_server_waits_one_fetch_timeout_at_most(
    store: SQLiteStore, clock: ManualClock
) -> None:
    files = FakeFiles(clock, latency=15.0)  # each file takes 15 s: under the 20 s timeout
    refs = [f"a{n}" for n in range(8)]
    for ref in refs:
        files.files[ref] = jpeg()
    llm = GatedLLM()
    media = MediaConfig(max_images=8, fetch_timeout_seconds=20.0)
    async with harness(store, clock, llm, outlet=MediaOutlet(clock, files), media=media) as h:
        started = clock.now()
        for n, ref in enumerate(refs):
            photo = MediaRef("image", "photo", ref=ref, media_type="image/jpeg")
            await h.router(Inbound(DM, "42", "Ann", "", f"p{n}", media=(photo,)))
        await settle(store)
        while not h.outlet.texts(DM) and clock.now() - started < 120:
            await h.advance(0.5, step=0.5)
        waited = clock.now() - started
        assert h.outlet.texts(DM), "no reply within two minutes"
        # The debounce (1.5 s), then at most the fetch timeout for all eight files.
        assert waited <= 1.5 + 20.0 + 1.0
        first = llm.requests[0]
        shown = [b for m in first.messages for b in m.blocks if isinstance(b, ImageBlock)]
        # What arrived in time is shown; the rest is told as not loaded, and fetched next turn.
        assert len(shown) + first.messages[-1].text.count("could not be loaded") == 8
        await h.router(Inbound(DM, "42", "Ann", "and now?", "p-next"))
        await settle(store)
        await h.advance(30, step=0.5)
    second = llm.requests[1]
    assert len([b for m in second.messages for b in m.blocks if isinstance(b, ImageBlock)]) == 8
