"""Benchmark of the coalescing queue (docs/architecture.md#queue) on a real store, in real time.

Runs the real Ingestor, Scheduler, Pipeline and store (a SQLite file, or with ``--store
postgresql`` a PostgreSQL database of a throwaway cluster) with an OfflineLLM of fixed latency
and an in-bench outlet, in one process or, with ``--processes N``, in N OS processes sharing the
database (each ingests every N-th conversation's burst; every process's scheduler competes for
every due timer through the lease CAS). It measures three things in one run:

1. coalescing: bursts of k = 1..max_burst messages sent back-to-back (well inside the
   debounce) into N conversations; per k, model calls and replies per burst (both must be
   exactly 1, where a naive handler would make k calls);
2. ingest throughput: ``Ingestor.ingest`` awaited one message at a time in each process (no
   scheduler running), next to the raw one-row-per-transaction INSERT rate of the same
   database measured the same way (one connection per process), and their ratio;
3. scheduler lag: for every turn, the time from its timer's ``due_at`` (the ``IngestResult``
   of the last message that armed it, or the stored timer when another process armed it) to
   the moment ``run_turn`` starts;
4. scale-out (docs/scaling.md): lost lease compare-and-swap attempts per turn, the share of
   turns each process ran, and turns per second draining a backlog of ``--backlog`` due turns
   with the fixed-latency model.

``--scheduler claim`` runs what ``personabot run`` runs: due turns claimed by the store up to
the free slots, and on PostgreSQL timers announced across processes (LISTEN/NOTIFY).
``--scheduler race`` runs the way before issue 20: every scheduler that sees a timer due
tries the lease, losers back off, other processes see a timer at their next scan.
``--processes`` and ``--scheduler`` take comma lists; every combination runs on a fresh
database in one invocation, and a summary table puts them side by side.

Usage::

    uv run python -m bench.queue [--quick] [--conversations 1000] [--max-burst 10]
        [--latency 0.05] [--store sqlite|postgresql] [--processes 1,2,4]
        [--scheduler race,claim] [--backlog 1000] [--out bench/results/queue.json]

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
import multiprocessing
import sys
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Coroutine, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, cast

from bench._report import (
    configure_logging,
    environment,
    format_table,
    non_negative_float,
    percentile,
    positive_int,
    utc_timestamp,
    write_json,
)
from bench._stores import (
    StoreKind,
    StoreTarget,
    bench_target,
    create_raw_table,
    drop_raw_table,
    raw_inserts,
)
from bot.app.build import memory_on, turn_parts
from bot.core.clock import SystemClock
from bot.core.errors import StoreError
from bot.core.events import ClaimedTurn, Claims, ConversationKey, Inbound, QueuePolicy, Reply
from bot.core.llm import ModelRequest, ModelResult
from bot.llm.offline import OfflineLLM
from bot.queue import Ingestor, Scheduler
from bot.runtime.pipeline import BotProfile, Bots, Pipeline
from bot.store.base import BaseStore
from memory.assemble import Budget, PersonaPin
from memory.service import MemoryPolicy

log = logging.getLogger("personabot.bench.queue")

SchedulerMode = Literal["claim", "race"]

BOT = "bench"
INGEST_BOT = "bench-ingest"
PLATFORM = "bench"
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
    store: StoreKind = "sqlite"
    processes: int = 1
    #: Processes that receive the bursts (0: all): 1 is Telegram polling's elected poller.
    ingesters: int = 0
    scheduler: SchedulerMode = "claim"
    backlog: int = 1000


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    p = argparse.ArgumentParser(
        prog="python -m bench.queue", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    p.add_argument("--quick", action="store_true", help="100 conversations, 1,000 ingests")
    p.add_argument("--conversations", type=positive_int, help="default 1000 (quick: 100)")
    p.add_argument("--max-burst", type=positive_int, default=10)
    p.add_argument("--latency", type=non_negative_float, default=0.05, help="model seconds")
    p.add_argument("--ingest-messages", type=positive_int, help="default 5000 (quick: 1000)")
    p.add_argument("--debounce", type=non_negative_float, default=0.2)
    p.add_argument("--max-wait", type=non_negative_float, default=2.0)
    p.add_argument("--lease", type=non_negative_float, default=10.0)
    p.add_argument("--max-concurrent", type=positive_int, default=16, help="turns at once")
    p.add_argument("--scan-interval", type=non_negative_float, default=1.0)
    p.add_argument("--timeout", type=non_negative_float, default=90.0, help="answer deadline")
    p.add_argument("--store", choices=("sqlite", "postgresql"), default="sqlite")
    p.add_argument("--processes", type=_ints, default=[1], help="OS processes, or a list: 1,2,4")
    p.add_argument(
        "--scheduler",
        type=_modes,
        default=["claim"],
        help="claim (personabot run), race (before issue 20), or both: race,claim",
    )
    p.add_argument(
        "--backlog", type=positive_int, help="due turns drained for turns/s (default 1000)"
    )
    p.add_argument(
        "--ingesters",
        type=int,
        default=0,
        help="processes receiving the bursts (default all; 1: one poller, the others only claim)",
    )
    p.add_argument("--out", type=Path, default=Path("bench/results/queue.json"))
    p.add_argument("-v", "--verbose", action="count", default=0, help="-v INFO, -vv DEBUG")
    return p


def _ints(text: str) -> list[int]:
    """argparse type: a comma list of integers >= 1."""
    return [positive_int(part) for part in text.split(",")]


def _modes(text: str) -> list[SchedulerMode]:
    """argparse type: a comma list of scheduler modes."""
    modes = text.split(",")
    for mode in modes:
        if mode not in ("claim", "race"):
            raise argparse.ArgumentTypeError(f"scheduler is claim or race, got {mode!r}")
    return [cast(SchedulerMode, m) for m in modes]


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
        store=args.store,
        processes=args.processes[0],
        scheduler=args.scheduler[0],
        backlog=args.backlog or (200 if args.quick else 1000),
        ingesters=args.ingesters,
    )


# -- in-bench doubles ------------------------------------------------------------------------


class BenchOutlet:
    """Records replies per conversation; typing does nothing; sends are not idempotent."""

    idempotent_send = False

    def __init__(self, shared_total: Any | None = None) -> None:
        self.replies: defaultdict[ConversationKey, list[Reply]] = defaultdict(list)
        # A multiprocessing.Value counting the replies of every process (multi-process runs).
        self._shared_total = shared_total

    async def send(self, reply: Reply) -> None:
        """Record the reply."""
        self.replies[reply.conversation].append(reply)
        if self._shared_total is not None:
            with self._shared_total.get_lock():
                self._shared_total.value += 1

    @contextlib.asynccontextmanager
    async def typing(self, conversation: ConversationKey) -> AsyncIterator[None]:
        """No typing indicator."""
        yield

    @property
    def total(self) -> int:
        """Replies sent so far (by every process, in a multi-process run)."""
        if self._shared_total is not None:
            return int(self._shared_total.value)
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
    """Wraps the pipeline's turns as the scheduler runs them (raced: ``run_turn``; claimed:
    the ``TurnClaims`` methods): records lag from the armed ``due_at``, and outcomes."""

    def __init__(self, pipeline: Pipeline, clock: SystemClock, store: BaseStore) -> None:
        self._pipeline = pipeline
        self._clock = clock
        self._store = store
        self.due_at: dict[ConversationKey, float] = {}
        self.lags: list[float] = []
        self.answered_lags: list[float] = []  # of the turns that sent the reply
        self.outcomes: Counter[str] = Counter()

    async def __call__(self, key: ConversationKey) -> str:
        """Run one turn of ``key`` as the racing scheduler would, recording its start lag."""
        due = self.due_at.get(key)
        lag: float | None = None
        if due is None:
            # Armed by another process: its stored due time (one extra read, off the clock).
            started = self._clock.now()
            timer = await self._store.timer(key)
            if timer is not None:
                lag = started - timer.due_at
        else:
            lag = self._clock.now() - due
        return await self._probe(key, lag, self._pipeline.run_turn(key))

    async def claim(self, now: float, limit: int, skip: Sequence[ConversationKey]) -> Claims:
        """The pipeline's claim."""
        return await self._pipeline.claim(now, limit, skip)

    async def next_claim_at(self, now: float, skip: Sequence[ConversationKey]) -> float | None:
        """The pipeline's next claim time."""
        return await self._pipeline.next_claim_at(now, skip)

    async def run_claimed(self, turn: ClaimedTurn) -> str:
        """Run a claimed turn, its lag from the due time it was claimed at."""
        lag = self._clock.now() - turn.due_at
        return await self._probe(turn.conversation, lag, self._pipeline.run_claimed(turn))

    async def _probe(
        self, key: ConversationKey, lag: float | None, turn: Coroutine[Any, Any, str]
    ) -> str:
        if lag is not None:
            self.lags.append(lag)
        token = _current_turn.set(key)
        try:
            outcome = await turn
        except Exception:
            self.outcomes["error"] += 1
            raise
        finally:
            _current_turn.reset(token)
        self.outcomes[outcome] += 1
        if outcome == "sent" and lag is not None:
            self.answered_lags.append(lag)
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

    store: BaseStore
    clock: SystemClock
    llm: CountingLLM
    outlet: BenchOutlet
    probe: TurnProbe
    scheduler: Scheduler
    ingestor: Ingestor


