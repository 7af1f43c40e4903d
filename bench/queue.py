"""Benchmark of the coalescing queue (SPEC section 4) on a real SQLite file, in real time.

Runs the real Ingestor, Scheduler, Pipeline and SQLiteStore with an OfflineLLM of fixed
latency and an in-bench outlet, and measures three things in one run:

1. coalescing: bursts of k = 1..max_burst messages sent back-to-back (well inside the
   debounce) into N conversations; per k, model calls and replies per burst (both must be
   exactly 1, where a naive handler would make k calls);
2. ingest throughput: ``Ingestor.ingest`` awaited one message at a time (no scheduler
   running), next to the raw one-row-per-transaction INSERT rate of the same file;
3. scheduler lag: for every turn, the time from its timer's ``due_at`` (the ``IngestResult``
   of the last message that armed it) to the moment ``run_turn`` starts.

Usage::

    uv run python -m bench.queue [--quick] [--conversations 1000] [--max-burst 10]
        [--latency 0.05] [--out bench/results/queue.json]

Prints plain-text tables and writes every figure as JSON to ``--out``. Exits 1 when any burst
got other than exactly one model call and one reply whose text covers all its messages, or
when not every conversation was answered in time (the correctness guard of the benchmark).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import logging
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiosqlite

from bench._report import environment, format_table, percentile, utc_timestamp, write_json
from bot.clock import SystemClock
from bot.errors import StoreError
from bot.events import ConversationKey, Inbound, QueuePolicy, Reply
from bot.llm.base import ModelRequest, ModelResult
from bot.llm.offline import OfflineLLM
from bot.pipeline import BotProfile, Pipeline
from bot.queue import Ingestor, Scheduler
from bot.store.sqlite import SQLiteStore
from memory.assemble import Budget, PersonaPin

log = logging.getLogger("personabot.bench.queue")

BOT = "bench"
INGEST_BOT = "bench-ingest"
PLATFORM = "bench"
BUSY_TIMEOUT_MS = 5000
FILLER = "how was your day? I keep thinking about the trip we planned for the spring"
PIN = PersonaPin(
    name="Bench",
    system="You are a benchmark persona. Answer briefly.",
    first_message=("Hello!",),
    model="offline",
)

# The conversation whose turn is running in the current task (set by TurnProbe, read by
# CountingLLM): attributes every model call to its conversation even with concurrent turns.
_current_turn: contextvars.ContextVar[ConversationKey | None] = contextvars.ContextVar(
    "bench_current_turn", default=None
)


# -- parameters ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Params:
    """Everything the run depends on (written to the JSON as given)."""

    conversations: int
    max_burst: int
    latency: float
    ingest_messages: int
    debounce: float
    max_wait: float
    lease: float
    max_concurrent: int
    scan_interval: float
    timeout: float
    quick: bool
    out: Path


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    p = argparse.ArgumentParser(
        prog="python -m bench.queue", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    p.add_argument("--quick", action="store_true", help="100 conversations, 1,000 ingests")
    p.add_argument("--conversations", type=_positive_int, help="default 1000 (quick: 100)")
    p.add_argument("--max-burst", type=_positive_int, default=10)
    p.add_argument("--latency", type=_non_negative_float, default=0.05, help="model seconds")
    p.add_argument("--ingest-messages", type=_positive_int, help="default 5000 (quick: 1000)")
    p.add_argument("--debounce", type=_non_negative_float, default=0.2)
    p.add_argument("--max-wait", type=_non_negative_float, default=2.0)
    p.add_argument("--lease", type=_non_negative_float, default=10.0)
    p.add_argument("--max-concurrent", type=_positive_int, default=16, help="turns at once")
    p.add_argument("--scan-interval", type=_non_negative_float, default=1.0)
    p.add_argument("--timeout", type=_non_negative_float, default=90.0, help="answer deadline")
    p.add_argument("--out", type=Path, default=Path("bench/results/queue.json"))
    p.add_argument("-v", "--verbose", action="count", default=0, help="-v INFO, -vv DEBUG")
    return p


def params_from(args: argparse.Namespace) -> Params:
    """Resolve quick/full defaults."""
    conversations = args.conversations or (100 if args.quick else 1000)
    ingest = args.ingest_messages or (1000 if args.quick else 5000)
    return Params(
        conversations=conversations,
        max_burst=args.max_burst,
        latency=args.latency,
        ingest_messages=ingest,
        debounce=args.debounce,
        max_wait=args.max_wait,
        lease=args.lease,
        max_concurrent=args.max_concurrent,
        scan_interval=args.scan_interval,
        timeout=args.timeout,
        quick=args.quick,
        out=args.out,
    )


# -- in-bench doubles ------------------------------------------------------------------------


class BenchOutlet:
    """Records replies per conversation; typing does nothing; sends are not idempotent."""

    idempotent_send = False

    def __init__(self) -> None:
        self.replies: defaultdict[ConversationKey, list[Reply]] = defaultdict(list)

    async def send(self, reply: Reply) -> None:
        """Record the reply."""
        self.replies[reply.conversation].append(reply)

    @contextlib.asynccontextmanager
    async def typing(self, conversation: ConversationKey) -> AsyncIterator[None]:
        """No typing indicator."""
        yield

    @property
    def total(self) -> int:
        """Replies sent so far."""
        return sum(len(r) for r in self.replies.values())


class CountingLLM(OfflineLLM):
    """The offline model, counting calls per conversation of the running turn."""

    def __init__(self, *, latency: float) -> None:
        super().__init__(latency=latency)
        self.per_conversation: Counter[ConversationKey] = Counter()
        self.unattributed = 0

    async def complete(self, request: ModelRequest) -> ModelResult:
        """Count, then answer like OfflineLLM."""
        key = _current_turn.get()
        if key is None:
            self.unattributed += 1
        else:
            self.per_conversation[key] += 1
        return await super().complete(request)


class TurnProbe:
    """Wraps ``Pipeline.run_turn``: records lag from the armed ``due_at``, and outcomes."""

    def __init__(self, pipeline: Pipeline, clock: SystemClock) -> None:
        self._pipeline = pipeline
        self._clock = clock
        self.due_at: dict[ConversationKey, float] = {}
        self.lags: list[float] = []
        self.outcomes: Counter[str] = Counter()

    async def __call__(self, key: ConversationKey) -> str:
        """Run one turn of ``key`` as the scheduler would, recording its start lag."""
        due = self.due_at.get(key)
        if due is not None:
            self.lags.append(self._clock.now() - due)
        token = _current_turn.set(key)
        try:
            outcome = await self._pipeline.run_turn(key)
        except Exception:
            self.outcomes["error"] += 1
            raise
        finally:
            _current_turn.reset(token)
        self.outcomes[outcome] += 1
        return outcome


# -- workload --------------------------------------------------------------------------------


def conversation(bot: str, index: int) -> ConversationKey:
    """The key of the benchmark's ``index``-th conversation of ``bot``."""
    return ConversationKey(PLATFORM, f"chat-{index}", None, bot)


