"""Benchmark of what tool definitions cost per model call (issue 38 item 6,
docs/architecture.md#prompt): tokens and effective cost with 0, 10 and 30 MCP tools, priced with
Claude's prompt-cache rules, before and after the tools got a cache breakpoint of their own.

One bot and persona (bench/memory.py's Mira) talks with several returning people at once (each
with a user memory and a rolling summary; seeded messages and gaps of seconds to minutes, some
over 5 minutes, after which the person's memory has learned one more fact). Every third turn of
a person the model calls one tool (tool use -> tool result -> answer). Each turn is built by the
real path below the store: ``assemble`` (memory/assemble.py) -> ``ToolLoop`` (its registry
sorts the tools; its own breakpoint on the newest step) -> ``AnthropicLLM`` (the real SDK)
against the fake Messages API (tests/fakes/messages_api.py), whose recorded request bodies are
what is priced. The tools are synthetic MCP-like definitions (six servers of five tools,
realistic JSON schemas and descriptions), listed server by server as a server lists them.

Two layouts, from the same recorded bodies in one run:

* **before**: the definitions without a breakpoint, as sent before this change (the MCP tools
  were already sorted by name and the same bytes every call: only their own breakpoint is new);
* **after**: as sent now, a breakpoint on the last definition whenever the prompt leaves one of
  the four free (the tool loop's later calls use all four: there the tools' one gives way).

Tokens are counted with the project's estimator (``bot.core.tokens.estimate_tokens``: UTF-8
bytes / 3, which errs high) on each block's text, a definition or a tool block as its JSON;
with tools, Anthropic's tool-use system prompt is added (``TOOL_PROMPT_TOKENS``). The cache
rules are bench/memory.py's ``price_request`` (checked by its self-check): a cache entry is a
prefix ending at a breakpoint of a request that wrote it, at least 1,024 tokens (Sonnet's
minimum), living 5 minutes after its last use; a request reads the longest live prefix ending
at or before its last breakpoint (looked up at every block boundary), writes up to that
breakpoint, and pays the rest uncached. One cache is shared by every conversation (the
provider's cache is per organisation). Prices: ``DEFAULT_PRICES`` of ``claude-sonnet-5-5``
($3 input, $15 output, $3.75 cache write, $0.30 cache read per million tokens).

Usage::

    uv run python -m bench.tools [--quick] [--people 4] [--turns 20] [--tools 0,10,30]

Prints the tables, writes every figure as JSON, and exits 1 when a target fails: with 0 tools
both layouts send the same bytes and cost the same; with tools "after" costs no more than
"before"; no request carries more than 4 breakpoints. Exits 2 when the cost model's
self-check fails.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final, Literal

from bench._report import configure_logging, environment, format_table, positive_int, write_json
from bench._report import utc_timestamp as _now
from bench._tool_catalogue import CATALOGUE, mcp_tools
from bench.memory import PIN, Block, price_conversation, reply_text, self_check, user_message
from bot.config.llm import DEFAULT_PRICES
from bot.core.clock import ManualClock
from bot.core.events import ConversationKey, SessionKey, StoredMessage, Turn
from bot.core.llm import MAX_BREAKPOINTS, ModelResult, Price, Usage
from bot.core.tokens import estimate_tokens
from bot.llm.anthropic import AnthropicLLM
from bot.runtime.tools import ToolLoop, ToolPolicy, ToolRegistry
from bot.runtime.turn_context import TurnContext
from memory.assemble import Budget, Participant, assemble
from memory.records import MemoryItem, Summary, UserMemory
from tests.fakes.messages_api import FakeMessagesAPI

BOT: Final = "bench-tools"
MODEL: Final = "claude-sonnet-5-5"
TOOL_COUNTS: Final = (0, 10, 30)
#: Every how many turns of a person the model calls a tool (when it has any).
TOOL_TURN_EVERY: Final = 3
#: Anthropic's tool-use system prompt, added to the input of a request with tools (its pricing
#: page: 346 tokens for Claude Sonnet with tool_choice auto or none).
TOOL_PROMPT_TOKENS: Final = 346
#: Seconds between the calls of one tool loop (the tool's run and the model's answer).
LOOP_STEP_SECONDS: Final = 3.0
START: Final = 1_700_000_000.0
EXPIRY: Final = 300.0

# -- the people and the timeline -----------------------------------------------------------------

FACT_POOL: Final = (
    ("occupation", "a nurse on night shifts"),
    ("pet", "a grey cat called Miso"),
    ("city", "lives in Leeds"),
    ("hobby", "bouldering on Thursdays"),
    ("family", "a younger brother at university"),
    ("plan", "a trip to Lisbon in May"),
    ("diet", "vegetarian"),
    ("worry", "a driving test next month"),
    ("music", "plays the cello in an amateur orchestra"),
    ("reading", "working through Ursula K. Le Guin's novels"),
    ("garden", "grows tomatoes on a balcony"),
    ("sleep", "often sleeps badly before exams"),
)
NAMES: Final = ("Dana", "Ilya", "Sasha", "Noor", "Priya", "Tom", "Ana", "Kemal")


@dataclass
class Person:
    """A returning person of the bot, with their own chat, memory and summary."""

    index: int
    name: str
    facts: list[tuple[str, str]]
    summary: Summary
    history: list[StoredMessage] = field(default_factory=list)

    @property
    def user_id(self) -> str:
        return f"u-{self.index}"

    @property
    def session(self) -> SessionKey:
        return SessionKey(ConversationKey("bench", f"chat-{self.index}", None, BOT), 1)

    def memory(self) -> UserMemory:
        return UserMemory(
            tuple(MemoryItem("semantic", f, v, (1,), True, START) for f, v in self.facts)
        )


def people(count: int, seed: int) -> list[Person]:
    """``count`` people, each with 4-6 remembered facts and a summary of earlier sessions."""
    out = []
    for i in range(count):
        rng = random.Random(f"person-{seed}-{i}")
        facts = rng.sample(FACT_POOL, rng.randint(4, 6))
        summary = Summary(
            1,
            40,
            topics=tuple(rng.sample(("work", "sleep", "a move", "exams", "cooking"), 3)),
            user_said=tuple(f"{NAMES[i % len(NAMES)]} mentioned {v}" for _, v in facts[:3]),
            open_threads=("how the week ahead goes",),
            preferences=("short answers", "no emoji"),
        )
        out.append(Person(i, NAMES[i % len(NAMES)], facts, summary))
    return out


@dataclass(frozen=True, slots=True)
class Event:
    """One turn of one person: when it is asked, and the quiet before it."""

    at: float
    person: int
    turn: int
    gap: float


def gap(rng: random.Random) -> float:
    """Seconds between a reply and the person's next message: mostly under a minute or two,
    some over the cache's 5 minutes."""
    roll = rng.random()
    if roll < 0.12:
        return rng.uniform(330.0, 40 * 60.0)
    if roll < 0.35:
        return rng.uniform(90.0, 280.0)
    return rng.uniform(8.0, 90.0)