def build_harness(store: BaseStore, params: Params, shared_total: Any | None = None) -> Harness:
    """Wire store, model, outlet, pipeline, scheduler and ingestor as ``bot.app.build`` does."""
    clock = SystemClock()
    llm = CountingLLM(latency=params.latency)
    outlet = BenchOutlet(shared_total)
    profile = BotProfile(
        key=BOT,
        pin=PIN,
        queue=QueuePolicy(debounce=params.debounce, max_wait=params.max_wait),
        memory=MemoryPolicy(budget=Budget(), summary_model=PIN.model),
        outlet=outlet,
        lease_seconds=params.lease,
    )
    memory = memory_on(store=store, llm=llm, clock=clock, policy_for=lambda _bot: profile.memory)
    pipeline = Pipeline(
        store=store,
        parts=turn_parts(
            store, llm=llm, clock=clock, memory=memory, outlet_for=Bots({BOT: profile}).outlet_for
        ),
        bots=Bots({BOT: profile}),
    )
    probe = TurnProbe(pipeline, clock, store)
    scheduler = Scheduler(
        store=store,
        clock=clock,
        run_turn=probe,
        bots=[BOT],
        scan_interval=params.scan_interval,
        max_concurrent=params.max_concurrent,
        claims=probe if params.scheduler == "claim" else None,
    )
    ingestor = Ingestor(
        store=store, clock=clock, policy_for=lambda _bot: profile.queue, wake=scheduler.wake
    )
    return Harness(store, clock, llm, outlet, probe, scheduler, ingestor)


