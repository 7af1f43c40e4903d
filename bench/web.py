"""Benchmark of the operator console (docs/web.md): server time of its pages on a big store.

Fills a fresh store (SQLite file, and with ``--store postgresql`` or ``both`` a PostgreSQL
database of a throwaway cluster) with ``--conversations`` conversations and ``--messages``
messages (written in bulk, straight into the tables), starts the real console on it and
requests each page ``--samples`` times with a logged-in client, reading the server's own
``Server-Timing`` (time in the handler: queries and rendering, no network):

- the overview; the conversation list, first page and a deep page (keyset cursor at 90 %);
- a conversation page (its transcript, sessions, summary, gaps, pending turn, the prompt);
- a person page (their facts and every message of theirs for provenance).

Usage::

    uv run python -m bench.web [--quick] [--store sqlite|postgresql|both]
        [--conversations 10000] [--messages 1000000] [--samples 40]
        [--out bench/results/web.json]

Then, on the same filled store, the queue benchmark's coalescing phase (bench/queue.py:
bursts into ``--lag-conversations`` conversations, the real scheduler and pipeline, a model of
fixed latency) runs twice: without the console, and with the console's overview, list and a
conversation page requested once a second; the scheduler lag (timer due -> turn start) of
both, side by side, says what the console costs the turns.

Prints tables (p50/p95 ms per page and store, against the 100 ms target; the lag with and
without the console) and writes JSON. Exits 1 when a page answered other than 200 or a
burst was not answered exactly once.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import sqlite3
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

from bench._report import environment, format_table, percentile, utc_timestamp, write_json
from bench._stores import StoreKind, StoreTarget, bench_target
from bot.app.build import build_memory
from bot.app.web import console
from bot.config import Secrets, Settings
from bot.core.clock import SystemClock
from bot.core.events import UserKey
from bot.llm.offline import OfflineLLM
from memory.records import MemoryItem, UserMemory

TOKEN = "bench-operator-token-0123456789"
TARGET_MS = 100.0
BASE = 1_700_000_000.0
PEOPLE = 2000


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="1,000 conversations, 50,000 messages")
    p.add_argument("--store", choices=("sqlite", "postgresql", "both"), default="both")
    p.add_argument("--conversations", type=int, default=10_000)
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--samples", type=int, default=40)
    p.add_argument("--lag-conversations", type=int, default=300)
    p.add_argument("--out", type=Path, default=Path("bench/results/web.json"))
    return p


def _rows(conversations: int, messages: int) -> tuple[list[tuple[Any, ...]], ...]:
    """Rows of conversations, sessions and messages: one open session each, its messages
    alternating person and persona, people spread over the conversations."""
    per = max(2, messages // conversations)
    convs, sessions, msgs = [], [], []
    mid = 0
    for c in range(1, conversations + 1):
        convs.append((c, "telegram-mira", "telegram", str(100_000 + c), "", BASE))
        last = BASE + c
        sessions.append((c, c, 1, "open", BASE, last, per + 1, per))
        person = f"u{c % PEOPLE}"
        for turn in range(1, per + 1):
            mid += 1
            user = turn % 2 == 1
            msgs.append(
                (
                    mid,
                    c,
                    c,
                    turn,
                    "user" if user else "assistant",
                    person if user else "bot",
                    f"Person {c % PEOPLE}" if user else "Mira",
                    f"message {turn} of conversation {c}: " + "words " * 12,
                    f"p{mid}" if user else None,
                    last - per + turn,
                )
            )
    return convs, sessions, msgs


_CONV = "INSERT INTO conversations (id, bot, platform, chat_id, thread_id, created_at) VALUES"
_SESS = (
    "INSERT INTO sessions (id, conversation_id, session_no, status, opened_at, "
    "last_activity_at, next_turn, last_user_turn) VALUES"
)
_MSG = (
    "INSERT INTO messages (id, conversation_id, session_id, turn, role, author_id, "
    "display_name, text, platform_message_id, created_at) VALUES"
)


def _fill_sqlite(path: str, rows: tuple[list[tuple[Any, ...]], ...]) -> None:
    convs, sessions, msgs = rows
    db = sqlite3.connect(path)
    try:
        db.execute("BEGIN")
        db.executemany(f"{_CONV} (?, ?, ?, ?, ?, ?)", convs)
        db.executemany(f"{_SESS} (?, ?, ?, ?, ?, ?, ?, ?)", sessions)
        db.executemany(f"{_MSG} (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", msgs)
        db.commit()
        # No ANALYZE: a running bot's file has no statistics either (PostgreSQL's autovacuum
        # gathers them, so that fill does run it).
    finally:
        db.close()


async def _fill_postgres(dsn: str, rows: tuple[list[tuple[Any, ...]], ...]) -> None:
    convs, sessions, msgs = rows
    db = await asyncpg.connect(dsn)
    try:
        cols = {
            "conversations": ["id", "bot", "platform", "chat_id", "thread_id", "created_at"],
            "sessions": [
                "id",
                "conversation_id",
                "session_no",
                "status",
                "opened_at",
                "last_activity_at",
                "next_turn",
                "last_user_turn",
            ],
            "messages": [
                "id",
                "conversation_id",
                "session_id",
                "turn",
                "role",
                "author_id",
                "display_name",
                "text",
                "platform_message_id",
                "created_at",
            ],
        }
        for table, records in (
            ("conversations", convs),
            ("sessions", sessions),
            ("messages", msgs),
        ):
            await db.copy_records_to_table(table, records=records, columns=cols[table])
            await db.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                f"(SELECT MAX(id) FROM {table}))"
            )
        await db.execute("ANALYZE")
    finally:
        await db.close()


async def _measure(target: StoreTarget, params: argparse.Namespace) -> dict[str, Any]:
    rows = _rows(params.conversations, params.messages)
    started = time.perf_counter()
    async with (
        contextlib.AsyncExitStack() as stack,
        target.open_store() as store,  # migrated, then filled underneath
    ):
        if target.kind == "sqlite":
            await asyncio.to_thread(_fill_sqlite, target.location, rows)
        else:
            await _fill_postgres(target.location, rows)
        filled = time.perf_counter() - started
        facts = UserMemory(
            items=tuple(
                MemoryItem("semantic", f"fact{i}", f"value {i}", sources=(2 * i + 1,))
                for i in range(20)
            )
        )
        await store.set_user_memory(UserKey("telegram", "u7"), facts.to_json(), BASE)
        settings = Settings.model_validate(
            {"bots": [{"platform": "telegram", "persona": "companion", "id": "telegram-mira"}]}
        )
        clock = SystemClock()
        # As personabot run wires it (bot/app/serve.py): on SQLite the console reads through
        # a connection of its own, so its queries never queue in front of the turns'.
        console_store = await stack.enter_async_context(
            target.open_store() if target.kind == "sqlite" else contextlib.nullcontext(store)
        )
        memory = build_memory(settings, console_store, OfflineLLM(), clock)
        web = console(
            settings,
            Secrets({"PERSONABOT_WEB_TOKEN": TOKEN}),
            store=console_store,
            memory=memory,
            clock=clock,
            listen="127.0.0.1:0",
        )
        deep = params.conversations - int(params.conversations * 0.9)
        pages = {
            "overview": "/",
            "conversations (first page)": "/conversations",
            "conversations (deep page)": f"/conversations?after={BASE + deep!r}:{deep}",
            "a conversation": f"/conversations/{params.conversations // 2}",
            "a person": "/people/telegram/u7",
        }
        timings: dict[str, list[float]] = {name: [] for name in pages}
        failures: list[str] = []
        async with web, aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
            base = f"http://127.0.0.1:{web.port}"
            async with http.post(f"{base}/login", data={"token": TOKEN}) as r:
                assert r.status == 200
            lag = await _lag(store, params, http, [base + p for p in list(pages.values())[:4]])
            for _ in range(params.samples):
                for name, path in pages.items():
                    async with http.get(base + path) as r:
                        await r.read()
                        if r.status != 200:
                            failures.append(f"{name}: {r.status}")
                        found = re.search(r"dur=([0-9.]+)", r.headers.get("Server-Timing", ""))
                        if found:
                            timings[name].append(float(found[1]))
    return {
        "store": target.kind,
        "fill_seconds": round(filled, 1),
        "pages": {
            name: {
                "p50_ms": round(percentile(values, 50), 1),
                "p95_ms": round(percentile(values, 95), 1),
                "samples": len(values),
            }
            for name, values in timings.items()
        },
        "failures": failures,
        "lag": lag,
    }


async def _lag(
    store: Any, params: argparse.Namespace, http: aiohttp.ClientSession, polled: list[str]
) -> dict[str, Any]:
    """Scheduler lag of the queue bench's coalescing phase, without and with the console
    polled once a second (the same store, the same process, one after the other)."""
    from bench import queue

    args = ["--quick", "--conversations", str(params.lag_conversations)]
    lag_params = queue.params_from(queue.build_parser().parse_args(args))
    out: dict[str, Any] = {}
    for run, poll in (("without console", False), ("console polled 1/s", True)):
        # Each run its own bot key: the conversations of the first are not the second's.
        queue.BOT = f"bench-{len(out)}"
        stop = asyncio.Event()

        async def poller(stop: asyncio.Event) -> None:
            while not stop.is_set():
                for url in polled:
                    async with http.get(url) as r:
                        await r.read()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 1.0)

        task = asyncio.create_task(poller(stop)) if poll else None
        try:
            result = await queue.coalescing_phase(store, lag_params)
        finally:
            stop.set()
            if task is not None:
                await task
        summary = queue.lag_summary(result.lags_ms)
        out[run] = {
            "turns": summary["turns"],
            "p50_ms": round(summary["p50_ms"], 1),
            "p99_ms": round(summary["p99_ms"], 1),
            "guard_failures": queue.guard_failures(result),
        }
    return out


async def run(params: argparse.Namespace) -> dict[str, Any]:
    kinds: list[StoreKind] = ["sqlite", "postgresql"] if params.store == "both" else [params.store]
    results = []
    for kind in kinds:
        async with bench_target(kind) as target:
            results.append(await _measure(target, params))
    return {
        "benchmark": "web",
        "at": utc_timestamp(),
        "environment": environment(),
        "params": {
            "conversations": params.conversations,
            "messages": params.messages,
            "samples": params.samples,
        },
        "target_p95_ms": TARGET_MS,
        "results": results,
    }


def main(argv: Sequence[str] | None = None) -> int:
    params = build_parser().parse_args(argv)
    if params.quick:
        params.conversations, params.messages, params.samples = 1000, 50_000, 10
        params.lag_conversations = 50
    report = asyncio.run(run(params))
    rows = []
    for result in report["results"]:
        for name, figures in result["pages"].items():
            ok = figures["p95_ms"] < TARGET_MS
            rows.append(
                [
                    f"{result['store']}: {name}",
                    figures["p50_ms"],
                    figures["p95_ms"],
                    "yes" if ok else "NO",
                ]
            )
    title = (
        f"console server time, {params.conversations:,} conversations, "
        f"{params.messages:,} messages, {params.samples} samples per page"
    )
    print(format_table(["page", "p50 ms", "p95 ms", f"p95 < {TARGET_MS:.0f} ms"], rows, title))
    lag_rows = [
        [f"{result['store']}: {run}", figures["turns"], figures["p50_ms"], figures["p99_ms"]]
        for result in report["results"]
        for run, figures in result["lag"].items()
    ]
    print()
    print(
        format_table(
            ["scheduler lag", "turns", "p50 ms", "p99 ms"],
            lag_rows,
            "turns with and without the console polled once a second (same store, same run)",
        )
    )
    for result in report["results"]:
        print(f"{result['store']}: filled in {result['fill_seconds']} s")
    write_json(params.out, report)
    failed = [f for r in report["results"] for f in r["failures"]]
    failed += [
        f for r in report["results"] for run in r["lag"].values() for f in run["guard_failures"]
    ]
    if failed:
        print("pages that failed: " + ", ".join(failed[:10]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