def timeline(count: int, turns: int, seed: int) -> list[Event]:
    """Every turn of every person in time order; people start a minute or so apart."""
    events = []
    for person in range(count):
        rng = random.Random(f"timeline-{seed}-{person}")
        at = START + person * rng.uniform(30.0, 90.0)
        for turn in range(turns):
            quiet = 0.0 if turn == 0 else gap(rng)
            at += quiet
            events.append(Event(at, person, turn, quiet))
            at += 10.0  # the reply takes a while
    return sorted(events, key=lambda e: (e.at, e.person))


# -- one run: every turn through assembly, the tool loop and the Anthropic client ----------------


@dataclass(frozen=True, slots=True)
class Call:
    """A recorded request, when it was made, and the tokens of its answer."""

    at: float
    body: Mapping[str, Any]
    output_tokens: int
    breakpoints: int


def _message(person: Person, turn: int, role: str, text: str, at: float) -> StoredMessage:
    return StoredMessage(
        id=len(person.history) + 1,
        session=person.session,
        turn=turn + 1,
        role=role,  # type: ignore[arg-type]
        author_id=person.user_id if role == "user" else "assistant",
        display_name=person.name,
        text=text,
        created_at=at,
    )


async def record(tool_count: int, count: int, turns: int, seed: int) -> list[Call]:
    """Play the timeline with ``tool_count`` tools; every model call's request as sent."""
    tools = mcp_tools(tool_count)
    registry = ToolRegistry(tools)
    pin = replace(PIN, model=MODEL)
    crowd = people(count, seed)
    clock = ManualClock(START)
    calls: list[Call] = []
    async with FakeMessagesAPI() as api:
        llm = AnthropicLLM(api_key="sk-bench", base_url=api.base_url, max_retries=0)
        try:
            for event in timeline(count, turns, seed):
                person = crowd[event.person]
                if event.gap > EXPIRY:  # the quiet let extraction learn one more fact
                    person.facts.append(FACT_POOL[(event.turn + event.person) % len(FACT_POOL)])
                said = user_message(random.Random(f"user-{seed}-{event.person}"), event.turn)
                reply = reply_text(seed * 100 + event.person, event.turn)
                uses_tool = bool(tools) and event.turn % TOOL_TURN_EVERY == TOOL_TURN_EVERY - 1
                outputs = [reply]
                if uses_tool:
                    chosen = tools[(event.turn * 7 + event.person) % len(tools)]
                    arguments = {"query": said[:40]}
                    api.tool_use_next(chosen.name, arguments)
                    outputs.insert(0, json.dumps({"name": chosen.name, "input": arguments}))
                api.reply_next(reply)
                message = _message(person, event.turn, "user", said, event.at)
                turn = Turn(person.session, event.turn, (message,), event.at)
                assembled = assemble(
                    pin,
                    turn,
                    Budget(),
                    history=person.history,
                    participants=[Participant(person.user_id, person.name, person.memory())],
                    summary=person.summary,
                )
                await clock.advance(event.at - clock.now())
                await _answer(llm, clock, registry, person, assembled.request)
                new = api.requests[len(calls) :]
                calls += [
                    Call(
                        event.at + i * LOOP_STEP_SECONDS,
                        r.body,
                        estimate_tokens(out),
                        len(r.cache_breakpoints),
                    )
                    for i, (r, out) in enumerate(zip(new, outputs, strict=True))
                ]
                person.history += [message, _message(person, event.turn, "assistant", reply, 0)]
        finally:
            await llm.aclose()
    return calls


