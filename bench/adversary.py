"""Benchmark of what one adversarial person costs per day (issue 13, item 2).

One person sends a maximal burst (``--messages`` messages of ``--chars`` characters at once,
by default 300 of 4,000) every ``24 / --bursts`` hours through one day, while a bystander in
another chat sends one short message per burst. Each burst goes through the real path --
SQLiteStore in a temp dir, Ingestor, Pipeline.run_turn until nothing is pending, the
background summary updates, and user-memory extraction after the chat goes quiet -- with the
offline model (its input usage is the same high-side estimate the budgets use).

Ways compared (the same day each time, on a fresh store):

1. before (estimated): what the code before issue 13 sent for each burst -- the whole burst in
   one reply request (each message cut at max_input_chars), memory tasks not counted;
2. no limits: today's fitting alone (turn caps, every request under prompt_budget_tokens);
3. person limit: ``[limits] user_input_tokens_per_day``;
4. bot limit: ``[limits] bot_tokens_per_day`` only (it stops the bystander too).

Usage::

    uv run python -m bench.adversary [--bursts 24] [--messages 300] [--chars 4000]
        [--person-limit 50000] [--bot-limit 200000] [--out bench/results/adversary.json]

Prints a table and writes every figure as JSON. Exits 1 when a target fails: no request
over the prompt budget, and with a person limit the adversary's input tokens per day stay
under the limit plus one fitted turn (the check happens before a call, so the last call may
overshoot), while the bystander is answered every time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench._report import (
    configure_logging,
    environment,
    format_table,
    positive_int,
    utc_timestamp,
    write_json,
)
from bot.app.build import memory_on, turn_parts
from bot.core.clock import ManualClock
from bot.core.events import (
    ConversationKey,
    Inbound,
    QueuePolicy,
    Reply,
    SessionKey,
    StoredMessage,
    UserKey,
)
from bot.core.llm import BaseLLM, ModelRequest, ModelResult
from bot.llm.offline import OfflineLLM
from bot.metrics import Metrics
from bot.queue import Ingestor
from bot.runtime.limits import LimitPolicy, Limits
from bot.runtime.pipeline import BotProfile, Bots, Pipeline
from bot.runtime.usage import Accounting
from bot.store.sqlite import SQLiteStore
from memory.assemble import Budget, PersonaPin, render_turn
from memory.fit import request_tokens
from memory.service import MemoryPolicy
from memory.tokens import estimate_tokens

BOT = "bench"
START = 1_800_000_000.0 - 1_800_000_000.0 % 86400  # a UTC midnight: one limit day
DEBOUNCE = 1.5
ADVERSARY = ConversationKey("telegram", "666", None, BOT)
BYSTANDER = ConversationKey("telegram", "7", None, BOT)
PIN = PersonaPin(
    name="Mira",
    system="You are Mira, a warm, curious companion. You speak plainly and ask one question.",
    first_message=("Hi, I'm Mira. What's on your mind today?",),
    model="offline",
)


@dataclass(frozen=True, slots=True)
class Params:
    """One benchmark run."""

    bursts: int
    messages: int
    chars: int
    person_limit: int
    bot_limit: int
    out: Path


@dataclass
class Way:
    """What one way of running the day cost."""

    name: str
    person_limit: int = 0
    bot_limit: int = 0
    calls: Counter[str] = field(default_factory=Counter)
    largest_request: int = 0
    adversary_input: int = 0
    total_input: int = 0
    bystander_replies: int = 0
    adversary_replies: int = 0
    seconds: float = 0.0
    estimated: bool = False


class MeteredLLM(BaseLLM):
    """The offline model, recording the estimated size of every request it gets."""

    name = "offline"

    def __init__(self) -> None:
        self._inner = OfflineLLM()
        self.largest = 0

    async def complete(self, request: ModelRequest) -> ModelResult:
        """Answer like the offline model; remember the largest input."""
        self.largest = max(self.largest, request_tokens(request))
        return await self._inner.complete(request)


class NullOutlet:
    """Counts replies per conversation; no typing indicator."""

    idempotent_send = False

    def __init__(self) -> None:
        self.sent: Counter[ConversationKey] = Counter()

    async def send(self, reply: Reply) -> None:
        """Count the reply."""
        self.sent[reply.conversation] += 1

    @contextlib.asynccontextmanager
    async def typing(self, conversation: ConversationKey) -> AsyncIterator[None]:
        """No typing indicator."""
        yield


def build_parser() -> argparse.ArgumentParser:
    """Command-line options."""
    p = argparse.ArgumentParser(prog="python -m bench.adversary", description=__doc__)
    p.add_argument("--bursts", type=positive_int, default=24, help="bursts per day (24)")
    p.add_argument("--messages", type=positive_int, default=300, help="messages a burst (300)")
    p.add_argument("--chars", type=positive_int, default=4000, help="characters a message")
    p.add_argument("--person-limit", type=positive_int, default=50_000)
    p.add_argument("--bot-limit", type=positive_int, default=200_000)
    p.add_argument("--out", type=Path, default=Path("bench/results/adversary.json"))
    p.add_argument("-v", "--verbose", action="count", default=0, help="-v INFO, -vv DEBUG")
    return p


def burst_text(burst: int, index: int, chars: int) -> str:
    """One adversarial message of exactly ``chars`` characters."""
    head = f"burst {burst} message {index}: "
    return (head + "lorem ipsum dolor sit amet " * (chars // 27 + 1))[:chars]


def estimate_before(params: Params) -> Way:
    """The pre-issue-13 reply request of each burst: pin + the whole burst as one turn."""
    way = Way("before (estimated)", estimated=True)
    session, chars = SessionKey(ADVERSARY, 1), params.chars
    for burst in range(params.bursts):
        messages = [
            StoredMessage(i, session, i, "user", "666", "Eve", burst_text(burst, i, chars), 0.0)
            for i in range(params.messages)
        ]
        tokens = estimate_tokens(PIN.text()) + estimate_tokens(render_turn(messages, 8000))
        way.largest_request = max(way.largest_request, tokens)
        way.adversary_input += tokens
        way.calls["reply"] += 1
        way.adversary_replies += 1
        way.bystander_replies += 1
    way.total_input = way.adversary_input
    return way


async def run_way(params: Params, way: Way, workdir: Path) -> Way:
    """Play the day through the real pipeline."""
    started = time.perf_counter()
    clock = ManualClock(start=START)
    llm = MeteredLLM()
    outlet = NullOutlet()
    policy = MemoryPolicy(
        budget=Budget(), summary_model="offline", extract_after_idle_seconds=300.0
    )
    profile = BotProfile(
        key=BOT,
        pin=PIN,
        queue=QueuePolicy(debounce=DEBOUNCE, max_wait=8.0),
        memory=policy,
        outlet=outlet,
    )
    async with SQLiteStore(path=workdir / f"{way.name.split()[0]}-{id(way)}.sqlite3") as store:
        metrics = Metrics()
        limits = Limits(
            store=store,
            clock=clock,
            policy=LimitPolicy(
                bot_tokens_per_day=way.bot_limit,
                user_input_tokens_per_day=way.person_limit,
            ),
            is_admin=lambda _bot, _user: False,
        )
        accounting = Accounting(store=store, clock=clock, metrics=metrics, limits=limits)
        memory = memory_on(
            store=store, llm=llm, clock=clock, policy_for=lambda _b: policy, account=accounting
        )
        bots = Bots({BOT: profile})
        pipeline = Pipeline(
            store=store,
            parts=turn_parts(
                store,
                llm=llm,
                clock=clock,
                memory=memory,
                outlet_for=bots.outlet_for,
                metrics=metrics,
                accounting=accounting,
            ),
            bots=bots,
            limits=limits,
        )
        ingestor = Ingestor(store=store, clock=clock, policy_for=lambda _b: profile.queue)
        gap = 86400.0 / params.bursts
        number = 0
        for burst in range(params.bursts):
            burst_start = clock.now()
            for i in range(params.messages):
                number += 1
                text = burst_text(burst, i, params.chars)
                await ingestor.ingest(Inbound(ADVERSARY, "666", "Eve", text, f"a{number}"))
            await ingestor.ingest(Inbound(BYSTANDER, "7", "Sam", f"hello #{burst}", f"b{burst}"))
            await clock.advance(DEBOUNCE)
            for conversation in (ADVERSARY, BYSTANDER):
                for _ in range(params.messages + 2):  # bounded: one turn per message at most
                    if await pipeline.run_turn(conversation) == "idle":
                        break
                await memory.wait_idle()
            await clock.advance(400.0)  # quiet: user memory is learned
            await memory.extract_due([BOT])
            await clock.advance(max(0.0, burst_start + gap - clock.now()))
        await memory.aclose()
        day = await store.usage_since(START, BOT)
        way.adversary_input = await store.input_tokens_since(UserKey("telegram", "666"), START)
        way.total_input = day.input_tokens + day.cache_write_tokens + day.cache_read_tokens
        way.calls = Counter({p: 0 for p in ("reply", "summary", "extract")})
        for labels in metrics.registry.collect():
            for sample in labels.samples:
                if sample.name == "personabot_model_calls_total":
                    way.calls[sample.labels["purpose"]] += int(sample.value)
    way.largest_request = llm.largest
    way.adversary_replies = outlet.sent[ADVERSARY]
    way.bystander_replies = outlet.sent[BYSTANDER]
    way.seconds = time.perf_counter() - started
    return way


def table(params: Params, ways: Sequence[Way]) -> str:
    """The comparison as a plain-text table."""
    headers = (
        "way",
        "bot_tokens_per_day",
        "user_input_tokens_per_day",
        "model calls (reply/summary/extract)",
        "largest request",
        "adversary input tokens/day",
        "all input tokens/day",
        "bystander answered",
    )
    rows = [
        (
            w.name,
            w.bot_limit or "-",
            w.person_limit or "-",
            f"{w.calls['reply']}/{w.calls['summary']}/{w.calls['extract']}",
            w.largest_request,
            w.adversary_input,
            w.total_input,
            f"{w.bystander_replies}/{params.bursts}",
        )
        for w in ways
    ]
    title = (
        f"One adversary: {params.bursts} bursts a day of {params.messages} messages x "
        f"{params.chars} characters; prompt_budget_tokens 6,000"
    )
    return format_table(headers, rows, title)


async def run(params: Params) -> int:
    """Run every way, print the table, write JSON; 1 when a target fails."""
    ways = [estimate_before(params)]
    with tempfile.TemporaryDirectory(prefix="personabot-adversary-") as tmp:
        workdir = Path(tmp)
        for way in (
            Way("no limits"),
            Way("person limit", person_limit=params.person_limit),
            Way("bot limit", bot_limit=params.bot_limit),
        ):
            ways.append(await run_way(params, way, workdir))
    print(table(params, ways))
    checks = {
        "every request under the prompt budget": all(
            w.largest_request <= 6000 for w in ways if not w.estimated
        ),
        "person limit holds (limit + one turn)": ways[2].adversary_input
        <= params.person_limit + 6000,
        "bystander answered every burst under the person limit": ways[2].bystander_replies
        == params.bursts,
    }
    for name, ok in checks.items():
        print(f"{'PASS' if ok else 'FAIL'}: {name}")
    write_json(
        params.out,
        {
            "at": utc_timestamp(),
            "environment": environment(),
            "params": {**asdict(params), "out": str(params.out)},
            "ways": [{**asdict(w), "calls": dict(w.calls)} for w in ways],
            "checks": checks,
        },
    )
    print(f"\nJSON written to {params.out}")
    return 0 if all(checks.values()) else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m bench.adversary``."""
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    params = Params(
        args.bursts, args.messages, args.chars, args.person_limit, args.bot_limit, args.out
    )
    return asyncio.run(run(params))


if __name__ == "__main__":
    sys.exit(main())
