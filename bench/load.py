"""Load benchmark: ``personabot run`` on Telegram long polling under bursts, and a quiet person.

The real runtime in its own OS processes (``bench/_load_runtime.py``: the command line's
``run`` on a generated TOML file; with ``--processes 4`` four of them on one PostgreSQL
database, the Telegram poller elected among them) against the project's fakes, served by this
process on 127.0.0.1: the fake Bot API (tests/fakes/telegram_api.py, real aiogram long
polling) and the fake Messages API (tests/fakes/messages_api.py, the real anthropic SDK) that
answers every call after ``--latency`` seconds. Everything runs on this machine, fakes
included.

One run per ``--processes`` entry, each on a fresh database:

1. warm-up: the quiet person's first message is answered (the path works end to end);
2. idle (``--idle-seconds``): the quiet person writes every ``--quiet-interval`` seconds and
   nobody else does; the time from their message to the reply is the probe;
3. load: ``--people`` people each send one burst of ``--burst`` messages at once, the bursts
   spread evenly over ``--seconds`` seconds (1,000 x 4 over 20 s: 200 messages/s), while the
   quiet person keeps writing; the load ends when every burst is answered (the drain).

Figures of each run:

- messages/s accepted: burst messages acknowledged to Telegram (the ``getUpdates`` offset
  moved past them; the adapter moves it only once a message is stored) from the first burst
  to the last acknowledgement; and the acknowledgement lag (push -> acknowledged);
- turns/s: replies sent from the first burst until every burst was answered;
- drain: from the last burst message to the last burst's reply;
- the quiet person's reply time, p50/p99, idle and under load (push -> ``sendMessage``);
- statements and transactions (``BEGIN``) the database ran in the load window, per inbound
  message and per turn (the same total divided by each), the busiest statements, and the
  background rate while idle. SQLite: the store's trace callback in each runtime process
  (``SQLiteStore.trace``, see bench/_load_runtime.py); PostgreSQL: ``pg_stat_statements`` of
  the benchmark's throwaway cluster (preloaded there; on a server from
  ``PERSONABOT_TEST_POSTGRES_DSN`` without it the counts are reported as unavailable);
- CPU seconds of the runtime processes and of this process (the fakes), and how busy the
  whole machine was, over the load window.

The correctness guard: every burst answered by exactly one reply and one model call that
held all of its messages, every quiet message answered once, every update acknowledged,
every runtime process stopped cleanly. The exit status is 1 when it fails.

Usage::

    uv run python -m bench.load [--quick] [--store sqlite|postgresql] [--processes 1,4]
        [--people 1000] [--burst 4] [--seconds 20] [--latency 0.3] [--quiet-interval 2.5]
        [--idle-seconds 20] [--out bench/results/load.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import os
import re
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Final

import asyncpg

from bench._report import (
    configure_logging,
    environment,
    format_table,
    non_negative_float,
    percentile,
    positive_float,
    positive_int,
    utc_timestamp,
    write_json,
)
from bench._stores import StoreKind, StoreTarget, bench_target
from tests.fakes.messages_api import CannedReply, FakeMessagesAPI, RecordedRequest
from tests.fakes.telegram_api import FakeTelegramAPI, TgChat, TgUser

log = logging.getLogger("personabot.bench.load")

ROOT: Final = Path(__file__).resolve().parents[1]
TOKEN: Final = "5550123:AALoadBench-token-abcdefghijklmnopqr"
TOKEN_ENV: Final = "LOAD_BENCH_TG_TOKEN"
DATABASE: Final = "personabot_bench_load"
PG_SETTINGS: Final = (
    ("shared_preload_libraries", "pg_stat_statements"),
    ("pg_stat_statements.track_utility", "on"),
)
QUIET: Final = TgUser(99_999, "Quinn")
PERSON_BASE: Final = 100_000
FILLER: Final = "how was your day? I keep thinking about the trip we planned for the spring"
PERSONA_SYSTEM: Final = "You are Mira, the load benchmark's persona. Answer briefly."
#: A message's tag: ``p00042 m2/4`` (person 42's second of four) or ``q00007`` (quiet).
TAG: Final = re.compile(r"\b([pq]\d{5})(?: m(\d+)/(\d+))?")
READY_LINE: Final = "running 1 bot(s)"
MONITOR_INTERVAL: Final = 0.05


# -- parameters ------------------------------------------------------------------------------


#: How the runtime processes are started (``asyncio.create_subprocess_exec``'s signature).
Spawn = Callable[..., Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Params:
    """Everything a run depends on (written to the JSON as given)."""

    store: StoreKind
    processes: tuple[int, ...]
    people: int
    burst: int
    seconds: float
    latency: float
    quiet_interval: float
    idle_seconds: float
    timeout: float
    debounce: float | None
    slots: int | None
    quick: bool
    out: Path

    @property
    def offered(self) -> float:
        """Burst messages per second offered."""
        return self.people * self.burst / self.seconds


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    p = argparse.ArgumentParser(
        prog="python -m bench.load", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    p.add_argument("--quick", action="store_true", help="a small run: 30 people over 3 s")
    p.add_argument("--store", choices=("sqlite", "postgresql"), default="sqlite")
    p.add_argument(
        "--processes", type=_ints, default=(1,), help="runtime processes, or a list: 1,4"
    )
    p.add_argument("--people", type=positive_int, help="people with one burst each (1000)")
    p.add_argument("--burst", type=positive_int, default=4, help="messages per burst")
    p.add_argument("--seconds", type=positive_float, help="bursts spread over (20 s)")
    p.add_argument("--latency", type=non_negative_float, default=0.3, help="model seconds")
    p.add_argument("--quiet-interval", type=positive_float, default=2.5)
    p.add_argument("--idle-seconds", type=positive_float, help="idle probe window (20 s)")
    p.add_argument(
        "--timeout", type=positive_float, default=300.0, help="drain deadline after the load"
    )
    p.add_argument(
        "--debounce", type=non_negative_float, help="queue.debounce_seconds (product default)"
    )
    p.add_argument(
        "--slots",
        type=positive_int,
        help="queue.max_concurrent_turns of each process (product default: 16)",
    )
    p.add_argument("--out", type=Path, default=Path("bench/results/load.json"))
    p.add_argument("-v", "--verbose", action="count", default=0, help="-v INFO, -vv DEBUG")
    return p


def _ints(text: str) -> tuple[int, ...]:
    """argparse type: a comma list of integers >= 1."""
    return tuple(positive_int(part) for part in text.split(","))


def params_from(args: argparse.Namespace) -> Params:
    """Resolve quick/full defaults."""
    return Params(
        store=args.store,
        processes=args.processes,
        people=args.people or (30 if args.quick else 1000),
        burst=args.burst,
        seconds=args.seconds or (3.0 if args.quick else 20.0),
        latency=args.latency,
        quiet_interval=args.quiet_interval,
        idle_seconds=args.idle_seconds or (3.0 if args.quick else 20.0),
        timeout=args.timeout,
        debounce=args.debounce,
        slots=args.slots,
        quick=args.quick,
        out=args.out,
    )


# -- the workload ----------------------------------------------------------------------------


def person(index: int) -> TgUser:
    """The ``index``-th person of the load (private chat id = user id)."""
    return TgUser(PERSON_BASE + index, f"Person {index}")


def person_tag(index: int) -> str:
    return f"p{index:05d}"


def burst_text(index: int, position: int, size: int) -> str:
    """Message ``position`` (0-based) of person ``index``'s burst; it names both."""
    return f"{person_tag(index)} m{position + 1}/{size}: {FILLER}"


