"""What only the PostgreSQL store has: concurrent migration, the database clock, pools, secrets."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from bot.app.build import build_store
from bot.config import Settings, StorageSettings, load_settings
from bot.core.errors import ConfigError, StoreError
from bot.core.events import ConversationKey
from bot.store.migrations.postgres import MIGRATIONS
from bot.store.postgres import PostgresStore, redact_url
from tests import pg_cluster
from tests.backends import PgTemplate
from tests.pg_cluster import SUPERUSER
from tests.store.helpers import in_flight

T0 = 1_700_000_000.0
KEY = ConversationKey("telegram", "1")
SECRET = "s3cret-Pa55word"


@pytest.fixture
async def empty_db(pg_template: PgTemplate) -> AsyncIterator[str]:
    """A fresh database with no schema at all."""
    name = pg_template.next_name()
    dsn = await pg_cluster.create_database(pg_template.server_dsn, name)
    try:
        yield dsn
    finally:
        await pg_cluster.drop_database(pg_template.server_dsn, name)


async def test_processes_starting_together_migrate_once(empty_db: str) -> None:
    stores = [PostgresStore(dsn=empty_db, min_pool=1, max_pool=2) for _ in range(5)]
    try:
        await asyncio.gather(*(s.open() for s in stores))
        assert {await s.schema_version() for s in stores} == {MIGRATIONS[-1][0]}
    finally:
        await asyncio.gather(*(s.aclose() for s in stores))
    conn = await asyncpg.connect(empty_db)
    try:
        applied = await conn.fetch("SELECT version FROM schema_version ORDER BY version")
    finally:
        await conn.close()
    assert [r[0] for r in applied] == [v for v, _ in MIGRATIONS]


async def test_a_newer_schema_is_refused(empty_db: str) -> None:
    async with PostgresStore(dsn=empty_db):
        pass
    conn = await asyncpg.connect(empty_db)
    try:
        await conn.execute("INSERT INTO schema_version VALUES (999)")
    finally:
        await conn.close()
    with pytest.raises(StoreError, match="newer than this personabot"):
        async with PostgresStore(dsn=empty_db):
            pass


async def test_database_clock_decides_lease_expiry(empty_db: str) -> None:
    """With use_db_clock, a caller's clock far ahead cannot take over a lease early."""
    async with PostgresStore(dsn=empty_db, use_db_clock=True) as store:
        held = await store.acquire_lease("x", "a", 60, T0)
        assert held is not None
        far_future = T0 + 10**9  # a process whose clock is wildly ahead
        assert await store.acquire_lease("x", "b", 60, far_future) is None
        renewed = await store.renew_lease(held, 60, far_future)
        assert renewed is not None and renewed.expires_at < far_future  # server time + 60
        short = await store.acquire_lease("y", "a", 0, T0)  # expires at once, by the server
        assert short is not None
        again = await store.acquire_lease("y", "b", 0, T0)
        assert again is not None and again.token == short.token + 1
    async with PostgresStore(dsn=empty_db) as store:  # the callers' clocks decide
        assert await store.acquire_lease("x", "b", 60, far_future) is not None


async def test_pool_waiters_count_as_in_flight(empty_db: str) -> None:
    async with PostgresStore(dsn=empty_db, min_pool=1, max_pool=1) as store:
        conn = await asyncpg.connect(empty_db)
        try:
            async with conn.transaction():
                # Hold the lease row: the store's CAS blocks on it, a second call waits for
                # the pool's only connection.
                await conn.execute(
                    "INSERT INTO leases VALUES ('x', 'other', 1, 0) ON CONFLICT DO NOTHING"
                )
                await conn.execute("SELECT 1 FROM leases WHERE name = 'x' FOR UPDATE")
                first = asyncio.create_task(store.acquire_lease("x", "a", 30, T0))
                second = asyncio.create_task(store.conversation_version(KEY))
                await asyncio.sleep(0)  # both tasks run up to their first wait
                assert in_flight(store) == 2
                done, _ = await asyncio.wait({first, second}, timeout=0.2)
                assert not done  # one waits on the row lock, the other for the connection
                assert in_flight(store) == 2
        finally:
            await conn.close()
        lease = await first
        assert lease is not None and lease.token == 2
        assert await second == 0
        assert in_flight(store) == 0


def test_redact_url_hides_only_the_password() -> None:
    assert redact_url(f"postgresql://bot:{SECRET}@db:5432/personabot") == (
        "postgresql://bot:***@db:5432/personabot"
    )
    assert redact_url("postgresql://bot@db/personabot") == "postgresql://bot@db/personabot"


async def test_connection_errors_never_show_the_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PGPASSWORD", SECRET + "-env")
    urls = [
        f"postgresql://bot:{SECRET}@127.0.0.1:1/personabot?connect_timeout=2",
        f"postgres://bot:{SECRET}@/personabot?host=/nonexistent-socket-dir",
        "postgresql://bot@127.0.0.1:1/personabot",  # password from PGPASSWORD
        f"postgresql://bot:{SECRET}@127.0.0.1:notaport/personabot",
    ]
    for url in urls:
        store = PostgresStore(dsn=url, connect_timeout=2)
        with pytest.raises(StoreError) as caught:
            await store.open()
        message = str(caught.value)
        assert SECRET not in message, message
        assert "cannot connect to PostgreSQL" in message
        assert caught.value.__cause__ is None  # the driver's own message is not chained


async def test_wrong_password_error_is_clean(pg_template: PgTemplate) -> None:
    """A real server refusing the login: the message names the user, never the password."""
    role = f"{pg_template.prefix}_nologin"
    admin = await asyncpg.connect(pg_template.server_dsn)
    try:
        await admin.execute(f'CREATE ROLE "{role}" NOLOGIN')
        dsn = pg_template.server_dsn.replace(f"://{SUPERUSER}@", f"://{role}:{SECRET}@")
        if dsn == pg_template.server_dsn:  # an external server's DSN: build one for the role
            parts = urlsplit(pg_template.server_dsn)
            dsn = urlunsplit(
                parts._replace(
                    netloc=f"{role}:{SECRET}@{parts.hostname or ''}"
                    + (f":{parts.port}" if parts.port else "")
                )
            )
        with pytest.raises(StoreError) as caught:
            await PostgresStore(dsn=dsn).open()
        assert SECRET not in str(caught.value)
    finally:
        await admin.execute(f'DROP ROLE IF EXISTS "{role}"')
        await admin.close()


def test_build_store_picks_postgres_with_pool_sizes_and_the_database_clock() -> None:
    for scheme in ("postgresql", "postgres"):
        url = f"{scheme}://bot:{SECRET}@db.internal:5432/personabot"
        settings = Settings(storage=StorageSettings(url=url, min_pool_size=2, max_pool_size=7))
        store = build_store(settings)
        assert isinstance(store, PostgresStore)
        assert store.use_db_clock is True
        assert (store._min_pool, store._max_pool) == (2, 7)
        assert SECRET not in store.dsn


def test_pool_sizes_are_validated_without_showing_the_url(tmp_path: Path) -> None:
    path = tmp_path / "personabot.toml"
    path.write_text(
        f'[storage]\nurl = "postgresql://bot:{SECRET}@db/x"\nmin_pool_size = 5\n'
        "max_pool_size = 2\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert caught.value.problems == (
        "storage: min_pool_size (5) must not exceed max_pool_size (2)",
    )
    assert SECRET not in str(caught.value)
