"""Benchmark of a scene's prompt cost (docs/scenes.md#prompt): what each line of a 3-persona
scene costs with Claude's prompt caching, next to a single-persona chat of the same human turns.

The scripted conversation of bench/memory.py (seeded: user messages of 5-60 words, gaps of
seconds to hours) is played twice through the real path (SQLite in a temp dir, Ingestor,
Pipeline, Memory with OfflineLLM as the memory model), each model request captured:

1. single persona: one reply per human turn (bench/memory.py's persona);
2. scene: three personas of the same pin size, ``strategy = "list"``, two speakers per human
   turn, so every turn has two lines, the second one's prompt holding the first.

Every request is priced under Claude's prompt-cache rules by bench/memory.py's cost model (a
prefix ending at a breakpoint is read at 0.1x while it lives 5 minutes, written at 1.25x). The
figure is the effective input cost per reply (per line), scene over single; target: at most
1.5x. Also shown: the share of input tokens read from the cache.

Usage::

    uv run python -m bench.scenes [--turns 200] [--quick] [--out bench/results/scenes.json]

Prints a table, writes JSON, exits 1 when the target fails.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench._report import (
    configure_logging,
    environment,
    format_table,
    positive_int,
    utc_timestamp,
    write_json,
)
from bench.memory import (
    PIN,
    Call,
    MemoryTaskLLM,
    ScriptTurn,
    make_script,
    memory_policy,
    price_conversation,
    reply_text,
    request_blocks,
)
from bot.app.build import memory_on, turn_parts
from bot.core.clock import ManualClock
from bot.core.events import ConversationKey, Inbound, QueuePolicy, Reply
from bot.core.llm import BaseLLM, ModelRequest, ModelResult, TextBlock, Usage
from bot.core.scenes import CastMember, SceneRules
from bot.queue import Ingestor
from bot.runtime.pipeline import BotProfile, Bots, Pipeline
from bot.store.sqlite import SQLiteStore
from memory.tokens import estimate_tokens

BOT = "bench-scene"
GROUP = ConversationKey("bench", "group-1", None, BOT)
START = 1_700_000_000.0
DEBOUNCE = 1.5
TARGET_RATIO = 1.5
DEFAULT_TURNS = 200
PEOPLE = (("u-dana", "Dana"), ("u-eli", "Eli"))
CAST = (
    ("mira", "Mira", PIN),
    ("orin", "Orin", replace(PIN, name="Orin", system=PIN.system.replace("Mira", "Orin"))),
    ("tess", "Tess", replace(PIN, name="Tess", system=PIN.system.replace("Mira", "Tess"))),
)
_SPEAKER = re.compile(r'Write the next line of "([^"]+)" only')


@dataclass(frozen=True, slots=True)
class Params:
    """Everything the run depends on (written to the JSON as given)."""

    turns: int
    seed: int
    quick: bool
    out: Path


class LineLLM(BaseLLM):
    """The chat model: records each request, answers with a scripted reply of 40-80 words."""

    name = "scripted"

    def __init__(self, clock: ManualClock, seed: int) -> None:
        self._clock = clock
        self._seed = seed
        self.calls: list[Call] = []

    async def complete(self, request: ModelRequest) -> ModelResult:
        """Record; the answer depends only on how many calls came before."""
        self.calls.append(Call(self._clock.now(), request))
        text = reply_text(self._seed, len(self.calls))
        tokens = sum(b.tokens for b in request_blocks(request))
        return ModelResult(text, Usage(tokens, estimate_tokens(text)), "scripted", "end_turn")


class NullOutlet:
    """Accepts replies; no typing indicator."""

    idempotent_send = False

    async def send(self, reply: Reply) -> None:
        """Nothing to do."""

    @contextlib.asynccontextmanager
    async def typing(self, conversation: ConversationKey) -> AsyncIterator[None]:
        """No typing indicator."""
        yield


def bots(scene: bool) -> Bots:
    """One bot: a single persona, or a scene of three (two lines per human turn)."""
    policy = memory_policy()
    rules = SceneRules(
        cast=tuple(CastMember(pid, name) for pid, name, _ in CAST),
        strategy="list",
        max_speakers=2,
        max_lines_per_hour=10_000,
    )
    outlet = NullOutlet()
    profiles = {
        pid: BotProfile(
            key=BOT,
            pin=pin,
            queue=QueuePolicy(debounce=DEBOUNCE, max_wait=8.0),
            memory=replace(policy, cast=rules.cast) if scene else policy,
            outlet=outlet,
            persona_id=pid,
            scene=rules if scene else None,
        )
        for pid, _, pin in CAST
    }
    first = CAST[0][0]
    rest = {(BOT, pid): p for pid, p in profiles.items() if pid != first} if scene else {}
    return Bots({BOT: profiles[first]}, rest)


async def play(
    script: Sequence[ScriptTurn], workdir: Path, *, scene: bool, seed: int
) -> list[Call]:
    """The script through the real pipeline; the captured chat requests."""
    clock = ManualClock(start=START)
    llm = LineLLM(clock, seed)
    hosted = bots(scene)
    policy = hosted.defaults[BOT].memory
    async with SQLiteStore(path=workdir / f"{'scene' if scene else 'single'}.sqlite3") as store:
        memory = memory_on(
            store=store, llm=MemoryTaskLLM(), clock=clock, policy_for=lambda _b: policy
        )
        pipeline = Pipeline(
            store=store,
            parts=turn_parts(
                store, llm=llm, clock=clock, memory=memory, outlet_for=hosted.outlet_for
            ),
            bots=hosted,
            scenes=store,
        )
        ingestor = Ingestor(
            store=store, clock=clock, policy_for=lambda _b: hosted.defaults[BOT].queue
        )
        try:
            for turn in script:
                if turn.gap:
                    await clock.advance(turn.gap)
                if turn.gap > policy.extract_after_idle_seconds:
                    await memory.extract_due([BOT])
                person, name = PEOPLE[turn.index % len(PEOPLE)]
                await ingestor.ingest(
                    Inbound(GROUP, person, name, turn.user, f"m{turn.index}", is_private=False)
                )
                await clock.advance(DEBOUNCE)
                before = len(llm.calls)
                outcome = await pipeline.run_turn(GROUP)
                lines = len(llm.calls) - before
                if outcome != "sent" or lines != (2 if scene else 1):
                    raise RuntimeError(f"turn {turn.index}: {outcome!r}, {lines} call(s)")
                await memory.wait_idle()
        finally:
            await memory.aclose()
    return llm.calls


def figures(calls: Sequence[Call]) -> dict[str, Any]:
    """Cost with and without caching, per reply, and the share read from the cache."""
    costs = price_conversation([(c.at, request_blocks(c.request)) for c in calls])
    n = len(costs)
    tokens = sum(c.input_tokens for c in costs)
    return {
        "replies": n,
        "input_tokens_per_reply": tokens / n,
        "cost_uncached_per_reply": sum(c.uncached_cost for c in costs) / n,
        "cost_cached_per_reply": sum(c.cost for c in costs) / n,
        "read_share": sum(c.read_tokens for c in costs) / tokens if tokens else 0.0,
        "write_share": sum(c.write_tokens for c in costs) / tokens if tokens else 0.0,
    }


def speakers(calls: Sequence[Call]) -> list[str]:
    """Who each scene request asked to speak (a check that both speakers ran)."""
    out = []
    for call in calls:
        last = call.request.messages[-1].blocks[-1]
        found = _SPEAKER.search(last.text) if isinstance(last, TextBlock) else None
        out.append(found.group(1) if found else "?")
    return out


async def run(params: Params) -> dict[str, Any]:
    """Both ways, priced."""
    script = make_script(params.turns, params.seed)
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        single = await play(script, Path(tmp), scene=False, seed=params.seed)
        scene = await play(script, Path(tmp), scene=True, seed=params.seed)
        seconds = time.perf_counter() - started
    one, many = figures(single), figures(scene)
    ratio = many["cost_cached_per_reply"] / one["cost_cached_per_reply"]
    said = speakers(scene)
    return {
        "single": one,
        "scene": many,
        "ratio_cached_per_reply": ratio,
        "ratio_uncached_per_reply": many["cost_uncached_per_reply"]
        / one["cost_uncached_per_reply"],
        "speakers": {name: said.count(name) for name in sorted(set(said))},
        "target_ratio": TARGET_RATIO,
        "passed": ratio <= TARGET_RATIO,
        "seconds": seconds,
    }


def table(result: dict[str, Any]) -> str:
    rows = [
        [
            label,
            f["replies"],
            round(f["input_tokens_per_reply"]),
            round(f["cost_uncached_per_reply"]),
            round(f["cost_cached_per_reply"]),
            f"{f['read_share']:.0%}",
        ]
        for label, f in (
            ("single persona", result["single"]),
            ("scene of 3, 2 lines a turn", result["scene"]),
        )
    ]
    head = [
        "chat",
        "replies",
        "input tokens/reply",
        "cost/reply uncached",
        "cost/reply cached",
        "read from cache",
    ]
    ratio = (
        f"scene / single, cached, per reply: {result['ratio_cached_per_reply']:.2f}x "
        f"(target <= {TARGET_RATIO}x)"
    )
    return format_table(head, rows) + "\n" + ratio


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.scenes", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    p.add_argument("--quick", action="store_true", help="60 human turns")
    p.add_argument("--turns", type=positive_int, help=f"human turns (default {DEFAULT_TURNS})")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--out", type=Path, default=Path("bench/results/scenes.json"))
    p.add_argument("-v", "--verbose", action="count", default=0)
    args = p.parse_args(argv)
    configure_logging(args.verbose)
    params = Params(
        args.turns or (60 if args.quick else DEFAULT_TURNS), args.seed, args.quick, args.out
    )
    result = asyncio.run(run(params))
    print(table(result))
    write_json(
        params.out,
        {
            "benchmark": "scenes",
            "at": utc_timestamp(),
            "environment": environment(),
            "params": {"turns": params.turns, "seed": params.seed, "quick": params.quick},
            **result,
        },
    )
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