def burst_size(index: int, max_burst: int) -> int:
    """Conversation ``index`` gets a burst of ``1 + index % max_burst`` messages."""
    return 1 + index % max_burst


def message_text(index: int, position: int, size: int) -> str:
    """A chat-sized message that names its conversation and place in the burst."""
    return f"c{index} m{position + 1}/{size}: {FILLER}"


def inbound(bot: str, index: int, position: int, text: str) -> Inbound:
    """One private message of conversation ``index`` with a unique platform id."""
    return Inbound(
        conversation=conversation(bot, index),
        author_id=f"user-{index}",
        display_name=f"User {index}",
        text=text,
        platform_message_id=f"{index}-{position}",
    )


def expected_echo(texts: Sequence[str]) -> str:
    """What OfflineLLM's reply says when its one turn held exactly ``texts`` in order."""
    return "You said: " + " / ".join(texts) + "\n"


# -- phase 1: coalescing and scheduler lag ---------------------------------------------------


@dataclass(slots=True)
class BurstLog:
    """What sending the bursts did."""

    texts: dict[int, list[str]] = field(default_factory=dict)
    spans: list[float] = field(default_factory=list)
    ingest_errors: int = 0
    seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class Harness:
    """The wired runtime of phase 1."""

    store: SQLiteStore
    clock: SystemClock
    llm: CountingLLM
    outlet: BenchOutlet
    probe: TurnProbe
    scheduler: Scheduler
    ingestor: Ingestor


