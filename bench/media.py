"""Benchmark of photos in a conversation (docs/architecture.md#media): what images cost in the
prompt, and how much latency fetching and downscaling them adds to a turn.

1. **Cost.** A scripted 100-turn conversation (bench/memory.py's script) with a photo every 10
   turns (turns 5, 15, ... 95; 1280x960 and 4032x3024 JPEGs in turn) is played through the real
   path: SQLiteStore in a temp dir, Ingestor, Pipeline.run_turn, Memory.build with the real
   MediaPreparer fetching every photo through the real Telegram adapter's MediaSource
   (``TelegramAdapter.media``: aiogram's getFile and download) from the fake Bot API server
   (tests/fakes/telegram_api.py), summaries compacted by OfflineLLM as the memory model. Every
   reply's ModelRequest is captured, and the conversation is priced two ways:

   (a) **re-sent**: every photo stays in every later prompt, as in a bot that keeps images in
       its history. Emulated from the captured requests: each is rebuilt with every earlier
       photo that it no longer carries (summarised away) put back as an image block, with a
       one-line label, at the start of its first message, in the order they arrived, and the
       summary's image descriptions emptied (it needs none). That is the cheapest place a kept
       photo has in this prompt layout (right after the system prompt, never moving), so (a)
       is a lower bound of what re-sending costs;
   (b) **personabot**: the captured requests as they are: images only while their message is
       in the window (at most ``max_images`` = 6, the default), the summary describing them
       after (the summariser is shown the images it folds).

   A third row, **no images**, is (b) with its image blocks removed: the text alone, so the
   images' own share of the cost can be read off. Requests are priced with bench/memory.py's
   prompt-cache model (write 1.25x, read 0.1x, 5-minute TTL, 1,024-token minimum) extended to
   image blocks: an image's tokens are ``memory.tokens.image_tokens`` of its size, its content
   is the hash of its bytes. Dollars use the Sonnet input price of bot/config/llm.py.

2. **Latency.** N turns (200; ``--quick`` 40) in each of three conversations, interleaved turn
   by turn: text only, one 1280x960 photo (~200 KB) per turn, one 4032x3024 image (~3 MB, sent
   as a file: Telegram re-encodes photos to at most 2560 px) per turn. Wall-clock time from
   ``Pipeline.run_turn`` to the model call (the request built), the MediaPreparer call alone
   (download through the adapter + ``prepare_image`` in a thread + ``save_media``), the
   download alone and ``Memory.build``, with a model of fixed latency; then ``prepare_image``
   alone on the same files. The fake server runs on 127.0.0.1 in the same process: the
   figures are the bot's own work, not a network's.

Usage (always as a module)::

    uv run python -m bench.media [--quick] [--out bench/results/media.json]

Prints plain-text tables, writes every figure as JSON, and exits 1 when personabot's effective
cost is not below re-sent's, 2 when the image cost model's self-check fails.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import hashlib
import io
import json
import random
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

from PIL import Image

from adapters.telegram.adapter import TelegramAdapter
from bench._report import (
    configure_logging,
    environment,
    format_table,
    percentile,
    positive_float,
    positive_int,
    utc_timestamp,
    write_json,
)
from bench.memory import (
    DEBOUNCE,
    PIN,
    START,
    USER_ID,
    USER_NAME,
    Block,
    NullOutlet,
    Pricing,
    ScriptedLLM,
    ScriptTurn,
    Totals,
    TurnCost,
    image_block,
    make_script,
    memory_policy,
    price_conversation,
    request_blocks,
)
from bot.app.build import memory_jobs, turn_parts
from bot.config import DEFAULT_PRICES
from bot.core.clock import ManualClock
from bot.core.events import (
    NOT_SET,
    ConversationKey,
    Inbound,
    NotSet,
    QueuePolicy,
    StoredMessage,
    Turn,
)
from bot.core.llm import (
    BaseLLM,
    ChatMessage,
    ContentBlock,
    ImageBlock,
    ModelRequest,
    ModelResult,
    TextBlock,
    Usage,
)
from bot.core.media import MediaRef, MediaSource
from bot.llm.offline import OfflineLLM
from bot.queue import Ingestor
from bot.runtime.images import prepare_image
from bot.runtime.media import MediaPreparer, MediaSettings
from bot.runtime.pipeline import BotProfile, Bots, Pipeline
from bot.store.sqlite import SQLiteStore
from memory.assemble import Assembled, PersonaPin
from memory.quoting import data_json
from memory.records import Summary
from memory.service import MediaPreparation, Memory, MemoryPolicy
from tests.fakes.telegram_api import FakeTelegramAPI

BOT: Final = "bench-media"
TOKEN: Final = "424242:bench-media-token"
DEFAULT_TURNS: Final = 100
DEFAULT_SIZES: Final = ((1280, 960), (4032, 3024))
#: Telegram stores photos with at most this long edge; a larger picture arrives as a file.
PHOTO_EDGE: Final = 2560
SONNET: Final = "claude-sonnet-5-5"
WARMUP_ROUNDS: Final = 3
VARIANTS: Final = ("resent", "personabot", "no_images")
LABELS: Final = {
    "resent": "(a) re-sent: every photo in every later prompt",
    "personabot": "(b) personabot: in the window, then summarised",
    "no_images": "no images (b's text only, reference)",
}


# -- parameters ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Params:
    """Everything the run depends on (written to the JSON as given)."""

    turns: int
    photo_every: int
    sizes: tuple[tuple[int, int], ...]
    latency_turns: int
    prepare_samples: int
    model_latency: float
    pool: int
    seed: int
    quick: bool
    out: Path


def _sizes(text: str) -> tuple[tuple[int, int], ...]:
    found = []
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d+)x(\d+)\s*", part)
        if match is None or min(int(match[1]), int(match[2])) < 16:
            raise argparse.ArgumentTypeError(f"not a list of WxH sizes of 16 px or more: {text!r}")
        found.append((int(match[1]), int(match[2])))
    return tuple(found)


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    p = argparse.ArgumentParser(
        prog="python -m bench.media", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    p.add_argument("--quick", action="store_true", help="40 latency turns, 40 prepare samples")
    p.add_argument("--turns", type=positive_int, default=DEFAULT_TURNS, help="cost: turns")
    p.add_argument("--photo-every", type=positive_int, default=10, help="cost: a photo each N")
    p.add_argument(
        "--sizes",
        type=_sizes,
        default=DEFAULT_SIZES,
        help="photo sizes, WxH,WxH (default 1280x960,4032x3024)",
    )
    p.add_argument("--latency-turns", type=positive_int, help="turns per kind (default 200)")
    p.add_argument("--prepare-samples", type=positive_int, help="prepare_image calls per size")
    p.add_argument(
        "--model-latency", type=positive_float, default=0.05, help="fake model latency, s"
    )
    p.add_argument("--pool", type=positive_int, help="distinct photos per size (5, --quick 3)")
    p.add_argument("--seed", type=int, default=7, help="seed of the script and the photos")
    p.add_argument("--out", type=Path, default=Path("bench/results/media.json"))
    p.add_argument("-v", "--verbose", action="count", default=0, help="-v INFO, -vv DEBUG")
    return p


def params_from(args: argparse.Namespace) -> Params:
    """Resolve quick/full defaults."""
    latency_turns = args.latency_turns or (40 if args.quick else 200)
    return Params(
        turns=args.turns,
        photo_every=args.photo_every,
        sizes=args.sizes,
        latency_turns=latency_turns,
        prepare_samples=args.prepare_samples or latency_turns,
        model_latency=args.model_latency,
        pool=args.pool or (3 if args.quick else 5),
        seed=args.seed,
        quick=args.quick,
        out=args.out,
    )


# -- photos ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Photo:
    """A generated picture as a person's phone would send it."""

    data: bytes = dataclasses.field(repr=False)
    width: int
    height: int

    @property
    def size(self) -> str:
        """``WxH``."""
        return f"{self.width}x{self.height}"

    @property
    def as_file(self) -> bool:
        """Too large for a Telegram photo: it arrives as an image file (a document)."""
        return max(self.width, self.height) > PHOTO_EDGE


