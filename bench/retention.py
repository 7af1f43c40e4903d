"""Benchmark of the retention worker and audit (docs/architecture.md#retention) on a large SQLite
file.

1. Fill: a real SQLite file (temp dir) is migrated by ``SQLiteStore`` and then bulk-filled
   through ``sqlite3`` (big transactions, secondary indexes of ``messages`` dropped and rebuilt)
   with ``--messages`` messages in ``--sessions`` sessions, four sessions per conversation,
   spread over ~120 days. The earlier sessions of a conversation closed long ago; its last one
   is, by conversation: closed long ago, closed recently, closed recently but opened before
   the cutoff (messages older than it), open with old messages, or open and recent. Sessions
   longer than twice the window carry the summary compaction would have left (turns
   1..n-window). Fill time is reported apart.
2. ``Retention.run_once()`` (days=30) in session mode, then on a fresh copy of the filled file
   in message mode (summary model: OfflineLLM, no latency), each followed by a second run.
3. ``Retention.audit()`` at days=7 in both modes over the store after the session-mode run,
   plus the audit of the policy in force over the store after the message-mode run (it must
   find no session with missing turns).
4. Reply latency (message ingest -> reply sent) of a real Ingestor + Scheduler + Pipeline with
   OfflineLLM(latency) on a fresh copy: ``--turns`` single-message bursts into as many open
   conversations at ``--rate`` a second, once alone, then while ``Retention.run_once()`` runs on
   a second store connection to the same file (session mode; then message mode, which finds
   the closed sessions gone and goes straight to summarising and trimming open ones), then,
   on another fresh copy, with session mode on the reply path's own connection (what
   ``personabot run`` does in-process). A third connection probes how long a writer waits for
   SQLite's write lock, to show why replies slow down.

The fill leaves the outbox empty by default. The pipeline leaves one delivered outbox row per
reply and nothing prunes them, so a real store of N messages holds about N/2; ``--outbox``
fills them too (``expire_session`` then scans the whole outbox per session: slow, see the
report of issue 5).

Usage (always as a module)::

    uv run python -m bench.retention [--messages 1000000] [--sessions 20000] [--quick]
        [--outbox] [--out bench/results/retention.json]

Prints plain-text tables, writes every figure as JSON, and exits 1 on a correctness failure:
an open session losing messages in session mode, a closed session left with only part of its
messages, an open session whose deleted turns no summary covers, data past the policy left
after a run, reported counts that disagree with the file or the retention log, an audit
finding missing turns after retention, a turn noticing missing turns, or a message left
without a reply. Slow figures are reported, never a failure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

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
from bench.queue import stop_scheduler
from bot.app.build import memory_on, turn_parts
from bot.core.clock import SystemClock
from bot.core.errors import StoreError
from bot.core.events import ConversationKey, Inbound, QueuePolicy, Reply, SessionKey
from bot.llm.offline import OfflineLLM
from bot.queue import Ingestor, Scheduler
from bot.runtime.pipeline import BotProfile, Bots, Pipeline
from bot.store.sqlite import SQLiteStore
from memory.assemble import Budget, PersonaPin
from memory.records import Summary
from memory.retention.worker import AtRisk, Retention, RetentionPolicy
from memory.service import Memory, MemoryPolicy

log = logging.getLogger("personabot.bench.retention")

Mode = Literal["session", "message"]
DAY: Final = 86_400.0
BOT: Final = "bench-retention"
PLATFORM: Final = "bench"
SESSIONS_PER_CONVERSATION: Final = 4
BUSY_TIMEOUT_MS: Final = 5000  # the [storage] busy_timeout_ms default
# Category of a conversation's last session, by conversation index modulo 8.
LAST_SESSION: Final = (
    "closed_old",
    "closed_old",
    "closed_recent",
    "closed_spanning",
    "open_old",
    "open_old",
    "open_recent",
    "open_recent",
)
CATEGORIES: Final = ("closed_old", "closed_recent", "closed_spanning", "open_old", "open_recent")
PIN: Final = PersonaPin(
    name="Bench",
    system="You are a benchmark persona. Answer briefly.",
    first_message=("Hello!",),
    model="offline",
)
USER_TEXTS: Final = (
    "morning! slept badly again, the neighbours had a party until two",
    "can you remind me what we said about the budget for the trip?",
    "I finally booked the train tickets, leaving on the 14th at 7:40",
    "my sister is coming over on Sunday, I want to cook something nice but not too fancy",
    "work was a lot today. the release slipped again and everyone is tired",
    "ok so the plan is: gym on monday and thursday, long walk on saturday",
    "do you think I should tell my manager about the offer from the other team?",
    "the cat knocked the plant over AGAIN",
)
ASSISTANT_TEXTS: Final = (
    "That sounds exhausting. A party until two on a work night is rough; did you manage to get "
    "any rest this morning, or are you running on coffee today?",
    "We said roughly 900 for the whole week: 350 for the train and the room, and the rest for "
    "food and the museum pass. You wanted to keep a small buffer for the last day.",
    "Nice, that's one big thing off the list. 7:40 is early, so maybe pack the night before and "
    "leave the tickets by the door.",
    "Something you can prepare ahead works well when you want to talk instead of standing at the "
    "stove: a tray bake, a big salad, or the lentil soup you mentioned last week.",
    "I'm sorry, that's a heavy week. Slipping releases wear everyone down. Is there one thing "
    "you could drop or hand off before Friday?",
    "That's a realistic plan. Two gym days and a long walk leave room for rest; want me to ask "
    "you on Thursday how it's going?",
)


# -- parameters ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Params:
    """Everything the run depends on (written to the JSON as given)."""

    messages: int
    sessions: int
    days: float
    audit_days: float
    batch_size: int
    turns: int
    rate: float
    latency: float
    debounce: float
    max_wait: float
    max_concurrent: int
    timeout: float
    seed: int
    outbox: bool
    quick: bool
    out: Path


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    p = argparse.ArgumentParser(
        prog="python -m bench.retention",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    p.add_argument("--quick", action="store_true", help="100,000 messages in 2,000 sessions")
    p.add_argument("--messages", type=positive_int, help="default 1,000,000 (quick: 100,000)")
    p.add_argument("--sessions", type=positive_int, help="default 20,000 (quick: 2,000)")
    p.add_argument("--days", type=positive_float, default=30.0, help="retention days")
    p.add_argument("--audit-days", type=positive_float, default=7.0)
    p.add_argument("--batch-size", type=positive_int, default=500)
    p.add_argument("--turns", type=positive_int, help="latency phase turns (200; quick 100)")
    p.add_argument("--rate", type=positive_float, default=20.0, help="turns a second")
    p.add_argument("--latency", type=non_negative_float, default=0.05, help="reply model seconds")
    p.add_argument("--debounce", type=non_negative_float, default=0.1)
    p.add_argument("--max-wait", type=non_negative_float, default=2.0)
    p.add_argument("--max-concurrent", type=positive_int, default=16, help="turns at once")
    p.add_argument("--timeout", type=positive_float, default=120.0, help="answer deadline")
    p.add_argument("--seed", type=int, default=5)
    p.add_argument(
        "--outbox",
        action="store_true",
        help="also fill the delivered outbox row of every reply, as the pipeline leaves them",
    )
    p.add_argument("--out", type=Path, default=Path("bench/results/retention.json"))
    p.add_argument("-v", "--verbose", action="count", default=0)
    return p


def params_from(args: argparse.Namespace) -> Params:
    """Parameters with the --quick defaults applied; rejects impossible shapes."""
    messages = args.messages or (100_000 if args.quick else 1_000_000)
    sessions = args.sessions or (2_000 if args.quick else 20_000)
    if messages < 2 * sessions:
        raise SystemExit("--messages must be at least twice --sessions (2 messages a session)")
    return Params(
        messages=messages,
        sessions=sessions,
        days=args.days,
        audit_days=args.audit_days,
        batch_size=args.batch_size,
        turns=args.turns or (100 if args.quick else 200),
        rate=args.rate,
        latency=args.latency,
        debounce=args.debounce,
        max_wait=args.max_wait,
        max_concurrent=args.max_concurrent,
        timeout=args.timeout,
        seed=args.seed,
        outbox=args.outbox,
        quick=args.quick,
        out=args.out,
    )


# -- the workload ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PlannedSession:
    """One session of the fill: row id, times and message count."""

    row_id: int
    conv: int  # conversation index; its row id is conv + 1
    number: int  # session_no within the conversation
    category: str
    opened_at: float
    last_at: float  # the last message and the last activity
    closed_at: float | None
    messages: int

    def created_at(self, turn: int) -> float:
        """When message ``turn`` was written (evenly spread over the session)."""
        if self.messages < 2:
            return self.last_at
        return self.opened_at + (self.last_at - self.opened_at) * (turn - 1) / (self.messages - 1)


def conversation_key(conv: int) -> ConversationKey:
    """The key of the fill's ``conv``-th conversation."""
    return ConversationKey(PLATFORM, f"chat-{conv}", None, BOT)