def quiet_text(number: int) -> str:
    return f"q{number:05d}: still there? just checking in"


def tagged_reply(request: RecordedRequest) -> CannedReply:
    """The fake model's answer: ``ok`` and the tags of the turn's messages (short: few
    tokens to stream; attributable: the reply names what it answers)."""
    tags = sorted({m[1] for m in TAG.finditer(request.last_user_text)})
    return CannedReply(text=" ".join(["ok", *tags]))


def config_text(params: Params, target: StoreTarget, telegram: str, claude: str) -> str:
    """The runtime's TOML: product defaults but for the store, the fakes and the persona."""
    url = target.location if target.kind == "postgresql" else f"sqlite:///{target.location}"
    queue_lines = [
        *([] if params.debounce is None else [f"debounce_seconds = {params.debounce}"]),
        *([] if params.slots is None else [f"max_concurrent_turns = {params.slots}"]),
    ]
    queue = "".join(f"\n{line}" for line in ["[queue]", *queue_lines]) + "\n" if queue_lines else ""
    return f"""
[storage]
url = {json.dumps(url)}

[llm]
base_url = {json.dumps(claude)}
{queue}
[[personas]]
id = "mira"
name = "Mira"
system = {json.dumps(PERSONA_SYSTEM)}
first_message = ["Hi, I'm Mira."]
model = "claude-load-bench"

[[bots]]
platform = "telegram"
persona = "mira"
token_env = "{TOKEN_ENV}"
api_server = {json.dumps(telegram)}
"""