def build_harness(store: SQLiteStore, params: Params) -> Harness:
    """Wire store, model, outlet, pipeline, scheduler and ingestor as ``bot.app`` does."""
    clock = SystemClock()
    llm = CountingLLM(latency=params.latency)
    outlet = BenchOutlet()
    profile = BotProfile(
        key=BOT,
        pin=PIN,
        queue=QueuePolicy(debounce=params.debounce, max_wait=params.max_wait),
        budget=Budget(),
        outlet=outlet,
        lease_seconds=params.lease,
    )
    pipeline = Pipeline(store=store, llm=llm, clock=clock, profiles={BOT: profile})
    probe = TurnProbe(pipeline, clock)
    scheduler = Scheduler(
        store=store,
        clock=clock,
        run_turn=probe,
        bots=[BOT],
        scan_interval=params.scan_interval,
        max_concurrent=params.max_concurrent,
    )
    ingestor = Ingestor(
        store=store, clock=clock, policy_for=lambda _bot: profile.queue, wake=scheduler.wake
    )
    return Harness(store, clock, llm, outlet, probe, scheduler, ingestor)


async def send_bursts(h: Harness, params: Params) -> BurstLog:
    """Each conversation gets its burst, messages back-to-back, one conversation after another."""
    sent = BurstLog()
    started = time.perf_counter()
    for index in range(params.conversations):
        size = burst_size(index, params.max_burst)
        texts = [message_text(index, j, size) for j in range(size)]
        sent.texts[index] = texts
        first = time.perf_counter()
        for j, text in enumerate(texts):
            try:
                result = await h.ingestor.ingest(inbound(BOT, index, j, text))
            except StoreError as exc:
                sent.ingest_errors += 1
                log.error("ingest into conversation %d failed: %s", index, exc)
                continue
            if result.due_at is not None:
                h.probe.due_at[conversation(BOT, index)] = result.due_at
        sent.spans.append(time.perf_counter() - first)
    sent.seconds = time.perf_counter() - started
    return sent


