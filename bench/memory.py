"""Benchmark of what the model sees (docs/architecture.md#prompt): prompt size, prompt-cache cost,
assembly time.

One scripted conversation (seeded: user messages of 5-60 words with personal facts early on,
replies of 40-80 words, gaps of seconds to hours between turns) is run three ways in one process:

1. full history: pin + every earlier message + the new turn;
2. plain sliding window: pin + the last 24 messages + the new turn (the prefix shifts every turn);
3. personabot: the real path -- SQLiteStore in a temp dir, Ingestor, Pipeline.run_turn,
   Memory.build, summaries compacted in chunks by OfflineLLM as the memory model, user memory
   extracted by Memory.extract_due after every gap over 5 minutes -- capturing the exact
   ModelRequest of each turn.

Every request is priced under Claude's prompt-cache pricing (see ``price_request``), with and
without caching: each breakpoint's entry lives its TTL, 5 minutes (written 1.25x) or 1 hour
(written 2x), and is read at 0.1x. personabot's prompts ask for 1-hour entries when they only
append to the previous prompt and 5-minute ones when their prefix is new anyway (after a fold;
``cache_ttl`` in memory/assemble.py); the two baselines use 5-minute entries, as a client that
only turns caching on does. The second table says why each personabot prompt's prefix differed
from the one before: a pause over an hour, a changed layer, a pause of 5 minutes to an hour
(served by the 1-hour entries), or nothing but the new exchange.

Then ``Memory.build`` is timed on stores holding 100, 10,000 and 100,000
messages (bulk-filled through a second sqlite3 connection, with a summary and a user memory).

Usage (always as a module, so that ``memory`` is the package and not this file)::

    uv run python -m bench.memory [--turns 300] [--quick] [--out bench/results/memory.json]

Prints plain-text tables, writes every figure as JSON, and exits 1 when a target fails:
personabot's cached input cost <= 10% of full history without caching and below full history
with caching; p50 assembly time at the largest size within 2x of the smallest. Exits 2 when the
cost model's built-in self-check fails.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import io
import itertools
import random
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

from PIL import Image

from bench._report import (
    configure_logging,
    environment,
    format_table,
    percentile,
    positive_int,
    utc_timestamp,
    write_json,
)
from bot.app.build import memory_on, turn_parts
from bot.core.clock import ManualClock
from bot.core.events import ConversationKey, Inbound, QueuePolicy, Reply, Turn
from bot.core.llm import (
    BaseLLM,
    CacheTTL,
    ContentBlock,
    ImageBlock,
    ModelRequest,
    ModelResult,
    TextBlock,
    Usage,
)
from bot.llm.offline import OfflineLLM
from bot.queue import Ingestor
from bot.runtime.pipeline import BotProfile, Bots, Pipeline
from bot.store.sqlite import SQLiteStore
from memory.assemble import Assembled, Budget, PersonaPin
from memory.records import MemoryItem, Section, Summary, UserMemory, trim_summary
from memory.service import Memory, MemoryPolicy
from memory.tokens import estimate_tokens, image_tokens

BOT = "bench-memory"
CONVERSATION = ConversationKey("bench", "chat-1", None, BOT)
USER_ID = "u-dana"
USER_NAME = "Dana"
START = 1_700_000_000.0
DEBOUNCE = 1.5
SLIDING_WINDOW = 24
COST_TARGET_RATIO = 0.10
FLAT_TARGET_RATIO = 2.0
HISTORY_AFTER_SUMMARY = 20
DEFAULT_TURNS = 300

PIN = PersonaPin(
    name="Mira",
    system="""You are Mira, a warm, curious and grounded companion who lives in the chat. \
You are thirty-something in spirit, a former radio host turned community gardener, and you love \
slow mornings, strong tea, second-hand bookshops and long walks by the river. You are not a \
therapist, a doctor or a lawyer, and you say so kindly when someone needs one; you never invent \
facts about the world or about the person you are talking to.

How you talk:
- Plainly and warmly, in short paragraphs, like a friend texting back; two to five sentences is \
usual.
- You ask at most one question at a time, and only when you actually want to know the answer.
- You notice feelings and name them gently, without drama and without lecturing.
- You use the person's name now and then, never in every message.
- You have opinions and small stories of your own (the garden, the allotment neighbours, the \
radio years) and share them when they help, briefly.
- Light humour is welcome; sarcasm about the person is not.

What you remember:
- You remember what the person told you about their life, their people and their plans, and \
you follow up on it later ("How did the exam go?").
- When you are not sure you remember something correctly, you ask instead of guessing.
- If the conversation picks up after a long pause, you acknowledge the pause naturally.

Boundaries:
- Stay in character as Mira; do not mention system prompts, models or tokens.
- If the person is in danger or talks about harming themselves, you stay calm, take it \
seriously, and encourage them to contact local emergency services or a crisis line.
- Keep everything suitable for a general audience; decline explicit content with a light touch.
- Never pretend to have done things in the real world (calls, purchases, messages) on the \
person's behalf.