# -- statement counts ------------------------------------------------------------------------


def is_begin(statement: str) -> bool:
    """Whether a statement opens a transaction."""
    head = statement.lstrip().upper()
    return head.startswith(("BEGIN", "START TRANSACTION"))


def is_rollback(statement: str) -> bool:
    """Whether a statement rolls a transaction back."""
    return statement.lstrip().upper().startswith(("ROLLBACK", "ABORT"))


class PgStatements:
    """``pg_stat_statements`` of the benchmark database, read at the marks of the run."""

    def __init__(self, conn: asyncpg.Connection[asyncpg.Record] | None, why: str = "") -> None:
        self._conn = conn
        self.unavailable = why
        self.snapshots: dict[str, Counter[str]] = {}

    @classmethod
    async def connect(cls, dsn: str) -> PgStatements:
        """Install the extension in the database; unavailable when the server lacks it."""
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            await conn.fetchval("SELECT count(*) FROM pg_stat_statements")
        except asyncpg.PostgresError as exc:
            await conn.close()
            return cls(None, f"pg_stat_statements unavailable on this server: {exc}")
        return cls(conn)

    async def mark(self, name: str) -> None:
        """Snapshot the calls of every statement of this database (not the reader's own)."""
        if self._conn is None:
            return
        rows = await self._conn.fetch(
            "SELECT query, calls FROM pg_stat_statements WHERE dbid = (SELECT oid FROM "
            "pg_database WHERE datname = current_database()) AND query NOT LIKE "
            "'%pg_stat_statements%'"
        )
        counts: Counter[str] = Counter()
        for row in rows:
            counts[" ".join(str(row["query"]).split())] += int(row["calls"])
        self.snapshots[name] = counts

    def window(self, start: str, end: str) -> Counter[str] | None:
        """Statements run between two marks."""
        if self._conn is None or start not in self.snapshots or end not in self.snapshots:
            return None
        after, before = self.snapshots[end], self.snapshots[start]
        return Counter({q: n - before.get(q, 0) for q, n in after.items() if n > before.get(q, 0)})

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()


def sqlite_window(files: Sequence[Path], start: float, end: float) -> Counter[str] | None:
    """Statements the runtime processes' trace logs put in ``[start, end)`` (wall clock)."""
    total: Counter[str] = Counter()
    for path in files:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        per_second = int(data["buckets_per_second"])
        low, high = math.floor(start * per_second), math.floor(end * per_second)
        for bucket, counts in data["buckets"].items():
            if low <= int(bucket) < high:
                total.update(counts)
    return total


@dataclass(frozen=True, slots=True)
class StatementFigures:
    """What the database ran in a window."""

    statements: int
    transactions: int
    rollbacks: int
    top: list[tuple[str, int]]

    @classmethod
    def of(cls, counts: Counter[str], top: int = 15) -> StatementFigures:
        return cls(
            statements=sum(counts.values()),
            transactions=sum(n for q, n in counts.items() if is_begin(q)),
            rollbacks=sum(n for q, n in counts.items() if is_rollback(q)),
            top=counts.most_common(top),
        )


# -- processes -------------------------------------------------------------------------------


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc; NaN elsewhere)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return math.nan
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _machine_ticks() -> tuple[int, int]:
    """(busy, total) CPU ticks of the whole machine since boot (NaN-free zeros elsewhere)."""
    try:
        line = Path("/proc/stat").read_text().splitlines()[0]
    except OSError:
        return 0, 0
    values = [int(v) for v in line.split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    return sum(values) - idle, sum(values)


@dataclass
class RuntimeProcess:
    """One ``personabot run`` process of the benchmark."""

    index: int
    proc: asyncio.subprocess.Process
    stderr: Path
    counts: Path

    def ready(self) -> bool:
        with contextlib.suppress(OSError):
            return READY_LINE in self.stderr.read_text(errors="replace")
        return False

    def tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.stderr.read_text(errors="replace").splitlines()[-lines:])
        return ""