async def _answer(
    llm: AnthropicLLM, clock: ManualClock, registry: ToolRegistry, person: Person, request: Any
) -> ModelResult:
    async def charge(result: ModelResult) -> None:
        return None

    context = TurnContext(person.session.conversation, person.session, BOT, "mira", (), clock.now())
    loop = ToolLoop(
        llm=llm, clock=clock, registry=registry, policy=ToolPolicy(), context=context, charge=charge
    )
    return (await loop.run(request)).result


# -- pricing -------------------------------------------------------------------------------------


def _json(block: Mapping[str, Any]) -> str:
    """A block's content as JSON, without its cache marker (not part of the cached content)."""
    return json.dumps({k: v for k, v in block.items() if k != "cache_control"}, sort_keys=True)


def blocks(body: Mapping[str, Any], *, tools_cached: bool) -> list[Block]:
    """A request body as priced blocks, in the cache's order: tools -> system -> messages.
    ``tools_cached`` False drops the breakpoint on the definitions (the layout before)."""
    out: list[Block] = []
    tools = body.get("tools") or []
    for tool in tools:
        text = _json(tool)
        mark = tools_cached and "cache_control" in tool
        out.append(Block("tools", text, estimate_tokens(text), mark, ttl=_ttl(tool)))
    if tools:
        out.append(Block("system", "(the tool-use system prompt)", TOOL_PROMPT_TOKENS))
    for system in body.get("system") or []:
        text = system["text"]
        mark = "cache_control" in system
        out.append(Block("system", text, estimate_tokens(text), mark, ttl=_ttl(system)))
    for message in body["messages"]:
        content = message["content"]
        for part in [{"type": "text", "text": content}] if isinstance(content, str) else content:
            text = part["text"] if part["type"] == "text" else _json(part)
            mark = "cache_control" in part
            out.append(Block(message["role"], text, estimate_tokens(text), mark, ttl=_ttl(part)))
    return out


def _ttl(part: Mapping[str, Any]) -> Literal["5m", "1h"]:
    """The lifetime a block's breakpoint asked for (5 minutes unless it says an hour)."""
    return "1h" if (part.get("cache_control") or {}).get("ttl") == "1h" else "5m"