def _times(category: str, now: float, rng: random.Random) -> tuple[float, float, float | None]:
    """(opened_at, last_at, closed_at) of a conversation's last session."""
    if category == "closed_old":
        opened = now - rng.uniform(45, 60) * DAY
        last = opened + rng.uniform(0.05, 3) * DAY
    elif category == "closed_recent":
        opened = now - rng.uniform(3, 25) * DAY
        last = opened + rng.uniform(0.05, 2) * DAY
    elif category == "closed_spanning":
        opened = now - rng.uniform(40, 60) * DAY
        last = now - rng.uniform(5, 20) * DAY
    elif category == "open_old":
        return now - rng.uniform(40, 110) * DAY, now - rng.uniform(0.01, 2) * DAY, None
    else:  # open_recent
        return now - rng.uniform(1.5, 20) * DAY, now - rng.uniform(0.01, 1) * DAY, None
    return opened, last, last + 3600.0  # closed by an idle timeout of an hour


def plan_sessions(sessions: int, messages: int, now: float, seed: int) -> list[PlannedSession]:
    """Every session of the fill, in row-id order (a conversation's sessions are adjacent)."""
    rng = random.Random(seed)
    base, extra = divmod(messages, sessions)
    plans: list[PlannedSession] = []
    conversations = math.ceil(sessions / SESSIONS_PER_CONVERSATION)
    for conv in range(conversations):
        count = min(SESSIONS_PER_CONVERSATION, sessions - conv * SESSIONS_PER_CONVERSATION)
        for j in range(count):
            last_one = j == count - 1
            category = LAST_SESSION[conv % len(LAST_SESSION)] if last_one else "closed_old"
            if last_one:
                opened, last, closed = _times(category, now, rng)
            else:  # earlier sessions: ~115, ~95, ~75 days ago, closed after an idle hour
                opened = now - (118 - 20 * j - rng.uniform(0, 4)) * DAY
                last = opened + rng.uniform(0.05, 3) * DAY
                closed = last + 3600.0
            index = len(plans)
            size = base + (1 if index < extra else 0)
            plans.append(
                PlannedSession(index + 1, conv, j + 1, category, opened, last, closed, size)
            )
    return plans


def summary_body(plan: PlannedSession, window: int) -> Summary:
    """The summary compaction would have left on a session longer than twice the window."""
    return Summary(
        first_turn=1,
        last_turn=plan.messages - window,
        topics=("the spring trip", "work stress", "cooking for family"),
        user_said=tuple(t[:120] for t in USER_TEXTS[: 4 + plan.conv % 4]),
        open_threads=("ask how the release went",),
        preferences=("short, warm replies",),
    )