def _child_env() -> dict[str, str]:
    drop = ("ANTHROPIC_", "PERSONABOT_", "TELEGRAM_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update({TOKEN_ENV: TOKEN, "ANTHROPIC_API_KEY": "sk-load-bench"})
    return env


@contextlib.asynccontextmanager
async def runtimes(
    count: int,
    config: Path,
    workdir: Path,
    spawn: Spawn,
    env: Callable[[int], Mapping[str, str]] = lambda _i: {},
) -> AsyncIterator[list[RuntimeProcess]]:
    """``count`` runtime processes on ``config`` (``env(i)``: what process i's environment
    adds); SIGTERM on exit (a clean stop: exit 0)."""
    started: list[RuntimeProcess] = []
    try:
        for i in range(count):
            stderr = workdir / f"runtime-{i}.err"
            with (workdir / f"runtime-{i}.out").open("wb") as out, stderr.open("wb") as err:
                proc = await spawn(
                    sys.executable, "-m", "bench._load_runtime", str(config),
                    str(workdir / f"runtime-{i}.counts.json"),
                    cwd=ROOT, env={**_child_env(), **env(i)}, stdout=out, stderr=err,
                )  # fmt: skip
            started.append(RuntimeProcess(i, proc, stderr, workdir / f"runtime-{i}.counts.json"))
        yield started
    finally:
        for rt in started:
            if rt.proc.returncode is None:
                rt.proc.send_signal(signal.SIGTERM)
        for rt in started:
            try:
                await asyncio.wait_for(rt.proc.wait(), timeout=120)
            except TimeoutError:
                rt.proc.kill()
                await rt.proc.wait()


async def wait_ready(
    procs: Sequence[RuntimeProcess], telegram: FakeTelegramAPI, within: float
) -> None:
    """Every process started its runtime, and one of them polls."""
    deadline = time.monotonic() + within
    while not (all(p.ready() for p in procs) and telegram.polls_started(TOKEN)):
        for p in procs:
            if p.proc.returncode is not None:
                raise RuntimeError(
                    f"runtime {p.index} exited with {p.proc.returncode}:\n{p.tail()}"
                )
        if time.monotonic() > deadline:
            tails = "\n".join(f"runtime {p.index}:\n{p.tail()}" for p in procs)
            raise RuntimeError(f"runtimes not ready within {within:.0f} s\n{tails}")
        await asyncio.sleep(0.1)


# -- observing the fakes ---------------------------------------------------------------------


@dataclass(slots=True)
class Pushed:
    """A message pushed to the fake Bot API (in update order)."""

    tag: str
    at: float  # monotonic
    burst: bool
    acked: float | None = None


@dataclass(frozen=True, slots=True)
class Sent:
    """A reply the runtime sent (``sendMessage`` that succeeded)."""

    chat_id: int
    at: float  # monotonic, on arrival at the fake
    tags: frozenset[str]


class Observer:
    """Watches the fake Bot API: pushes in order, acknowledgements, replies by chat."""

    def __init__(self, telegram: FakeTelegramAPI) -> None:
        self.telegram = telegram
        self.pushed: list[Pushed] = []
        self.replies: list[Sent] = []
        self.by_chat: Counter[int] = Counter()
        self.send_errors = 0
        self._scanned = 0
        self._acked = 0  # how many of ``pushed`` are acknowledged

    def push(self, user: TgUser, text: str, *, burst: bool) -> None:
        self.telegram.push_message(TOKEN, TgChat.private(user), user, text)
        tag = text.split(" ", 1)[0].rstrip(":")
        self.pushed.append(Pushed(tag, time.monotonic(), burst))

    def scan(self) -> None:
        """Take in what happened since the last scan."""
        now = time.monotonic()
        # Updates are confirmed in order: everything pushed minus what is still unconfirmed.
        acked = len(self.pushed) - self.telegram.pending_updates(TOKEN)
        for item in self.pushed[self._acked : acked]:
            item.acked = now
        self._acked = max(self._acked, acked)
        calls = self.telegram.calls
        for call in calls[self._scanned :]:
            if call.method != "sendMessage":
                continue
            if not call.ok:
                self.send_errors += 1
                continue
            chat = call.chat_id or 0
            tags = frozenset(m[1] for m in TAG.finditer(call.text))
            self.replies.append(Sent(chat, call.at, tags))
            self.by_chat[chat] += 1
        self._scanned = len(calls)

    async def watch(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self.scan()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), MONITOR_INTERVAL)
        self.scan()

    def answered(self, tag: str) -> float | None:
        """When the first reply naming ``tag`` arrived."""
        return next((r.at for r in self.replies if tag in r.tags), None)


class QuietPerson:
    """Writes every ``interval`` seconds (through the observer, which keeps the times)."""

    def __init__(self, observer: Observer, interval: float) -> None:
        self._observer = observer
        self._interval = interval
        self.number = 0

    def say(self) -> str:
        """Send the next message now; its tag."""
        self.number += 1
        text = quiet_text(self.number)
        self._observer.push(QUIET, text, burst=False)
        return text.split(":", 1)[0]

    async def run(self, stop: asyncio.Event) -> None:
        """Write every interval until ``stop``."""
        next_at = time.monotonic()
        while not stop.is_set():
            self.say()
            next_at += self._interval
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, next_at - time.monotonic()))