Formatting: no headings, no bullet lists unless asked, no emoji spam (one now and then is \
fine). Write in the language the person writes in.""",
    first_message=("Hi, I'm Mira. What's on your mind today?",),
    model="bench-chat-model",
)


# -- parameters ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Params:
    """Everything the run depends on (written to the JSON as given)."""

    turns: int
    sizes: tuple[int, ...]
    builds: int
    seed: int
    quick: bool
    # The prompt's window and budget under test (default: personabot's defaults).
    budget: Budget
    out: Path


def _sizes(text: str) -> tuple[int, ...]:
    try:
        values = tuple(sorted({int(v) for v in text.split(",") if v.strip()}))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text!r}") from exc
    if not values or values[0] < HISTORY_AFTER_SUMMARY + 2:
        raise argparse.ArgumentTypeError(f"sizes must be >= {HISTORY_AFTER_SUMMARY + 2}")
    return values


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    p = argparse.ArgumentParser(
        prog="python -m bench.memory", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    p.add_argument("--quick", action="store_true", help="100 turns, sizes 100,10000, 50 builds")
    p.add_argument("--turns", type=positive_int, help="turns of the conversation (default 300)")
    p.add_argument("--sizes", type=_sizes, help="stored history sizes (default 100,10000,100000)")
    p.add_argument("--builds", type=positive_int, help="timed builds per size (default 200)")
    p.add_argument("--seed", type=int, default=7, help="seed of the scripted conversation")
    p.add_argument(
        "--window-messages", type=positive_int, help="messages kept after a fold (default 24)"
    )
    p.add_argument(
        "--window-max",
        type=positive_int,
        help="messages the window grows to before a fold (default twice --window-messages)",
    )
    p.add_argument("--prompt-tokens", type=positive_int, help="prompt budget (default 6000)")
    p.add_argument("--out", type=Path, default=Path("bench/results/memory.json"))
    p.add_argument("-v", "--verbose", action="count", default=0, help="-v INFO, -vv DEBUG")
    return p


def params_from(args: argparse.Namespace) -> Params:
    """Resolve quick/full defaults."""
    return Params(
        turns=args.turns or (100 if args.quick else DEFAULT_TURNS),
        sizes=args.sizes or ((100, 10_000) if args.quick else (100, 10_000, 100_000)),
        builds=args.builds or (50 if args.quick else 200),
        seed=args.seed,
        quick=args.quick,
        out=args.out,
        budget=budget_from(args),
    )


def budget_from(args: argparse.Namespace) -> Budget:
    """personabot's default budget with the window and prompt budget given on the command
    line ([memory] window_messages, window_max_messages, prompt_budget_tokens)."""
    default = Budget()
    window = args.window_messages or default.window_messages
    most = args.window_max or 0
    if most and most <= window:
        raise SystemExit(f"--window-max ({most}) must be more than the window ({window})")
    return replace(
        default,
        window_messages=window,
        window_max_messages=most,
        prompt_tokens=args.prompt_tokens or default.prompt_tokens,
    )


# -- the cost model (pure) -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Pricing:
    """Claude's prompt-cache pricing, relative to the base input price per token: a 5-minute
    entry is written at ``write``, a 1-hour one at ``write_1h``, either read at ``read``."""

    base: float = 1.0
    write: float = 1.25
    read: float = 0.1
    ttl_seconds: float = 300.0
    min_cacheable_tokens: int = 1024
    write_1h: float = 2.0
    ttl_1h_seconds: float = 3600.0

    def lifetime(self, ttl: CacheTTL) -> float:
        """Seconds an entry of that TTL lives unused."""
        return self.ttl_1h_seconds if ttl == "1h" else self.ttl_seconds


@dataclass(frozen=True, slots=True)
class Block:
    """One content block of a request: role ("system", "user", "assistant"), text, tokens,
    whether a cache breakpoint follows it and its TTL. An image block's ``text`` is its
    content key (media type and a hash of its bytes: see ``image_block``)."""

    role: str
    text: str
    tokens: int
    breakpoint: bool = False
    kind: Literal["text", "image"] = "text"
    ttl: CacheTTL = "5m"


@dataclass(frozen=True, slots=True)
class TurnCost:
    """Tokens of one request by how they are billed, and the effective cost with caching
    (``write_tokens`` counts every write; ``write_1h_tokens`` the part to 1-hour entries)."""

    input_tokens: int
    read_tokens: int
    write_tokens: int
    plain_tokens: int
    cost: float
    write_1h_tokens: int = 0

    @property
    def uncached_cost(self) -> float:
        """The cost without prompt caching (every token at the base price of 1.0)."""
        return float(self.input_tokens)


#: prefix digest -> (expiry time in simulated seconds, lifetime in seconds)
Cache = Mapping[bytes, tuple[float, float]]


def block(role: str, text: str, breakpoint: bool = False, ttl: CacheTTL = "5m") -> Block:
    """A block whose tokens are ``estimate_tokens(text)`` (the count used for all three ways)."""
    return Block(role, text, estimate_tokens(text), breakpoint, ttl=ttl)


def image_block(role: str, image: ImageBlock) -> Block:
    """An image as a block: the tokens the API charges for its size, its bytes' hash as its
    content (the same picture re-encoded is new content, as it is to the provider's cache)."""
    with Image.open(io.BytesIO(image.data)) as im:
        width, height = im.size
    key = f"{image.media_type};sha256={hashlib.sha256(image.data).hexdigest()}"
    return Block(role, key, image_tokens(width, height), image.cache, "image")


def content_block(role: str, content: ContentBlock) -> Block:
    """A captured text or image block as a priced block (tool blocks are not benchmarked)."""
    if isinstance(content, TextBlock):
        return block(role, content.text, content.cache, content.ttl)
    if isinstance(content, ImageBlock):
        return image_block(role, content)
    raise TypeError(f"no price for a {type(content).__name__} block")


def prefix_keys(blocks: Sequence[Block]) -> list[bytes]:
    """Digest of the content of ``blocks[: i + 1]`` for every i (roles, kinds and texts or
    image keys, no flags)."""
    keys: list[bytes] = []
    digest = b""
    for b in blocks:
        h = hashlib.sha256(digest)
        h.update(b.role.encode() + b"\0" + b.kind.encode() + b"\0" + b.text.encode())
        digest = h.digest()
        keys.append(digest)
    return keys


def price_request(
    blocks: Sequence[Block], cache: Cache, now: float, pricing: Pricing = Pricing()
) -> tuple[TurnCost, dict[bytes, tuple[float, float]]]:
    """Price one request and return the cache as it is afterwards (the input is not changed).

    The model: a cache entry is the content (roles and texts, cache flags ignored) of a prefix
    ending at a breakpoint of the request that wrote it, of at least ``min_cacheable_tokens``;
    it lives its breakpoint's TTL (5 minutes, or 1 hour) after its last use. Here, with
    ``last`` the last breakpoint:

    - read (``read`` x): the longest prefix ending at or before ``last`` equal to a live entry
      (entries are looked up at every block boundary, as the provider looks back);
    - written: from there up to ``last``, stored as one entry per breakpoint of at least
      ``min_cacheable_tokens``; each stretch is priced at the TTL of the breakpoint that ends
      it (``write`` x for 5 minutes, ``write_1h`` x for 1 hour: with 1-hour breakpoints first,
      as the API requires, that is its rule "1-hour writes from the hit to the last 1-hour
      breakpoint, 5-minute writes from there to the last breakpoint"); a breakpoint under the
      minimum stores nothing and its tokens go with the next one's stretch -- nothing is read
      or written when the prefix up to ``last`` is shorter than that (or when there is no
      breakpoint);
    - plain (``base`` x): everything after ``last``.

    Use refreshes: the entry read and every live entry that is a prefix of it (that content
    was served from the cache too) live their own TTL from ``now``, like the entries written.
    """
    live = {key: entry for key, entry in cache.items() if entry[0] > now}
    ends = list(itertools.accumulate(b.tokens for b in blocks))
    total = ends[-1] if ends else 0
    marks = [i for i, b in enumerate(blocks) if b.breakpoint]
    if not marks or ends[marks[-1]] < pricing.min_cacheable_tokens:
        return TurnCost(total, 0, 0, total, total * pricing.base), live
    last = marks[-1]
    keys = prefix_keys(blocks[: last + 1])
    hit = next((i for i in range(last, -1, -1) if keys[i] in live), -1)
    read = ends[hit] if hit >= 0 else 0
    plain = total - ends[last]
    for i in range(hit + 1):
        if keys[i] in live:
            lifetime = live[keys[i]][1]
            live[keys[i]] = (now + lifetime, lifetime)
    written = {"5m": 0, "1h": 0}
    start = read
    for i in marks:
        if i > hit and ends[i] >= pricing.min_cacheable_tokens:
            ttl = blocks[i].ttl
            written[ttl] += ends[i] - start
            start = ends[i]
            lifetime = pricing.lifetime(ttl)
            live[keys[i]] = (now + lifetime, lifetime)
    cost = read * pricing.read + plain * pricing.base
    cost += written["5m"] * pricing.write + written["1h"] * pricing.write_1h
    write = written["5m"] + written["1h"]
    return TurnCost(total, read, write, plain, cost, written["1h"]), live


def price_conversation(
    requests: Sequence[tuple[float, Sequence[Block]]], pricing: Pricing = Pricing()
) -> list[TurnCost]:
    """Price requests made at the given times, in order, against one provider cache."""
    cache: dict[bytes, tuple[float, float]] = {}
    costs = []
    for now, blocks in requests:
        cost, cache = price_request(blocks, cache, now, pricing)
        costs.append(cost)
    return costs


def self_check() -> list[str]:
    """A 3-turn example priced by hand; returns what the cost model got wrong (empty = ok).

    T1 t=0:   [S 1000 bp][u1 100 bp]: S alone (< 1024) is not cacheable; 1100 are written
              -> 1100 x 1.25 = 1375.
    T2 t=120: [S bp][u1][a1 50][u2 80 bp]: reads S+u1 (1100), writes a1+u2 (130)
              -> 110 + 162.5 = 272.5.
    T3 t=400: [S bp][u1][a1][u2][a2 60 bp][u3 40]: reads T2's prefix (1230), writes a2 (60),
              u3 is plain -> 123 + 75 + 40 = 238. Total 1885.5; without caching 3660.
    T3 at t=421 instead: T2's entries expired at 420 -> writes 1290, 40 plain -> 1652.5.
    A request of 600 tokens in all is never cached: 600.
    Refresh on use: T1 at 0, T2 at 250 (reads T1's entry, which now lives until 550), then
    T1's content again at 500 -> read 1100 -> 110.

    1-hour entries (written 2x): H1 t=0: [S 1100 bp 1h][u1 100 bp]: 1100 x 2 + 100 x 1.25
    -> 2325. H2 t=1800: [S bp 1h][u1][a1 50][u2 80 bp]: the 5-minute entry is gone, the
    1-hour one lives -> reads 1100, writes 230 -> 110 + 287.5 = 397.5; S now lives until
    5400, so H1 again at 5300 reads it -> 110 + 125 = 235. A 1-hour stretch after a
    5-minute hit: H1 at 0, then at 20 [S bp 1h][u1][a1 bp 1h][u2 bp]: reads 1200, writes a1
    for an hour (50 x 2) and u2 (80 x 1.25) -> 120 + 100 + 100 = 320.
    """
    s = Block("system", "S", 1000, True)
    u1, a1, u2 = Block("user", "u1", 100), Block("assistant", "a1", 50), Block("user", "u2", 80)
    t1 = [s, Block("user", "u1", 100, True)]
    t2 = [s, u1, a1, Block("user", "u2", 80, True)]
    t3 = [s, u1, a1, u2, Block("assistant", "a2", 60, True), Block("user", "u3", 40)]
    on_time = price_conversation([(0.0, t1), (120.0, t2), (400.0, t3)])
    late = price_conversation([(0.0, t1), (120.0, t2), (421.0, t3)])
    tiny = [Block("system", "s", 500, True), Block("user", "u", 100, True)]
    refreshed = price_conversation([(0.0, t1), (250.0, t2), (500.0, t1)])
    third = on_time[2]
    long = Block("system", "S", 1100, True, ttl="1h")
    h1 = [long, Block("user", "u1", 100, True)]
    h2 = [long, u1, a1, Block("user", "u2", 80, True)]
    h5 = [long, u1, Block("assistant", "a1", 50, True, ttl="1h"), Block("user", "u2", 80, True)]
    hour = price_conversation([(0.0, h1), (1800.0, h2), (5300.0, h1)])
    after_hit = price_conversation([(0.0, h1), (20.0, h5)])[1]
    checks: dict[str, tuple[Sequence[float], Sequence[float]]] = {
        "costs of the 3 turns": ([c.cost for c in on_time], [1375.0, 272.5, 238.0]),
        "total with caching": ([sum(c.cost for c in on_time)], [1885.5]),
        "total without caching": ([sum(c.uncached_cost for c in on_time)], [3660.0]),
        "turn 3 read/write/plain": (
            [third.read_tokens, third.write_tokens, third.plain_tokens],
            [1230, 60, 40],
        ),
        "turn 3 after expiry": ([late[2].cost], [1652.5]),
        "600 tokens in all": ([price_request(tiny, {}, 0.0)[0].cost], [600.0]),
        "refresh on use": ([refreshed[2].cost], [110.0]),
        "1-hour prefix after 30 min, refreshed": ([c.cost for c in hour], [2325.0, 397.5, 235.0]),
        "1-hour write after a 5-minute hit": (
            [after_hit.cost, after_hit.write_1h_tokens],
            [320.0, 50],
        ),
    }
    return [
        f"{name}: got {list(got)}, expected {list(want)}"
        for name, (got, want) in checks.items()
        if len(got) != len(want) or any(abs(g - w) > 1e-6 for g, w in zip(got, want, strict=True))
    ]


# -- the scripted conversation ---------------------------------------------------------------

# Personal facts by turn, phrased so that OfflineLLM's extraction recognises most of them.
FACTS: dict[int, str] = {
    1: "Hi Mira! My name is Dana, nice to meet you.",
    2: "I work as a paediatric nurse at the children's hospital, mostly night shifts lately.",
    3: "I live in Leeds with my partner Sam and our very lazy cat Biscuit.",
    5: "Honestly I'm afraid of deep water, which is awkward because Sam loves sailing.",
    7: "Next month I'm running my first half marathon and I'm nervous about it.",
    9: "On my days off I love baking sourdough, it calms me down.",
    12: "This weekend I have my sister's engagement party in York.",
    18: "My mum turns sixty in March and we are planning a surprise.",
    150: "Big news: I now work as a clinical educator, so no more night shifts!",
    210: "Next week I'm flying to Lisbon for a nursing conference.",
}

TOPICS: tuple[tuple[str, ...], ...] = (
    (
        "Work was a lot today.",
        "We had three admissions in one hour and nobody got a break.",
        "One of the little ones on the ward drew me a dinosaur.",
        "Night shifts really mess with my sleep, I keep waking up at noon.",
        "My manager wants me to mentor the new starters.",
        "I think I did a good job with a scared family this morning.",
    ),
    (
        "Training went okay this morning.",
        "I ran twelve kilometres along the canal and my knee held up.",
        "The long runs are getting easier but the hills still hurt.",
        "I bought new running shoes and they feel like clouds.",
        "My pace is slower than the plan says and that worries me a bit.",
        "Sam came along on the bike and kept me company.",
    ),
    (
        "The sourdough finally rose properly!",
        "I tried a rye loaf and it came out dense as a brick.",
        "My starter is called Gerald, don't ask.",
        "I might try cinnamon buns this weekend.",
        "Baking is the only thing that really switches my brain off.",
    ),
    (
        "Biscuit knocked a glass off the table again.",
        "The cat has decided my running shoes are his bed.",
        "Sam and I argued a bit about the holiday plans.",
        "We made up over takeaway and a silly film.",
        "Sam thinks I work too much and he is probably right.",
    ),
    (
        "My sister keeps sending me wedding venue links.",
        "Mum called and asked again when we are getting married.",
        "I still have not bought a present for the party.",
        "My brother is moving back from Glasgow next year.",
        "Family stuff always makes me a bit anxious.",
    ),
    (
        "It has rained all week here.",
        "I finished that mystery novel you would probably hate.",
        "We watched a documentary about octopuses last night.",
        "I keep meaning to start journaling again.",
        "My sleep has been all over the place recently.",
        "I feel more tired than usual and I am not sure why.",
    ),
)

QUESTIONS: tuple[str, ...] = (
    "What do you think?",
    "Does that sound silly?",
    "How is the garden doing?",
    "Any tips for staying calm before a race?",
    "Do you remember what I told you about my sister?",
    "What would you do in my place?",
    "Is it normal to feel this tired?",
    "Did you ever do anything like that on the radio?",
)

REPLY_SENTENCES: tuple[str, ...] = (
    "That sounds like a genuinely full day, and I can hear how tired you are.",
    "I love that you still found a moment to notice the small good things.",
    "Honestly, that would rattle most people, so go easy on yourself tonight.",
    "The allotment was a mess this morning, the slugs have discovered my lettuces.",
    "It makes sense that you feel pulled in two directions about it.",
    "When I was on the radio we had a rule: one deep breath before every hard call.",
    "You have been carrying a lot lately, more than you usually admit.",
    "Small steps count, even when they feel embarrassingly small.",
    "I remember you saying something similar a while ago, and you got through it then.",
    "Tea first, decisions later, that is my entire philosophy.",
    "There is no wrong way to feel about family stuff like this.",
    "That is a real achievement, and I hope you let yourself enjoy it for a minute.",
    "Your body is probably asking for more rest than your schedule allows.",
    "I would be nervous too, and nerves usually mean you care.",
    "Sam sounds like he is trying, even when the timing is clumsy.",
    "Biscuit clearly runs that household and everyone knows it.",
    "If it helps, write down the three things that worry you most and look at them tomorrow.",
    "My neighbour at the allotment swears by cinnamon in everything, for the record.",
)

REPLY_QUESTIONS: tuple[str, ...] = (
    "How are you feeling about it now?",
    "What would make tomorrow a little easier?",
    "Did you manage to get any sleep?",
    "What part of it stayed with you the most?",
    "Is there anything you are looking forward to this week?",
)


@dataclass(frozen=True, slots=True)
class ScriptTurn:
    """One turn of the scripted conversation: the quiet before it, what is said, the reply."""

    index: int
    gap: float  # seconds from the previous reply to this message (0 for the first turn)
    user: str
    reply: str


def _words(text: str) -> int:
    return len(text.split())


def _compose(rng: random.Random, pool: Sequence[str], first: str | None, target: int) -> str:
    """Sentences from ``pool`` (after ``first``) while the text stays within ``target`` words."""
    parts = [first] if first else [rng.choice(pool)]
    count = _words(parts[0])
    for sentence in rng.sample(list(pool), len(pool)):
        if sentence in parts or count + _words(sentence) > target:
            continue
        parts.append(sentence)
        count += _words(sentence)
    return " ".join(parts)


def user_message(rng: random.Random, index: int) -> str:
    """A user message of 5-60 words: the fact due at this turn, topic sentences, a question."""
    roll = rng.random()
    target = rng.randint(5, 20) if roll < 0.55 else rng.randint(20, 40) if roll < 0.88 else 60
    topic = TOPICS[rng.randrange(len(TOPICS))]
    pool = (*topic, rng.choice(QUESTIONS))
    text = _compose(rng, pool, FACTS.get(index), target)
    if _words(text) < 5:  # a short question alone: add what it is about
        text = f"{topic[0]} {text}"
    words = text.split()
    return " ".join(words[:60]) if len(words) > 60 else text


def reply_text(seed: int, index: int) -> str:
    """A persona reply of 40-80 words, the same for a given seed and turn."""
    rng = random.Random(f"reply-{seed}-{index}")
    target = rng.randint(40, 80)
    parts: list[str] = []
    for sentence in rng.sample(REPLY_SENTENCES, len(REPLY_SENTENCES)):
        if sum(_words(p) for p in parts) >= target - 6:
            break
        parts.append(sentence)
    parts.append(rng.choice(REPLY_QUESTIONS))
    words = " ".join(parts).split()
    return " ".join(words[:80])


def draw_gap(rng: random.Random) -> float:
    """Seconds of quiet before a message: mostly seconds to minutes, some over 5 minutes,
    a few hours."""
    roll = rng.random()
    if roll < 0.012:
        return rng.uniform(3_600.0, 6 * 3_600.0)
    if roll < 0.08:
        return rng.uniform(330.0, 45 * 60.0)
    if roll < 0.27:
        return rng.uniform(90.0, 290.0)
    return rng.uniform(4.0, 90.0)


def make_script(turns: int, seed: int) -> list[ScriptTurn]:
    """The whole conversation, reproducible from ``seed``."""
    rng = random.Random(seed)
    script = []
    for index in range(1, turns + 1):
        gap = 0.0 if index == 1 else draw_gap(rng)
        script.append(ScriptTurn(index, gap, user_message(rng, index), reply_text(seed, index)))
    return script


def script_stats(script: Sequence[ScriptTurn], quiet: float) -> dict[str, Any]:
    """Length and gap figures of the script (for the JSON)."""
    user_words = [_words(t.user) for t in script]
    reply_words = [_words(t.reply) for t in script]
    gaps = [t.gap for t in script[1:]]
    return {
        "turns": len(script),
        "user_words": {"min": min(user_words), "max": max(user_words), "mean": _mean(user_words)},
        "reply_words": {
            "min": min(reply_words),
            "max": max(reply_words),
            "mean": _mean(reply_words),
        },
        "gaps": {
            "under_90s": sum(g < 90 for g in gaps),
            "90s_to_5min": sum(90 <= g <= quiet for g in gaps),
            "over_5min": sum(g > quiet for g in gaps),
            "over_1h": sum(g > 3_600 for g in gaps),
            "median_s": percentile(gaps, 50),
            "simulated_hours": (sum(gaps) + DEBOUNCE * len(script)) / 3_600,
        },
    }


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


# -- the two baselines -----------------------------------------------------------------------


def _exchange(turn: ScriptTurn) -> list[Block]:
    return [block("user", turn.user), block("assistant", turn.reply)]


def full_history_requests(script: Sequence[ScriptTurn]) -> list[list[Block]]:
    """Pin + every earlier message + the new turn; breakpoints on the pin and the new turn."""
    pin = block("system", PIN.text(), breakpoint=True)
    earlier: list[Block] = []
    requests = []
    for turn in script:
        requests.append([pin, *earlier, block("user", turn.user, breakpoint=True)])
        earlier += _exchange(turn)
    return requests


def sliding_window_requests(
    script: Sequence[ScriptTurn], window: int = SLIDING_WINDOW
) -> list[list[Block]]:
    """Pin + the last ``window`` messages + the new turn; breakpoints as in full history.

    Each turn adds a user message and a reply, so once full the window drops the oldest two
    messages every turn and its first message (the start of the prefix) changes every turn.
    """
    pin = block("system", PIN.text(), breakpoint=True)
    earlier: list[Block] = []
    requests = []
    for turn in script:
        kept = earlier[-window:] if window else []
        requests.append([pin, *kept, block("user", turn.user, breakpoint=True)])
        earlier += _exchange(turn)
    return requests


# -- personabot's path -----------------------------------------------------------------------


def request_blocks(request: ModelRequest) -> list[Block]:
    """A captured request as blocks, with exactly its own breakpoints."""
    blocks = [block("system", b.text, b.cache) for b in request.system]
    for message in request.messages:
        blocks += [content_block(message.role, b) for b in message.blocks]
    return blocks


@dataclass(frozen=True, slots=True)
class Call:
    """A captured model request and the simulated time it was made at."""

    at: float
    request: ModelRequest


class ScriptedLLM(BaseLLM):
    """The chat model: records every request and answers with the scripted reply."""

    name = "scripted"

    def __init__(self, clock: ManualClock) -> None:
        self._clock = clock
        self._next: str | None = None
        self.calls: list[Call] = []

    def expect(self, reply: str) -> None:
        """The answer to the next request."""
        self._next = reply

    async def complete(self, request: ModelRequest) -> ModelResult:
        """Record the request; answer with the expected reply (once)."""
        if self._next is None:
            raise RuntimeError("unexpected model call: no scripted reply is pending")
        reply, self._next = self._next, None
        self.calls.append(Call(self._clock.now(), request))
        tokens = sum(b.tokens for b in request_blocks(request))
        return ModelResult(reply, Usage(tokens, estimate_tokens(reply)), "scripted", "end_turn")


class MemoryTaskLLM(OfflineLLM):
    """The memory model: OfflineLLM, counting the input tokens of each kind of task."""

    def __init__(self) -> None:
        super().__init__()
        self.tasks: Counter[str] = Counter()
        self.input_tokens: Counter[str] = Counter()

    async def complete(self, request: ModelRequest) -> ModelResult:
        """Count, then answer like OfflineLLM."""
        self.tasks[request.purpose] += 1
        self.input_tokens[request.purpose] += sum(b.tokens for b in request_blocks(request))
        return await super().complete(request)


class NullOutlet:
    """Accepts replies; no typing indicator."""

    idempotent_send = False

    def __init__(self) -> None:
        self.sent = 0

    async def send(self, reply: Reply) -> None:
        """Count the reply."""
        self.sent += 1

    @contextlib.asynccontextmanager
    async def typing(self, conversation: ConversationKey) -> AsyncIterator[None]:
        """No typing indicator."""
        yield


def memory_policy(budget: Budget | None = None) -> MemoryPolicy:
    """personabot's defaults (config.example.toml): window 24, budgets 6000/800/600, 5 min;
    ``budget`` in place of the default budget."""
    return MemoryPolicy(
        budget=budget or Budget(),
        summary_model="bench-memory-model",
        extract_after_idle_seconds=300.0,
    )


@dataclass(slots=True)
class PersonabotRun:
    """What running the script through the real pipeline produced."""

    calls: list[Call]
    memory_tasks: dict[str, int]
    memory_task_tokens: dict[str, int]
    extractions: int
    seconds: float


@dataclass(frozen=True, slots=True)
class Runtime:
    """The wired pieces of personabot's path."""

    clock: ManualClock
    llm: ScriptedLLM
    memory: Memory
    pipeline: Pipeline
    ingestor: Ingestor
    policy: MemoryPolicy


def wire(store: SQLiteStore, memory_llm: BaseLLM, budget: Budget | None = None) -> Runtime:
    """Store, memory, pipeline and ingestor as ``bot.app.build`` wires them, on a manual clock."""
    clock = ManualClock(start=START)
    llm = ScriptedLLM(clock)
    policy = memory_policy(budget)
    profile = BotProfile(
        key=BOT,
        pin=PIN,
        queue=QueuePolicy(debounce=DEBOUNCE, max_wait=8.0),
        memory=policy,
        outlet=NullOutlet(),
    )
    memory = memory_on(store=store, llm=memory_llm, clock=clock, policy_for=lambda _bot: policy)
    pipeline = Pipeline(
        store=store,
        parts=turn_parts(
            store, llm=llm, clock=clock, memory=memory, outlet_for=Bots({BOT: profile}).outlet_for
        ),
        bots=Bots({BOT: profile}),
    )
    ingestor = Ingestor(store=store, clock=clock, policy_for=lambda _bot: profile.queue)
    return Runtime(clock, llm, memory, pipeline, ingestor, policy)


async def play_turn(rt: Runtime, turn: ScriptTurn) -> int:
    """Quiet gap (learning user memory if it was long), the message, the turn; returns the
    number of sessions learned from."""
    learned = 0
    if turn.gap:
        await rt.clock.advance(turn.gap)
    if turn.gap > rt.policy.extract_after_idle_seconds:
        learned = await rt.memory.extract_due([BOT])
    await rt.ingestor.ingest(
        Inbound(CONVERSATION, USER_ID, USER_NAME, turn.user, platform_message_id=f"m{turn.index}")
    )
    await rt.clock.advance(DEBOUNCE)
    rt.llm.expect(turn.reply)
    outcome = await rt.pipeline.run_turn(CONVERSATION)
    if outcome != "sent" or len(rt.llm.calls) != turn.index:
        raise RuntimeError(f"turn {turn.index}: outcome {outcome!r}, {len(rt.llm.calls)} calls")
    if rt.llm.calls[-1].request.messages[-1].text != turn.user:
        raise RuntimeError(f"turn {turn.index}: the new turn is not the scripted message")
    await rt.memory.wait_idle()  # the background summary update, as between real turns
    return learned


async def run_personabot(
    script: Sequence[ScriptTurn], workdir: Path, budget: Budget | None = None
) -> PersonabotRun:
    """Play the script through the real pipeline on a fresh SQLite file (``budget``: the
    prompt's, default personabot's)."""
    started = time.perf_counter()
    memory_llm = MemoryTaskLLM()
    extractions = 0
    async with SQLiteStore(path=workdir / "conversation.sqlite3") as store:
        rt = wire(store, memory_llm, budget)
        try:
            for turn in script:
                extractions += await play_turn(rt, turn)
        finally:
            await rt.memory.aclose()
    return PersonabotRun(
        calls=rt.llm.calls,
        memory_tasks=dict(memory_llm.tasks),
        memory_task_tokens=dict(memory_llm.input_tokens),
        extractions=extractions,
        seconds=time.perf_counter() - started,
    )


# -- costs of the three ways -----------------------------------------------------------------

WAYS: tuple[str, ...] = ("full_history", "sliding_window", "personabot")
LABELS: dict[str, str] = {
    "full_history": "full history",
    "sliding_window": f"sliding window ({SLIDING_WINDOW} msgs)",
    "personabot": "personabot",
}


@dataclass(frozen=True, slots=True)
class Totals:
    """Sums over the conversation of one way."""

    input_tokens: int
    read_tokens: int
    write_tokens: int
    plain_tokens: int
    cost_uncached: float
    cost_cached: float
    last_turn_tokens: int

    @classmethod
    def of(cls, costs: Sequence[TurnCost]) -> Totals:
        """Add up per-turn costs."""
        return cls(
            input_tokens=sum(c.input_tokens for c in costs),
            read_tokens=sum(c.read_tokens for c in costs),
            write_tokens=sum(c.write_tokens for c in costs),
            plain_tokens=sum(c.plain_tokens for c in costs),
            cost_uncached=sum(c.uncached_cost for c in costs),
            cost_cached=sum(c.cost for c in costs),
            last_turn_tokens=costs[-1].input_tokens if costs else 0,
        )


def _tagged(request: ModelRequest, tag: str) -> str | None:
    """The system block holding ``tag`` (e.g. ``<user_memory>``), or None."""
    return next((b.text for b in request.system if tag in b.text), None)


def prefix_cause(previous: Call | None, call: Call, ttl: float, long_ttl: float = 3600.0) -> str:
    """Why this personabot request's prefix differs from the previous one (first match): a
    pause longer than the longest TTL (``long_ttl``), a layer that changed, else a pause longer
    than the short TTL (``ttl``: the prefix is stable, only 1-hour entries can serve it) or
    nothing but the new exchange appended."""
    if previous is None:
        return "first turn"
    gap = call.at - previous.at
    if gap > long_ttl:
        return "cache expired (gap > 1 h)"
    before, now = previous.request, call.request
    if _tagged(before, "<user_memory>") != _tagged(now, "<user_memory>"):
        return "user memory changed"
    if _tagged(before, "<conversation_summary>") != _tagged(now, "<conversation_summary>"):
        return "summary changed (compaction)"
    if before.messages[0].text != now.messages[0].text:
        return "window start moved"
    if gap > ttl:
        return "appended after a pause of 5 min - 1 h"
    return "appended (prefix stable)"


def cause_table_rows(
    calls: Sequence[Call], costs: Sequence[TurnCost], ttl: float
) -> dict[str, dict[str, float]]:
    """personabot's cached cost grouped by why the prefix changed."""
    groups: dict[str, dict[str, float]] = {}
    previous: Call | None = None
    for call, cost in zip(calls, costs, strict=True):
        cause = prefix_cause(previous, call, ttl)
        row = groups.setdefault(
            cause, {"turns": 0, "input_tokens": 0, "read": 0, "written": 0, "cost": 0.0}
        )
        row["turns"] += 1
        row["input_tokens"] += cost.input_tokens
        row["read"] += cost.read_tokens
        row["written"] += cost.write_tokens
        row["cost"] += cost.cost
        previous = call
    return groups


def breakpoint_prefixes(request: ModelRequest) -> list[int]:
    """Tokens from the start of the request to each of its breakpoints."""
    blocks = request_blocks(request)
    ends = list(itertools.accumulate(b.tokens for b in blocks))
    return [end for b, end in zip(blocks, ends, strict=True) if b.breakpoint]


def per_turn_rows(
    script: Sequence[ScriptTurn],
    calls: Sequence[Call],
    costs: Mapping[str, Sequence[TurnCost]],
    ttl: float,
) -> list[dict[str, Any]]:
    """One JSON row per turn with every way's figures."""
    rows = []
    previous: Call | None = None
    for i, (turn, call) in enumerate(zip(script, calls, strict=True)):
        row: dict[str, Any] = {
            "turn": turn.index,
            "at_s": round(call.at - START, 3),
            "gap_before_s": round(turn.gap, 3),
            "user_words": _words(turn.user),
            "reply_words": _words(turn.reply),
        }
        for way in WAYS:
            c = costs[way][i]
            row[way] = {
                "input_tokens": c.input_tokens,
                "read_tokens": c.read_tokens,
                "write_tokens": c.write_tokens,
                "plain_tokens": c.plain_tokens,
                "cost_uncached": c.uncached_cost,
                "cost_cached": round(c.cost, 3),
            }
        row["personabot"]["layers"] = list(call.request.layers)
        row["personabot"]["breakpoint_prefix_tokens"] = breakpoint_prefixes(call.request)
        row["personabot"]["prefix"] = prefix_cause(previous, call, ttl)
        rows.append(row)
        previous = call
    return rows


# -- assembly time ---------------------------------------------------------------------------

_FILL_SQL = (
    "INSERT INTO messages (id, conversation_id, session_id, turn, role, author_id, "
    "display_name, text, platform_message_id, is_private, version, pending, answered_by, "
    "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, 0, ?, ?)"
)


def filled_summary(size: int, texts: Sequence[str], budget: Budget) -> Summary:
    """A realistic summary of turns 1..size-20: the last things the user said, cut to budget."""
    said = tuple(t[:120] for t in texts[::2][-40:])
    summary = Summary(
        first_turn=1,
        last_turn=size - HISTORY_AFTER_SUMMARY,
        topics=("work on the ward", "half marathon training", "sourdough", "family plans"),
        user_said=said,
        open_threads=("ask how the half marathon went", "mum's sixtieth surprise"),
        preferences=("short, warm replies",),
    )
    return trim_summary(summary, budget.summary_tokens)


def filled_memory(now: float) -> UserMemory:
    """A user memory record like the one the conversation builds."""
    facts: tuple[tuple[Section, str, str], ...] = (
        ("semantic", "name", "Dana"),
        ("semantic", "occupation", "clinical educator"),
        ("semantic", "location", "Leeds with my partner Sam and our very lazy cat Biscuit"),
        ("semantic", "interest", "baking sourdough on my days off"),
        ("emotional", "fear", "deep water"),
        ("episodic", "event", "Next month I'm running my first half marathon"),
        ("episodic", "event", "Next week I'm flying to Lisbon for a nursing conference"),
    )
    return UserMemory(
        items=tuple(
            MemoryItem(section, name, value, (i + 1,), True, now)
            for i, (section, name, value) in enumerate(facts)
        )
    )


def fill_rows(conv_id: int, session_id: int, first_id: int, size: int, texts: Sequence[str],
              now: float) -> list[tuple[Any, ...]]:  # fmt: skip
    """``size`` answered messages, user and assistant alternating, turns 1..size."""
    rows = []
    for turn in range(1, size + 1):
        row_id = first_id + turn - 1
        user = turn % 2 == 1
        rows.append(
            (
                row_id,
                conv_id,
                session_id,
                turn,
                "user" if user else "assistant",
                USER_ID if user else "assistant",
                USER_NAME if user else "",
                texts[(turn - 1) % len(texts)],
                f"fill-{turn}" if user else None,
                (turn + 1) // 2,
                row_id + 1 if user and turn < size else None,
                now - (size - turn) * 30.0,
            )
        )
    return rows


def bulk_fill(path: Path, size: int, texts: Sequence[str], now: float, budget: Budget) -> None:
    """Insert ``size`` messages, a summary and a user memory through a second connection,
    in one transaction, into the open session of the benchmark conversation."""
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.execute("PRAGMA busy_timeout = 5000")
        con.execute("BEGIN IMMEDIATE")
        conv_id, session_id = con.execute(
            "SELECT c.id, s.id FROM conversations c JOIN sessions s ON s.conversation_id = c.id "
            "WHERE c.bot = ? AND c.platform = ? AND c.chat_id = ? AND s.status = 'open'",
            (BOT, CONVERSATION.platform, CONVERSATION.chat_id),
        ).fetchone()
        first_id = con.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM messages").fetchone()[0]
        con.executemany(_FILL_SQL, fill_rows(conv_id, session_id, first_id, size, texts, now))
        last_user = size if size % 2 else size - 1
        con.execute(
            "UPDATE sessions SET next_turn = ?, last_user_turn = ?, extracted_turn = ?, "
            "last_activity_at = ? WHERE id = ?",
            (size + 1, last_user, last_user, now, session_id),
        )
        con.execute("UPDATE conversations SET version = ? WHERE id = ?", (size, conv_id))
        summary = filled_summary(size, texts, budget)
        con.execute(
            "INSERT INTO summaries (session_id, body, first_turn, last_turn, updated_at) "
            "VALUES (?, ?, ?, ?, ?)",
            (session_id, summary.to_json(), summary.first_turn, summary.last_turn, now),
        )
        con.execute(
            "INSERT INTO user_memory (platform, user_id, record, updated_at) VALUES (?, ?, ?, ?)",
            (CONVERSATION.platform, USER_ID, filled_memory(now).to_json(), now),
        )
        con.execute("COMMIT")
    finally:
        con.close()


@dataclass(frozen=True, slots=True)
class BuildTiming:
    """``Memory.build`` latency at one stored history size."""

    size: int
    builds: int
    p50_ms: float
    p99_ms: float
    mean_ms: float
    fill_seconds: float
    layers: tuple[str, ...]
    prompt_tokens: int
    # The gap check of the reply path (Memory.gaps with the summary read once), and the same
    # check without a summary (every stored turn is then scanned: the degenerate case).
    gaps_p50_ms: float = 0.0
    gaps_p99_ms: float = 0.0
    gaps_unsummarised_p50_ms: float = 0.0


async def pending_probe_turn(store: SQLiteStore, now: float) -> Turn:
    """Ingest one new message and read it back as the pending turn to build prompts for."""
    await store.ingest(
        Inbound(CONVERSATION, USER_ID, USER_NAME, "So, where were we?", "probe"), now, QueuePolicy()
    )
    turn = await store.pending_turn(CONVERSATION)
    if turn is None:
        raise RuntimeError("the probe message is not pending")
    return turn


@dataclass(frozen=True, slots=True)
class Probe:
    """A filled store, ready to build prompts for one pending turn."""

    size: int
    memory: Memory
    turn: Turn
    fill_seconds: float


async def prepare_probe(
    stack: contextlib.AsyncExitStack, size: int, texts: Sequence[str], workdir: Path
) -> Probe:
    """A fresh store (closed with ``stack``) filled with ``size`` messages and a new turn."""
    path = workdir / f"history-{size}.sqlite3"
    policy = memory_policy()
    now = START + 10 * 86_400.0
    store = await stack.enter_async_context(SQLiteStore(path=path))
    await store.open_session(CONVERSATION, now)
    started = time.perf_counter()
    bulk_fill(path, size, texts, now, policy.budget)
    fill_seconds = time.perf_counter() - started
    turn = await pending_probe_turn(store, now)
    memory = memory_on(
        store=store, llm=OfflineLLM(), clock=ManualClock(now), policy_for=lambda _: policy
    )
    return Probe(size, memory, turn, fill_seconds)


async def time_builds(probes: Sequence[Probe], builds: int) -> list[BuildTiming]:
    """Time ``builds`` calls of Memory.build per store, interleaved round-robin so that load
    from elsewhere on the machine falls on every size alike."""
    samples: dict[int, list[float]] = {p.size: [] for p in probes}
    last: dict[int, Assembled] = {}
    for p in probes:  # warm-up: connection, page cache, statement cache
        for _ in range(5):
            last[p.size] = await p.memory.build(p.turn, PIN)
    gaps: dict[int, list[float]] = {p.size: [] for p in probes}
    bare: dict[int, list[float]] = {p.size: [] for p in probes}
    for _ in range(builds):
        for p in probes:
            t0 = time.perf_counter()
            last[p.size] = await p.memory.build(p.turn, PIN)
            samples[p.size].append((time.perf_counter() - t0) * 1000.0)
            summary = await p.memory.summary(p.turn.session)
            t0 = time.perf_counter()
            if await p.memory.gaps(p.turn.session, summary):
                raise RuntimeError("the benchmark store has gaps")
            gaps[p.size].append((time.perf_counter() - t0) * 1000.0)
            t0 = time.perf_counter()
            await p.memory.gaps(p.turn.session, None)
            bare[p.size].append((time.perf_counter() - t0) * 1000.0)
    return [
        BuildTiming(
            size=p.size,
            builds=builds,
            p50_ms=percentile(samples[p.size], 50),
            p99_ms=percentile(samples[p.size], 99),
            mean_ms=_mean(samples[p.size]),
            fill_seconds=p.fill_seconds,
            layers=last[p.size].request.layers,
            prompt_tokens=last[p.size].total_tokens,
            gaps_p50_ms=percentile(gaps[p.size], 50),
            gaps_p99_ms=percentile(gaps[p.size], 99),
            gaps_unsummarised_p50_ms=percentile(bare[p.size], 50),
        )
        for p in probes
    ]


async def assembly_timings(
    sizes: Sequence[int], builds: int, texts: Sequence[str], workdir: Path
) -> list[BuildTiming]:
    """Fill one store per size, then time Memory.build on all of them."""
    async with contextlib.AsyncExitStack() as stack:
        probes = [await prepare_probe(stack, n, texts, workdir) for n in sizes]
        return await time_builds(probes, builds)


def fill_texts(script: Sequence[ScriptTurn]) -> list[str]:
    """Message texts to fill stores with: the script's, user and reply alternating."""
    return [text for turn in script for text in (turn.user, turn.reply)]


# -- report ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Target:
    """One pass/fail target with the figure it was judged on."""

    name: str
    value: float
    limit: str
    passed: bool


def targets(totals: Mapping[str, Totals], timings: Sequence[BuildTiming]) -> list[Target]:
    """The three targets of the issue."""
    full, ours = totals["full_history"], totals["personabot"]
    share = ours.cost_cached / full.cost_uncached
    vs_cached = ours.cost_cached / full.cost_cached
    flat = timings[-1].p50_ms / timings[0].p50_ms if len(timings) > 1 else float("nan")
    return [
        Target(
            "personabot cached cost / full history without caching",
            share,
            f"<= {COST_TARGET_RATIO:.2f}",
            share <= COST_TARGET_RATIO,
        ),
        Target(
            "personabot cached cost / full history with caching",
            vs_cached,
            "< 1.00",
            vs_cached < 1.0,
        ),
        Target(
            f"assembly p50 at {timings[-1].size:,} / p50 at {timings[0].size:,} messages",
            flat,
            f"<= {FLAT_TARGET_RATIO:.1f}",
            flat <= FLAT_TARGET_RATIO,
        ),
    ]


def cost_table(totals: Mapping[str, Totals], turns: int) -> str:
    """Totals per way."""
    full = totals["full_history"].cost_uncached
    headers = ["way", "input tokens", "last turn", "no cache", "cached", "read", "written"]
    headers += ["plain", "cached/no cache", "cached/full no cache"]
    rows = [
        [
            LABELS[way],
            t.input_tokens,
            t.last_turn_tokens,
            t.cost_uncached,
            t.cost_cached,
            t.read_tokens,
            t.write_tokens,
            t.plain_tokens,
            f"{t.cost_cached / t.cost_uncached:.1%}",
            f"{t.cost_cached / full:.1%}",
        ]
        for way, t in totals.items()
    ]
    title = (
        f"1. Effective input cost of {turns} turns (base price = 1.0 per token; write 1.25x "
        "for 5 min, 2x for 1 h, read 0.1x, min 1,024 tokens)"
    )
    return format_table(headers, rows, title)


def cause_table(groups: Mapping[str, Mapping[str, float]]) -> str:
    """personabot's cached cost by what happened to the prefix."""
    total = sum(g["cost"] for g in groups.values()) or 1.0
    rows = [
        [
            cause,
            int(g["turns"]),
            int(g["input_tokens"]),
            int(g["read"]),
            int(g["written"]),
            g["cost"],
            f"{g['cost'] / total:.1%}",
        ]
        for cause, g in sorted(groups.items(), key=lambda kv: -kv[1]["cost"])
    ]
    headers = ("prefix vs previous turn", "turns", "input", "read", "written", "cost", "share")
    return format_table(headers, rows, "2. personabot: where the cached cost goes")


def timing_table(timings: Sequence[BuildTiming]) -> str:
    """Memory.build latency per stored history size."""
    rows = [
        [
            t.size,
            t.builds,
            t.p50_ms,
            t.p99_ms,
            t.mean_ms,
            t.gaps_p50_ms,
            t.gaps_p99_ms,
            t.gaps_unsummarised_p50_ms,
            ", ".join(t.layers),
            t.fill_seconds,
        ]
        for t in timings
    ]
    headers = (
        "stored messages",
        "builds",
        "p50 ms",
        "p99 ms",
        "mean ms",
        "gap check p50 ms",
        "gap p99 ms",
        "gap, no summary, p50 ms",
        "layers",
        "fill s",
    )
    return format_table(headers, rows, "3. Memory.build time by stored history size")


def target_lines(results: Sequence[Target]) -> str:
    """PASS/FAIL lines."""
    return "\n".join(
        f"{'PASS' if t.passed else 'FAIL'}  {t.name}: {t.value:.3f} (target {t.limit})"
        for t in results
    )


def memory_task_line(run: PersonabotRun, totals: Mapping[str, Totals]) -> str:
    """The memory model's own input (not part of the figures above)."""
    tokens = sum(run.memory_task_tokens.values())
    tasks = ", ".join(f"{k} x{v}" for k, v in sorted(run.memory_tasks.items())) or "none"
    with_tasks = totals["personabot"].cost_cached + tokens
    full = totals["full_history"].cost_uncached
    return (
        f"memory model (not counted above): {tasks}; {tokens:,} input tokens uncached "
        f"-> personabot + memory tasks at the chat price = {with_tasks:,.0f} "
        f"({with_tasks / full:.1%} of full history without caching)"
    )


def payload(
    params: Params,
    script: Sequence[ScriptTurn],
    run: PersonabotRun,
    costs: Mapping[str, Sequence[TurnCost]],
    timings: Sequence[BuildTiming],
    results: Sequence[Target],
) -> dict[str, Any]:
    """Everything measured, as JSON-ready data."""
    totals = {way: asdict(Totals.of(c)) for way, c in costs.items()}
    policy = memory_policy(params.budget)
    return {
        "benchmark": "memory",
        "timestamp": utc_timestamp(),
        "parameters": {
            **asdict(params),
            "out": str(params.out),
            "pricing": asdict(Pricing()),
            "budget": asdict(policy.budget),
            "extract_after_idle_seconds": policy.extract_after_idle_seconds,
            "sliding_window_messages": SLIDING_WINDOW,
            "debounce_seconds": DEBOUNCE,
            "pin_tokens": estimate_tokens(PIN.text()),
            "token_estimate": "memory.tokens.estimate_tokens per block (UTF-8 bytes / 3 + 4)",
        },
        "environment": environment(),
        "script": script_stats(script, policy.extract_after_idle_seconds),
        "totals": totals,
        "personabot": {
            "prefix_causes": cause_table_rows(
                run.calls, costs["personabot"], Pricing().ttl_seconds
            ),
            "memory_tasks": run.memory_tasks,
            "memory_task_input_tokens": run.memory_task_tokens,
            "sessions_learned_from": run.extractions,
            "run_seconds": run.seconds,
        },
        "assembly": [asdict(t) for t in timings],
        "targets": [asdict(t) for t in results],
        "passed": all(t.passed for t in results),
        "per_turn": per_turn_rows(script, run.calls, costs, Pricing().ttl_seconds),
    }


# -- main ------------------------------------------------------------------------------------


async def measure(params: Params) -> tuple[list[ScriptTurn], PersonabotRun, list[BuildTiming]]:
    """Run the conversation through personabot, then time assembly at each size."""
    script = make_script(params.turns, params.seed)
    with tempfile.TemporaryDirectory(prefix="personabot-bench-memory-") as tmp:
        run = await run_personabot(script, Path(tmp), params.budget)
        texts = fill_texts(script)
        timings = await assembly_timings(params.sizes, params.builds, texts, Path(tmp))
    return script, run, timings


def price_all(script: Sequence[ScriptTurn], run: PersonabotRun) -> dict[str, list[TurnCost]]:
    """Every way priced at the times personabot's requests were made."""
    times = [call.at for call in run.calls]
    requests = {
        "full_history": full_history_requests(script),
        "sliding_window": sliding_window_requests(script),
        "personabot": [request_blocks(call.request) for call in run.calls],
    }
    return {
        way: price_conversation(list(zip(times, blocks, strict=True)))
        for way, blocks in requests.items()
    }


async def run(params: Params) -> int:
    """Self-check, measure, print, write JSON; return the exit status."""
    problems = self_check()
    if problems:
        for problem in problems:
            print(f"cost model self-check failed: {problem}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    script, personabot, timings = await measure(params)
    costs = price_all(script, personabot)
    totals = {way: Totals.of(c) for way, c in costs.items()}
    results = targets(totals, timings)
    groups = cause_table_rows(personabot.calls, costs["personabot"], Pricing().ttl_seconds)
    print(cost_table(totals, len(script)), end="\n\n")
    print(memory_task_line(personabot, totals), end="\n\n")
    print(cause_table(groups), end="\n\n")
    print(timing_table(timings), end="\n\n")
    print(target_lines(results))
    if len(script) != DEFAULT_TURNS:
        print(
            f"note: the cost targets are stated for {DEFAULT_TURNS} turns; full history grows "
            f"quadratically, so at {len(script)} turns its ratio to personabot is not comparable"
        )
    write_json(params.out, payload(params, script, personabot, costs, timings, results))
    print(f"\nJSON written to {params.out} ({time.perf_counter() - started:.1f} s)")
    # The 10% target is stated for 300 turns; at other lengths it is reported, not enforced.
    enforced = [t for t in results if len(script) == DEFAULT_TURNS or "without" not in t.name]
    return 0 if all(t.passed for t in enforced) else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m bench.memory``."""
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    return asyncio.run(run(params_from(args)))


if __name__ == "__main__":
    sys.exit(main())