@contextlib.asynccontextmanager
async def scheduling(h: Harness, params: Params) -> AsyncIterator[None]:
    """The scheduler running (claimed: with the store's timer announcements, as
    ``personabot run`` wires them), stopped at the end."""
    task = asyncio.create_task(h.scheduler.run(), name="bench scheduler")
    listener = None
    if params.scheduler == "claim":

        def announced(bot: str | None, due_at: float | None) -> None:
            if bot is None or bot == BOT:
                h.scheduler.wake(due_at)

        listener = asyncio.create_task(h.store.listen_timers(announced), name="wake-ups")
    try:
        yield
    finally:
        await stop_scheduler(h.scheduler, task, grace=params.lease + params.latency + 5.0)
        if listener is not None:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener


async def send_bursts(h: Harness, params: Params, share: tuple[int, int] = (0, 1)) -> BurstLog:
    """Each conversation gets its burst, messages back-to-back, one conversation after another.

    ``share = (i, n)``: this process sends the bursts of conversations ``i, i + n, ...``.
    """
    sent = BurstLog()
    started = time.perf_counter()
    for index in range(share[0], params.conversations, share[1]):
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
            and not await h.store.due_timers(sys.float_info.max, 1, bots=[BOT])  # none armed
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


@dataclass(frozen=True, slots=True)
class Answers:
    """Model calls and reply texts per conversation, from one process or merged from several."""

    calls: Mapping[ConversationKey, int]
    replies: Mapping[ConversationKey, Sequence[str]]

    @classmethod
    def of(cls, h: Harness) -> Answers:
        """What this process's model and outlet saw."""
        return cls(
            dict(h.llm.per_conversation),
            {k: [r.text for r in v] for k, v in h.outlet.replies.items()},
        )