async def wait_until(check: Any, within: float, poll: float = MONITOR_INTERVAL) -> bool:
    """Poll ``check()`` until true or ``within`` seconds passed; whether it became true."""
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(poll)
    return True


# -- one configuration -----------------------------------------------------------------------


@dataclass
class Marks:
    """Moments of the run, on both clocks (monotonic for the fakes, wall for the counts)."""

    mono: dict[str, float] = field(default_factory=dict)
    wall: dict[str, float] = field(default_factory=dict)
    cpu: dict[str, list[float]] = field(default_factory=dict)  # runtimes' CPU seconds
    own_cpu: dict[str, float] = field(default_factory=dict)
    machine: dict[str, tuple[int, int]] = field(default_factory=dict)

    def take(self, name: str, procs: Sequence[RuntimeProcess]) -> None:
        self.mono[name] = time.monotonic()
        self.wall[name] = time.time()
        self.cpu[name] = [_cpu_seconds(p.proc.pid) for p in procs]
        self.own_cpu[name] = time.process_time()
        self.machine[name] = _machine_ticks()


def _lat(values: Sequence[float]) -> dict[str, Any]:
    return {
        "samples": len(values),
        "p50_s": percentile(values, 50),
        "p99_s": percentile(values, 99),
        "max_s": max(values, default=math.nan),
    }


async def run_config(params: Params, processes: int, spawn: Spawn) -> dict[str, Any]:
    """One configuration on a fresh database and fresh fakes; its JSON report."""
    async with (
        bench_target(params.store, name=DATABASE, server_settings=PG_SETTINGS) as target,
        FakeTelegramAPI() as telegram,
        FakeMessagesAPI(latency=params.latency) as claude,
    ):
        telegram.add_bot(TOKEN, "load_bench_bot")
        claude.answer_when(lambda _request: True, tagged_reply)
        pg = await PgStatements.connect(target.location) if target.kind == "postgresql" else None
        with tempfile.TemporaryDirectory(prefix="personabot-load-") as tmp:
            workdir = Path(tmp)
            config = workdir / "personabot.toml"
            config.write_text(
                config_text(params, target, telegram.base_url, claude.base_url), encoding="utf-8"
            )
            observer = Observer(telegram)
            marks = Marks()
            failures: list[str] = []
            codes: list[int | None] = []
            try:
                async with runtimes(processes, config, workdir, spawn) as procs:
                    await wait_ready(procs, telegram, within=120)
                    log.info("runtime process(es) ready")
                    await drive(params, observer, marks, procs, pg, failures)
                    log.info("stopping the runtime process(es)")
                log.info("stopped")
                for proc in procs:
                    log.debug("runtime %d stderr:\n%s", proc.index, proc.tail(15))
                codes = [p.proc.returncode for p in procs]
                observer.scan()  # replies sent during the shutdown grace
                if pg is None:
                    files = [p.counts for p in procs]
                    idle = sqlite_window(files, marks.wall["idle"], marks.wall["load"])
                    load = sqlite_window(files, marks.wall["load"], marks.wall["drained"])
                    why = "" if load is not None else "a runtime process wrote no counts"
                else:
                    idle, load = pg.window("idle", "load"), pg.window("load", "drained")
                    why = pg.unavailable
            finally:
                if pg is not None:
                    await pg.close()
    failures += [f"runtime {i} exited with {c}" for i, c in enumerate(codes) if c != 0]
    failures += guard(params, observer, claude.requests)
    result = report(params, processes, target, observer, marks, (idle, load, why), failures)
    result["telegram_calls"] = dict(Counter(c.method for c in telegram.calls))
    result["model_calls"] = len(claude.requests)
    return result


