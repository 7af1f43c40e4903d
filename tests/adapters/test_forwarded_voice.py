"""Review 15: a forwarded voice note is someone else's words, never the forwarder's.

A forward's text is its quote, and long-term memory never learns a quote as the person's own
(memory/content.py). A forwarded voice note is transcribed like any other: its transcript is
the voice's owner's words too, so it must not be learned into the forwarder's memory either.
Through the App's runtime with the real transcription client against the fake whisper server,
the offline model's extraction as the memory model.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.config import TranscriptionConfig
from bot.core.clock import ManualClock
from bot.core.events import ConversationKey, Inbound, UserKey
from bot.core.media import MediaRef, Quote
from bot.llm.offline import OfflineLLM
from bot.store.sqlite import SQLiteStore
from tests.fakes.llm import GatedLLM
from tests.fakes.media_source import FakeFiles, MediaOutlet
from tests.fakes.transcription_api import FakeTranscriptionAPI
from tests.harness import BOT, harness, settle
from tests.store.helpers import close_session

DM = ConversationKey("telegram", "42", None, BOT)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    async with SQLiteStore(path=tmp_path / "store.sqlite3") as opened:
        yield opened


def voice(ref: str) -> MediaRef:
    return MediaRef("voice", "voice message", ref=ref, media_type="audio/ogg", duration=3.0)


async def test_a_forwarded_voice_note_is_not_learned_as_the_forwarders_words(
    store: SQLiteStore, clock: ManualClock
) -> None:
    files = FakeFiles(clock)
    files.files["theirs"] = b"I am afraid of spiders"  # the fake server "hears" these bytes
    files.files["mine"] = b"I work as a nurse"
    llm = GatedLLM()
    async with FakeTranscriptionAPI() as stt:
        config = TranscriptionConfig(url=stt.base_url, model="whisper-1")
        outlet = MediaOutlet(clock, files)
        async with harness(
            store, clock, llm, outlet=outlet, transcription=config, memory_llm=OfflineLLM()
        ) as h:
            forward = Quote("forward", "Bob", "[voice message]", "77")
            await h.router(
                Inbound(DM, "42", "Ann", "", "p1", media=(voice("theirs"),), quote=forward)
            )
            await settle(store)
            await h.advance(3)
            await h.router(Inbound(DM, "42", "Ann", "", "p2", media=(voice("mine"),)))
            await settle(store)
            await h.advance(3)
            assert len(stt.calls) == 2  # both were transcribed, both answered
            assert len(h.outlet.texts(DM)) == 2
            await close_session(store, DM, clock.now(), "test")
            await h.memory.extract_due()
            learned = await h.memory.user_memory(UserKey("telegram", "42"))
    values = [item.value for item in learned.items]
    assert "nurse" in values  # her own voice note is learned...
    assert not any("spider" in v for v in values)  # ...Bob's, which she forwarded, is not
    # And the persona read it as forwarded words, not as hers.
    assert llm.last_input(0) == (
        '[forwarded from "Bob": "[voice message]"]\n'
        '[forwarded voice message, transcribed: "I am afraid of spiders"]'
    )
