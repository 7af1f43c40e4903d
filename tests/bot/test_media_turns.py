"""Media in a turn, through the App's runtime on both stores (bot/runtime/media.py): photos
reach the model as image blocks, albums are one call, big images are downscaled, failures are
told honestly, cached copies survive a retry, voice notes are transcribed or declared."""

from __future__ import annotations

import io

from PIL import Image

from bot.config import MediaConfig, TranscriptionConfig
from bot.core.clock import ManualClock
from bot.core.errors import MediaUnavailable, ModelUnavailable
from bot.core.events import ConversationKey, Inbound, SessionKey
from bot.core.llm import ImageBlock, ModelRequest, ModelResult
from bot.core.media import MediaRef, Quote
from bot.llm.offline import OfflineLLM
from bot.store.base import BaseStore
from memory.assemble import Budget
from memory.service import MemoryPolicy
from tests.fakes.llm import GatedLLM
from tests.fakes.media_source import FakeFiles, MediaOutlet
from tests.fakes.transcription_api import FakeTranscriptionAPI
from tests.harness import BOT, Harness, harness, settle

DM = ConversationKey("telegram", "42", None, BOT)
_IDS = iter(range(10_000, 20_000))


def jpeg(width: int = 640, height: int = 480, color: str = "red") -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), color).save(out, "JPEG")
    return out.getvalue()


def photo(ref: str) -> MediaRef:
    return MediaRef("image", "photo", ref=ref, unique_id=f"u-{ref}", media_type="image/jpeg")


async def send(h: Harness, text: str = "", *media: MediaRef, quote: Quote | None = None) -> None:
    await h.router(
        Inbound(
            conversation=DM,
            author_id="42",
            display_name="Ann",
            text=text,
            platform_message_id=f"p{next(_IDS)}",
            media=media,
            quote=quote,
        )
    )
    await settle(h.store)


def images(request: ModelRequest) -> list[ImageBlock]:
    return [b for b in request.messages[-1].blocks if isinstance(b, ImageBlock)]


async def test_a_photo_with_caption_reaches_the_model_as_an_image_and_text(
    store: BaseStore, clock: ManualClock
) -> None:
    files = FakeFiles(clock)
    files.files["f1"] = jpeg()
    llm = GatedLLM()
    async with harness(store, clock, llm, outlet=MediaOutlet(clock, files)) as h:
        await send(h, "look at my cat", photo("f1"))
        await h.advance(2)
    assert llm.calls == 1
    (image,) = images(llm.requests[0])
    assert image.media_type == "image/jpeg"
    assert Image.open(io.BytesIO(image.data)).size == (640, 480)
    assert llm.last_input() == "[photo]\nlook at my cat"
    assert len(h.outlet.texts(DM)) == 1


async def test_an_album_within_the_debounce_is_one_call_with_three_images(
    store: BaseStore, clock: ManualClock
) -> None:
    files = FakeFiles(clock)
    for n, color in enumerate(("red", "green", "blue")):
        files.files[f"a{n}"] = jpeg(color=color)
    llm = GatedLLM()
    async with harness(store, clock, llm, outlet=MediaOutlet(clock, files)) as h:
        await send(h, "our trip", photo("a0"))
        await h.advance(0.3)
        await send(h, "", photo("a1"))
        await h.advance(0.3)
        await send(h, "", photo("a2"))
        await h.advance(2)
    assert llm.calls == 1
    shown = images(llm.requests[0])
    colors = [Image.open(io.BytesIO(b.data)).convert("RGB").getpixel((5, 5)) for b in shown]
    channels = [max(range(3), key=lambda i: c[i]) for c in colors if isinstance(c, tuple)]
    assert channels == [0, 1, 2]  # red, green, blue: in order
    assert len(h.outlet.texts(DM)) == 1


async def test_an_oversized_image_is_downscaled_under_the_limits(
    store: BaseStore, clock: ManualClock
) -> None:
    files = FakeFiles(clock)
    files.files["big"] = jpeg(4000, 3000)
    llm = GatedLLM()
    async with harness(store, clock, llm, outlet=MediaOutlet(clock, files)) as h:
        await send(h, "", photo("big"))
        await h.advance(2)
    (image,) = images(llm.requests[0])
    width, height = Image.open(io.BytesIO(image.data)).size
    assert max(width, height) <= 1568 and width * height <= 1_150_000
    assert abs(width / height - 4 / 3) < 0.01
    assert len(image.data) * 4 / 3 < 5 * 1024 * 1024