async def drive(
    params: Params,
    observer: Observer,
    marks: Marks,
    procs: Sequence[RuntimeProcess],
    pg: PgStatements | None,
    failures: list[str],
) -> None:
    """Warm-up, idle probe, load and drain, while the observer watches the fakes."""
    stop_watch = asyncio.Event()
    watcher = asyncio.create_task(observer.watch(stop_watch))
    quiet = QuietPerson(observer, params.quiet_interval)
    try:
        first = quiet.say()  # warm-up, before the windows: not measured
        if not await wait_until(lambda: observer.answered(first) is not None, 60):
            raise RuntimeError("the warm-up message got no reply within 60 s")
        stop_quiet = asyncio.Event()
        log.info("warm-up answered; idle probe")
        marks.take("idle", procs)
        if pg is not None:
            await pg.mark("idle")
        talker = asyncio.create_task(quiet.run(stop_quiet))
        await asyncio.sleep(params.idle_seconds)
        marks.take("load", procs)
        if pg is not None:
            await pg.mark("load")
        log.info("load")
        started = time.monotonic()
        spacing = params.seconds / params.people
        for i in range(params.people):
            delay = started + i * spacing - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            user = person(i)
            for position in range(params.burst):
                observer.push(user, burst_text(i, position, params.burst), burst=True)
        marks.take("sent", procs)
        chats = [person(i).id for i in range(params.people)]
        drained = await wait_until(lambda: all(observer.by_chat[c] for c in chats), params.timeout)
        marks.take("drained", procs)
        if pg is not None:
            await pg.mark("drained")
        if not drained:
            missing = sum(1 for c in chats if not observer.by_chat[c])
            failures.append(f"{missing} bursts not answered within {params.timeout:.0f} s")
        log.info("drained")
        stop_quiet.set()
        await talker
        waiting = [p.tag for p in observer.pushed if not p.burst]
        await wait_until(
            lambda: all(observer.answered(t) is not None for t in waiting), min(60, params.timeout)
        )
        await asyncio.sleep(1.0)  # a late second reply would show by now
    finally:
        stop_watch.set()
        await watcher


# -- the guard -------------------------------------------------------------------------------


def reply_calls(requests: Iterable[RecordedRequest]) -> dict[str, list[set[int]]]:
    """For each person's tag, the burst positions each reply model call held (in its last
    user message); calls that are not the persona's replies (memory tasks) are left out."""
    calls: dict[str, list[set[int]]] = {}
    for request in requests:
        system = request.system_blocks
        if not system or PERSONA_SYSTEM not in str(system[0].get("text", "")):
            continue
        parts: dict[str, set[int]] = {}
        for found in TAG.finditer(request.last_user_text):
            if found[2]:
                parts.setdefault(found[1], set()).add(int(found[2]))
        for tag, positions in parts.items():
            calls.setdefault(tag, []).append(positions)
    return calls


def guard(params: Params, observer: Observer, requests: Sequence[RecordedRequest]) -> list[str]:
    """Exactly one reply and one model call with every message per burst; every quiet
    message answered once; everything acknowledged."""
    failures: list[str] = []
    calls = reply_calls(requests)
    wanted = set(range(1, params.burst + 1))
    bad_replies = [
        f"{person_tag(i)}: {n} replies"
        for i in range(params.people)
        if (n := observer.by_chat[person(i).id]) != 1
    ]
    bad_calls = [
        f"{person_tag(i)}: model calls held {[sorted(c) for c in made]}"
        for i in range(params.people)
        if (made := calls.get(person_tag(i), [])) != [wanted]
    ]
    if bad_replies:
        failures.append(f"{len(bad_replies)} bursts without exactly one reply")
    if bad_calls:
        failures.append(f"{len(bad_calls)} bursts without exactly one model call holding all")
    if bad_replies or bad_calls:
        log.warning("guard: %s", "; ".join([*bad_replies, *bad_calls][:10]))
    answered = Counter(t for r in observer.replies if r.chat_id == QUIET.id for t in r.tags)
    unanswered = [p.tag for p in observer.pushed if not p.burst and answered[p.tag] == 0]
    twice = [t for t, n in answered.items() if n > 1]
    if unanswered:
        failures.append(f"quiet messages not answered: {', '.join(unanswered[:5])}")
    if twice:
        failures.append(f"quiet messages answered twice: {', '.join(twice[:5])}")
    unacked = sum(1 for p in observer.pushed if p.acked is None)
    if unacked:
        failures.append(f"{unacked} updates never acknowledged")
    return failures


# -- figures ---------------------------------------------------------------------------------


