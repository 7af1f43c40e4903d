"""Review of issue 20 with real processes (tests/fakes/worker.py: what ``personabot run``
builds, behind an HTTP test adapter) on one PostgreSQL database, the fake Messages API."""

from __future__ import annotations

import asyncio
import os
import signal
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import asyncpg
import pytest

from tests import pg_cluster
from tests.bot.test_multiprocess import (  # noqa: F401 (worker_env is a fixture)
    Worker,
    eventually,
    post,
    worker_env,
    workers,
    write_config,
)
from tests.fakes.messages_api import FakeMessagesAPI


def _config(
    path: Path,
    *,
    dsn: str,
    api: str,
    scan: float,
    lease: float = 10.0,
    debounce: float = 0.3,
    replace: dict[str, str] | None = None,
) -> Path:
    """tests/bot/test_multiprocess.py's worker configuration, with lines replaced."""
    write_config(path, dsn=dsn, api_url=api, lease=lease, debounce=debounce, scan=scan)
    text = path.read_text(encoding="utf-8")
    for old, new in (replace or {}).items():
        assert old in text, old
        text = text.replace(old, new)
    path.write_text(text, encoding="utf-8")
    return path


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.fixture
async def private_cluster() -> AsyncIterator[pg_cluster.LocalCluster]:
    """A throwaway cluster of this test alone (it gets restarted)."""
    try:
        cluster = await asyncio.to_thread(pg_cluster.LocalCluster.start)
    except pg_cluster.ClusterUnavailable as exc:
        pytest.skip(str(exc))
    try:
        yield cluster
    finally:
        await asyncio.to_thread(cluster.stop)


async def _restart(cluster: pg_cluster.LocalCluster, outage: float) -> None:
    """Stop the server (fast: clients are disconnected), keep it down for ``outage`` seconds
    (the scenario: a restart or failover of that length), start it again."""
    log = str(cluster.root / "server.log")
    data = str(cluster.data_dir)
    await asyncio.to_thread(cluster._tool, "pg_ctl", "stop", "-D", data, "-m", "fast", "-w")
    await asyncio.sleep(outage)
    options = " ".join(f"-c {k}={v}" for k, v in pg_cluster.SERVER_SETTINGS)
    options += f" -p {pg_cluster.PORT} -k {cluster.socket_dir}"
    await asyncio.to_thread(
        cluster._tool, "pg_ctl", "start", "-D", data, "-w", "-l", log, "-o", options
    )


async def _post_until_stored(
    http: aiohttp.ClientSession, w: Worker, chat: str, text: str, mid: str
) -> None:
    """Post until the worker stores it (its first ingest after a restart may meet a dead
    pooled connection and answer 500; the platform would deliver it again)."""
    body = {"chat_id": chat, "author_id": f"user-{chat}", "text": text, "message_id": mid}
    for _ in range(50):
        async with http.post(w.url("/inbound"), json=body) as response:
            if response.status == 200:
                return
        await asyncio.sleep(0.1)
    raise AssertionError("the worker never stored the message")


async def test_processes_answer_again_after_a_postgresql_restart(
    private_cluster: pg_cluster.LocalCluster,
    tmp_path: Path,
    worker_env: dict[str, str],  # noqa: F811
) -> None:
    dsn = await pg_cluster.create_database(private_cluster.dsn(), "restarted")
    async with FakeMessagesAPI(latency=0.0) as api:
        config = _config(tmp_path / "personabot.toml", dsn=dsn, api=api.base_url, scan=0.2)
        async with (
            workers(2, config, tmp_path, worker_env) as procs,
            aiohttp.ClientSession() as http,
        ):

            def replies() -> list[dict[str, object]]:
                return [r for w in procs for r in w.delivered()]

            await post(http, procs[0], "before", "hello before", "b-0")
            await eventually(lambda: len(replies()) == 1, 15, "the reply before the restart")
            await _restart(private_cluster, outage=1.5)
            for i, w in enumerate(procs):
                await _post_until_stored(http, w, f"after{i}", f"hello after {i}", f"a-{i}")
            await eventually(lambda: len(replies()) == 3, 8, "replies after the restart")
    assert Counter(str(r["chat_id"]) for r in replies()) == {"before": 1, "after0": 1, "after1": 1}