@dataclass(frozen=True, slots=True)
class Priced:
    """The calls of one run priced in one layout: sums over every call."""

    tools: int
    layout: str
    calls: int
    turns: int
    tool_tokens: int  # of one request's definitions and tool-use prompt
    input_tokens: int
    write_tokens: int
    read_tokens: int
    uncached_tokens: int
    output_tokens: int
    input_dollars: float
    dollars: float
    per_call: list[dict[str, Any]] = field(repr=False)

    def row(self) -> list[object]:
        n = self.calls
        return [
            f"{self.tools} tools, {self.layout}",
            self.tool_tokens,
            n,
            round(self.input_tokens / n),
            round(self.write_tokens / n),
            round(self.read_tokens / n),
            round(self.uncached_tokens / n),
            f"{self.input_dollars / n * 1000:.3f}",
            f"{self.dollars / n * 1000:.3f}",
            f"{self.dollars / self.turns * 1000:.3f}",
        ]


def price(calls: Sequence[Call], tool_count: int, turns: int, layout: str) -> Priced:
    """Every call priced against one shared cache, in dollars of the model's price table."""
    settings = DEFAULT_PRICES[MODEL]
    table = Price(
        settings.input,
        settings.output,
        settings.cache_write,
        settings.cache_read,
        settings.cache_write_1h,
    )
    requests = [(c.at, blocks(c.body, tools_cached=layout == "after")) for c in calls]
    costs = price_conversation(requests)
    per_call: list[dict[str, Any]] = []
    for call, (_, sent), cost in zip(calls, requests, costs, strict=True):
        usage = Usage(
            cost.plain_tokens,
            call.output_tokens,
            cost.write_tokens,
            cost.read_tokens,
            cost.write_1h_tokens,
        )
        per_call.append(
            {
                "at": round(call.at - START, 1),
                "input": cost.input_tokens,
                "write": cost.write_tokens,
                "read": cost.read_tokens,
                "uncached": cost.plain_tokens,
                "output": call.output_tokens,
                "input_dollars": table.cost(replace(usage, output_tokens=0)),
                "dollars": table.cost(usage),
                "breakpoints": sum(b.breakpoint for b in sent),
            }
        )
    first = requests[0][1] if requests else []
    return Priced(
        tools=tool_count,
        layout=layout,
        calls=len(calls),
        turns=turns,
        tool_tokens=sum(b.tokens for b in first if b.role == "tools")
        + (TOOL_PROMPT_TOKENS if tool_count else 0),
        input_tokens=sum(c["input"] for c in per_call),
        write_tokens=sum(c["write"] for c in per_call),
        read_tokens=sum(c["read"] for c in per_call),
        uncached_tokens=sum(c["uncached"] for c in per_call),
        output_tokens=sum(c["output"] for c in per_call),
        input_dollars=sum(c["input_dollars"] for c in per_call),
        dollars=sum(c["dollars"] for c in per_call),
        per_call=per_call,
    )


# -- the report ----------------------------------------------------------------------------------

HEADERS: Final = (
    "layout",
    "tool tokens",
    "calls",
    "input/call",
    "cache write/call",
    "cache read/call",
    "uncached/call",
    "input $/1k calls",
    "$/1k calls",
    "$/1k turns",
)


def ratio_rows(results: Sequence[Priced]) -> list[list[object]]:
    """after / before per tool count, and each against 0 tools in the same layout."""
    by = {(r.tools, r.layout): r for r in results}
    base = {layout: by.get((0, layout)) for layout in ("before", "after")}
    rows: list[list[object]] = []
    for count in sorted({r.tools for r in results}):
        before, after = by[(count, "before")], by[(count, "after")]
        rows.append(
            [
                f"{count} tools",
                after.input_dollars / before.input_dollars,
                after.dollars / before.dollars,
                _per_call(before, base["before"]),
                _per_call(after, base["after"]),
            ]
        )
    return rows


def _per_call(run: Priced, base: Priced | None) -> float:
    if base is None or not base.calls:
        return float("nan")
    return (run.dollars / run.calls) / (base.dollars / base.calls)