def _noise(rng: random.Random, width: int, height: int) -> Image.Image:
    return Image.frombytes("L", (width, height), rng.randbytes(width * height))


def make_photo(width: int, height: int, seed: int) -> Photo:
    """A JPEG (quality 90) that compresses like a photograph, not like a flat colour: per
    channel a rotated gradient, coarse and mid-scale structure and a grain, reproducible from
    ``seed``. The grain is tuned so that 1280x960 comes out near 200 KB and 4032x3024 near
    3 MB, as a phone's pictures do."""
    rng = random.Random(f"photo-{seed}-{width}x{height}")
    grain_weight = 0.04 if width * height < 4_000_000 else 0.08
    tile = 256
    channels = []
    for _ in range(3):
        coarse = _noise(rng, max(2, width // 160), max(2, height // 160))
        mid = _noise(rng, max(2, width // 12), max(2, height // 12))
        gradient = Image.linear_gradient("L").rotate(rng.uniform(0, 360)).resize((width, height))
        grain = Image.new("L", (width, height))
        grain_tile = _noise(rng, tile, tile)
        for x in range(0, width, tile):
            for y in range(0, height, tile):
                grain.paste(grain_tile, (x, y))
        shape = Image.blend(coarse.resize((width, height), Image.Resampling.BICUBIC), gradient, 0.5)
        shape = Image.blend(shape, mid.resize((width, height), Image.Resampling.BILINEAR), 0.25)
        channels.append(Image.blend(shape, grain, grain_weight))
    out = io.BytesIO()
    Image.merge("RGB", channels).save(out, "JPEG", quality=90)
    return Photo(out.getvalue(), width, height)


class PhotoBank:
    """Photos by size and number, each made once."""

    def __init__(self, seed: int) -> None:
        self._seed = seed
        self._made: dict[tuple[tuple[int, int], int], Photo] = {}

    def get(self, size: tuple[int, int], number: int) -> Photo:
        """Photo ``number`` of ``size`` (distinct numbers are distinct pictures)."""
        key = (size, number)
        if key not in self._made:
            self._made[key] = make_photo(*size, self._seed * 1000 + number)
        return self._made[key]

    def pool(self, sizes: Sequence[tuple[int, int]], per_size: int) -> list[list[Photo]]:
        """``per_size`` distinct photos of each size."""
        return [[self.get(size, n) for n in range(per_size)] for size in sizes]


class TelegramFiles:
    """Photos registered with the fake Bot API, as the MediaRef the adapter would hand over."""

    def __init__(self, api: FakeTelegramAPI) -> None:
        self._api = api
        self._names = iter(range(1, 1_000_000))

    def ref(self, photo: Photo) -> MediaRef:
        """A new file id for ``photo`` (each message gets its own, as on Telegram)."""
        file = self._api.add_file(photo.data, suffix=".jpg")
        if photo.as_file:  # an image document: no size in the update
            label = f"image IMG_{next(self._names):04d}.jpg"
            return MediaRef(
                "image", label, file.file_id, file.file_unique_id, "image/jpeg", file.file_size
            )
        return MediaRef(
            "image",
            "photo",
            file.file_id,
            file.file_unique_id,
            "image/jpeg",
            file.file_size,
            photo.width,
            photo.height,
        )


@contextlib.asynccontextmanager
async def telegram_source() -> AsyncIterator[tuple[MediaSource, TelegramFiles]]:
    """The real Telegram adapter's MediaSource against a fresh fake Bot API server."""
    async with FakeTelegramAPI() as api:
        api.add_bot(TOKEN, "bench_media_bot", "Mira")
        adapter = TelegramAdapter(bot_key=BOT, token=TOKEN, api_server=api.base_url)
        try:
            yield adapter.media, TelegramFiles(api)
        finally:
            await adapter.aclose()


# -- the image cost model --------------------------------------------------------------------


def digest(image: ImageBlock) -> str:
    """The content key of an image (its bytes' hash)."""
    return hashlib.sha256(image.data).hexdigest()


def self_check() -> list[str]:
    """Image blocks priced by hand; returns what the model got wrong (empty = ok).

    [S 1000 bp][image 200x150 = 40 tokens, bp]: 1040 written -> 1300. The same request 10 s
    later reads all 1040 -> 104. A different picture of the same size is new content: 1300.
    """
    s = Block("system", "S", 1000, True)
    first, other = (ImageBlock("image/jpeg", make_photo(200, 150, n).data, True) for n in (1, 2))
    one, two = image_block("user", first), image_block("user", other)
    costs = price_conversation([(0.0, [s, one]), (10.0, [s, one]), (20.0, [s, two])])
    got = [one.tokens, *(c.cost for c in costs)]
    want = [40, 1300.0, 104.0, 1300.0]
    if got != want:
        return [f"image blocks: got {got}, expected {want}"]
    return []


# -- (a) re-sent: the captured requests with every earlier photo kept -------------------------


def _images(request: ModelRequest) -> list[ImageBlock]:
    return [b for m in request.messages for b in m.blocks if isinstance(b, ImageBlock)]


def _without(system: TextBlock, entries: Sequence[str]) -> TextBlock:
    text = system.text
    for entry in entries:
        text = text.replace(data_json(entry), '""')  # the summary's entries are data_json
    return dataclasses.replace(system, text=text)


def resent_requests(
    requests: Sequence[ModelRequest], descriptions: Sequence[str] = ()
) -> list[ModelRequest]:
    """Each request with every photo sent in an earlier one, and no longer in it, put back,
    and the summary's ``descriptions`` of images emptied (a bot that keeps the photos needs
    none).

    The photos go at the start of the first message (the window's first user message, or the
    turn), in the order they arrived, each after a label line: right after the system prompt,
    where a kept photo costs least, since nothing before it changes more often than the system.
    """
    seen: dict[str, tuple[int, ImageBlock]] = {}
    rebuilt = []
    for turn, request in enumerate(requests, start=1):
        present = {digest(b) for b in _images(request)}
        for image in _images(request):
            seen.setdefault(digest(image), (turn, image))
        kept: list[ContentBlock] = []
        for key, (arrived, image) in seen.items():
            if key not in present:
                kept += [TextBlock(f"[photo sent in turn {arrived}]"), image]
        system = tuple(_without(b, descriptions) for b in request.system)
        first, *rest = request.messages
        messages = (ChatMessage(first.role, (*kept, *first.blocks)), *rest)
        rebuilt.append(dataclasses.replace(request, system=system, messages=messages))
    return rebuilt


def without_images(request: ModelRequest) -> ModelRequest:
    """The request with its image blocks left out (the text alone)."""
    messages = tuple(
        ChatMessage(m.role, tuple(b for b in m.blocks if not isinstance(b, ImageBlock)))
        for m in request.messages
    )
    return dataclasses.replace(request, messages=messages)


# -- 1. the conversation through personabot's path -------------------------------------------


_IMAGE_INTRO: Final = re.compile(r"Image of turn (\d+) \((\".*\")\):")
#: What a summariser might say a photo showed (about 25 words: a real one is asked to be brief).
SCENES: Final = (
    "a sourdough loaf cooling on a wooden board by the kitchen window, crust split open, flour "
    "on the counter and a cat watching from the chair",
    "a muddy canal towpath at sunrise after a long run, trainers in the foreground, mist on "
    "the water and a heron standing near the far bank",
    "a crowded hospital staff room with a birthday cake, paper cups and a child's drawing of a "
    "dinosaur pinned to the notice board behind it",
    "a lazy ginger cat asleep inside an open suitcase on the bed, one paw over its face, "
    "clothes half packed around it for the trip",
    "a rainy street in York at dusk with fairy lights over a pub door, two people laughing "
    "under one umbrella and wet cobbles shining",
)


def description(turn: int, label: str, number: int) -> str:
    """Summary entry ``number`` describing an image of ``turn``."""
    return f"sent a {label} (turn {turn}) showing {SCENES[number % len(SCENES)]}"


class MemoryModel(OfflineLLM):
    """The memory model: OfflineLLM, counting input tokens (and image tokens) by task, and
    describing the images of a summary task as a real summariser is asked to.

    OfflineLLM summarises the last text block of the task (bot/llm/offline.py), which is the
    transcript only when no image follows it; so a summary task with images is answered for its
    transcript, and each image adds one entry (``description``) to what the user said.
    """

    def __init__(self) -> None:
        super().__init__()
        self.tasks: Counter[str] = Counter()
        self.input_tokens: Counter[str] = Counter()
        self.image_tokens: Counter[str] = Counter()
        self.images: Counter[str] = Counter()
        self.descriptions: list[str] = []

    async def complete(self, request: ModelRequest) -> ModelResult:
        """Count, then answer like OfflineLLM (plus the images' descriptions)."""
        blocks = request_blocks(request)
        self.tasks[request.purpose] += 1
        self.input_tokens[request.purpose] += sum(b.tokens for b in blocks)
        self.image_tokens[request.purpose] += sum(b.tokens for b in blocks if b.kind == "image")
        self.images[request.purpose] += sum(b.kind == "image" for b in blocks)
        if request.purpose != "summary" or not _images(request):
            return await super().complete(request)
        task = request.messages[0]
        intros = [
            _IMAGE_INTRO.fullmatch(b.text) for b in task.blocks[1:] if isinstance(b, TextBlock)
        ]
        transcript = ChatMessage(task.role, task.blocks[:1])
        result = await super().complete(dataclasses.replace(request, messages=(transcript,)))
        update = json.loads(result.text)
        said = []
        for match in filter(None, intros):
            said.append(description(int(match[1]), json.loads(match[2]), len(self.descriptions)))
            self.descriptions.append(said[-1])
        update["user_said"] = [*update["user_said"], *said]
        return dataclasses.replace(result, text=json.dumps(update))


class Outlet(NullOutlet):
    """Accepts replies (bench/memory.py's), with the rest of the Outlet port."""

    async def private_conversation(
        self, conversation: ConversationKey, user_id: str
    ) -> ConversationKey:
        """The benchmark's chats are private already."""
        return conversation


@dataclass(frozen=True, slots=True)
class Wired:
    """Store, memory, pipeline and ingestor as ``bot.app.build`` wires them."""

    clock: ManualClock
    memory: Memory
    pipeline: Pipeline
    ingestor: Ingestor
    policy: MemoryPolicy


def wire(
    store: SQLiteStore,
    *,
    llm: BaseLLM,
    memory_llm: BaseLLM,
    clock: ManualClock,
    media: MediaPreparation,
    memory_class: type[Memory] = Memory,
) -> Wired:
    """The real path, with ``media`` (the real MediaPreparer, maybe timed) in Memory.build."""
    policy = memory_policy()
    profile = BotProfile(
        key=BOT,
        pin=PIN,
        queue=QueuePolicy(debounce=DEBOUNCE, max_wait=8.0),
        memory=policy,
        outlet=Outlet(),
    )
    memory = memory_class(
        store=store,
        jobs=memory_jobs(
            store, llm=memory_llm, clock=clock, policy_for=lambda _bot: policy, media=media
        ),
    )
    pipeline = Pipeline(
        store=store,
        parts=turn_parts(
            store, llm=llm, clock=clock, memory=memory, outlet_for=Bots({BOT: profile}).outlet_for
        ),
        bots=Bots({BOT: profile}),
    )
    ingestor = Ingestor(store=store, clock=clock, policy_for=lambda _bot: profile.queue)
    return Wired(clock, memory, pipeline, ingestor, policy)


def preparer(store: SQLiteStore, source: MediaSource, clock: ManualClock) -> MediaPreparer:
    """The real MediaPreparer with the ``[media]`` defaults, fetching from ``source``."""
    return MediaPreparer(
        store=store, sources=lambda _bot: source, settings=MediaSettings(), clock=clock
    )


def photo_turns(turns: int, every: int) -> list[int]:
    """Turns that carry a photo: the middle of every ``every`` turns (5, 15, ... for 10)."""
    return [i for i in range(1, turns + 1) if i % every == every // 2 % every]


@dataclass(slots=True)
class ConversationRun:
    """What playing the script through the real path produced."""

    requests: list[ModelRequest]
    times: list[float]
    photo_turns: list[int]
    photos: list[Photo]
    memory: MemoryModel
    seconds: float


async def _play(
    rt: Wired,
    llm: ScriptedLLM,
    conversation: ConversationKey,
    turn: ScriptTurn,
    media: tuple[MediaRef, ...],
) -> None:
    if turn.gap:
        await rt.clock.advance(turn.gap)
    if turn.gap > rt.policy.extract_after_idle_seconds:
        await rt.memory.extract_due([BOT])
    await rt.ingestor.ingest(
        Inbound(conversation, USER_ID, USER_NAME, turn.user, f"m{turn.index}", media=media)
    )
    await rt.clock.advance(DEBOUNCE)
    llm.expect(turn.reply)
    outcome = await rt.pipeline.run_turn(conversation)
    if outcome != "sent" or len(llm.calls) != turn.index:
        raise RuntimeError(f"turn {turn.index}: outcome {outcome!r}, {len(llm.calls)} calls")
    last = llm.calls[-1].request.messages[-1]
    shown = sum(isinstance(b, ImageBlock) for b in last.blocks)
    if shown != len(media):
        raise RuntimeError(f"turn {turn.index}: {len(media)} photo(s) sent, {shown} shown")
    await rt.memory.wait_idle()  # the background summary update, as between real turns


async def run_conversation(params: Params, bank: PhotoBank, workdir: Path) -> ConversationRun:
    """Play the script with its photos through the real path on a fresh SQLite file."""
    started = time.perf_counter()
    script = make_script(params.turns, params.seed)
    with_photo = photo_turns(params.turns, params.photo_every)
    # The sizes in turn, every photo a distinct picture.
    sizes = params.sizes
    photos = [bank.get(sizes[n % len(sizes)], n // len(sizes)) for n in range(len(with_photo))]
    conversation = ConversationKey("telegram", "1001", None, BOT)
    clock = ManualClock(start=START)
    llm = ScriptedLLM(clock)
    memory_llm = MemoryModel()
    async with (
        telegram_source() as (source, files),
        SQLiteStore(path=workdir / "conversation.sqlite3") as store,
    ):
        prepare = preparer(store, source, clock)
        rt = wire(store, llm=llm, memory_llm=memory_llm, clock=clock, media=prepare)
        by_turn = dict(zip(with_photo, photos, strict=True))
        try:
            for turn in script:
                photo = by_turn.get(turn.index)
                media = () if photo is None else (files.ref(photo),)
                await _play(rt, llm, conversation, turn, media)
        finally:
            await rt.memory.aclose()
    return ConversationRun(
        requests=[c.request for c in llm.calls],
        times=[c.at for c in llm.calls],
        photo_turns=with_photo,
        photos=photos,
        memory=memory_llm,
        seconds=time.perf_counter() - started,
    )


@dataclass(frozen=True, slots=True)
class VariantCost:
    """One way of sending the conversation, priced."""

    totals: Totals
    image_tokens: int
    images_sent: int  # image blocks over all requests
    max_images_per_request: int
    costs: tuple[TurnCost, ...]
    image_tokens_per_turn: tuple[int, ...]

    @property
    def image_share(self) -> float:
        """Image tokens / input tokens."""
        return self.image_tokens / self.totals.input_tokens if self.totals.input_tokens else 0.0


def price_variant(times: Sequence[float], requests: Sequence[ModelRequest]) -> VariantCost:
    """Price requests made at these times against one provider cache."""
    blocks = [request_blocks(r) for r in requests]
    costs = price_conversation(list(zip(times, blocks, strict=True)))
    per_turn = [sum(b.tokens for b in bs if b.kind == "image") for bs in blocks]
    counts = [sum(b.kind == "image" for b in bs) for bs in blocks]
    return VariantCost(
        totals=Totals.of(costs),
        image_tokens=sum(per_turn),
        images_sent=sum(counts),
        max_images_per_request=max(counts, default=0),
        costs=tuple(costs),
        image_tokens_per_turn=tuple(per_turn),
    )


def price_all(run: ConversationRun) -> dict[str, VariantCost]:
    """The three ways, priced at the times personabot's requests were made."""
    requests = {
        "resent": resent_requests(run.requests, run.memory.descriptions),
        "personabot": run.requests,
        "no_images": [without_images(r) for r in run.requests],
    }
    return {way: price_variant(run.times, rs) for way, rs in requests.items()}


# -- 2. latency ------------------------------------------------------------------------------


class LatencyLLM(BaseLLM):
    """A model of fixed latency that notes when each request reached it."""

    name = "fixed-latency"

    def __init__(self, latency: float) -> None:
        self._latency = latency
        self.reached: float | None = None

    def take(self) -> float | None:
        """When the last request reached the model (None: none since the last take)."""
        reached, self.reached = self.reached, None
        return reached

    async def complete(self, request: ModelRequest) -> ModelResult:
        """Note the time, wait ``latency`` (real time), answer briefly."""
        self.reached = time.perf_counter()
        await asyncio.sleep(self._latency)
        text = "What a lovely picture, thank you for sharing it with me."
        return ModelResult(text, Usage(1000, 15), self.name, "end_turn")


class TimedSource:
    """A MediaSource that times the adapter's fetch (the download alone)."""

    def __init__(self, inner: MediaSource) -> None:
        self._inner = inner
        self.seconds = 0.0

    async def fetch(
        self, media: MediaRef, *, chat_id: str, platform_message_id: str | None, max_bytes: int
    ) -> bytes:
        """The adapter's fetch, timed."""
        started = time.perf_counter()
        try:
            return await self._inner.fetch(
                media, chat_id=chat_id, platform_message_id=platform_message_id, max_bytes=max_bytes
            )
        finally:
            self.seconds += time.perf_counter() - started


class TimedPreparer:
    """The MediaPreparer, timed (fetch + prepare_image + save_media of the turn's media)."""

    def __init__(self, inner: MediaPreparer) -> None:
        self._inner = inner
        self.seconds = 0.0

    async def __call__(
        self, turn: Sequence[StoredMessage], history: Sequence[StoredMessage], *, max_images: int
    ) -> tuple[tuple[StoredMessage, ...], tuple[StoredMessage, ...]]:
        """Prepare, timed."""
        started = time.perf_counter()
        try:
            return await self._inner(turn, history, max_images=max_images)
        finally:
            self.seconds += time.perf_counter() - started


class TimedMemory(Memory):
    """Memory whose ``build`` (media preparation included) is timed."""

    build_seconds = 0.0

    async def build(
        self,
        turn: Turn,
        pin: PersonaPin,
        *,
        gap_notice: str | None = None,
        summary: Summary | NotSet | None = NOT_SET,
        policy: MemoryPolicy | None = None,
        persona: str | None = None,
    ) -> Assembled:
        """Memory.build, timed."""
        started = time.perf_counter()
        try:
            return await super().build(
                turn, pin, gap_notice=gap_notice, summary=summary, policy=policy, persona=persona
            )
        finally:
            self.build_seconds += time.perf_counter() - started


@dataclass(frozen=True, slots=True)
class Sample:
    """One timed turn, in milliseconds."""

    to_request: float
    turn: float
    build: float
    prepare: float
    download: float


@dataclass(frozen=True, slots=True)
class Stat:
    """p50 / p99 / mean of samples, in milliseconds."""

    p50: float
    p99: float
    mean: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Stat:
        """The statistics of ``values``."""
        return cls(
            percentile(values, 50),
            percentile(values, 99),
            sum(values) / len(values) if values else float("nan"),
        )


@dataclass(frozen=True, slots=True)
class LatencyKind:
    """Turns of one kind (text only, or one photo of a size per turn)."""

    name: str
    photo_bytes: float  # mean size of the files sent (0 for text)
    turns: int
    to_request: Stat
    turn: Stat
    build: Stat
    prepare: Stat
    download: Stat
    samples_ms: tuple[float, ...]  # to_request of each turn, in order


class _Rig:
    """One conversation of the latency run on the shared store, clock and source."""

    def __init__(
        self,
        rt: Wired,
        llm: LatencyLLM,
        source: TimedSource,
        media: TimedPreparer,
        chat: str,
    ) -> None:
        self.rt, self.llm, self.source, self.media = rt, llm, source, media
        assert isinstance(rt.memory, TimedMemory)
        self.memory: TimedMemory = rt.memory
        self.conversation = ConversationKey("telegram", chat, None, BOT)
        self.samples: list[Sample] = []
        self._ids = iter(range(1, 10**9))

    async def turn(self, text: str, media: tuple[MediaRef, ...], *, record: bool) -> None:
        """One message, one answered turn; its times appended when ``record``."""
        rt = self.rt
        await rt.clock.advance(20.0)
        await rt.ingestor.ingest(
            Inbound(self.conversation, USER_ID, USER_NAME, text, f"p{next(self._ids)}", media=media)
        )
        await rt.clock.advance(DEBOUNCE)
        self.llm.take()
        self.source.seconds = self.media.seconds = self.memory.build_seconds = 0.0
        started = time.perf_counter()
        outcome = await rt.pipeline.run_turn(self.conversation)
        ended = time.perf_counter()
        reached = self.llm.take()
        if outcome != "sent" or reached is None:
            raise RuntimeError(f"latency turn in {self.conversation.chat_id}: {outcome!r}")
        if record:
            self.samples.append(
                Sample(
                    to_request=(reached - started) * 1000,
                    turn=(ended - started) * 1000,
                    build=self.memory.build_seconds * 1000,
                    prepare=self.media.seconds * 1000,
                    download=self.source.seconds * 1000,
                )
            )
        await rt.memory.wait_idle()


def _kind(name: str, photo_bytes: float, samples: Sequence[Sample]) -> LatencyKind:
    def stat(field: str) -> Stat:
        return Stat.of([getattr(s, field) for s in samples])

    return LatencyKind(
        name=name,
        photo_bytes=photo_bytes,
        turns=len(samples),
        to_request=stat("to_request"),
        turn=stat("turn"),
        build=stat("build"),
        prepare=stat("prepare"),
        download=stat("download"),
        samples_ms=tuple(round(s.to_request, 3) for s in samples),
    )


def _cycle(photos: Sequence[Photo]) -> Iterator[Photo]:
    while True:
        yield from photos


async def run_latency(
    params: Params, pool: Sequence[Sequence[Photo]], workdir: Path
) -> list[LatencyKind]:
    """Text-only turns and turns with one photo of each size, interleaved turn by turn (so
    that load from elsewhere on the machine falls on every kind alike)."""
    texts = [t.user for t in make_script(params.latency_turns + WARMUP_ROUNDS, params.seed)]
    clock = ManualClock(start=START)
    rigs: list[_Rig] = []
    async with contextlib.AsyncExitStack() as stack:
        inner, files = await stack.enter_async_context(telegram_source())
        store = await stack.enter_async_context(SQLiteStore(path=workdir / "latency.sqlite3"))
        for n in range(1 + len(pool)):
            llm = LatencyLLM(params.model_latency)
            source = TimedSource(inner)
            media = TimedPreparer(preparer(store, source, clock))
            rt = wire(
                store,
                llm=llm,
                memory_llm=OfflineLLM(),
                clock=clock,
                media=media,
                memory_class=TimedMemory,
            )
            stack.push_async_callback(rt.memory.aclose)
            rigs.append(_Rig(rt, llm, source, media, chat=str(2001 + n)))
        streams = [_cycle(photos) for photos in pool]
        for index, text in enumerate(texts):
            record = index >= WARMUP_ROUNDS
            await rigs[0].turn(text, (), record=record)
            for rig, stream in zip(rigs[1:], streams, strict=True):
                await rig.turn(text, (files.ref(next(stream)),), record=record)
    kinds = [_kind("text only", 0.0, rigs[0].samples)]
    for rig, photos in zip(rigs[1:], pool, strict=True):
        name = f"{'image file' if photos[0].as_file else 'photo'} {photos[0].size}"
        mean_bytes = sum(len(p.data) for p in photos) / len(photos)
        kinds.append(_kind(name, mean_bytes, rig.samples))
    return kinds


@dataclass(frozen=True, slots=True)
class PrepareTiming:
    """``prepare_image`` alone on one size."""

    size: str
    input_bytes: float
    output: str
    output_bytes: float
    calls: int
    ms: Stat


def time_prepare(pool: Sequence[Sequence[Photo]], samples: int) -> list[PrepareTiming]:
    """``prepare_image`` on each size's photos in turn, ``samples`` calls per size (after one
    warm-up call each), interleaved across sizes."""
    times: list[list[float]] = [[] for _ in pool]
    outputs = [prepare_image(photos[0].data) for photos in pool]
    for n in range(samples):
        for i, photos in enumerate(pool):
            data = photos[n % len(photos)].data
            started = time.perf_counter()
            prepare_image(data)
            times[i].append((time.perf_counter() - started) * 1000)
    return [
        PrepareTiming(
            size=photos[0].size,
            input_bytes=sum(len(p.data) for p in photos) / len(photos),
            output=f"{out.width}x{out.height} {out.media_type}",
            output_bytes=len(out.data),
            calls=samples,
            ms=Stat.of(values),
        )
        for photos, out, values in zip(pool, outputs, times, strict=True)
    ]


# -- report ----------------------------------------------------------------------------------


def dollars(units: float) -> float:
    """Input-token units at Sonnet's input price."""
    return units * DEFAULT_PRICES[SONNET].input / 1_000_000


def cost_table(costs: Mapping[str, VariantCost], run: ConversationRun) -> str:
    """Totals per way and the ratio to re-sent."""
    base = costs["resent"].totals.cost_cached
    headers = ["way", "input tokens", "image tokens", "image share", "read", "written", "plain"]
    headers += ["cost, no cache", "effective cost", "$ (Sonnet)", "vs (a)"]
    rows = [
        [
            LABELS[way],
            c.totals.input_tokens,
            c.image_tokens,
            f"{c.image_share:.1%}",
            c.totals.read_tokens,
            c.totals.write_tokens,
            c.totals.plain_tokens,
            c.totals.cost_uncached,
            c.totals.cost_cached,
            f"{dollars(c.totals.cost_cached):.3f}",
            f"{c.totals.cost_cached / base:.3f}",
        ]
        for way, c in costs.items()
    ]
    title = (
        f"1. Prompt of {len(run.requests)} turns with {len(run.photos)} photos (turns "
        f"{', '.join(map(str, run.photo_turns))}): input-token units, write 1.25x, read 0.1x, "
        "TTL 5 min"
    )
    return format_table(headers, rows, title)


def images_line(costs: Mapping[str, VariantCost]) -> str:
    """How many image blocks each way sent."""
    a, b = costs["resent"], costs["personabot"]
    text = costs["no_images"].totals.cost_cached
    return (
        f"image blocks sent: (a) {a.images_sent} (up to {a.max_images_per_request} per request), "
        f"(b) {b.images_sent} (up to {b.max_images_per_request} per request); the images' own "
        f"effective cost (minus no images): (a) {a.totals.cost_cached - text:,.0f}, "
        f"(b) {b.totals.cost_cached - text:,.0f} units"
    )


def memory_totals(costs: Mapping[str, VariantCost], memory: MemoryModel) -> dict[str, float]:
    """Chat plus memory-model input (uncached, at the chat price), both ways: (a) needs no
    image in its summaries (it keeps the images), (b) shows each folded image once more."""
    tokens = sum(memory.input_tokens.values())
    images = sum(memory.image_tokens.values())
    a = costs["resent"].totals.cost_cached + tokens - images
    b = costs["personabot"].totals.cost_cached + tokens
    return {
        "memory_input_tokens": tokens,
        "memory_image_tokens": images,
        "resent_with_memory": a,
        "personabot_with_memory": b,
        "ratio": b / a if a else float("nan"),
    }


def memory_line(memory: MemoryModel, totals: Mapping[str, float]) -> str:
    """The memory model's input and the ratio with it counted."""
    tasks = ", ".join(f"{k} x{v}" for k, v in sorted(memory.tasks.items())) or "none"
    return (
        f"memory model (not counted above): {tasks}; {totals['memory_input_tokens']:,.0f} input "
        f"tokens, {totals['memory_image_tokens']:,.0f} of them {memory.images['summary']} images "
        "shown to the summariser; counted at the chat price, uncached: (a) "
        f"{totals['resent_with_memory']:,.0f} (its summaries need no images), (b) "
        f"{totals['personabot_with_memory']:,.0f} -> (b)/(a) = {totals['ratio']:.3f}"
    )


def latency_table(kinds: Sequence[LatencyKind], model_latency: float) -> str:
    """p50/p99 per kind and the latency added over text-only turns."""
    text = kinds[0]
    headers = ["turn", "file KB", "turns", "to request p50", "p99", "added p50", "added p99"]
    headers += ["MediaPreparer p50", "p99", "download p50", "p99", "Memory.build p50", "p99"]
    headers += ["whole turn p50", "p99"]
    rows = [
        [
            k.name,
            k.photo_bytes / 1024,
            k.turns,
            k.to_request.p50,
            k.to_request.p99,
            k.to_request.p50 - text.to_request.p50,
            k.to_request.p99 - text.to_request.p99,
            k.prepare.p50,
            k.prepare.p99,
            k.download.p50,
            k.download.p99,
            k.build.p50,
            k.build.p99,
            k.turn.p50,
            k.turn.p99,
        ]
        for k in kinds
    ]
    title = (
        "2. Turn latency, ms: run_turn to the model call (request built); added = minus "
        f"text-only; whole turn includes the model's fixed {model_latency * 1000:.0f} ms"
    )
    return format_table(headers, rows, title)


def prepare_table(timings: Sequence[PrepareTiming]) -> str:
    """prepare_image alone per size."""
    rows = [
        [t.size, t.input_bytes / 1024, t.output, t.output_bytes / 1024, t.calls, t.ms.p50, t.ms.p99]
        for t in timings
    ]
    headers = ("input", "input KB", "prepared", "prepared KB", "calls", "p50 ms", "p99 ms")
    return format_table(headers, rows, "3. prepare_image alone (Pillow, this thread)")


@dataclass(frozen=True, slots=True)
class Target:
    """One pass/fail target with the figure it was judged on."""

    name: str
    value: float
    limit: str
    passed: bool


def targets(costs: Mapping[str, VariantCost]) -> list[Target]:
    """personabot's effective cost below re-sent's."""
    ratio = costs["personabot"].totals.cost_cached / costs["resent"].totals.cost_cached
    return [Target("(b) personabot / (a) re-sent, effective cost", ratio, "< 1.00", ratio < 1.0)]


def _per_turn(run: ConversationRun, costs: Mapping[str, VariantCost]) -> list[dict[str, Any]]:
    rows = []
    for i, at in enumerate(run.times):
        row: dict[str, Any] = {"turn": i + 1, "at_s": round(at - START, 3)}
        row["photo"] = i + 1 in run.photo_turns
        for way, c in costs.items():
            cost = c.costs[i]
            row[way] = {
                "input_tokens": cost.input_tokens,
                "image_tokens": c.image_tokens_per_turn[i],
                "read_tokens": cost.read_tokens,
                "write_tokens": cost.write_tokens,
                "plain_tokens": cost.plain_tokens,
                "cost_cached": round(cost.cost, 3),
            }
        row["personabot"]["layers"] = list(run.requests[i].layers)
        rows.append(row)
    return rows


def _variant_json(c: VariantCost) -> dict[str, Any]:
    return {
        **asdict(c.totals),
        "image_tokens": c.image_tokens,
        "image_share": c.image_share,
        "images_sent": c.images_sent,
        "max_images_per_request": c.max_images_per_request,
        "dollars_cached": dollars(c.totals.cost_cached),
        "dollars_uncached": dollars(c.totals.cost_uncached),
    }


def payload(
    params: Params,
    run: ConversationRun,
    costs: Mapping[str, VariantCost],
    kinds: Sequence[LatencyKind],
    prepared: Sequence[PrepareTiming],
    results: Sequence[Target],
) -> dict[str, Any]:
    """Everything measured, as JSON-ready data."""
    base = costs["resent"].totals
    text = kinds[0]
    return {
        "benchmark": "media",
        "timestamp": utc_timestamp(),
        "parameters": {
            **asdict(params),
            "out": str(params.out),
            "pricing": asdict(Pricing()),
            "dollars_per_million_input_tokens": DEFAULT_PRICES[SONNET].input,
            "price_model": SONNET,
            "max_images": memory_policy().max_images,
            "warmup_rounds": WARMUP_ROUNDS,
            "image_tokens": "memory.tokens.image_tokens(width, height) of the prepared image",
        },
        "environment": environment(),
        "cost": {
            "turns": len(run.requests),
            "photo_turns": run.photo_turns,
            "photos": [{"size": p.size, "bytes": len(p.data)} for p in run.photos],
            "variants": {way: _variant_json(c) for way, c in costs.items()},
            "ratio_personabot_to_resent": {
                "effective_cost": costs["personabot"].totals.cost_cached / base.cost_cached,
                "cost_uncached": costs["personabot"].totals.cost_uncached / base.cost_uncached,
                "input_tokens": costs["personabot"].totals.input_tokens / base.input_tokens,
            },
            "with_memory_model": memory_totals(costs, run.memory),
            "memory_tasks": dict(run.memory.tasks),
            "memory_task_input_tokens": dict(run.memory.input_tokens),
            "memory_task_image_tokens": dict(run.memory.image_tokens),
            "run_seconds": run.seconds,
            "per_turn": _per_turn(run, costs),
        },
        "latency": {
            "model_latency_s": params.model_latency,
            "kinds": [
                {
                    **asdict(k),
                    "added_p50_ms": k.to_request.p50 - text.to_request.p50,
                    "added_p99_ms": k.to_request.p99 - text.to_request.p99,
                }
                for k in kinds
            ],
        },
        "prepare_image": [asdict(t) for t in prepared],
        "targets": [asdict(t) for t in results],
        "passed": all(t.passed for t in results),
    }


# -- main ------------------------------------------------------------------------------------


async def run(params: Params) -> int:
    """Self-check, measure, print, write JSON; return the exit status."""
    problems = self_check()
    if problems:
        for problem in problems:
            print(f"image cost model self-check failed: {problem}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    bank = PhotoBank(params.seed)
    pool = bank.pool(params.sizes, params.pool)
    with tempfile.TemporaryDirectory(prefix="personabot-bench-media-") as tmp:
        conversation = await run_conversation(params, bank, Path(tmp))
        kinds = await run_latency(params, pool, Path(tmp))
    prepared = time_prepare(pool, params.prepare_samples)
    costs = price_all(conversation)
    results = targets(costs)
    totals = memory_totals(costs, conversation.memory)
    print(cost_table(costs, conversation), end="\n\n")
    print(images_line(costs))
    print(memory_line(conversation.memory, totals), end="\n\n")
    print(latency_table(kinds, params.model_latency), end="\n\n")
    print(prepare_table(prepared), end="\n\n")
    for t in results:
        print(f"{'PASS' if t.passed else 'FAIL'}  {t.name}: {t.value:.3f} (target {t.limit})")
    write_json(params.out, payload(params, conversation, costs, kinds, prepared, results))
    print(f"\nJSON written to {params.out} ({time.perf_counter() - started:.1f} s)")
    return 0 if all(t.passed for t in results) else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m bench.media``."""
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    return asyncio.run(run(params_from(args)))


if __name__ == "__main__":
    sys.exit(main())