async def test_an_idle_process_does_not_spin_on_a_locked_conversation(
    pg_dsn: str,
    tmp_path: Path,
    worker_env: dict[str, str],  # noqa: F811
) -> None:
    async with FakeMessagesAPI(latency=0.0) as api:
        config = _config(
            tmp_path / "personabot.toml", dsn=pg_dsn, api=api.base_url, scan=0.5, debounce=0.5
        )
        async with (
            workers(1, config, tmp_path, worker_env) as procs,
            aiohttp.ClientSession() as http,
        ):
            (w,) = procs
            admin = await asyncpg.connect(pg_dsn)
            try:
                await post(http, w, "k1", "hello", "k1-0")  # due in 0.5 s
                tx = admin.transaction()
                await tx.start()
                # Both locks a claim could meet: the conversation's and its turn lease's.
                await admin.execute("SELECT id FROM conversations FOR UPDATE")
                await admin.execute("SELECT name FROM leases FOR UPDATE")
                await asyncio.sleep(0.6)  # now due; the row stays locked
                before = cpu_seconds(w.pid)
                await asyncio.sleep(2.0)  # the measured window
                spent = cpu_seconds(w.pid) - before
                await tx.rollback()
                await eventually(lambda: len(w.delivered()) == 1, 10, "the reply once unlocked")
            finally:
                await admin.close()
    assert spent < 0.4, f"{spent:.2f} s of CPU in 2 s of waiting on a locked row"


async def test_processes_hosting_different_bots_answer_only_their_own(
    pg_dsn: str,
    tmp_path: Path,
    worker_env: dict[str, str],  # noqa: F811
) -> None:
    """Two processes per bot (bots test-mira and test-orin on one database), one turn slot
    and one pooled connection each, listening to each other's announcements; one process of
    each bot is SIGKILLed mid-stream. Each burst is answered once, by a process of its bot."""
    async with FakeMessagesAPI(latency=0.3) as api:
        configs = []
        for persona in ("mira", "orin"):
            path = _config(
                tmp_path / f"{persona}.toml",
                dsn=pg_dsn,
                api=api.base_url,
                scan=0.3,
                lease=3.0,
                replace={
                    "max_pool_size = 8": "max_pool_size = 1",
                    "max_concurrent_turns = 100": "max_concurrent_turns = 1",
                    'id = "mira"': f'id = "{persona}"',
                },
            )
            configs.append(path)
        (tmp_path / "mira").mkdir()
        (tmp_path / "orin").mkdir()
        async with (
            workers(2, configs[0], tmp_path / "mira", worker_env) as miras,
            workers(2, configs[1], tmp_path / "orin", worker_env) as orins,
            aiohttp.ClientSession() as http,
        ):
            chats = [f"c{i}" for i in range(12)]
            for i, chat in enumerate(chats):
                await post(http, miras[i % 2], chat, f"to mira {chat}", f"m-{chat}")
                await post(http, orins[i % 2], chat, f"to orin {chat}", f"o-{chat}")
                if i == 3:
                    miras[1].proc.send_signal(signal.SIGKILL)
                    orins[0].proc.send_signal(signal.SIGKILL)
                    await miras[1].proc.wait()
                    await orins[0].proc.wait()
                    break
            survivors = (miras[0], orins[1])
            for chat in chats[4:]:
                await post(http, survivors[0], chat, f"to mira {chat}", f"m-{chat}")
                await post(http, survivors[1], chat, f"to orin {chat}", f"o-{chat}")

            def delivered() -> list[tuple[str, dict[str, object]]]:
                return [("mira", r) for w in miras for r in w.delivered()] + [
                    ("orin", r) for w in orins for r in w.delivered()
                ]

            # SIGKILLed holders' leases expire after 3 s; the survivors answer the rest.
            await eventually(lambda: len(delivered()) >= 2 * len(chats), 40, "every burst")
            await asyncio.sleep(1.0)  # a stray duplicate would show up here
            got = delivered()
    assert Counter((bot, str(r["chat_id"])) for bot, r in got) == Counter(
        {(bot, chat): 1 for bot in ("mira", "orin") for chat in chats}
    )
    for bot, r in got:
        assert str(r["text"]) == f"to {bot} {r['chat_id']}"