async def wait_answered(h: Harness, expected: int, within: float) -> bool:
    """Poll until every conversation has a reply, no timer is armed and no turn runs."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if (
            h.outlet.total >= expected
            and h.scheduler.active == 0
            and await h.store.next_due_at(bots=[BOT]) is None
        ):
            return True
        await asyncio.sleep(0.05)
    return False


async def stop_scheduler(scheduler: Scheduler, task: asyncio.Task[None], grace: float) -> None:
    """Stop the scheduler loop; cancel it if its running turns outlast ``grace``."""
    scheduler.stop()
    try:
        await asyncio.wait_for(asyncio.shield(task), timeout=grace)
    except TimeoutError:
        log.warning("scheduler did not stop within %.1fs; cancelling", grace)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


_KROW_COUNTS = ("bursts", "messages", "model_calls", "replies", "complete_replies", "bad_bursts")


@dataclass(frozen=True, slots=True)
class KRow:
    """Coalescing figures of one burst size."""

    k: int
    bursts: int
    messages: int
    model_calls: int
    replies: int
    complete_replies: int
    bad_bursts: int

    @property
    def calls_per_burst(self) -> float:
        """Model calls per burst (must be 1.0)."""
        return self.model_calls / self.bursts if self.bursts else float("nan")

    @property
    def replies_per_burst(self) -> float:
        """Replies per burst (must be 1.0)."""
        return self.replies / self.bursts if self.bursts else float("nan")

    def as_dict(self) -> dict[str, Any]:
        """The row with its derived ratios and the naive-handler contrast."""
        return {
            **asdict(self),
            "model_calls_per_burst": self.calls_per_burst,
            "replies_per_burst": self.replies_per_burst,
            "naive_calls_per_burst": float(self.k),
        }


def burst_is_good(h: Harness, key: ConversationKey, texts: Sequence[str]) -> tuple[int, int, bool]:
    """(model calls, replies, whether the single reply echoes exactly ``texts`` in order)."""
    calls = h.llm.per_conversation.get(key, 0)
    replies = h.outlet.replies.get(key, [])
    complete = len(replies) == 1 and expected_echo(texts) in replies[0].text
    return calls, len(replies), complete


def coalescing_rows(h: Harness, sent: BurstLog, params: Params) -> list[KRow]:
    """Aggregate per-conversation calls and replies by burst size."""
    totals: dict[int, Counter[str]] = {k: Counter() for k in range(1, params.max_burst + 1)}
    for index, texts in sent.texts.items():
        counts = totals[len(texts)]
        calls, replies, complete = burst_is_good(h, conversation(BOT, index), texts)
        counts.update(
            bursts=1,
            messages=len(texts),
            model_calls=calls,
            replies=replies,
            complete_replies=int(complete),
            bad_bursts=int(calls != 1 or replies != 1 or not complete),
        )
    return [KRow(k=k, **{f: c[f] for f in _KROW_COUNTS}) for k, c in totals.items()]


@dataclass(frozen=True, slots=True)
class CoalescingResult:
    """Phase 1 figures."""

    rows: list[KRow]
    answered: bool
    wall_seconds: float
    burst_ingest_seconds: float
    max_burst_span_ms: float
    ingest_errors: int
    outcomes: dict[str, int]
    lags_ms: list[float]
    unattributed_calls: int
    total_calls: int

    @property
    def messages(self) -> int:
        """Burst messages sent."""
        return sum(row.messages for row in self.rows)

    @property
    def ingest_per_second(self) -> float:
        """Burst messages ingested per second while turns ran alongside."""
        if self.burst_ingest_seconds <= 0:
            return float("nan")
        return self.messages / self.burst_ingest_seconds


async def coalescing_phase(store: SQLiteStore, params: Params) -> CoalescingResult:
    """Send every burst with the scheduler running, then wait until all are answered."""
    h = build_harness(store, params)
    task = asyncio.create_task(h.scheduler.run(), name="bench scheduler")
    started = time.perf_counter()
    try:
        sent = await send_bursts(h, params)
        answered = await wait_answered(h, params.conversations, within=params.timeout)
    finally:
        await stop_scheduler(h.scheduler, task, grace=params.lease + params.latency + 5.0)
    wall = time.perf_counter() - started
    return CoalescingResult(
        rows=coalescing_rows(h, sent, params),
        answered=answered,
        wall_seconds=wall,
        burst_ingest_seconds=sent.seconds,
        max_burst_span_ms=max(sent.spans, default=0.0) * 1000,
        ingest_errors=sent.ingest_errors,
        outcomes=dict(h.probe.outcomes),
        lags_ms=[lag * 1000 for lag in h.probe.lags],
        unattributed_calls=h.llm.unattributed,
        total_calls=h.llm.calls,
    )


# -- phase 2: ingest throughput vs raw inserts -----------------------------------------------


@dataclass(frozen=True, slots=True)
class Rate:
    """``count`` operations in ``seconds``."""

    count: int
    seconds: float
    errors: int = 0

    @property
    def per_second(self) -> float:
        """Operations per second."""
        return self.count / self.seconds if self.seconds > 0 else float("nan")

    def as_dict(self) -> dict[str, Any]:
        """The figures with the rate."""
        return {**asdict(self), "per_second": self.per_second}


async def ingest_rate(store: SQLiteStore, params: Params) -> Rate:
    """``Ingestor.ingest`` awaited one message at a time; the debounce is too long to fire."""
    policy = QueuePolicy(debounce=3600.0, max_wait=7200.0)
    ingestor = Ingestor(store=store, clock=SystemClock(), policy_for=lambda _bot: policy)
    n = params.conversations
    messages = [
        inbound(INGEST_BOT, m % n, m // n, message_text(m % n, m // n, 0))
        for m in range(params.ingest_messages)
    ]
    errors = 0
    started = time.perf_counter()
    for message in messages:
        try:
            await ingestor.ingest(message)
        except StoreError as exc:
            errors += 1
            log.error("ingest failed: %s", exc)
    return Rate(len(messages), time.perf_counter() - started, errors)


_RAW_TABLE = """
CREATE TABLE IF NOT EXISTS bench_raw_insert (
    id INTEGER PRIMARY KEY, conversation_id INTEGER NOT NULL, session_id INTEGER NOT NULL,
    turn INTEGER NOT NULL, role TEXT NOT NULL, author_id TEXT NOT NULL,
    display_name TEXT NOT NULL, text TEXT NOT NULL, platform_message_id TEXT,
    is_private INTEGER NOT NULL, version INTEGER NOT NULL, pending INTEGER NOT NULL,
    created_at REAL NOT NULL
)
"""
_RAW_INSERT = (
    "INSERT INTO bench_raw_insert (conversation_id, session_id, turn, role, author_id, "
    "display_name, text, platform_message_id, is_private, version, pending, created_at) "
    "VALUES (?, ?, ?, 'user', ?, ?, ?, ?, 1, ?, 1, ?)"
)


@contextlib.asynccontextmanager
async def raw_connection(path: Path) -> AsyncIterator[aiosqlite.Connection]:
    """A second connection to the file with the store's pragmas and a scratch table."""
    async with aiosqlite.connect(str(path), isolation_level=None) as db:
        await db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        await db.execute("PRAGMA journal_mode = WAL")
        await db.execute("PRAGMA synchronous = NORMAL")
        await db.execute(_RAW_TABLE)
        try:
            yield db
        finally:
            await db.execute("DROP TABLE bench_raw_insert")


