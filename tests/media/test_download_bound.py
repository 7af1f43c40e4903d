"""Review 15: an image is never downloaded past what the preparation can read.

``[media] max_download_mb`` goes up to 500, and Discord lets (Nitro) users upload files that
large; the image preparation reads at most ``MAX_INPUT_BYTES`` (50 MB) and refuses the rest.
The download was bounded by ``max_download_mb`` only, so a few huge "images" were read whole
into memory (four at once), in the process that hosts every bot, only to be refused after.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.config import MediaConfig
from bot.core.clock import ManualClock
from bot.core.events import ConversationKey, Inbound, SessionKey
from bot.core.media import MediaRef
from bot.runtime.images import MAX_INPUT_BYTES
from bot.store.sqlite import SQLiteStore
from tests.fakes.llm import GatedLLM
from tests.fakes.media_source import FakeFiles, MediaOutlet
from tests.harness import BOT, harness, settle

DM = ConversationKey("discord", "42", None, BOT)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    async with SQLiteStore(path=tmp_path / "store.sqlite3") as opened:
        yield opened


class RecordingFiles(FakeFiles):
    """Records the most bytes each fetch was allowed to read."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.allowed: list[int] = []

    async def fetch(
        self, media: MediaRef, *, chat_id: str, platform_message_id: str | None, max_bytes: int
    ) -> bytes:
        self.allowed.append(max_bytes)
        return await super().fetch(
            media, chat_id=chat_id, platform_message_id=platform_message_id, max_bytes=max_bytes
        )


async def test_a_huge_image_is_refused_before_it_is_read_whole(
    store: SQLiteStore, clock: ManualClock
) -> None:
    files = RecordingFiles(clock)
    files.files["huge"] = bytes(MAX_INPUT_BYTES + 1)
    llm = GatedLLM()
    outlet = MediaOutlet(clock, files)
    async with harness(
        store, clock, llm, outlet=outlet, media=MediaConfig(max_download_mb=500)
    ) as h:
        image = MediaRef("image", "image huge.png", ref="huge", media_type="image/png")
        await h.router(Inbound(DM, "42", "Ann", "look", "p1", media=(image,)))
        await settle(store)
        await h.advance(3)
    assert files.allowed == [MAX_INPUT_BYTES]  # never more than an image can be
    assert "could not be loaded" in llm.last_input()
    (message,) = [m for m in await store.history(SessionKey(DM, 1), 10) if m.role == "user"]
    assert message.media[0].status == "failed"
