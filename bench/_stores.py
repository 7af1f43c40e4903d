"""Where a benchmark's store lives (a SQLite file or a PostgreSQL database), and raw inserts.

PostgreSQL comes from ``PERSONABOT_TEST_POSTGRES_DSN`` or a throwaway cluster, through the same
helper the tests use (``tests/pg_cluster.py``). The raw single-row insert rate is measured on the
same file or server, into a scratch table shaped like ``messages``, so that the store's ingest
rate can be read as a ratio of what the database does at its simplest.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

import aiosqlite
import asyncpg

from bot.store.base import BaseStore
from bot.store.postgres import PostgresStore
from bot.store.sqlite import SQLiteStore
from tests import pg_cluster

StoreKind = Literal["sqlite", "postgresql"]
BUSY_TIMEOUT_MS: Final = 5000
POOL_SIZE: Final = 10  # the [storage] max_pool_size default
_COLUMNS: Final = (
    "conversation_id, session_id, turn, role, author_id, display_name, text, "
    "platform_message_id, is_private, version, pending, created_at"
)


@dataclass(frozen=True, slots=True)
class StoreTarget:
    """A benchmark database: picklable, so child processes can open their own store on it."""

    kind: StoreKind
    location: str  # file path or DSN

    def open_store(self) -> BaseStore:
        """An unopened store on the target (``async with``)."""
        if self.kind == "sqlite":
            return SQLiteStore(path=self.location, busy_timeout_ms=BUSY_TIMEOUT_MS)
        return PostgresStore(dsn=self.location, min_pool=1, max_pool=POOL_SIZE, use_db_clock=True)

    def describe(self) -> str:
        """What the tables were measured on."""
        return "SQLite file (WAL)" if self.kind == "sqlite" else "PostgreSQL (throwaway cluster)"


@contextlib.asynccontextmanager
async def bench_target(
    kind: StoreKind,
    *,
    name: str = "personabot_bench_queue",
    server_settings: Sequence[tuple[str, str]] = (),
) -> AsyncIterator[StoreTarget]:
    """A fresh, empty database of ``kind``, removed afterwards: a SQLite file, or PostgreSQL
    database ``name`` (a throwaway cluster is started with ``server_settings``)."""
    if kind == "sqlite":
        with tempfile.TemporaryDirectory(prefix="personabot-bench-") as tmp:
            yield StoreTarget("sqlite", str(Path(tmp) / f"{name}.sqlite3"))
        return
    with pg_cluster.server(server_settings) as server_dsn:
        await pg_cluster.drop_database(server_dsn, name)
        dsn = await pg_cluster.create_database(server_dsn, name)
        try:
            yield StoreTarget("postgresql", dsn)
        finally:
            await pg_cluster.drop_database(server_dsn, name)


async def create_raw_table(target: StoreTarget) -> None:
    """The scratch table of the raw insert measurement (empty)."""
    if target.kind == "sqlite":
        async with aiosqlite.connect(target.location, isolation_level=None) as db:
            await db.execute("DROP TABLE IF EXISTS bench_raw_insert")
            await db.execute(
                "CREATE TABLE bench_raw_insert (id INTEGER PRIMARY KEY, conversation_id INTEGER "
                "NOT NULL, session_id INTEGER NOT NULL, turn INTEGER NOT NULL, role TEXT NOT "
                "NULL, author_id TEXT NOT NULL, display_name TEXT NOT NULL, text TEXT NOT NULL, "
                "platform_message_id TEXT, is_private INTEGER NOT NULL, version INTEGER NOT NULL,"
                " pending INTEGER NOT NULL, created_at REAL NOT NULL)"
            )
        return
    conn = await asyncpg.connect(target.location)
    try:
        await conn.execute("DROP TABLE IF EXISTS bench_raw_insert")
        await conn.execute(
            "CREATE TABLE bench_raw_insert (id BIGSERIAL PRIMARY KEY, conversation_id BIGINT NOT "
            "NULL, session_id BIGINT NOT NULL, turn INTEGER NOT NULL, role TEXT NOT NULL, "
            "author_id TEXT NOT NULL, display_name TEXT NOT NULL, text TEXT NOT NULL, "
            "platform_message_id TEXT, is_private BOOLEAN NOT NULL, version BIGINT NOT NULL, "
            "pending BOOLEAN NOT NULL, created_at DOUBLE PRECISION NOT NULL)"
        )
    finally:
        await conn.close()


async def drop_raw_table(target: StoreTarget) -> None:
    """Remove the scratch table."""
    if target.kind == "sqlite":
        async with aiosqlite.connect(target.location, isolation_level=None) as db:
            await db.execute("DROP TABLE IF EXISTS bench_raw_insert")
        return
    conn = await asyncpg.connect(target.location)
    try:
        await conn.execute("DROP TABLE IF EXISTS bench_raw_insert")
    finally:
        await conn.close()


async def raw_inserts(
    target: StoreTarget, rows: Sequence[tuple[Any, ...]], *, explicit_tx: bool
) -> None:
    """Insert ``rows`` one per transaction on one new connection (autocommit, or explicit)."""
    if target.kind == "sqlite":
        sql = (
            f"INSERT INTO bench_raw_insert ({_COLUMNS}) "
            "VALUES (?, ?, ?, 'user', ?, ?, ?, ?, 1, ?, 1, ?)"
        )
        async with aiosqlite.connect(target.location, isolation_level=None) as db:
            await db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            await db.execute("PRAGMA journal_mode = WAL")
            await db.execute("PRAGMA synchronous = NORMAL")
            for row in rows:
                if explicit_tx:
                    await db.execute("BEGIN IMMEDIATE")
                    await db.execute(sql, row)
                    await db.execute("COMMIT")
                else:
                    await db.execute(sql, row)
        return
    sql = (
        f"INSERT INTO bench_raw_insert ({_COLUMNS}) "
        "VALUES ($1, $2, $3, 'user', $4, $5, $6, $7, TRUE, $8, TRUE, $9)"
    )
    conn = await asyncpg.connect(target.location)
    try:
        for row in rows:
            if explicit_tx:
                async with conn.transaction():
                    await conn.execute(sql, *row)
            else:
                await conn.execute(sql, *row)
    finally:
        await conn.close()
