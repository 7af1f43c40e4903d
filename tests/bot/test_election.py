"""One receiver per account across processes (Telegram polling), elected by a store lease."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sqlite3
import sys
import time
from pathlib import Path

import asyncpg
import pytest

from bot.core.clock import ManualClock
from bot.runtime.election import Exclusive
from bot.store.base import BaseStore
from tests.fakes.telegram_api import FakeTelegramAPI, TgChat, TgUser
from tests.harness import settle
from tests.processes import DROPPED, clean_env, spawn

TOKEN = "5550009:AAElect-e2e-token-abcdefghijklmnopqrs"
USER = TgUser(777, "Ann")


async def test_exclusive_job_runs_in_one_elector_and_moves_when_it_dies(
    store: BaseStore, clock: ManualClock
) -> None:
    running: list[str] = []

    def job(name: str):  # type: ignore[no-untyped-def]
        async def work() -> None:
            running.append(name)
            try:
                await asyncio.Event().wait()
            finally:
                running.remove(name)

        return work

    a = Exclusive(store=store, clock=clock, name="receiver:x", ttl=3, holder="a")
    b = Exclusive(store=store, clock=clock, name="receiver:x", ttl=3, holder="b")
    task_a = asyncio.create_task(a.run(job("a")))
    await settle(store)
    task_b = asyncio.create_task(b.run(job("b")))
    for _ in range(20):
        await clock.advance(0.5)
        await settle(store)
    assert running == ["a"]  # a renews; b stands by
    task_a.cancel()  # a's process dies: no release, no more renewals
    with contextlib.suppress(asyncio.CancelledError):
        await task_a
    for _ in range(8):  # within one lease time
        await clock.advance(0.5)
        await settle(store)
    assert running == ["b"]
    task_b.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task_b


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The shared database of the processes: a SQLite file, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'shared.sqlite3'}"
    dsn: str = request.getfixturevalue("pg_dsn")
    return dsn


def _config(tmp_path: Path, api: FakeTelegramAPI, url: str) -> Path:
    path = tmp_path / "personabot.toml"
    path.write_text(
        f"""
[storage]
url = {json.dumps(url)}
[llm]
provider = "offline"
[queue]
debounce_seconds = 0.3
max_wait_seconds = 2
lease_seconds = 2
scan_interval_seconds = 0.2
shutdown_grace_seconds = 1
[[bots]]
platform = "telegram"
persona = "companion"
api_server = "{api.base_url}"
"""
    )
    return path


HOLDER_SQL = (
    "SELECT holder FROM leases WHERE name = 'receiver:telegram-companion' AND expires_at > "
)


async def _holder_pid(url: str) -> int | None:
    """The pid of the process holding the receiver lease now (None: nobody)."""
    if url.startswith("sqlite"):
        with (
            contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as db,
            contextlib.suppress(sqlite3.OperationalError),
        ):
            row = db.execute(HOLDER_SQL + "?", (time.time(),)).fetchone()
            return None if row is None else int(row[0].split(":")[1])
        return None
    conn = await asyncpg.connect(url)
    try:
        with contextlib.suppress(asyncpg.UndefinedTableError):
            value = await conn.fetchval(HOLDER_SQL + "$1", time.time())
            return None if value is None else int(value.split(":")[1])
        return None
    finally:
        await conn.close()


async def _until_logged(tmp_path: Path, line: str, within: float) -> None:
    """Wait until every process's log holds ``line``."""
    deadline = time.monotonic() + within
    logs = [tmp_path / f"process-{n}.log" for n in range(2)]
    while not all(line in log.read_text(errors="replace") for log in logs):
        assert time.monotonic() < deadline, f"not every process logged {line!r}"
        await asyncio.sleep(0.05)


async def _wait_holder(url: str, within: float) -> int:
    deadline = time.monotonic() + within
    while (pid := await _holder_pid(url)) is None:
        assert time.monotonic() < deadline, "no process was elected"
        await asyncio.sleep(0.05)
    return pid


async def test_killing_the_poller_hands_polling_to_another_process(
    tmp_path: Path, db_url: str
) -> None:
    async with FakeTelegramAPI() as api:
        api.add_bot(TOKEN, "elect_bot")
        config = _config(tmp_path, api, db_url)
        env = clean_env(drop=(*DROPPED, "TELEGRAM_"), TELEGRAM_BOT_TOKEN=TOKEN)
        # Each process's log, for the failure message: which one did what, and when.
        logs = [(tmp_path / f"process-{n}.log").open("wb") for n in range(2)]
        procs = [
            await spawn(
                sys.executable,
                "-m",
                "bot",
                "run",
                "--config",
                str(config),
                cwd=tmp_path,
                env=env,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=log,
            )
            for log in logs
        ]
        try:
            await _wait_holder(db_url, within=40)
            await api.wait_for(lambda: api.polls_started(TOKEN), within=20, what="polling")
            chat = TgChat.private(USER)
            api.push_message(TOKEN, chat, USER, "before")
            await api.wait_for(lambda: api.sent_messages(TOKEN), what="a reply")
            # The standby must be up (standing by for the lease) before the leader dies: its
            # start-up may lag the leader's by seconds on a loaded machine, and that is not
            # takeover time.
            await _until_logged(tmp_path, "is @elect_bot", within=40)
            leader = await _holder_pid(db_url)
            victim = next(p for p in procs if p.pid == leader)
            # While both processes live, only one ever polls (Telegram would answer 409).
            assert [c for c in api.calls_of("getUpdates") if not c.ok] == []
            polls = api.polls_started(TOKEN)
            victim.send_signal(signal.SIGKILL)
            killed_at = time.monotonic()
            try:
                await api.wait_for(
                    lambda: api.polls_started(TOKEN) > polls, within=10, what="the standby to poll"
                )
            except AssertionError as exc:
                tails = [
                    f"process {n} (pid {p.pid}, exit {p.returncode}):\n"
                    + "\n".join(
                        (tmp_path / f"process-{n}.log")
                        .read_text(errors="replace")
                        .splitlines()[-15:]
                    )
                    for n, p in enumerate(procs)
                ]
                raise AssertionError(f"{exc}\n" + "\n".join(tails)) from None
            took = time.monotonic() - killed_at
            assert took <= 2 + 1.0, took  # within lease_seconds (+ process scheduling)
            survivor = next(p for p in procs if p is not victim)
            assert await _holder_pid(db_url) == survivor.pid
            for text in ("one", "two", "three"):
                api.push_message(TOKEN, chat, USER, text)
            await api.wait_for(lambda: len(api.sent_messages(TOKEN)) == 2, what="the burst")
            await asyncio.sleep(1.5)  # a duplicate would arrive within the debounce + a turn
            replies = [c.visible_text for c in api.sent_messages(TOKEN)]
            assert len(replies) == 2 and "one / two / three" in replies[1]
            # The dead poller's last long poll may still be open on the server at takeover:
            # the new poller's first call can meet a 409 and retry, never more.
            late = [c for c in api.calls_of("getUpdates") if not c.ok]
            assert len(late) <= 1
        finally:
            for proc in procs:
                if proc.returncode is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in procs:
                await asyncio.wait_for(proc.wait(), timeout=20)
            for log in logs:
                log.close()
