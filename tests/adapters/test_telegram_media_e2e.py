"""What people send, end to end through the real aiogram client against the fake Bot API and
the wired runtime (issue 15's acceptance): the model gets photos as image blocks, an album as
one call, big photos downscaled; voice notes transcribed by the fake whisper server, or the
persona told it cannot listen; a reply to an old message carries the quoted text."""

from __future__ import annotations

import asyncio
import contextlib
import io
import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from PIL import Image

from adapters.telegram.adapter import TelegramAdapter
from bot.app.build import runtime
from bot.core.llm import ImageBlock, ModelRequest
from bot.core.media import Transcriber
from bot.llm.transcription import OpenAITranscriber
from tests.adapters.test_telegram import (
    ANN,
    BOT,
    PERSONA,
    TOKEN,
    USERNAME,
    Rig,
    _settings,
    _turns,
)
from tests.fakes.llm import GatedLLM
from tests.fakes.telegram_api import FakeTelegramAPI, TgChat
from tests.fakes.transcription_api import FakeTranscriptionAPI

PRIVATE = TgChat.private(ANN)
pytestmark = pytest.mark.timeout(90)


def photo_bytes(width: int, height: int, seed: int = 1) -> bytes:
    """A JPEG with noise, so it is as large as a real photo of that size."""
    rng = random.Random(seed)
    small = Image.new("RGB", (max(1, width // 16), max(1, height // 16)))
    small.putdata(
        [
            (rng.randrange(256), rng.randrange(256), rng.randrange(256))
            for _ in range(small.width * small.height)
        ]
    )
    out = io.BytesIO()
    small.resize((width, height)).save(out, "JPEG", quality=90)
    return out.getvalue()


@contextlib.asynccontextmanager
async def bot(
    tmp_path: Path, api: FakeTelegramAPI, llm: GatedLLM, transcriber: Transcriber | None = None
) -> AsyncIterator[Rig]:
    """The adapter polling the fake on the wired runtime."""
    adapter = TelegramAdapter(bot_key=BOT, token=TOKEN, api_server=api.base_url)
    settings = _settings(tmp_path, debounce=0.5, max_wait=3.0)
    async with runtime(
        settings, llm=llm, adapters={BOT: (PERSONA, adapter)}, transcriber=transcriber
    ) as rt:
        task = asyncio.create_task(adapter.run(rt.router))
        try:
            await api.wait_for(lambda: task.done() or api.polls_started(TOKEN), what="polling")
            assert not task.done(), task.exception()
            yield Rig(api, adapter, rt, llm)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await adapter.aclose()


@pytest.fixture
async def api() -> AsyncIterator[FakeTelegramAPI]:
    """The fake Bot API with the test bot registered."""
    async with FakeTelegramAPI() as server:
        server.add_bot(TOKEN, USERNAME, "Mira")
        yield server


def images(request: ModelRequest) -> list[Image.Image]:
    blocks = [b for b in request.messages[-1].blocks if isinstance(b, ImageBlock)]
    return [Image.open(io.BytesIO(b.data)) for b in blocks]


async def test_a_photo_with_caption_reaches_the_model_as_an_image_and_text(
    tmp_path: Path, api: FakeTelegramAPI
) -> None:
    llm = GatedLLM(answer=lambda r: "what a mug")
    async with bot(tmp_path, api, llm) as rig:
        sizes = api.photo((320, 240, photo_bytes(320, 240)), (1200, 900, photo_bytes(1200, 900)))
        api.push_message(TOKEN, PRIVATE, ANN, None, caption="my new mug", extra={"photo": sizes})
        await api.wait_for(rig.replies, what="the reply")
        await rig.quiet(rig.key(PRIVATE))
    (turn,) = _turns(llm)
    (image,) = images(turn)
    assert image.size == (1200, 900)  # the size worth downloading, not the thumbnail
    assert turn.messages[-1].text == "[photo]\nmy new mug"
    assert rig.replies() == ["what a mug"]


async def test_an_album_of_three_photos_is_one_call_with_three_images(
    tmp_path: Path, api: FakeTelegramAPI
) -> None:
    llm = GatedLLM(answer=lambda r: "great trip")
    async with bot(tmp_path, api, llm) as rig:
        items = [
            {"photo": api.photo((800 + n, 600, photo_bytes(800 + n, 600, n)))} for n in range(3)
        ]
        for update in api.album(PRIVATE, ANN, items, caption="our trip"):
            api.push(TOKEN, update)
        await api.wait_for(rig.replies, what="the reply")
        await rig.quiet(rig.key(PRIVATE))
    (turn,) = _turns(llm)
    assert [i.size for i in images(turn)] == [(800, 600), (801, 600), (802, 600)]
    assert rig.replies() == ["great trip"]


async def test_an_oversized_photo_is_downscaled_under_the_limits(
    tmp_path: Path, api: FakeTelegramAPI
) -> None:
    llm = GatedLLM(answer=lambda r: "big")
    async with bot(tmp_path, api, llm) as rig:
        big = photo_bytes(4032, 3024)
        assert len(big) > 1_000_000
        api.push_message(TOKEN, PRIVATE, ANN, None, extra={"photo": api.photo((4032, 3024, big))})
        await api.wait_for(rig.replies, what="the reply")
        await rig.quiet(rig.key(PRIVATE))
    (turn,) = _turns(llm)
    (block,) = [b for b in turn.messages[-1].blocks if isinstance(b, ImageBlock)]
    width, height = Image.open(io.BytesIO(block.data)).size
    assert max(width, height) <= 1568 and width * height <= 1_150_000
    assert len(block.data) * 4 / 3 <= 5 * 1024 * 1024


async def test_a_voice_note_is_transcribed_and_answered_once(
    tmp_path: Path, api: FakeTelegramAPI
) -> None:
    llm = GatedLLM(answer=lambda r: "I'll remind you")
    async with (
        FakeTranscriptionAPI(transcript="remind me about the dentist") as stt,
        OpenAITranscriber(stt.base_url, model="whisper-1", api_key=None) as transcriber,
        bot(tmp_path, api, llm, transcriber) as rig,
    ):
        api.push_message(
            TOKEN, PRIVATE, ANN, None, extra={"voice": api.voice(b"OggS hi", duration=3)}
        )
        await api.wait_for(rig.replies, what="the reply")
        await rig.quiet(rig.key(PRIVATE))
    (turn,) = _turns(llm)
    assert turn.messages[-1].text == "[voice message, transcribed] remind me about the dentist"
    assert [c.audio for c in stt.calls] == [b"OggS hi"]
    assert rig.replies() == ["I'll remind you"]


async def test_without_a_transcriber_the_persona_is_told_it_got_a_voice_note(
    tmp_path: Path, api: FakeTelegramAPI
) -> None:
    llm = GatedLLM(answer=lambda r: "I can't listen to that, sorry")
    async with bot(tmp_path, api, llm) as rig:
        api.push_message(TOKEN, PRIVATE, ANN, None, extra={"voice": api.voice(duration=65)})
        await api.wait_for(rig.replies, what="the reply")
        await rig.quiet(rig.key(PRIVATE))
    (turn,) = _turns(llm)
    assert "[voice message (1:05): you cannot listen to it" in turn.messages[-1].text
    assert len(rig.replies()) == 1


async def test_a_reply_to_an_old_message_carries_the_quoted_text(
    tmp_path: Path, api: FakeTelegramAPI
) -> None:
    llm = GatedLLM(answer=lambda r: "ok")
    async with bot(tmp_path, api, llm) as rig:
        first = rig.say(PRIVATE, ANN, "my sister's name is Ingrid")
        await api.wait_for(rig.replies, what="the first reply")
        await rig.quiet(rig.key(PRIVATE))
        # Long after, and beyond any window: a reply to that first message.
        for n in range(3):
            rig.say(PRIVATE, ANN, f"filler {n}")

            def replied(count: int = n + 2) -> bool:
                return len(rig.replies()) == count

            await api.wait_for(replied, what="a reply")
            await rig.quiet(rig.key(PRIVATE))
        rig.say(PRIVATE, ANN, "she visits tomorrow", reply_to_message_id=first)
        await api.wait_for(lambda: len(rig.replies()) == 5, what="the last reply")
        await rig.quiet(rig.key(PRIVATE))
    last = _turns(llm)[-1].messages[-1].text
    assert last == (
        '[replying to "Ann" (user "' + str(ANN.id) + '"), who wrote: '
        '"my sister\'s name is Ingrid"]\nshe visits tomorrow'
    )