def report(
    params: Params,
    processes: int,
    target: StoreTarget,
    observer: Observer,
    marks: Marks,
    statements: tuple[Counter[str] | None, Counter[str] | None, str],
    failures: list[str],
) -> dict[str, Any]:
    """Every figure of one configuration, JSON-ready."""
    m = marks.mono
    bursts = [p for p in observer.pushed if p.burst]
    first_push = bursts[0].at if bursts else math.nan
    last_push = bursts[-1].at if bursts else math.nan
    acks = [p.acked for p in bursts if p.acked is not None]
    last_ack = max(acks, default=math.nan)
    burst_chats = {person(i).id for i in range(params.people)}
    burst_replies = [r.at for r in observer.replies if r.chat_id in burst_chats]
    last_answer = max(burst_replies, default=math.nan)
    window = m["drained"] - m["load"]
    turns_in_load = sum(1 for r in observer.replies if m["load"] <= r.at <= m["drained"])
    idle_lat: list[float] = []
    load_lat: list[float] = []
    for sent in observer.pushed:
        answered = None if sent.burst else observer.answered(sent.tag)
        if answered is None:
            continue
        if m["idle"] <= sent.at < m["load"]:
            idle_lat.append(answered - sent.at)
        elif m["load"] <= sent.at <= m["drained"]:
            load_lat.append(answered - sent.at)
    messages_in_load = sum(1 for p in observer.pushed if m["load"] <= p.at <= m["drained"])
    idle_counts, load_counts, why = statements
    idle_window = m["load"] - m["idle"]
    stmt: dict[str, Any] = {"available": load_counts is not None, "why_not": why or None}
    if load_counts is not None:
        figures = StatementFigures.of(load_counts)
        stmt.update(
            load_window_seconds=window,
            inbound_messages=messages_in_load,
            turns=turns_in_load,
            statements=figures.statements,
            transactions=figures.transactions,
            rollbacks=figures.rollbacks,
            statements_per_message=_ratio(figures.statements, messages_in_load),
            transactions_per_message=_ratio(figures.transactions, messages_in_load),
            statements_per_turn=_ratio(figures.statements, turns_in_load),
            transactions_per_turn=_ratio(figures.transactions, turns_in_load),
            top=[{"statement": q, "count": n} for q, n in figures.top],
        )
    if idle_counts is not None:
        idle = StatementFigures.of(idle_counts)
        stmt["idle"] = {
            "seconds": idle_window,
            "statements": idle.statements,
            "transactions": idle.transactions,
            "statements_per_second": _ratio(idle.statements, idle_window),
            "quiet_turns": len(idle_lat),
        }
    cpu = {
        "runtimes_s": [
            after - before
            for before, after in zip(marks.cpu["load"], marks.cpu["drained"], strict=True)
        ],
        "bench_s": marks.own_cpu["drained"] - marks.own_cpu["load"],
        "window_s": window,
    }
    busy0, total0 = marks.machine["load"]
    busy1, total1 = marks.machine["drained"]
    cpu["machine_busy"] = _ratio(busy1 - busy0, total1 - total0)
    return {
        "store": target.kind,
        "store_description": target.describe(),
        "processes": processes,
        "people": params.people,
        "burst": params.burst,
        "seconds": params.seconds,
        "offered_messages_per_second": params.offered,
        "burst_messages": len(bursts),
        # How long pushing the bursts took (the schedule says ``seconds`` minus one spacing):
        # longer means this process could not offer the rate.
        "send_seconds": last_push - first_push,
        "accepted_messages_per_second": _ratio(len(acks), last_ack - first_push),
        "ack_lag": _lat([p.acked - p.at for p in bursts if p.acked is not None]),
        "turns": turns_in_load,
        "turns_per_second": _ratio(turns_in_load, window),
        "drain_seconds": last_answer - last_push,
        "quiet_idle": _lat(idle_lat),
        "quiet_load": _lat(load_lat),
        "statements": stmt,
        "cpu": cpu,
        "send_errors": observer.send_errors,
        "guard": {"passed": not failures, "failures": failures},
    }


def _ratio(a: float, b: float) -> float:
    return a / b if b and not math.isnan(b) else math.nan


# -- tables ----------------------------------------------------------------------------------


def _pair(a: float, b: float) -> str:
    def cell(v: float) -> str:
        return "-" if math.isnan(v) else f"{v:.2f}"

    return f"{cell(a)} / {cell(b)}"


def summary_rows(runs: Iterable[Mapping[str, Any]]) -> list[list[object]]:
    rows: list[list[object]] = []
    for r in runs:
        s = r["statements"]
        nan = math.nan
        accepted, offered = r["accepted_messages_per_second"], r["offered_messages_per_second"]
        rows.append(
            [
                f"{r['store']}, {r['processes']} proc",
                f"{accepted:.0f} of {offered:.0f}",
                r["ack_lag"]["p99_s"],
                r["turns_per_second"],
                r["drain_seconds"],
                _pair(r["quiet_idle"]["p50_s"], r["quiet_idle"]["p99_s"]),
                _pair(r["quiet_load"]["p50_s"], r["quiet_load"]["p99_s"]),
                _pair(s.get("statements_per_message", nan), s.get("transactions_per_message", nan)),
                _pair(s.get("statements_per_turn", nan), s.get("transactions_per_turn", nan)),
                "pass" if r["guard"]["passed"] else "FAIL",
            ]
        )
    return rows


