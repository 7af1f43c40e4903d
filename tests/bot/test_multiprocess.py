"""docs/architecture.md#queue rule 8: several OS processes on one PostgreSQL database, real time.

Each process is ``tests/fakes/worker.py``: the real runtime (store from the config, Claude
client, queue, pipeline) behind an HTTP test adapter. All of them call one fake Messages API
that counts calls and takes 2 s per call. Telegram's poller election is not tested here (it
needs the Telegram adapter).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import asyncpg
import pytest

from tests.fakes.messages_api import FakeMessagesAPI

ROOT = Path(__file__).resolve().parents[2]
FILLER = "and that is all I wanted to say"
WORKER = (sys.executable, "-m", "tests.fakes.worker")


@dataclass
class Worker:
    """One running worker process."""

    proc: asyncio.subprocess.Process
    port: int
    pid: int
    holder: str
    replies: Path
    log: Path

    def url(self, path: str) -> str:
        """An URL of the worker's HTTP adapter."""
        return f"http://127.0.0.1:{self.port}{path}"

    def delivered(self) -> list[dict[str, object]]:
        """Replies this worker delivered (read from its file, so also after a SIGKILL)."""
        if not self.replies.exists():
            return []
        text = self.replies.read_text(encoding="utf-8")
        # The worker may be writing a line right now: only complete lines are replies.
        complete = text[: text.rfind("\n") + 1]
        return [json.loads(line) for line in complete.splitlines() if line.strip()]


def write_config(
    path: Path,
    *,
    dsn: str,
    api_url: str,
    lease: float,
    debounce: float,
    scan: float,
) -> Path:
    """A personabot.toml for the workers."""
    path.write_text(
        f"""
[storage]
url = {json.dumps(dsn)}
max_pool_size = 8

[llm]
base_url = {json.dumps(api_url)}
max_retries = 0
timeout_seconds = 30

[queue]
debounce_seconds = {debounce}
max_wait_seconds = 15.0
lease_seconds = {lease}
max_concurrent_turns = 100
scan_interval_seconds = {scan}
shutdown_grace_seconds = 2.0

[memory]
extract_after_idle_minutes = 10000

[logging]
level = "WARNING"

[[personas]]
id = "mira"
name = "Mira"
system = "You are Mira."
first_message = ["Hi, I'm Mira."]
model = "claude-test"
""",
        encoding="utf-8",
    )
    return path


@pytest.fixture(scope="module")
def worker_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The workers' environment, with their imports compiled once into a bytecode cache.

    Without it each worker compiles the Claude SDK from source when bytecode writing is off
    (PYTHONDONTWRITEBYTECODE), seconds per process.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "PERSONABOT_"))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(tmp_path_factory.mktemp("pycache"))
    env["ANTHROPIC_API_KEY"] = "test"
    # One worker started up to READY (on a throwaway SQLite file) compiles what all import.
    tmp = tmp_path_factory.mktemp("warm")
    config = tmp / "personabot.toml"
    config.write_text(f'[storage]\nurl = "sqlite:///{tmp}/warm.sqlite3"\n', encoding="utf-8")
    with subprocess.Popen(
        [*WORKER, "--config", str(config), "--replies", str(tmp / "replies.jsonl")],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    ) as warm:
        assert warm.stdout is not None
        ready = warm.stdout.readline()
        warm.terminate()
        warm.communicate(timeout=60)
    assert ready.startswith(b"READY"), ready
    return env


@contextlib.asynccontextmanager
async def workers(
    count: int, config: Path, tmp_path: Path, env: dict[str, str]
) -> AsyncIterator[list[Worker]]:
    """Start ``count`` workers, wait until each listens; stop the survivors on exit."""
    procs: list[tuple[asyncio.subprocess.Process, Path, Path]] = []
    started: list[Worker] = []
    try:
        for i in range(count):
            log = tmp_path / f"worker-{i}.log"
            replies = tmp_path / f"replies-{i}.jsonl"
            with log.open("wb") as err:
                proc = await asyncio.create_subprocess_exec(
                    *WORKER,
                    "--config",
                    str(config),
                    "--replies",
                    str(replies),
                    cwd=ROOT,
                    env=env,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=err,
                )
            procs.append((proc, replies, log))
        for proc, replies, log in procs:
            assert proc.stdout is not None
            async with asyncio.timeout(30):
                line = (await proc.stdout.readline()).decode().split()
            assert line[:1] == ["READY"], log.read_text(errors="replace")[-3000:]
            started.append(Worker(proc, int(line[1]), int(line[2]), line[3], replies, log))
        yield started
    finally:
        for proc, _, _ in procs:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
        for proc, _, _ in procs:
            try:
                async with asyncio.timeout(15):
                    await proc.communicate()
            except TimeoutError:
                proc.kill()
                await proc.communicate()


async def eventually(check: Callable[[], bool], within: float, what: str) -> None:
    """Poll ``check`` until it holds; fail after ``within`` seconds."""
    deadline = asyncio.get_running_loop().time() + within
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what}")
        await asyncio.sleep(0.05)