async def test_only_the_newest_images_are_sent_and_older_ones_say_so(
    store: BaseStore, clock: ManualClock
) -> None:
    files = FakeFiles(clock)
    refs = [f"p{n}" for n in range(5)]
    for ref in refs:
        files.files[ref] = jpeg(64, 64)
    llm = GatedLLM()
    outlet = MediaOutlet(clock, files)
    async with harness(store, clock, llm, outlet=outlet, media=MediaConfig(max_images=2)) as h:
        for ref in refs:
            await send(h, "", photo(ref))
        await h.advance(2)
    assert llm.calls == 1
    assert len(images(llm.requests[0])) == 2
    assert files.fetched == ["p4", "p3"]  # the older three are never downloaded
    assert llm.last_input().count("[photo: not shown to you here]") == 3


async def test_a_photo_that_cannot_be_loaded_is_told_and_tried_again_next_turn(
    store: BaseStore, clock: ManualClock
) -> None:
    files = FakeFiles(clock)
    files.files["f1"] = jpeg()
    files.faults["f1"] = [MediaUnavailable("connection reset")]
    llm = GatedLLM()
    async with harness(store, clock, llm, outlet=MediaOutlet(clock, files)) as h:
        await send(h, "see?", photo("f1"))
        await h.advance(2)
        assert "could not be loaded" in llm.last_input()
        assert images(llm.requests[0]) == []
        await send(h, "and now?")
        await h.advance(2)
    assert llm.calls == 2
    # The photo is in the window now, fetched this time and shown in the earlier message.
    shown = [b for m in llm.requests[1].messages for b in m.blocks if isinstance(b, ImageBlock)]
    assert len(shown) == 1
    assert files.fetched == ["f1", "f1"]


class FlakyLLM(GatedLLM):
    """Fails its first call (an outage), then answers."""

    async def complete(self, request: ModelRequest) -> ModelResult:
        if not self.requests:
            self.requests.append(request)
            raise ModelUnavailable("overloaded")
        return await super().complete(request)


async def test_a_retried_turn_uses_the_cached_copy_without_fetching_again(
    store: BaseStore, clock: ManualClock
) -> None:
    files = FakeFiles(clock)
    files.files["f1"] = jpeg()
    llm = FlakyLLM()
    async with harness(store, clock, llm, outlet=MediaOutlet(clock, files)) as h:
        await send(h, "hi", photo("f1"))
        await h.advance(2)
        files.files.clear()  # the platform forgot it (an expired Discord URL, say)
        await h.advance(120, step=1)
    assert llm.calls == 2
    assert len(images(llm.requests[1])) == 1
    assert files.fetched == ["f1"]
    assert len(h.outlet.texts(DM)) == 1


def voice(ref: str, seconds: float = 4.0) -> MediaRef:
    return MediaRef("voice", "voice message", ref=ref, media_type="audio/ogg", duration=seconds)


async def test_a_voice_note_is_transcribed_and_answered_once(
    store: BaseStore, clock: ManualClock
) -> None:
    files = FakeFiles(clock)
    files.files["v1"] = b"OggS fake opus bytes"
    llm = GatedLLM()
    async with FakeTranscriptionAPI(transcript="remind me to call mum") as stt:
        config = TranscriptionConfig(url=stt.base_url, model="whisper-1")
        async with harness(
            store, clock, llm, outlet=MediaOutlet(clock, files), transcription=config
        ) as h:
            await send(h, "", voice("v1"))
            await h.advance(2)
            await h.advance(1)
    assert llm.calls == 1
    assert llm.last_input() == "[voice message, transcribed] remind me to call mum"
    assert len(stt.calls) == 1 and stt.calls[0].audio == b"OggS fake opus bytes"
    assert len(h.outlet.texts(DM)) == 1
    (message,) = [m for m in await h.store.history(SessionKey(DM, 1), 10) if m.role == "user"]
    assert message.was_voice and message.media[0].note == "remind me to call mum"


async def test_without_a_transcriber_the_persona_is_told_it_cannot_listen(
    store: BaseStore, clock: ManualClock
) -> None:
    files = FakeFiles(clock)
    files.files["v1"] = b"OggS"
    llm = GatedLLM()
    async with harness(store, clock, llm, outlet=MediaOutlet(clock, files)) as h:
        await send(h, "", voice("v1", 7))
        await h.advance(2)
    assert llm.calls == 1
    assert "voice message (0:07): you cannot listen to it" in llm.last_input()
    assert files.fetched == []  # nothing to do with the audio: never downloaded


async def voice_turn(
    store: BaseStore,
    clock: ManualClock,
    files: FakeFiles,
    *notes: MediaRef,
    transcript: str | None = "x",
    max_seconds: float = 300.0,
) -> tuple[GatedLLM, FakeTranscriptionAPI]:
    """One turn of these voice notes with the fake whisper server as the transcriber."""
    llm = GatedLLM()
    async with FakeTranscriptionAPI(transcript=transcript) as stt:
        config = TranscriptionConfig(url=stt.base_url, max_seconds=max_seconds)
        async with harness(
            store, clock, llm, outlet=MediaOutlet(clock, files), transcription=config
        ) as h:
            for note in notes:
                await send(h, "", note)
            await h.advance(2)
    return llm, stt