_MESSAGE_SQL: Final = (
    "INSERT INTO messages (id, conversation_id, session_id, turn, role, author_id, display_name, "
    "text, platform_message_id, is_private, version, pending, answered_by, created_at, model, "
    "input_tokens, output_tokens) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, 0, ?, ?, ?, ?, ?)"
)
_SESSION_SQL: Final = (
    "INSERT INTO sessions (id, conversation_id, session_no, status, opened_at, last_activity_at, "
    "closed_at, close_reason, next_turn, last_user_turn, extracted_turn) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def message_rows(plan: PlannedSession, first_id: int, version: int) -> Iterator[tuple[object, ...]]:
    """The session's messages: turns 1..n, user and assistant alternating, all answered."""
    user, name = f"user-{plan.conv}", f"User {plan.conv}"
    for turn in range(1, plan.messages + 1):
        row_id = first_id + turn - 1
        head = (row_id, plan.conv + 1, plan.row_id, turn)
        created = plan.created_at(turn)
        if turn % 2:
            version += 1
            answered = row_id + 1 if turn < plan.messages else None
            text = USER_TEXTS[(row_id * 7) % len(USER_TEXTS)]
            tail: tuple[object, ...] = (None, None, None)
            who: tuple[object, ...] = ("user", user, name, text, f"{plan.number}-{turn}")
            yield (*head, *who, version, answered, created, *tail)
        else:
            text = ASSISTANT_TEXTS[(row_id * 5) % len(ASSISTANT_TEXTS)]
            tail = ("offline", 1200 + turn * 40, 60)
            who = ("assistant", "assistant", "", text, None)
            yield (*head, *who, version, None, created, *tail)


def session_row(plan: PlannedSession) -> tuple[object, ...]:
    """The sessions row of a planned session."""
    last_user = plan.messages if plan.messages % 2 else plan.messages - 1
    status = "open" if plan.closed_at is None else "closed"
    reason = None if plan.closed_at is None else "idle"
    return (
        plan.row_id,
        plan.conv + 1,
        plan.number,
        status,
        plan.opened_at,
        plan.last_at,
        plan.closed_at,
        reason,
        plan.messages + 1,
        last_user,
        last_user,
    )


@dataclass(frozen=True, slots=True)
class FillResult:
    """What the fill wrote and how long it took."""

    seconds: float
    conversations: int
    sessions: int
    messages: int
    summaries: int
    outbox_rows: int
    file_mb: float
    by_category: dict[str, int]


def flush(path: Path) -> None:
    """fsync ``path``: no write-back of it left for the kernel to do during a measurement."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


async def migrate(path: Path) -> None:
    """Create the schema the way the bot does (SQLiteStore applies the migrations)."""
    async with SQLiteStore(path=path):
        pass


def _drop_message_indexes(con: sqlite3.Connection) -> list[str]:
    """Drop the secondary indexes of ``messages``; return their CREATE statements."""
    rows = con.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'messages' "
        "AND sql IS NOT NULL"
    ).fetchall()
    for name, _ in rows:
        con.execute(f"DROP INDEX {name}")
    return [sql for _, sql in rows]


_OUTBOX_SQL: Final = (
    "INSERT INTO outbox (conversation_id, session_id, reply_message_id, text, reply_to, status, "
    "attempts, created_at, attempted_at, finished_at) VALUES (?, ?, ?, ?, ?, 'sent', 1, ?, ?, ?)"
)


def outbox_rows(plan: PlannedSession, first_id: int) -> Iterator[tuple[object, ...]]:
    """The delivered outbox row ``finish_turn`` leaves for every reply (nothing prunes them)."""
    for turn in range(2, plan.messages + 1, 2):
        row_id = first_id + turn - 1
        at = plan.created_at(turn)
        text = ASSISTANT_TEXTS[(row_id * 5) % len(ASSISTANT_TEXTS)]
        yield (plan.conv + 1, plan.row_id, row_id, text, f"{plan.number}-{turn - 1}", at, at, at)


@dataclass(frozen=True, slots=True)
class FillCounts:
    """Rows of the tables besides messages."""

    summaries: int = 0
    outbox: int = 0

    def __add__(self, other: FillCounts) -> FillCounts:
        return FillCounts(self.summaries + other.summaries, self.outbox + other.outbox)


def _insert_session(
    con: sqlite3.Connection, plan: PlannedSession, first_id: int, version: int, outbox: bool
) -> FillCounts:
    """One session's row, messages, summary (when compaction would have left one) and
    delivered outbox rows (``outbox``)."""
    con.execute(_SESSION_SQL, session_row(plan))
    con.executemany(_MESSAGE_SQL, message_rows(plan, first_id, version))
    counts = FillCounts()
    window = Budget().window_messages
    if plan.messages > 2 * window:
        summary = summary_body(plan, window)
        con.execute(
            "INSERT INTO summaries (session_id, body, first_turn, last_turn, updated_at) "
            "VALUES (?, ?, ?, ?, ?)",
            (plan.row_id, summary.to_json(), 1, summary.last_turn, plan.last_at),
        )
        counts += FillCounts(summaries=1)
    if outbox:
        counts += FillCounts(
            outbox=con.executemany(_OUTBOX_SQL, outbox_rows(plan, first_id)).rowcount
        )
    return counts


def _insert_conversation(
    con: sqlite3.Connection, plans: Sequence[PlannedSession], first_id: int, outbox: bool
) -> tuple[int, FillCounts]:
    """Insert one conversation with its sessions; return (next message id, row counts)."""
    version, counts = 0, FillCounts()
    for plan in plans:
        counts += _insert_session(con, plan, first_id, version, outbox)
        first_id += plan.messages
        version += (plan.messages + 1) // 2
    key = conversation_key(plans[0].conv)
    con.execute(
        "INSERT INTO conversations (id, bot, platform, chat_id, thread_id, version, created_at) "
        "VALUES (?, ?, ?, ?, '', ?, ?)",
        (plans[0].conv + 1, key.bot, key.platform, key.chat_id, version, plans[0].opened_at),
    )
    return first_id, counts


def bulk_fill(path: Path, plans: Sequence[PlannedSession], outbox: bool) -> FillCounts:
    """Insert every planned row in transactions of ~200k messages."""
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.execute("PRAGMA journal_mode = DELETE")
        con.execute("PRAGMA synchronous = OFF")
        con.execute("PRAGMA cache_size = -262144")  # 256 MiB for the index rebuild
        indexes = _drop_message_indexes(con)
        con.execute("BEGIN")
        next_id, in_tx, counts = 1, 0, FillCounts()
        by_conv: dict[int, list[PlannedSession]] = {}
        for plan in plans:
            by_conv.setdefault(plan.conv, []).append(plan)
        for group in by_conv.values():
            start = next_id
            next_id, added = _insert_conversation(con, group, next_id, outbox)
            counts += added
            in_tx += next_id - start
            if in_tx >= 200_000:
                con.execute("COMMIT")
                con.execute("BEGIN")
                in_tx = 0
        con.execute("COMMIT")
        for sql in indexes:
            con.execute(sql)
        con.execute("ANALYZE")
        con.execute("PRAGMA journal_mode = WAL")
    finally:
        con.close()
    return counts


async def fill(path: Path, params: Params, now: float) -> tuple[FillResult, list[PlannedSession]]:
    """Migrate and bulk-fill ``path``; the plan is returned for the checks and the drive."""
    started = time.perf_counter()
    plans = plan_sessions(params.sessions, params.messages, now, params.seed)
    await migrate(path)
    counts = await asyncio.to_thread(bulk_fill, path, plans, params.outbox)
    await asyncio.to_thread(flush, path)  # written with synchronous = OFF
    seconds = time.perf_counter() - started
    return (
        FillResult(
            seconds=seconds,
            conversations=len({p.conv for p in plans}),
            sessions=len(plans),
            messages=sum(p.messages for p in plans),
            summaries=counts.summaries,
            outbox_rows=counts.outbox,
            file_mb=path.stat().st_size / 1e6,
            by_category=dict(Counter(p.category for p in plans)),
        ),
        plans,
    )


# -- store state and correctness checks --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionState:
    """One session as stored: status, message count and turn range, summary range."""

    status: str
    closed_at: float | None
    last_turn: int  # next_turn - 1: the turns the session has had
    count: int
    first_stored: int | None
    last_stored: int | None
    summary: tuple[int, int] | None
    oldest_at: float | None


_STATE_SQL: Final = (
    "SELECT s.id, s.status, s.closed_at, s.next_turn - 1, COUNT(m.id), MIN(m.turn), MAX(m.turn), "
    "su.first_turn, su.last_turn, MIN(m.created_at) FROM sessions s "
    "LEFT JOIN messages m ON m.session_id = s.id AND m.pending = 0 "
    "LEFT JOIN summaries su ON su.session_id = s.id GROUP BY s.id"
)


def read_state(path: Path) -> dict[int, SessionState]:
    """Every session's state, read through a separate sqlite3 connection."""
    con = sqlite3.connect(path)
    try:
        rows = con.execute(_STATE_SQL).fetchall()
    finally:
        con.close()
    return {
        int(r[0]): SessionState(
            r[1],
            r[2],
            int(r[3]),
            int(r[4]),
            r[5],
            r[6],
            None if r[7] is None else (r[7], r[8]),
            r[9],
        )
        for r in rows
    }


def logged_deletions(path: Path) -> int:
    """Messages the retention log says were deleted."""
    con = sqlite3.connect(path)
    try:
        return int(
            con.execute("SELECT COALESCE(SUM(messages), 0) FROM retention_log").fetchone()[0]
        )
    finally:
        con.close()


def _closed_problems(sid: int, s: SessionState, cutoff: float) -> list[str]:
    """A closed session is whole or empty (then expired), and empty once past its retention."""
    problems = []
    whole = s.count == s.last_turn and s.first_stored == 1
    if s.count and not whole:
        problems.append(
            f"closed session {sid} left with turns {s.first_stored}-{s.last_stored} "
            f"of 1-{s.last_turn} ({s.count} stored)"
        )
    if s.count == 0 and s.status != "expired":
        problems.append(f"closed session {sid} lost every message but is not marked expired")
    if s.closed_at is not None and s.closed_at <= cutoff and s.count:
        problems.append(f"session {sid} closed before the cutoff still holds {s.count} messages")
    return problems


def _open_problems(sid: int, s: SessionState, mode: Mode, cutoff: float) -> list[str]:
    """An open session keeps a contiguous tail; any missing head is covered by the summary."""
    problems = []
    if s.count and (
        s.last_stored != s.last_turn or s.count != s.last_turn - (s.first_stored or 0) + 1
    ):
        problems.append(f"open session {sid} is not contiguous up to turn {s.last_turn}")
    if mode == "session" and s.count != s.last_turn:
        problems.append(
            f"open session {sid} lost messages in session mode ({s.count} of {s.last_turn})"
        )
    missing_to = (s.first_stored or s.last_turn + 1) - 1
    covered = s.summary is not None and s.summary[0] == 1 and s.summary[1] >= missing_to
    if missing_to >= 1 and not covered:
        problems.append(
            f"open session {sid} misses turns 1-{missing_to} and its summary covers {s.summary}"
        )
    if mode == "message" and s.oldest_at is not None and s.oldest_at <= cutoff:
        problems.append(f"open session {sid} still holds messages older than the cutoff")
    return problems


def state_failures(state: dict[int, SessionState], mode: Mode, cutoff: float) -> list[str]:
    """Every invariant violation of the store after a retention run in ``mode``."""
    problems: list[str] = []
    for sid, s in state.items():
        if s.status == "open":
            problems += _open_problems(sid, s, mode, cutoff)
        else:
            problems += _closed_problems(sid, s, cutoff)
    return problems


def _capped(problems: list[str], label: str, limit: int = 5) -> list[str]:
    """At most ``limit`` problems, then a count of the rest."""
    out = [f"{label}: {p}" for p in problems[:limit]]
    if len(problems) > limit:
        out.append(f"{label}: ... and {len(problems) - limit} more")
    return out


# -- timing retention ------------------------------------------------------------------------


class TimedStore(SQLiteStore):
    """The SQLite store, timing its retention write transactions (lock wait included)."""

    def __init__(self, *, path: str | Path, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> None:
        super().__init__(path=path, busy_timeout_ms=busy_timeout_ms)
        self.write_ms: dict[str, list[float]] = {"expire_session": [], "delete_old_messages": []}
        self.write_log: list[tuple[float, float]] = []  # (start, end) perf_counter

    @contextlib.contextmanager
    def _timed(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            ended = time.perf_counter()
            self.write_ms[name].append((ended - started) * 1000.0)
            self.write_log.append((started, ended))

    async def expire_session(self, session: SessionKey, now: float) -> int:
        """Time the whole-session deletion."""
        with self._timed("expire_session"):
            return await super().expire_session(session, now)

    async def delete_old_messages(
        self, session: SessionKey, through_turn: int, cutoff: float, now: float, limit: int
    ) -> int:
        """Time one batch of per-message deletions."""
        with self._timed("delete_old_messages"):
            return await super().delete_old_messages(session, through_turn, cutoff, now, limit)


class PhasedStore(TimedStore):
    """A timed store that signals when message mode moves on to open sessions."""

    def __init__(self, *, path: str | Path) -> None:
        super().__init__(path=path)
        self.open_phase = asyncio.Event()

    async def sessions_with_old_messages(self, cutoff: float, limit: int = 100) -> list[SessionKey]:
        """Signal, then list."""
        self.open_phase.set()
        return await super().sessions_with_old_messages(cutoff, limit)


def make_retention(
    store: SQLiteStore, mode: Mode, days: float, batch: int, llm: OfflineLLM | None = None
) -> Retention:
    """A retention worker whose summaries come from the offline model (no latency)."""
    clock = SystemClock()
    policy = MemoryPolicy(budget=Budget(), summary_model="offline")
    memory = memory_on(
        store=store, llm=llm or OfflineLLM(), clock=clock, policy_for=lambda _bot: policy
    )
    return Retention(
        store=store,
        memory=memory,
        clock=clock,
        policy=RetentionPolicy(mode=mode, days=days, batch_size=batch),
        holder=f"bench-{mode}",
    )


@dataclass(frozen=True, slots=True)
class RunFigures:
    """One ``run_once``: what it did and how fast."""

    label: str
    seconds: float
    expired_sessions: int
    deleted_messages: int
    summarised_sessions: int
    skipped: str | None
    write_tx: dict[str, dict[str, float]]
    write_busy_fraction: float  # share of the run spent inside retention's write calls
    write_gap_ms: dict[str, float]  # time between one retention write and the next
    ended_at: float = field(default=0.0, compare=False)  # perf_counter, not reported

    @property
    def rows_per_second(self) -> float:
        """Deleted messages per second."""
        return self.deleted_messages / self.seconds if self.seconds > 0 else math.nan

    def as_dict(self) -> dict[str, Any]:
        """The figures with the rate."""
        data = {**asdict(self), "rows_per_second": self.rows_per_second}
        del data["ended_at"]
        return data


def ms_summary(values: Sequence[float]) -> dict[str, float]:
    """Count and p50/p99/max of millisecond samples."""
    return {
        "count": float(len(values)),
        "p50_ms": percentile(values, 50),
        "p99_ms": percentile(values, 99),
        "max_ms": max(values, default=math.nan),
        "total_s": sum(values) / 1000.0,
    }


def _gaps_ms(log: Sequence[tuple[float, float]]) -> list[float]:
    """Milliseconds between the end of one timed write and the start of the next."""
    return [(log[i + 1][0] - log[i][1]) * 1000.0 for i in range(len(log) - 1)]


async def timed_run(store: TimedStore, retention: Retention, label: str) -> RunFigures:
    """Run retention once and collect its figures."""
    for samples in store.write_ms.values():
        samples.clear()
    store.write_log.clear()
    started = time.perf_counter()
    report = await retention.run_once()
    ended = time.perf_counter()
    busy = sum(end - start for start, end in store.write_log)
    gaps = _gaps_ms(store.write_log)
    return RunFigures(
        label=label,
        seconds=ended - started,
        expired_sessions=report.expired_sessions,
        deleted_messages=report.deleted_messages,
        summarised_sessions=report.summarised_sessions,
        skipped=report.skipped,
        write_tx={k: ms_summary(v) for k, v in store.write_ms.items() if v},
        write_busy_fraction=busy / (ended - started) if ended > started else math.nan,
        write_gap_ms={"p50_ms": percentile(gaps, 50), "p99_ms": percentile(gaps, 99)},
        ended_at=ended,
    )


@dataclass(frozen=True, slots=True)
class ModeResult:
    """Both runs of one mode, and what the checks found."""

    mode: Mode
    first: RunFigures
    second: RunFigures
    messages_before: int
    messages_after: int
    logged: int
    summary_calls: int
    failures: list[str]


def _count_failures(result: ModeResult) -> list[str]:
    """Reported deletions must match the file and the retention log."""
    reported = result.first.deleted_messages + result.second.deleted_messages
    removed = result.messages_before - result.messages_after
    problems = []
    if reported != removed:
        problems.append(f"runs reported {reported} deletions, the file lost {removed} messages")
    if result.logged != removed:
        problems.append(f"retention_log records {result.logged} deletions, {removed} happened")
    if result.first.skipped or result.second.skipped:
        problems.append(f"a run was skipped: {result.first.skipped or result.second.skipped}")
    return problems


async def run_mode(path: Path, mode: Mode, params: Params) -> ModeResult:
    """Two retention runs in ``mode`` on ``path``, then the invariant checks."""
    before = sum(s.count for s in read_state(path).values())
    llm = OfflineLLM()
    cutoff = time.time() - params.days * DAY  # the runs' cutoffs are at least this late
    async with TimedStore(path=path) as store:
        retention = make_retention(store, mode, params.days, params.batch_size, llm)
        first = await timed_run(store, retention, f"{mode} mode, first run")
        second = await timed_run(store, retention, f"{mode} mode, second run")
    state = await asyncio.to_thread(read_state, path)
    result = ModeResult(
        mode=mode,
        first=first,
        second=second,
        messages_before=before,
        messages_after=sum(s.count for s in state.values()),
        logged=await asyncio.to_thread(logged_deletions, path),
        summary_calls=llm.calls,
        failures=[],
    )
    result.failures.extend(_capped(state_failures(state, mode, cutoff), f"{mode} mode"))
    result.failures.extend(f"{mode} mode: {p}" for p in _count_failures(result))
    return result


# -- the audit -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AuditFigures:
    """One ``Retention.audit`` call."""

    label: str
    mode: Mode
    days: float
    seconds: float
    open_sessions: int
    sessions_at_risk: int
    risks: int
    turns_at_risk: int
    by_reason: dict[str, int]


def open_sessions(path: Path) -> int:
    """Open sessions in the file (what the audit walks)."""
    con = sqlite3.connect(path)
    try:
        return int(con.execute("SELECT COUNT(*) FROM sessions WHERE status = 'open'").fetchone()[0])
    finally:
        con.close()


async def time_audit(path: Path, mode: Mode, days: float, label: str) -> AuditFigures:
    """Time one audit of ``path`` under the policy (mode, days)."""
    async with SQLiteStore(path=path, busy_timeout_ms=BUSY_TIMEOUT_MS) as store:
        retention = make_retention(store, mode, days, 500)
        started = time.perf_counter()
        risks: list[AtRisk] = await retention.audit(RetentionPolicy(mode=mode, days=days))
        seconds = time.perf_counter() - started
    return AuditFigures(
        label=label,
        mode=mode,
        days=days,
        seconds=seconds,
        open_sessions=await asyncio.to_thread(open_sessions, path),
        sessions_at_risk=len({r.session for r in risks}),
        risks=len(risks),
        turns_at_risk=sum(r.last_turn - r.first_turn + 1 for r in risks),
        by_reason=dict(Counter(r.reason for r in risks)),
    )


def audit_failures(audits: Sequence[AuditFigures]) -> list[str]:
    """After retention in either mode, no open session may already miss turns."""
    return [
        f"audit '{a.label}': {a.by_reason['already missing']} session(s) already miss turns"
        for a in audits
        if a.by_reason.get("already missing")
    ]


# -- reply latency while retention runs ------------------------------------------------------


class TimingOutlet:
    """Records when the first reply of each conversation was sent."""

    idempotent_send = False

    def __init__(self) -> None:
        self.sent: dict[ConversationKey, float] = {}
        self.replies = 0
        self.changed = asyncio.Event()

    async def send(self, reply: Reply) -> None:
        """Note the send time."""
        self.sent.setdefault(reply.conversation, time.perf_counter())
        self.replies += 1
        self.changed.set()

    @contextlib.asynccontextmanager
    async def typing(self, conversation: ConversationKey) -> AsyncIterator[None]:
        """No typing indicator."""
        yield


class CountingTurns:
    """``Pipeline.run_turn`` for the scheduler, counting outcomes other than "sent"."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline
        self.errors: Counter[str] = Counter()

    async def __call__(self, key: ConversationKey) -> str:
        """Run the turn; count failures and non-sent outcomes."""
        try:
            outcome = await self.pipeline.run_turn(key)
        except Exception as exc:
            self.errors[type(exc).__name__] += 1
            raise
        if outcome != "sent":
            self.errors[outcome] += 1
        return outcome


@dataclass(frozen=True, slots=True)
class Live:
    """A wired reply path on one store connection."""

    store: PhasedStore
    ingestor: Ingestor
    scheduler: Scheduler
    outlet: TimingOutlet
    turns: CountingTurns
    memory: Memory


def _wire(store: PhasedStore, params: Params) -> Live:
    """Store, offline model, pipeline, scheduler and ingestor, wired as ``bot.app.build`` does."""
    clock = SystemClock()
    llm = OfflineLLM(latency=params.latency)
    outlet = TimingOutlet()
    profile = BotProfile(
        key=BOT,
        pin=PIN,
        queue=QueuePolicy(debounce=params.debounce, max_wait=params.max_wait),
        memory=MemoryPolicy(budget=Budget(), summary_model=PIN.model),
        outlet=outlet,
        lease_seconds=30.0,
    )
    memory = memory_on(store=store, llm=llm, clock=clock, policy_for=lambda _bot: profile.memory)
    pipeline = Pipeline(
        store=store,
        parts=turn_parts(
            store, llm=llm, clock=clock, memory=memory, outlet_for=Bots({BOT: profile}).outlet_for
        ),
        bots=Bots({BOT: profile}),
    )
    turns = CountingTurns(pipeline)
    scheduler = Scheduler(
        store=store,
        clock=clock,
        run_turn=turns,
        bots=[BOT],
        scan_interval=1.0,
        max_concurrent=params.max_concurrent,
    )
    ingestor = Ingestor(
        store=store, clock=clock, policy_for=lambda _bot: profile.queue, wake=scheduler.wake
    )
    return Live(store, ingestor, scheduler, outlet, turns, memory)


@contextlib.asynccontextmanager
async def live_runtime(path: Path, params: Params) -> AsyncIterator[Live]:
    """A running reply path on its own connection to ``path``."""
    async with PhasedStore(path=path) as store:
        live = _wire(store, params)
        task = asyncio.create_task(live.scheduler.run(), name="bench scheduler")
        try:
            yield live
        finally:
            await stop_scheduler(live.scheduler, task, grace=params.latency + 10.0)
            await live.memory.aclose()  # background compaction checks still use the store


class LockProbe:
    """A third connection (a thread) taking SQLite's write lock every ``period`` seconds with
    ``BEGIN IMMEDIATE; ROLLBACK``: how long any writer waits for the lock."""

    def __init__(self, path: Path, period: float = 0.01) -> None:
        self._path = path
        self._period = period
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="lock probe", daemon=True)
        self.waits: list[tuple[float, float]] = []  # (perf_counter at start, wait ms)
        self.busy_errors = 0

    def _loop(self) -> None:
        con = sqlite3.connect(self._path, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
        try:
            while not self._stop.wait(self._period):
                started = time.perf_counter()
                try:
                    con.execute("BEGIN IMMEDIATE")
                    con.execute("ROLLBACK")
                except sqlite3.OperationalError:
                    self.busy_errors += 1
                    continue
                self.waits.append((started, (time.perf_counter() - started) * 1000.0))
        finally:
            con.close()

    def __enter__(self) -> LockProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self, start: float, end: float) -> dict[str, float]:
        """Lock waits (milliseconds) of the attempts started between ``start`` and ``end``."""
        waits = [ms for at, ms in self.waits if start <= at < end]
        return {**ms_summary(waits), "busy_errors": float(self.busy_errors)}


@dataclass(slots=True)
class Drive:
    """What one drive of single-message bursts measured."""

    sent_at: dict[ConversationKey, float] = field(default_factory=dict)
    ingest_ms: list[float] = field(default_factory=list)
    ingest_errors: int = 0
    started: float = 0.0
    ended: float = 0.0


async def _send_one(live: Live, drive: Drive, conv: int, tag: str) -> None:
    """Ingest one message into conversation ``conv``, timing the call."""
    key = conversation_key(conv)
    message = Inbound(key, f"user-{conv}", f"User {conv}", USER_TEXTS[conv % 8], f"{tag}-{conv}")
    started = time.perf_counter()
    drive.sent_at[key] = started
    try:
        await live.ingestor.ingest(message)
    except StoreError as exc:
        drive.ingest_errors += 1
        log.error("ingest into %s failed: %s", key, exc)
    drive.ingest_ms.append((time.perf_counter() - started) * 1000.0)


async def drive_turns(live: Live, convs: Sequence[int], rate: float, tag: str) -> Drive:
    """One message into each conversation at ``rate`` a second (ingests do not wait for
    each other, so a slow one does not slow the pace)."""
    drive = Drive(started=time.perf_counter())
    tasks = []
    for i, conv in enumerate(convs):
        delay = drive.started + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(_send_one(live, drive, conv, tag)))
    await asyncio.gather(*tasks)
    drive.ended = time.perf_counter()
    return drive


async def wait_replies(live: Live, keys: Sequence[ConversationKey], within: float) -> None:
    """Until every conversation got its reply (or ``within`` seconds passed)."""
    deadline = time.monotonic() + within
    while any(k not in live.outlet.sent for k in keys):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        live.outlet.changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(live.outlet.changed.wait(), remaining)


@dataclass(frozen=True, slots=True)
class LatencyFigures:
    """Reply latency of one drive, alone or while retention ran.

    With retention, the percentiles cover the turns whose message arrived before retention
    ended (``measured``); the ``all_*`` figures cover every turn of the drive.
    """

    label: str
    turns: int
    replied: int
    measured: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    all_p50_ms: float
    all_p99_ms: float
    ingest_ms: dict[str, float]
    ingest_errors: int
    turn_errors: dict[str, int]
    gap_notices: int
    drive_seconds: float
    lock_wait_ms: dict[str, float]
    retention: RunFigures | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready figures."""
        data = asdict(self)
        data["retention"] = None if self.retention is None else self.retention.as_dict()
        return data


def latency_figures(
    label: str, live: Live, drive: Drive, probe: LockProbe, retention: RunFigures | None = None
) -> LatencyFigures:
    """Percentiles of ingest -> reply sent over the drive's conversations."""
    sent = live.outlet.sent
    latency = {k: (sent[k] - t0) * 1000.0 for k, t0 in drive.sent_at.items() if k in sent}
    until = math.inf if retention is None else retention.ended_at
    measured = [ms for k, ms in latency.items() if drive.sent_at[k] < until]
    every = list(latency.values())
    return LatencyFigures(
        label=label,
        turns=len(drive.sent_at),
        replied=len(latency),
        measured=len(measured),
        p50_ms=percentile(measured, 50),
        p99_ms=percentile(measured, 99),
        max_ms=max(measured, default=math.nan),
        all_p50_ms=percentile(every, 50),
        all_p99_ms=percentile(every, 99),
        ingest_ms=ms_summary(drive.ingest_ms),
        ingest_errors=drive.ingest_errors,
        turn_errors=dict(live.turns.errors),
        gap_notices=sum(v for k, v in live.turns.pipeline.counters.items() if k.startswith("gap")),
        drive_seconds=drive.ended - drive.started,
        lock_wait_ms=probe.summary(drive.started, min(until, drive.ended)),
        retention=retention,
    )


async def baseline(path: Path, params: Params, convs: Sequence[int]) -> LatencyFigures:
    """The drive with nothing else running."""
    async with live_runtime(path, params) as live:
        with LockProbe(path) as probe:
            drive = await drive_turns(live, convs, params.rate, "alone")
            await wait_replies(live, list(drive.sent_at), params.timeout)
    return latency_figures("no retention", live, drive, probe)


@contextlib.asynccontextmanager
async def retention_store(live: Live, path: Path, shared: bool) -> AsyncIterator[PhasedStore]:
    """The reply path's own store (one connection), or a second connection to the file."""
    if shared:
        yield live.store
        return
    async with PhasedStore(path=path) as store:
        yield store


async def alongside(
    path: Path, mode: Mode, params: Params, convs: Sequence[int], *, shared: bool = False
) -> LatencyFigures:
    """The drive while ``Retention.run_once`` runs on a second connection to the same file
    (``shared``: on the reply path's own connection, as ``personabot run`` does).

    The drive starts once retention is deleting: in message mode, once it has moved on to
    summarising and trimming open sessions.
    """
    label = f"{mode} mode, {'same' if shared else 'second'} connection"
    async with live_runtime(path, params) as live, retention_store(live, path, shared) as store:
        retention = make_retention(store, mode, params.days, params.batch_size)
        with LockProbe(path) as probe:
            task = asyncio.create_task(timed_run(store, retention, f"{label}, while serving"))
            started = asyncio.create_task(
                store.open_phase.wait() if mode == "message" else asyncio.sleep(0.2)
            )
            await asyncio.wait([started, task], return_when=asyncio.FIRST_COMPLETED)
            started.cancel()
            drive = await drive_turns(live, convs, params.rate, f"{mode}-{shared}")
            figures = await task
        await wait_replies(live, list(drive.sent_at), params.timeout)
    return latency_figures(label, live, drive, probe, figures)


def live_conversations(plans: Sequence[PlannedSession], turns: int) -> list[int]:
    """``turns`` conversations whose last session is open, old and recent alternating."""
    old = [p.conv for p in plans if p.category == "open_old"]
    recent = [p.conv for p in plans if p.category == "open_recent"]
    mixed = [c for pair in zip(old, recent, strict=False) for c in pair]
    if len(mixed) < turns:
        raise SystemExit(f"--turns {turns}: only {len(mixed)} open conversations in the fill")
    step = len(mixed) / turns
    return [mixed[int(i * step)] for i in range(turns)]


def latency_failures(rows: Sequence[LatencyFigures]) -> list[str]:
    """Every message must get its reply, and no turn may find missing turns."""
    failures = [
        f"latency '{r.label}': {r.turns - r.replied} of {r.turns} turns got no reply "
        f"({r.ingest_errors} ingest errors, turn outcomes/errors {r.turn_errors})"
        for r in rows
        if r.replied < r.turns
    ]
    failures += [
        f"latency '{r.label}': {r.gap_notices} turn(s) found missing turns (gap notice)"
        for r in rows
        if r.gap_notices
    ]
    return failures


# -- report ----------------------------------------------------------------------------------


def fill_table(result: FillResult) -> str:
    """What the fill wrote."""
    rate = result.messages / result.seconds if result.seconds > 0 else math.nan
    row: list[object] = [result.messages, result.sessions, result.conversations, result.summaries]
    row += [result.outbox_rows, result.seconds, rate, result.file_mb]
    headers = ["messages", "sessions", "conversations", "summaries", "outbox rows"]
    table = format_table(
        [*headers, "seconds", "messages/s", "file MB"],
        [row],
        "1. Fill (bulk sqlite3 inserts; not part of the figures below)",
    )
    cats = ", ".join(f"{c} {result.by_category.get(c, 0):,}" for c in CATEGORIES)
    return f"{table}\nsessions by category: {cats}"


def _tx_cell(run: RunFigures, name: str, key: str) -> float:
    return run.write_tx.get(name, {}).get(key, math.nan)


def run_table(results: Sequence[ModeResult]) -> str:
    """Both runs of both modes."""
    rows = [
        [
            run.label,
            run.seconds,
            run.expired_sessions,
            run.deleted_messages,
            run.summarised_sessions,
            run.rows_per_second,
            _tx_cell(run, "expire_session", "p50_ms"),
            _tx_cell(run, "expire_session", "p99_ms"),
            _tx_cell(run, "expire_session", "max_ms"),
            _tx_cell(run, "delete_old_messages", "max_ms"),
            run.write_busy_fraction * 100,
        ]
        for result in results
        for run in (result.first, result.second)
    ]
    headers = ["run", "seconds", "sessions expired", "messages deleted", "summarised"]
    headers += ["rows/s", "expire p50 ms", "p99 ms", "max ms", "delete batch max ms"]
    return format_table(
        [*headers, "in writes %"],
        rows,
        "2. Retention.run_once (days=30; a fresh copy of the filled file per mode; expire and "
        "delete batch: one write transaction each; in writes: share of the run inside them)",
    )


def audit_table(audits: Sequence[AuditFigures]) -> str:
    """Audit timings and findings."""
    rows = [
        [a.label, a.open_sessions, a.seconds, a.sessions_at_risk, a.turns_at_risk] for a in audits
    ]
    return format_table(
        ("audit", "open sessions", "seconds", "sessions at risk", "turns at risk"),
        rows,
        "3. Retention.audit",
    )


def latency_table(rows: Sequence[LatencyFigures]) -> str:
    """Reply latency alone and with retention running, and the p99 ratios."""
    cells = [
        [
            r.label,
            r.turns,
            r.replied,
            r.measured,
            r.p50_ms,
            r.p99_ms,
            r.max_ms,
            r.ingest_ms["p99_ms"],
            r.retention.seconds if r.retention else "-",
        ]
        for r in rows
    ]
    headers = ["retention", "turns", "replied", "measured", "p50 ms", "p99 ms", "max ms"]
    table = format_table(
        [*headers, "ingest p99 ms", "retention s"],
        cells,
        "4. Reply latency, message ingest -> reply sent (measured: turns that arrived before "
        "retention ended)",
    )
    base = rows[0].p99_ms
    ratios = "; ".join(f"{r.label}: {r.p99_ms / base:.2f}" for r in rows[1:])
    return f"{table}\np99(with)/p99(without): {ratios}"


def lock_table(rows: Sequence[LatencyFigures]) -> str:
    """Why: how long a writer waits for SQLite's lock, and how busy retention keeps it."""
    cells = []
    for r in rows:
        run = r.retention
        cells.append(
            [
                r.label,
                r.lock_wait_ms["p50_ms"],
                r.lock_wait_ms["p99_ms"],
                r.lock_wait_ms["max_ms"],
                r.ingest_ms["max_ms"],
                run.write_busy_fraction * 100 if run else "-",
                run.write_gap_ms["p50_ms"] if run else "-",
            ]
        )
    headers = ["retention", "lock wait p50 ms", "p99 ms", "max ms", "ingest max ms"]
    return format_table(
        [*headers, "retention in writes %", "gap between writes p50 ms"],
        cells,
        "5. The write lock: a third connection's BEGIN IMMEDIATE every 10 ms, and the share of "
        "the retention run spent in its write calls",
    )


def code_revision() -> dict[str, Any]:
    """The commit measured, and whether the working tree differed from it (read-only git)."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    status = git("status", "--porcelain", "--untracked-files=no")
    return {
        "commit": git("rev-parse", "HEAD"),
        "modified": None if status is None else bool(status),
    }


def payload(
    params: Params,
    filled: FillResult,
    modes: Sequence[ModeResult],
    audits: Sequence[AuditFigures],
    latency: Sequence[LatencyFigures],
    failures: list[str],
) -> dict[str, Any]:
    """Everything measured, as JSON-ready data."""
    base = latency[0].p99_ms
    return {
        "benchmark": "retention",
        "timestamp": utc_timestamp(),
        "parameters": {**asdict(params), "out": str(params.out)},
        "environment": environment(),
        "code": code_revision(),
        "fill": asdict(filled),
        "retention": [
            {
                "mode": m.mode,
                "first_run": m.first.as_dict(),
                "second_run": m.second.as_dict(),
                "messages_before": m.messages_before,
                "messages_after": m.messages_after,
                "retention_log_messages": m.logged,
                "summary_model_calls": m.summary_calls,
            }
            for m in modes
        ],
        "audit": [asdict(a) for a in audits],
        "latency": [r.as_dict() for r in latency],
        "p99_ratio_with_to_without": {r.label: r.p99_ms / base for r in latency[1:]},
        "guard": {"passed": not failures, "failures": failures},
    }


# -- main ------------------------------------------------------------------------------------


def copy_of(source: Path, name: str) -> Path:
    """A copy of the (closed, checkpointed) filled file next to it, flushed to disk: left
    dirty in the page cache, the first WAL checkpoint's fsync would write the whole file back
    inside a measured transaction (~0.3 s at 1M messages)."""
    target = source.with_name(name)
    shutil.copyfile(source, target)
    flush(target)
    return target


async def retention_phase(
    filled: Path, params: Params
) -> tuple[list[ModeResult], list[AuditFigures]]:
    """Both modes on their own copies, then the audits."""
    modes: list[ModeResult] = []
    audits: list[AuditFigures] = []
    for mode in ("session", "message"):
        path = await asyncio.to_thread(copy_of, filled, f"{mode}.sqlite3")
        modes.append(await run_mode(path, mode, params))
        if mode == "session":
            for audit_mode in ("session", "message"):
                label = f"{audit_mode} mode, days={params.audit_days:g}"
                audits.append(await time_audit(path, audit_mode, params.audit_days, label))
        else:
            label = f"message mode, days={params.days:g}, after message-mode run"
            audits.append(await time_audit(path, "message", params.days, label))
        path.unlink()
    return modes, audits


async def latency_phase(
    filled: Path, params: Params, plans: Sequence[PlannedSession]
) -> list[LatencyFigures]:
    """Alone, then with retention on a second connection (session mode, then message mode,
    which then finds the closed sessions gone and goes straight to the open ones), then with
    session mode on the reply path's own connection (a fresh copy)."""
    convs = live_conversations(plans, params.turns)
    path = await asyncio.to_thread(copy_of, filled, "live.sqlite3")
    rows = [await baseline(path, params, convs)]
    rows.append(await alongside(path, "session", params, convs))
    rows.append(await alongside(path, "message", params, convs))
    path.unlink()
    path = await asyncio.to_thread(copy_of, filled, "live-shared.sqlite3")
    rows.append(await alongside(path, "session", params, convs, shared=True))
    path.unlink()
    return rows


async def run(params: Params) -> int:
    """Fill, time retention and the audit, measure reply latency; print, write JSON."""
    with tempfile.TemporaryDirectory(prefix="personabot-retention-") as tmp:
        filled_path = Path(tmp) / "filled.sqlite3"
        filled, plans = await fill(filled_path, params, time.time())
        print(fill_table(filled), end="\n\n", flush=True)
        modes, audits = await retention_phase(filled_path, params)
        print(run_table(modes), end="\n\n", flush=True)
        print(audit_table(audits), end="\n\n", flush=True)
        latency = await latency_phase(filled_path, params, plans)
        print(latency_table(latency), end="\n\n", flush=True)
        print(lock_table(latency), flush=True)
    failures = [f for m in modes for f in m.failures]
    failures += audit_failures(audits) + latency_failures(latency)
    write_json(params.out, payload(params, filled, modes, audits, latency, failures))
    print(f"\nJSON written to {params.out}")
    for failure in failures:
        print(f"FAIL: {failure}", file=sys.stderr)
    return 1 if failures else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m bench.retention``."""
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    return asyncio.run(run(params_from(args)))


if __name__ == "__main__":
    sys.exit(main())