def burst_is_good(
    answers: Answers, key: ConversationKey, texts: Sequence[str]
) -> tuple[int, int, bool]:
    """(model calls, replies, whether the single reply echoes exactly ``texts`` in order)."""
    calls = answers.calls.get(key, 0)
    replies = answers.replies.get(key, [])
    complete = len(replies) == 1 and expected_echo(texts) in replies[0]
    return calls, len(replies), complete


def coalescing_rows(
    answers: Answers, texts_sent: Mapping[int, list[str]], params: Params
) -> list[KRow]:
    """Aggregate per-conversation calls and replies by burst size."""
    totals: dict[int, Counter[str]] = {k: Counter() for k in range(1, params.max_burst + 1)}
    for index, texts in texts_sent.items():
        counts = totals[len(texts)]
        calls, replies, complete = burst_is_good(answers, conversation(BOT, index), texts)
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
class Backlog:
    """Phase 4: ``turns`` due at once drained by every process's scheduler."""

    turns: int
    seconds: float
    answered: bool
    sent_per_process: list[int]
    lost_cas: int

    @property
    def per_second(self) -> float:
        """Turns answered per second."""
        return self.turns / self.seconds if self.seconds > 0 else float("nan")


def lost_cas(h: Harness) -> int:
    """Lost lease attempts of this process's scheduler (see CoalescingResult.lost_cas)."""
    return h.scheduler.lost_claims + h.probe.outcomes["busy"]


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
    answered_lags_ms: list[float]
    unattributed_calls: int
    total_calls: int
    #: Replies each process's turns sent (one entry per process), and lease CAS attempts
    #: that lost (raced: turns that found the lease taken; claimed: timers a claim saw taken).
    sent_per_process: list[int] = field(default_factory=list)
    lost_cas: int = 0
    backlog: Backlog | None = None

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


async def coalescing_phase(store: BaseStore, params: Params) -> CoalescingResult:
    """Send every burst with the scheduler running, then wait until all are answered."""
    h = build_harness(store, params)
    started = time.perf_counter()
    async with scheduling(h, params):
        sent = await send_bursts(h, params)
        answered = await wait_answered(h, params.conversations, within=params.timeout)
    wall = time.perf_counter() - started
    return CoalescingResult(
        rows=coalescing_rows(Answers.of(h), sent.texts, params),
        answered=answered,
        wall_seconds=wall,
        burst_ingest_seconds=sent.seconds,
        max_burst_span_ms=max(sent.spans, default=0.0) * 1000,
        ingest_errors=sent.ingest_errors,
        outcomes=dict(h.probe.outcomes),
        lags_ms=[lag * 1000 for lag in h.probe.lags],
        answered_lags_ms=[lag * 1000 for lag in h.probe.answered_lags],
        unattributed_calls=h.llm.unattributed,
        total_calls=h.llm.calls,
        sent_per_process=[h.probe.outcomes["sent"]],
        lost_cas=lost_cas(h),
    )


#: Conversation indices of the backlog phase (after any coalescing phase's).
BACKLOG_FROM = 10_000_000