SUMMARY_HEADERS: Final = (
    "run",
    "accepted msg/s",
    "ack p99 s",
    "turns/s",
    "drain s",
    "quiet idle p50/p99 s",
    "quiet load p50/p99 s",
    "stmts/tx per msg",
    "stmts/tx per turn",
    "guard",
)


def details(run: Mapping[str, Any]) -> str:
    """The busiest statements of the load window and the CPU, for one configuration."""
    s = run["statements"]
    head = f"{run['store']}, {run['processes']} process(es)"
    if not s["available"]:
        text = f"{head}: statement counts unavailable ({s['why_not']})"
    else:
        per = s["inbound_messages"] or 1
        rows = [[_short(t["statement"]), t["count"], t["count"] / per] for t in s["top"]]
        text = format_table(
            ("statement", "count", "per msg"),
            rows,
            f"{head}: busiest statements of the load window ({s['statements']:,} statements, "
            f"{s['transactions']:,} transactions, {s['inbound_messages']:,} messages, "
            f"{s['turns']:,} turns in {s['load_window_seconds']:.1f} s)",
        )
        if "idle" in s:
            idle = s["idle"]
            text += (
                f"\nidle: {idle['statements_per_second']:.1f} statements/s over "
                f"{idle['seconds']:.0f} s ({idle['quiet_turns']} quiet turns)"
            )
    nominal = run["seconds"] * (1 - 1 / run["people"])
    if run["send_seconds"] > nominal + max(0.5, 0.05 * nominal):
        text += (
            f"\nnote: pushing the bursts took {run['send_seconds']:.1f} s instead of "
            f"{nominal:.1f} s: the offered rate was lower than asked"
        )
    cpu = run["cpu"]
    runtimes = ", ".join(f"{c:.1f}" for c in cpu["runtimes_s"])
    text += (
        f"\nCPU over the {cpu['window_s']:.1f} s load window: runtime process(es) {runtimes} s; "
        f"this process (the fakes) {cpu['bench_s']:.1f} s; machine busy "
        f"{cpu['machine_busy'] * 100:.0f} %"
    )
    return text


def _short(statement: str, width: int = 100) -> str:
    return statement if len(statement) <= width else statement[: width - 3] + "..."


# -- main ------------------------------------------------------------------------------------


async def run(params: Params, spawn: Spawn = asyncio.create_subprocess_exec) -> int:
    """Every configuration; tables, JSON, the exit status."""
    runs = []
    for processes in params.processes:
        print(f"=== {params.store}, {processes} runtime process(es) ===", flush=True)
        single = replace(params, processes=(processes,))
        result = await run_config(single, processes, spawn)
        runs.append(result)
        print(details(result), end="\n\n", flush=True)
    title = (
        f"Load: {params.people:,} people x {params.burst} messages over {params.seconds:g} s "
        f"({params.offered:.0f} msg/s offered), model {params.latency:g} s, quiet person "
        f"every {params.quiet_interval:g} s, {params.slots or 16} turn slots a process"
    )
    print(format_table(SUMMARY_HEADERS, summary_rows(runs), title))
    payload = {
        "benchmark": "load",
        "timestamp": utc_timestamp(),
        "parameters": {**asdict(params), "out": str(params.out)},
        "environment": environment(),
        "runs": runs,
        "guard": {"passed": all(r["guard"]["passed"] for r in runs)},
    }
    write_json(params.out, payload)
    print(f"\nJSON written to {params.out}")
    failed = False
    for r in runs:
        for failure in r["guard"]["failures"]:
            failed = True
            print(f"FAIL ({r['store']}, {r['processes']} proc): {failure}", file=sys.stderr)
    return 1 if failed else 0


def main(
    argv: Sequence[str] | None = None, *, spawn: Spawn = asyncio.create_subprocess_exec
) -> int:
    """Entry point of ``python -m bench.load``; ``spawn`` starts the runtime processes (the
    tests hand their own: tests/processes.py)."""
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    try:
        return asyncio.run(run(params_from(args), spawn))
    except RuntimeError as exc:  # a runtime that did not start or answer at all
        print(f"FAIL: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