async def post(http: aiohttp.ClientSession, worker: Worker, chat: str, text: str, mid: str) -> None:
    """One user message to a worker; returns once it is ingested."""
    body = {"chat_id": chat, "author_id": f"user-{chat}", "text": text, "message_id": mid}
    async with http.post(worker.url("/inbound"), json=body) as response:
        assert response.status == 200, await response.text()


async def test_three_processes_answer_each_burst_once(
    pg_dsn: str, tmp_path: Path, worker_env: dict[str, str]
) -> None:
    rng = random.Random(20261130)
    bursts = {
        f"c{i}": [f"c{i} m{j} {FILLER}" for j in range(rng.randint(1, 5))] for i in range(200)
    }
    async with FakeMessagesAPI(latency=2.0) as api:
        config = write_config(
            tmp_path / "personabot.toml",
            dsn=pg_dsn,
            api_url=api.base_url,
            lease=30.0,
            debounce=2.0,
            scan=0.5,
        )
        async with workers(3, config, tmp_path, worker_env) as procs:
            # Every message of a burst goes to a random process (as a load balancer would).
            routes = {chat: [rng.choice(procs) for _ in texts] for chat, texts in bursts.items()}
            async with aiohttp.ClientSession() as http:

                async def send(chat: str) -> None:
                    for j, (text, worker) in enumerate(
                        zip(bursts[chat], routes[chat], strict=True)
                    ):
                        await post(http, worker, chat, text, f"{chat}-{j}")

                await asyncio.gather(*(send(chat) for chat in bursts))

            def replies() -> list[dict[str, object]]:
                return [r for w in procs for r in w.delivered()]

            await eventually(lambda: len(replies()) >= len(bursts), 45, "a reply to every burst")
            # Let any stray second call or reply show up before counting.
            await eventually(lambda: api.call_count >= len(bursts), 10, "all model calls")
            delivered = replies()
        per_process = Counter(w.pid for ws in routes.values() for w in ws)
        assert len(per_process) == 3  # every process ingested messages
        assert sum(len(set(w.pid for w in ws)) > 1 for ws in routes.values()) > 50

    # Exactly one model call per burst, holding the whole burst in order.
    assert api.call_count == len(bursts)
    calls = Counter[str]()
    for request in api.requests:
        text = request.last_user_text
        chats = {chat for chat in bursts if f"{chat} m0 " in text}
        assert len(chats) == 1, text
        (chat,) = chats
        assert [line for line in text.splitlines() if line.strip()] == bursts[chat]
        calls[chat] += 1
    assert set(calls.values()) == {1}
    # Exactly one reply per burst, covering every message once.
    assert Counter(str(r["chat_id"]) for r in delivered) == Counter(dict.fromkeys(bursts, 1))
    for r in delivered:
        assert str(r["text"]).split("\n") == bursts[str(r["chat_id"])]


async def test_sigkill_mid_generation_another_process_replies_once(
    pg_dsn: str, tmp_path: Path, worker_env: dict[str, str]
) -> None:
    lease_seconds = 3.0
    async with FakeMessagesAPI(latency=2.0) as api:
        config = write_config(
            tmp_path / "personabot.toml",
            dsn=pg_dsn,
            api_url=api.base_url,
            lease=lease_seconds,
            debounce=0.3,
            scan=0.2,
        )
        async with (
            workers(3, config, tmp_path, worker_env) as procs,
            aiohttp.ClientSession() as http,
        ):
            await post(http, procs[0], "k1", "are you there?", "k1-0")
            await eventually(lambda: api.call_count == 1, 15, "the first generation")
            db = await asyncpg.connect(pg_dsn)
            try:
                holder, expires_at = await db.fetchrow(
                    "SELECT holder, expires_at FROM leases WHERE name LIKE 'turn:%:k1'"
                )
                victim = next(w for w in procs if w.holder == holder)
                victim.proc.send_signal(signal.SIGKILL)  # mid-generation: the call takes 2 s
                await victim.proc.wait()
                killed_at = time.time()

                def replies() -> list[dict[str, object]]:
                    return [r for w in procs for r in w.delivered()]

                await eventually(lambda: len(replies()) >= 1, 30, "the takeover's reply")
                timers = await db.fetchval("SELECT COUNT(*) FROM timers")
                rows = await db.fetch("SELECT role, pending FROM messages ORDER BY turn")
            finally:
                await db.close()
            survivors_replies = replies()

    assert victim.delivered() == []  # the killed process's work never reached the platform
    assert len(survivors_replies) == 1
    (reply,) = survivors_replies
    assert reply["pid"] != victim.pid
    assert reply["text"] == "are you there?"
    # Sent only after the lease expired (server clock, same machine).
    assert float(str(reply["at"])) >= expires_at >= killed_at - lease_seconds
    assert api.call_count == 2  # the killed generation and the takeover's
    assert timers == 0
    assert [(r["role"], r["pending"]) for r in rows] == [("user", False), ("assistant", False)]