async def backlog_phase(
    store: BaseStore,
    params: Params,
    share: tuple[int, int] = (0, 1),
    total: Any | None = None,
    barrier: Any | None = None,
) -> Backlog:
    """``params.backlog`` conversations, one message each, all due at once before any
    scheduler runs; then every process's scheduler drains them (turns per second)."""
    h = build_harness(store, replace(params, debounce=0.0), shared_total=total)
    mine = range(BACKLOG_FROM + share[0], BACKLOG_FROM + params.backlog, share[1])
    for index in mine:
        await h.ingestor.ingest(inbound(BOT, index, 0, message_text(index, 0, 1)))
    if barrier is not None:
        await _all_reach(barrier)  # every process's share is due: start together
    started = time.perf_counter()
    async with scheduling(h, params):
        answered = await wait_answered(h, params.backlog, within=params.timeout)
        seconds = time.perf_counter() - started
    return Backlog(
        turns=params.backlog,
        seconds=seconds,
        answered=answered,
        sent_per_process=[h.probe.outcomes["sent"]],
        lost_cas=lost_cas(h),
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


async def ingest_rate(store: BaseStore, params: Params, share: tuple[int, int] = (0, 1)) -> Rate:
    """``Ingestor.ingest`` awaited one message at a time; the debounce is too long to fire.

    ``share = (i, n)``: this process ingests messages ``i, i + n, ...`` of the workload.
    """
    policy = QueuePolicy(debounce=3600.0, max_wait=7200.0)
    ingestor = Ingestor(store=store, clock=SystemClock(), policy_for=lambda _bot: policy)
    n = params.conversations
    messages = [
        inbound(INGEST_BOT, m % n, m // n, message_text(m % n, m // n, 0))
        for m in range(share[0], params.ingest_messages, share[1])
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


def _raw_row(index: int, position: int, version: int, now: float) -> tuple[Any, ...]:
    text = message_text(index, position, 0)
    who = (f"user-{index}", f"User {index}")
    return (index, index, position, *who, text, f"{index}-{position}", version, now)


def raw_rows(params: Params, share: tuple[int, int] = (0, 1)) -> list[tuple[Any, ...]]:
    """Rows shaped like the messages the ingest phase stores (this process's share)."""
    n = params.conversations
    now = time.time()
    return [
        _raw_row(m % n, m // n, m, now) for m in range(share[0], params.ingest_messages, share[1])
    ]


async def raw_insert_rate(
    target: StoreTarget, params: Params, *, explicit_tx: bool, share: tuple[int, int] = (0, 1)
) -> Rate:
    """One row per transaction on one connection: autocommit INSERT, or BEGIN/INSERT/COMMIT.

    The scratch table must exist (``create_raw_table``).
    """
    rows = raw_rows(params, share)
    started = time.perf_counter()
    await raw_inserts(target, rows, explicit_tx=explicit_tx)
    return Rate(len(rows), time.perf_counter() - started)


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


async def ingest_phase(store: BaseStore, target: StoreTarget, params: Params) -> IngestResultSet:
    """Ingest rate, then the raw rates of the same database, the store idle."""
    ingest = await ingest_rate(store, params)
    await create_raw_table(target)
    raw = await raw_insert_rate(target, params, explicit_tx=False)
    await create_raw_table(target)
    raw_tx = await raw_insert_rate(target, params, explicit_tx=True)
    await drop_raw_table(target)
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
    if result.backlog is not None and not result.backlog.answered:
        failures.append("the backlog was not drained before --timeout")
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
        ["raw BEGIN/INSERT/COMMIT", *_rate_cells(phase.raw_tx)],
    ]
    table = format_table(
        ("measure", "rows", "seconds", "rows/s"),
        rows,
        "2. Ingest throughput (same database; one connection per process)",
    )
    tx_ratio = phase.ingest.per_second / phase.raw_tx.per_second
    return f"{table}\nratio ingest/raw: {phase.ratio:.3f} (ingest/raw-tx: {tx_ratio:.3f})"


def _rate_cells(rate: Rate) -> list[object]:
    return [rate.count, rate.seconds, rate.per_second]


def lag_table(result: CoalescingResult) -> str:
    """Lag percentiles, turn outcomes and phase-1 timings.

    The lag includes any wait for a free turn slot (``--max-concurrent``).
    """
    rows = []
    for label, lags in (
        ("every turn start", result.lags_ms),
        ("turns that replied", result.answered_lags_ms),
    ):
        lag = lag_summary(lags)
        rows.append([label, lag["turns"], lag["p50_ms"], lag["p99_ms"], lag["max_ms"]])
    table = format_table(
        ("", "turns", "p50 ms", "p99 ms", "max ms"),
        rows,
        "3. Scheduler lag (timer due_at -> run_turn start; a start that lost the lease CAS "
        "backs off)",
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
        "scheduler_lag_replying_turns": lag_summary(coalescing.answered_lags_ms),
        "scale_out": scale_out(coalescing),
        "guard": {"passed": not failures, "failures": failures},
    }


def _share(sent: Sequence[int]) -> float:
    total = sum(sent)
    return max(sent) / total if total else float("nan")


def scale_out(result: CoalescingResult) -> dict[str, Any]:
    """Lost CAS attempts per turn, the turn share of the busiest process, backlog turns/s."""
    turns = sum(result.sent_per_process)
    out: dict[str, Any] = {
        "lost_cas": result.lost_cas,
        "lost_cas_per_turn": result.lost_cas / turns if turns else float("nan"),
        "sent_per_process": result.sent_per_process,
        "max_share": _share(result.sent_per_process),
    }
    if result.backlog is not None:
        b = result.backlog
        out["backlog"] = {
            **asdict(b),
            "turns_per_second": b.per_second,
            "max_share": _share(b.sent_per_process),
            "lost_cas_per_turn": b.lost_cas / b.turns,
        }
    return out


SUMMARY_HEADERS = (
    "scheduler",
    "processes",
    "lag p50 ms",
    "lag p99 ms",
    "lost CAS/turn",
    "max share (1/N)",
    "backlog turns/s",
    "backlog max share",
    "backlog lost CAS/turn",
    "calls/burst",
)


def summary_row(report: dict[str, Any]) -> list[object]:
    """One configuration's scale-out figures (see SUMMARY_HEADERS)."""
    # The lag of the turns that replied: a raced start that lost the CAS is no turn.
    params, out = report["parameters"], report["scale_out"]
    lag = report["scheduler_lag_replying_turns"]
    backlog = out.get("backlog", {})
    calls = sum(k["model_calls"] for k in report["coalescing"]["per_k"])
    bursts = sum(k["bursts"] for k in report["coalescing"]["per_k"])
    receivers = params.get("ingesters") or params["processes"]
    return [
        params["scheduler"],
        params["processes"]
        if receivers == params["processes"]
        else f"{params['processes']} ({receivers} receiving)",
        lag["p50_ms"],
        lag["p99_ms"],
        out["lost_cas_per_turn"],
        f"{out['max_share']:.3f} ({1 / params['processes']:.3f})",
        backlog.get("turns_per_second", float("nan")),
        f"{backlog.get('max_share', float('nan')):.3f}",
        backlog.get("lost_cas_per_turn", float("nan")),
        calls / bursts if bursts else float("nan"),
    ]


# -- main ------------------------------------------------------------------------------------


async def run(params: Params) -> dict[str, Any]:
    """Every phase on one fresh database; print the tables, return the JSON report."""
    async with bench_target(params.store) as target:
        if params.processes == 1:
            async with target.open_store() as store:
                coalescing = await coalescing_phase(store, params)
                backlog = await backlog_phase(store, params)
                coalescing = replace(coalescing, backlog=backlog)
                ingest = await ingest_phase(store, target, params)
        else:
            coalescing, ingest = await run_processes(target, params)
    failures = guard_failures(coalescing)
    print(
        f"store: {target.describe()}; processes: {params.processes}; scheduler: {params.scheduler}",
        end="\n\n",
    )
    print(coalescing_table(coalescing), end="\n\n")
    print(ingest_table(ingest), end="\n\n")
    print(lag_table(coalescing))
    report = payload(params, coalescing, ingest, failures)
    print(
        "\n"
        + format_table(
            SUMMARY_HEADERS, [summary_row(report)], "4. Scale-out (docs/scaling.md#claims)"
        )
    )
    for failure in failures:
        print(f"FAIL: {failure}", file=sys.stderr)
    return report


async def run_all(base: Params, combos: Sequence[tuple[int, SchedulerMode]]) -> int:
    """Every (processes, scheduler) combination on a fresh database; a summary of all."""
    reports = []
    for processes, mode in combos:
        print(f"\n=== scheduler {mode}, {processes} process(es) ===", flush=True)
        reports.append(await run(replace(base, processes=processes, scheduler=mode)))
    failed = [r for r in reports if not r["guard"]["passed"]]
    if len(reports) > 1:
        title = f"Scale-out side by side ({base.store}; {base.conversations} conversations)"
        print("\n" + format_table(SUMMARY_HEADERS, [summary_row(r) for r in reports], title))
    write_json(
        base.out, {"benchmark": "queue", "runs": reports} if len(reports) > 1 else reports[0]
    )
    print(f"\nJSON written to {base.out}")
    return 1 if failed else 0


# -- several processes -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChildReport:
    """What one process of a multi-process run measured (sent back to the parent)."""

    calls: dict[int, int]  # conversation index -> model calls made in this process
    replies: dict[int, list[str]]  # conversation index -> reply texts sent by this process
    texts: dict[int, list[str]]  # the bursts this process sent
    spans: list[float]
    ingest_errors: int
    burst_seconds: float
    answered: bool
    wall: float
    outcomes: dict[str, int]
    lags: list[float]
    answered_lags: list[float]
    unattributed: int
    ingest: Rate
    raw: Rate
    raw_tx: Rate
    lost_cas: int = 0
    backlog: Backlog | None = None


def _index(key: ConversationKey) -> int:
    return int(key.chat_id.removeprefix("chat-"))


async def _all_reach(barrier: Any) -> None:
    """Wait at a multiprocessing barrier without blocking the event loop."""
    await asyncio.to_thread(barrier.wait, 600)


async def _child_main(
    params: Params, target: StoreTarget, index: int, barrier: Any, totals: tuple[Any, Any]
) -> ChildReport:
    share = (index, params.processes)
    async with target.open_store() as store:
        h = build_harness(store, params, shared_total=totals[0])
        await _all_reach(barrier)  # everyone is connected: start together
        started = time.perf_counter()
        async with scheduling(h, params):
            receivers = params.ingesters or params.processes
            sent = (
                await send_bursts(h, params, (index, receivers))
                if index < receivers
                else BurstLog()
            )
            # Every process waits for every conversation: it may be running others' turns.
            answered = await wait_answered(h, params.conversations, within=params.timeout)
        wall = time.perf_counter() - started
        await _all_reach(barrier)
        backlog = await backlog_phase(store, params, share, totals[1], barrier)
        await _all_reach(barrier)
        ingest = await ingest_rate(store, params, share)
    await _all_reach(barrier)
    raw = await raw_insert_rate(target, params, explicit_tx=False, share=share)
    await _all_reach(barrier)
    raw_tx = await raw_insert_rate(target, params, explicit_tx=True, share=share)
    return ChildReport(
        calls={_index(k): v for k, v in h.llm.per_conversation.items()},
        replies={_index(k): [r.text for r in v] for k, v in h.outlet.replies.items()},
        texts=sent.texts,
        spans=sent.spans,
        ingest_errors=sent.ingest_errors,
        burst_seconds=sent.seconds,
        answered=answered,
        wall=wall,
        outcomes=dict(h.probe.outcomes),
        lags=h.probe.lags,
        answered_lags=h.probe.answered_lags,
        unattributed=h.llm.unattributed,
        ingest=ingest,
        raw=raw,
        raw_tx=raw_tx,
        lost_cas=lost_cas(h),
        backlog=backlog,
    )


def _child(
    params: Params,
    target: StoreTarget,
    index: int,
    barrier: Any,
    totals: tuple[Any, Any],
    results: Any,
) -> None:
    """Entry point of one benchmark process."""
    configure_logging(0)
    results.put(asyncio.run(_child_main(params, target, index, barrier, totals)))


def _aggregate(rates: Sequence[Rate]) -> Rate:
    """Processes that started together: all their operations over the slowest one's time."""
    return Rate(
        sum(r.count for r in rates), max(r.seconds for r in rates), sum(r.errors for r in rates)
    )


def _merge_backlogs(parts: Sequence[Backlog]) -> Backlog | None:
    """One backlog figure: every process's turns, over the slowest process's time."""
    if not parts:
        return None
    return Backlog(
        turns=parts[0].turns,
        seconds=max(p.seconds for p in parts),
        answered=all(p.answered for p in parts),
        sent_per_process=[n for p in parts for n in p.sent_per_process],
        lost_cas=sum(p.lost_cas for p in parts),
    )


def merge_reports(
    reports: Sequence[ChildReport], params: Params
) -> tuple[CoalescingResult, IngestResultSet]:
    """One result from every process's figures."""
    calls: Counter[ConversationKey] = Counter()
    replies: defaultdict[ConversationKey, list[str]] = defaultdict(list)
    texts: dict[int, list[str]] = {}
    outcomes: Counter[str] = Counter()
    for report in reports:
        calls.update({conversation(BOT, i): n for i, n in report.calls.items()})
        for i, sent in report.replies.items():
            replies[conversation(BOT, i)].extend(sent)
        texts.update(report.texts)
        outcomes.update(report.outcomes)
    coalescing = CoalescingResult(
        rows=coalescing_rows(Answers(calls, replies), texts, params),
        answered=all(r.answered for r in reports),
        wall_seconds=max(r.wall for r in reports),
        burst_ingest_seconds=max(r.burst_seconds for r in reports),
        max_burst_span_ms=max((s for r in reports for s in r.spans), default=0.0) * 1000,
        ingest_errors=sum(r.ingest_errors for r in reports),
        outcomes=dict(outcomes),
        lags_ms=[lag * 1000 for r in reports for lag in r.lags],
        answered_lags_ms=[lag * 1000 for r in reports for lag in r.answered_lags],
        unattributed_calls=sum(r.unattributed for r in reports),
        total_calls=sum(calls.values()) + sum(r.unattributed for r in reports),
        sent_per_process=[r.outcomes.get("sent", 0) for r in reports],
        lost_cas=sum(r.lost_cas for r in reports),
        backlog=_merge_backlogs([r.backlog for r in reports if r.backlog is not None]),
    )
    ingest = IngestResultSet(
        _aggregate([r.ingest for r in reports]),
        _aggregate([r.raw for r in reports]),
        _aggregate([r.raw_tx for r in reports]),
    )
    return coalescing, ingest


async def run_processes(
    target: StoreTarget, params: Params
) -> tuple[CoalescingResult, IngestResultSet]:
    """Both phases in ``params.processes`` OS processes on one database."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(params.processes)
    totals = (ctx.Value("i", 0), ctx.Value("i", 0))  # replies of the two phases with turns
    results = ctx.Queue()
    await create_raw_table(target)
    procs = [
        ctx.Process(
            target=_child,
            args=(params, target, i, barrier, totals, results),
            name=f"bench-{i}",
        )
        for i in range(params.processes)
    ]
    for proc in procs:
        proc.start()
    try:
        limit = params.timeout * 3 + 300
        reports = [
            await asyncio.to_thread(results.get, True, limit) for _ in range(params.processes)
        ]
    finally:
        for proc in procs:
            await asyncio.to_thread(proc.join, 30)
            if proc.is_alive():
                proc.kill()
    await drop_raw_table(target)
    return merge_reports(reports, params)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m bench.queue``."""
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    combos = [(p, m) for p in args.processes for m in args.scheduler]
    return asyncio.run(run_all(params_from(args), combos))


if __name__ == "__main__":
    sys.exit(main())
