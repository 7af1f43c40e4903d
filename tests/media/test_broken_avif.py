"""Review 15: an AVIF whose primary item is missing is refused like any broken image.

Pillow's AVIF plugin raises ``RuntimeError`` ("Failed to decode image: Missing or empty image
item") for it, which the preparation did not translate (found by mutating valid images of
every readable format). Through the App's runtime: the photo is told as not loaded and the
person is answered, once.
"""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from PIL import Image

from bot.config import MediaConfig
from bot.core.clock import ManualClock
from bot.core.errors import MediaRejected
from bot.core.events import ConversationKey, Inbound, SessionKey
from bot.core.media import MediaRef
from bot.runtime.images import prepare_image
from bot.store.sqlite import SQLiteStore
from tests.fakes.llm import GatedLLM
from tests.fakes.media_source import FakeFiles, MediaOutlet
from tests.harness import BOT, harness, settle

DM = ConversationKey("telegram", "42", None, BOT)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    async with SQLiteStore(path=tmp_path / "store.sqlite3") as opened:
        yield opened


def avif_without_its_image() -> bytes:
    """A valid AVIF whose ``pitm`` box names an item the file does not have."""
    out = io.BytesIO()
    Image.new("RGB", (200, 150), "red").save(out, "AVIF")
    data = bytearray(out.getvalue())
    box = data.find(b"pitm")
    assert box > 0
    data[box + 8 : box + 10] = b"\x00\xef"  # primary item id (after version and flags)
    return bytes(data)


def test_a_broken_avif_is_rejected_with_a_reason() -> None:
    with pytest.raises(MediaRejected, match="could not be read"):
        prepare_image(avif_without_its_image())


async def test_a_broken_avif_photo_is_told_and_the_person_answered(
    store: SQLiteStore, clock: ManualClock
) -> None:
    files = FakeFiles(clock)
    files.files["f1"] = avif_without_its_image()
    llm = GatedLLM()
    async with harness(
        store, clock, llm, outlet=MediaOutlet(clock, files), media=MediaConfig()
    ) as h:
        image = MediaRef("image", "image pic.avif", ref="f1", media_type="image/avif")
        await h.router(Inbound(DM, "42", "Ann", "what is this?", "p1", media=(image,)))
        await settle(store)
        await h.advance(30, step=0.5)
    assert llm.calls == 1
    assert "could not be loaded" in llm.last_input()
    assert len(h.outlet.texts(DM)) == 1
    (message,) = [m for m in await store.history(SessionKey(DM, 1), 10) if m.role == "user"]
    assert message.media[0].status == "failed"


async def test_a_media_source_failing_unexpectedly_never_fails_the_turn(
    store: SQLiteStore, clock: ManualClock
) -> None:
    """A plugin platform's MediaSource (or a library under it) raising something outside the
    media error tree: the turn goes on, the photo told as not loaded."""
    files = FakeFiles(clock)
    files.files["f1"] = b"whatever"
    files.faults["f1"] = [KeyError("url")] * 50
    llm = GatedLLM()
    async with harness(store, clock, llm, outlet=MediaOutlet(clock, files)) as h:
        image = MediaRef("image", "photo", ref="f1", media_type="image/jpeg")
        await h.router(Inbound(DM, "42", "Ann", "look", "p1", media=(image,)))
        await settle(store)
        await h.advance(30, step=0.5)
        await h.router(Inbound(DM, "42", "Ann", "hello?", "p2"))
        await settle(store)
        await h.advance(30, step=0.5)
    assert llm.calls == 2 and len(h.outlet.texts(DM)) == 2
    assert "could not be loaded" in llm.last_input(0)
    assert files.fetched == ["f1"]  # failed for good: not fetched again by the next turn