def failures(results: Sequence[Priced], calls: Mapping[int, Sequence[Call]]) -> list[str]:
    """What the targets of the module docstring found wrong (empty: all met)."""
    found = []
    by = {(r.tools, r.layout): r for r in results}
    for count, recorded in calls.items():
        before, after = by[(count, "before")], by[(count, "after")]
        worst = max((c.breakpoints for c in recorded), default=0)
        if worst > MAX_BREAKPOINTS:
            found.append(f"{count} tools: a request carried {worst} breakpoints")
        if count == 0 and (before.per_call != after.per_call):
            found.append("0 tools: the layouts differ, though nothing may change without tools")
        if after.dollars > before.dollars + 1e-12:
            found.append(f"{count} tools: after costs more than before")
    return found


@dataclass(frozen=True, slots=True)
class Params:
    """What the run depends on (written to the JSON as given)."""

    people: int
    turns: int
    tools: tuple[int, ...]
    seed: int
    quick: bool
    out: Path


def _counts(text: str) -> tuple[int, ...]:
    try:
        values = tuple(sorted({int(v) for v in text.split(",") if v.strip()}))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text!r}") from exc
    if not values or values[0] < 0 or values[-1] > len(CATALOGUE):
        raise argparse.ArgumentTypeError(f"tool counts are 0..{len(CATALOGUE)}")
    return values


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    p = argparse.ArgumentParser(
        prog="python -m bench.tools", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    p.add_argument("--quick", action="store_true", help="2 people, 6 turns each")
    p.add_argument("--people", type=positive_int, help="people talking at once (default 4)")
    p.add_argument("--turns", type=positive_int, help="turns of each person (default 20)")
    p.add_argument("--tools", type=_counts, default=TOOL_COUNTS, help="tool counts: 0,10,30")
    p.add_argument("--seed", type=int, default=7, help="seed of the people and their messages")
    p.add_argument("--out", type=Path, default=Path("bench/results/tools.json"))
    p.add_argument("-v", "--verbose", action="count", default=0, help="-v INFO, -vv DEBUG")
    return p


async def run(params: Params) -> int:
    """Record and price every tool count; print the tables, write the JSON."""
    started = time.perf_counter()
    problems = self_check()
    if problems:
        for problem in problems:
            print(f"cost model self-check failed: {problem}", file=sys.stderr)
        return 2
    recorded: dict[int, list[Call]] = {}
    results: list[Priced] = []
    for count in params.tools:
        recorded[count] = await record(count, params.people, params.turns, params.seed)
        turns = params.people * params.turns
        results += [price(recorded[count], count, turns, layout) for layout in ("before", "after")]
    title = (
        f"{params.people} people x {params.turns} turns, Claude Sonnet prices, 5-minute cache "
        "(tokens and dollars per call, means)"
    )
    print(format_table(HEADERS, [r.row() for r in results], title), end="\n\n")
    ratios = ratio_rows(results)
    ratio_headers = (
        "tools",
        "input after/before",
        "after/before",
        "vs 0 tools, before",
        "vs 0 tools, after",
    )
    print(format_table(ratio_headers, ratios, "Ratios (cost per call)"), end="\n\n")
    found = failures(results, recorded)
    print("targets: " + ("met" if not found else "; ".join(found)))
    write_json(
        params.out,
        {
            "benchmark": "tools",
            "timestamp": _now(),
            "params": {
                "people": params.people,
                "turns": params.turns,
                "tools": params.tools,
                "seed": params.seed,
                "quick": params.quick,
            },
            "environment": environment(),
            "model": MODEL,
            "tool_prompt_tokens": TOOL_PROMPT_TOKENS,
            "results": [_as_dict(r) for r in results],
            "ratios": [dict(zip(ratio_headers, row, strict=True)) for row in ratios],
            "failures": found,
        },
    )
    print(f"\nJSON written to {params.out} ({time.perf_counter() - started:.1f} s)")
    return 1 if found else 0


def _as_dict(priced: Priced) -> dict[str, Any]:
    return {name: getattr(priced, name) for name in Priced.__dataclass_fields__}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m bench.tools``."""
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    params = Params(
        people=args.people or (2 if args.quick else 4),
        turns=args.turns or (6 if args.quick else 20),
        tools=args.tools,
        seed=args.seed,
        quick=args.quick,
        out=args.out,
    )
    return asyncio.run(run(params))


if __name__ == "__main__":
    sys.exit(main())