async def test_a_voice_note_over_the_length_bound_is_not_transcribed(
    store: BaseStore, clock: ManualClock
) -> None:
    files = FakeFiles(clock)
    files.files["v1"] = b"OggS"
    llm, stt = await voice_turn(store, clock, files, voice("v1", 600), max_seconds=60)
    assert stt.calls == []
    assert "you cannot listen to it" in llm.last_input()


async def test_a_reply_to_an_old_message_carries_the_quoted_text(
    store: BaseStore, clock: ManualClock
) -> None:
    llm = GatedLLM()
    async with harness(store, clock, llm) as h:
        quote = Quote("reply", "Mira", "Tea or coffee?", from_bot=True)
        await send(h, "tea, always", quote=quote)
        await h.advance(2)
    assert llm.last_input() == '[replying to your own message: "Tea or coffee?"]\ntea, always'


async def test_a_slow_download_keeps_the_turn_leased_so_no_other_process_repeats_it(
    store: BaseStore, clock: ManualClock
) -> None:
    files = FakeFiles(clock, latency=5.0)  # longer than the lease
    files.files["f1"] = jpeg()
    llm = GatedLLM()
    async with (
        harness(store, clock, llm, outlet=MediaOutlet(clock, files), lease=2.0, holder="a") as a,
        harness(store, clock, llm, outlet=MediaOutlet(clock, files), lease=2.0, holder="b"),
    ):
        await send(a, "hi", photo("f1"))
        await a.advance(12)
    assert files.fetched == ["f1"]
    assert llm.calls == 1


async def test_a_voice_note_larger_than_its_allowed_length_can_be_is_not_transcribed(
    store: BaseStore, clock: ManualClock
) -> None:
    """The sender claims 5 s; 5 MB of audio is far more than max_seconds of speech."""
    files = FakeFiles(clock)
    files.files["v1"] = b"O" * (5 * 1024 * 1024)
    llm, stt = await voice_turn(store, clock, files, voice("v1", 5), max_seconds=60)
    assert stt.calls == []
    assert "could not be transcribed" in llm.last_input()


async def test_at_most_ten_voice_notes_of_a_turn_are_transcribed(
    store: BaseStore, clock: ManualClock
) -> None:
    files = FakeFiles(clock)
    for n in range(12):
        files.files[f"v{n}"] = f"OggS {n}".encode()
    notes = [voice(f"v{n}") for n in range(12)]
    # No transcript set: the fake answers with the audio's bytes, so calls tell apart.
    llm, stt = await voice_turn(store, clock, files, *notes, transcript=None)
    assert sorted(c.audio for c in stt.calls) == sorted(f"OggS {n}".encode() for n in range(2, 12))
    assert llm.last_input().count("you cannot listen to it") == 2


async def test_a_photo_leaving_the_window_is_shown_to_the_summariser_then_its_copy_goes(
    store: BaseStore, clock: ManualClock
) -> None:
    files = FakeFiles(clock)
    files.files["f1"] = jpeg()
    llm = GatedLLM()
    memory_llm = GatedLLM(delegate=OfflineLLM())
    policy = MemoryPolicy(budget=Budget(window_messages=2), summary_model="m")
    async with harness(
        store,
        clock,
        llm,
        outlet=MediaOutlet(clock, files),
        memory_policy=policy,
        memory_llm=memory_llm,
    ) as h:
        await send(h, "my bike", photo("f1"))
        await h.advance(2)
        for n in range(3):
            await send(h, f"more {n}")
            await h.advance(2)
        await h.memory.wait_idle()
        (first,) = [m for m in await h.store.history(SessionKey(DM, 1), 1, oldest_first=True)]
        (media,) = first.media
        summaries = [r for r in memory_llm.requests if r.purpose == "summary"]
        stored = await h.store.media_data([media.id])
    assert any(isinstance(b, ImageBlock) for b in summaries[0].messages[-1].blocks)
    assert media.status == "ready" and stored == {}  # described, and the copy is gone
    assert files.fetched == ["f1"]


async def test_a_video_note_larger_than_its_allowed_length_can_be_is_not_transcribed(
    store: BaseStore, clock: ManualClock
) -> None:
    files = FakeFiles(clock)
    files.files["n1"] = b"\0" * (18 * 1024 * 1024)  # "5 s", 18 MB: far over 60 s at 2 Mbit/s
    note = MediaRef("video_note", "video note", ref="n1", media_type="video/mp4", duration=5)
    llm, stt = await voice_turn(store, clock, files, note, max_seconds=60)
    assert stt.calls == []
    assert "could not be transcribed" in llm.last_input()
