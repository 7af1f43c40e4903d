"""A store that cannot be opened fails the start within a bounded time and closes what it
opened: a SQLite file locked by another program, a PostgreSQL server that never answers."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest

from bot.core.errors import StoreError
from bot.core.events import ConversationKey, SessionKey
from bot.store.migrations.sqlite import MIGRATIONS
from bot.store.postgres import PostgresStore
from bot.store.sqlite import SQLiteStore
from tests.backends import StoreFactory
from tests.processes import clean_env, spawn

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "s3cret-pw-never-shown"


@contextlib.contextmanager
def write_lock(path: Path) -> Iterator[None]:
    """Another program holds the database's write lock (an open IMMEDIATE transaction)."""
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("CREATE TABLE IF NOT EXISTS other_tool (x)")
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO other_tool VALUES (1)")
        yield
    finally:
        db.rollback()
        db.close()


@contextlib.asynccontextmanager
async def silent_server() -> AsyncIterator[int]:
    """A TCP port that accepts connections and never says a word (a hung PostgreSQL)."""
    held: list[asyncio.StreamWriter] = []

    async def accept(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


def _config(tmp_path: Path, url: str, extra: str = "") -> Path:
    path = tmp_path / "personabot.toml"
    path.write_text(
        f"""
[storage]
url = "{url}"
busy_timeout_ms = 500
connect_timeout_seconds = 1.0
{extra}
[llm]
provider = "offline"

[[personas]]
id = "mira"
name = "Mira"
system = "You are Mira."
first_message = ["Hi, I'm Mira."]

[[bots]]
platform = "telegram"
persona = "mira"
token_env = "MIRA_TG"
api_server = "http://127.0.0.1:9"
""",
        encoding="utf-8",
    )
    return path


async def personabot(tmp_path: Path, *args: str, within: float = 30.0) -> tuple[int, str, float]:
    """Run the CLI; (exit code, output, seconds). A process that outlives ``within`` fails."""
    env = clean_env(
        drop=("PERSONABOT_", "PG"), MIRA_TG="5550009:AAOpen-test-token-abcdefghijklmnopqrs"
    )
    started = time.monotonic()
    proc = await spawn(
        sys.executable, "-m", "bot", *args, cwd=ROOT, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout=within)
    except TimeoutError:
        proc.kill()
        await proc.communicate()
        raise AssertionError(f"personabot {' '.join(args)} still running after {within}s") from None
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace"), time.monotonic() - started


async def test_sqlite_open_fails_and_closes_its_connection(tmp_path: Path) -> None:
    path = tmp_path / "locked.sqlite3"
    before = set(threading.enumerate())
    with write_lock(path):
        store = SQLiteStore(path=path, busy_timeout_ms=200)
        started = time.monotonic()
        with pytest.raises(StoreError, match=r"database is locked.*busy_timeout_ms = 200"):
            await store.open()
        assert time.monotonic() - started < 2.0
        # aiosqlite's worker thread (not a daemon: it would keep the process alive) ends; it
        # may still be returning from its last call when close() resolves, so join it.
        for thread in [t for t in threading.enumerate() if t not in before]:
            thread.join(timeout=2.0)
            assert not thread.is_alive(), thread
    async with store:  # the lock is gone: the same store opens and migrates
        assert await store.schema_version() >= 1


@pytest.mark.parametrize("command", [("db", "migrate"), ("run",)])
async def test_locked_sqlite_start_exits_non_zero(tmp_path: Path, command: tuple[str, ...]) -> None:
    path = tmp_path / "bots.sqlite3"
    config = _config(tmp_path, f"sqlite:///{path}")
    with write_lock(path):
        code, out, _ = await personabot(tmp_path, *command, "--config", str(config))
    assert code == 1, out
    assert "database is locked" in out and "busy_timeout_ms = 500" in out
    # Once the other program let go, the same command succeeds.
    if command == ("db", "migrate"):
        code, out, _ = await personabot(tmp_path, *command, "--config", str(config))
        assert code == 0, out


async def test_postgres_that_never_answers_fails_in_bounded_time() -> None:
    async with silent_server() as port:
        dsn = f"postgresql://bot:{PASSWORD}@127.0.0.1:{port}/personabot"
        store = PostgresStore(dsn=dsn, connect_timeout=0.5)
        started = time.monotonic()
        with pytest.raises(StoreError) as caught:
            await store.open()
        assert time.monotonic() - started < 3.0
    assert "cannot connect to PostgreSQL" in str(caught.value)
    assert PASSWORD not in str(caught.value) and "bot:***@" in str(caught.value)


@pytest.mark.parametrize("command", [("db", "migrate"), ("run",)])
async def test_postgres_unreachable_start_exits_non_zero(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    async with silent_server() as port:
        url = f"postgresql://bot:{PASSWORD}@127.0.0.1:{port}/personabot"
        config = _config(tmp_path, url)
        code, out, _ = await personabot(tmp_path, *command, "--config", str(config))
    assert code == 1, out
    assert "cannot connect to PostgreSQL" in out
    assert PASSWORD not in out


async def test_a_version_merged_out_of_order_is_still_applied(stores: StoreFactory) -> None:
    """A database migrated by a build that had version 4 but not yet 3 gets 3 at the next
    start (versions are applied by membership, not by 'newer than the newest')."""
    async with stores.new() as store:
        pass
    if stores.backend.name == "sqlite":
        with contextlib.closing(sqlite3.connect(stores.path)) as db, db:
            db.execute("DROP TABLE tombstones")
            db.execute("DELETE FROM schema_version WHERE version = 3")
    else:
        conn = await asyncpg.connect(stores.dsn)
        try:
            await conn.execute("DROP TABLE tombstones")
            await conn.execute("DELETE FROM schema_version WHERE version = 3")
        finally:
            await conn.close()
    async with stores.new() as store:
        assert await store.missing_turns(SessionKey(ConversationKey("telegram", "c"), 1)) == []
        assert await store.schema_version() == max(v for v, _ in MIGRATIONS)