def _raw_row(index: int, position: int, version: int, now: float) -> tuple[Any, ...]:
    text = message_text(index, position, 0)
    who = (f"user-{index}", f"User {index}")
    return (index, index, position, *who, text, f"{index}-{position}", version, now)


def raw_rows(params: Params) -> list[tuple[Any, ...]]:
    """Rows shaped like the messages the ingest phase stores."""
    n = params.conversations
    now = time.time()
    return [_raw_row(m % n, m // n, m, now) for m in range(params.ingest_messages)]


async def raw_insert_rate(path: Path, params: Params, *, explicit_tx: bool) -> Rate:
    """One row per transaction: autocommit INSERT, or BEGIN IMMEDIATE / INSERT / COMMIT."""
    rows = raw_rows(params)
    async with raw_connection(path) as db:
        started = time.perf_counter()
        for row in rows:
            if explicit_tx:
                await db.execute("BEGIN IMMEDIATE")
                await db.execute(_RAW_INSERT, row)
                await db.execute("COMMIT")
            else:
                await db.execute(_RAW_INSERT, row)
        elapsed = time.perf_counter() - started
    return Rate(len(rows), elapsed)


@dataclass(frozen=True, slots=True)
class IngestResultSet:
    """Phase 2 figures."""

    ingest: Rate
    raw: Rate
    raw_tx: Rate

    @property
    def ratio(self) -> float:
        """Ingest rate over raw autocommit insert rate."""
        return self.ingest.per_second / self.raw.per_second


async def ingest_phase(store: SQLiteStore, params: Params) -> IngestResultSet:
    """Ingest rate, then the raw rates of the same file, the store connection idle."""
    ingest = await ingest_rate(store, params)
    raw = await raw_insert_rate(Path(store.path), params, explicit_tx=False)
    raw_tx = await raw_insert_rate(Path(store.path), params, explicit_tx=True)
    return IngestResultSet(ingest, raw, raw_tx)


# -- report ----------------------------------------------------------------------------------


def lag_summary(lags_ms: Sequence[float]) -> dict[str, float | int]:
    """Turn-start lag percentiles in milliseconds."""
    return {
        "turns": len(lags_ms),
        "p50_ms": percentile(lags_ms, 50),
        "p99_ms": percentile(lags_ms, 99),
        "max_ms": max(lags_ms, default=float("nan")),
    }


def guard_failures(result: CoalescingResult) -> list[str]:
    """Why the run is not correct: every burst needs exactly one call and one full reply."""
    failures = [
        f"k={row.k}: {row.bad_bursts} of {row.bursts} bursts did not get exactly one model "
        f"call and one reply covering all messages (calls/burst {row.calls_per_burst:.3f}, "
        f"replies/burst {row.replies_per_burst:.3f})"
        for row in result.rows
        if row.bad_bursts or (row.bursts and row.calls_per_burst != 1.0)
    ]
    if not result.answered:
        failures.append("not every conversation was answered before --timeout")
    if result.ingest_errors:
        failures.append(f"{result.ingest_errors} ingest errors during the bursts")
    if result.unattributed_calls:
        failures.append(f"{result.unattributed_calls} model calls outside a probed turn")
    return failures


def _krow_cells(label: object, row: KRow, naive: float) -> list[object]:
    return [
        label,
        row.bursts,
        row.messages,
        row.model_calls,
        row.replies,
        row.calls_per_burst,
        row.replies_per_burst,
        naive,
        row.complete_replies,
    ]


def coalescing_table(result: CoalescingResult) -> str:
    """Per-k table with a total row."""
    headers = ["k", "bursts", "messages", "model calls", "replies", "calls/burst"]
    headers += ["replies/burst", "naive calls/burst", "complete"]
    rows = [_krow_cells(r.k, r, float(r.k)) for r in result.rows]
    total = KRow(0, *(sum(getattr(r, f) for r in result.rows) for f in _KROW_COUNTS))
    naive = total.messages / total.bursts if total.bursts else float("nan")
    rows.append(_krow_cells("all", total, naive))
    return format_table(headers, rows, "1. Coalescing (one model call and one reply per burst)")


def ingest_table(phase: IngestResultSet) -> str:
    """Ingest vs raw insert rates."""
    rows: list[list[object]] = [
        ["Ingestor.ingest (awaited, one at a time)", *_rate_cells(phase.ingest)],
        ["raw INSERT, autocommit (1 row/tx)", *_rate_cells(phase.raw)],
        ["raw BEGIN IMMEDIATE/INSERT/COMMIT", *_rate_cells(phase.raw_tx)],
    ]
    table = format_table(
        ("measure", "rows", "seconds", "rows/s"), rows, "2. Ingest throughput (same file)"
    )
    tx_ratio = phase.ingest.per_second / phase.raw_tx.per_second
    return f"{table}\nratio ingest/raw: {phase.ratio:.3f} (ingest/raw-tx: {tx_ratio:.3f})"


def _rate_cells(rate: Rate) -> list[object]:
    return [rate.count, rate.seconds, rate.per_second]


def lag_table(result: CoalescingResult) -> str:
    """Lag percentiles, turn outcomes and phase-1 timings.

    The lag includes any wait for a free turn slot (``--max-concurrent``).
    """
    lag = lag_summary(result.lags_ms)
    table = format_table(
        ("turns", "p50 ms", "p99 ms", "max ms"),
        [[lag["turns"], lag["p50_ms"], lag["p99_ms"], lag["max_ms"]]],
        "3. Scheduler lag (timer due_at -> run_turn start)",
    )
    outcomes = ", ".join(f"{k}={v}" for k, v in sorted(result.outcomes.items())) or "none"
    return (
        f"{table}\nturn outcomes: {outcomes}\n"
        f"phase 1: {result.wall_seconds:.2f} s wall; {result.messages:,} burst messages "
        f"ingested in {result.burst_ingest_seconds:.2f} s ({result.ingest_per_second:,.0f}/s "
        f"with the scheduler running);\nlongest burst span {result.max_burst_span_ms:.1f} ms"
    )


def payload(
    params: Params, coalescing: CoalescingResult, ingest: IngestResultSet, failures: list[str]
) -> dict[str, Any]:
    """Everything measured, as JSON-ready data."""
    return {
        "benchmark": "queue",
        "timestamp": utc_timestamp(),
        "parameters": {**asdict(params), "out": str(params.out)},
        "environment": environment(),
        "coalescing": {
            "per_k": [row.as_dict() for row in coalescing.rows],
            "answered_in_time": coalescing.answered,
            "wall_seconds": coalescing.wall_seconds,
            "burst_messages": coalescing.messages,
            "burst_ingest_seconds": coalescing.burst_ingest_seconds,
            "burst_ingest_per_second": coalescing.ingest_per_second,
            "max_burst_span_ms": coalescing.max_burst_span_ms,
            "ingest_errors": coalescing.ingest_errors,
            "turn_outcomes": coalescing.outcomes,
            "model_calls_total": coalescing.total_calls,
        },
        "ingest": {
            "ingest": ingest.ingest.as_dict(),
            "raw_insert_autocommit": ingest.raw.as_dict(),
            "raw_insert_explicit_tx": ingest.raw_tx.as_dict(),
            "ratio_ingest_to_raw": ingest.ratio,
        },
        "scheduler_lag": lag_summary(coalescing.lags_ms),
        "guard": {"passed": not failures, "failures": failures},
    }


# -- main ------------------------------------------------------------------------------------


async def run(params: Params) -> int:
    """Both phases on one fresh SQLite file; print, write JSON, return the exit status."""
    with tempfile.TemporaryDirectory(prefix="personabot-bench-") as tmp:
        async with SQLiteStore(path=Path(tmp) / "queue.sqlite3") as store:
            coalescing = await coalescing_phase(store, params)
            ingest = await ingest_phase(store, params)
    failures = guard_failures(coalescing)
    print(coalescing_table(coalescing), end="\n\n")
    print(ingest_table(ingest), end="\n\n")
    print(lag_table(coalescing))
    write_json(params.out, payload(params, coalescing, ingest, failures))
    print(f"\nJSON written to {params.out}")
    for failure in failures:
        print(f"FAIL: {failure}", file=sys.stderr)
    return 1 if failures else 0


def configure_logging(verbosity: int) -> None:
    """WARNING by default; -v INFO; -vv DEBUG."""
    level = logging.WARNING if verbosity <= 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m bench.queue``."""
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    return asyncio.run(run(params_from(args)))


if __name__ == "__main__":
    sys.exit(main())
