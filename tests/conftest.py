"""Shared fixtures: real stores on real files and real PostgreSQL databases, a manual clock.

PostgreSQL: ``PERSONABOT_TEST_POSTGRES_DSN`` when set, else a throwaway cluster started once
per session (``tests/pg_cluster.py``). The schema is migrated once into a template database and
every test gets its own database cloned from it (tens of milliseconds). Without a server the
PostgreSQL variants are skipped with a message saying how to enable them, unless
``PERSONABOT_REQUIRE_POSTGRES=1`` (CI), which makes a missing server an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from bot.core.clock import ManualClock
from bot.store.base import BaseStore
from bot.store.postgres import PostgresStore
from tests import pg_cluster, processes
from tests.backends import Backend, PgTemplate, StoreFactory

BACKENDS = ["sqlite", "postgresql"]

#: From this many collected tests on, the zygote starts with the run (see below).
EAGER_ZYGOTE = 200
#: Set to 1, every test process is exec'd (tests/processes.py).
EXEC = "PERSONABOT_TEST_EXEC"


def pytest_configure(config: pytest.Config) -> None:
    """Let every Python process the tests start reuse compiled bytecode.

    Many tests start real ``personabot`` processes (and test workers, when ``-n`` is given):
    each one imports aiogram, discord.py and the Anthropic SDK. With ``PYTHONDONTWRITEBYTECODE``
    set (as on the CI machines), every process compiled them again, seconds of CPU each. The
    libraries are compiled once when they are installed (``compile-bytecode`` in pyproject's
    ``[tool.uv]``: ``uv sync`` writes their ``__pycache__``, several files at a time); the
    processes the tests start inherit this environment, so the first one to import a module of
    the checkout (the product, the tests with pytest's assertion rewriting) writes its
    bytecode next to it, in ``__pycache__`` (ignored by git), and the next ones read it. No
    ``PYTHONPYCACHEPREFIX``: with one set, Python looks for bytecode only under it and the
    installed libraries' ``__pycache__`` went unread (every test worker compiled them again on
    a fresh checkout: ~7 s of CPU each). What runs is the same code; a changed source file is
    compiled again (Python checks its mtime).
    """
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    # The controller of a run on several workers starts one process zygote for all of them
    # (tests/processes.py), before they start: its imports overlap with their collection.
    workers = config.getoption("numprocesses", None)
    if workers and not hasattr(config, "workerinput") and os.environ.get(EXEC) != "1":
        processes.share()


#: Files whose tests take 10 s or more each (`uv run pytest --durations=20`), slowest first:
#: they run first, so that no worker starts one as the others finish (the run's tail).
SLOW_FIRST = (
    "tests/deploy/test_deploy_doc.py",
    "tests/deploy/test_deploy_attacks.py",
    "tests/cards/test_quickstart.py",
    "tests/bot/test_queue_state.py",
    "tests/scenes/test_scene_sigkill.py",
    "tests/cards/test_lorebook_limits.py",
    "tests/bench/test_load_bench.py",
    "tests/bench/test_lorebook_bench.py",
    "tests/web/test_browser.py",
    "tests/bench/test_typist_bench.py",
    "tests/streaming/test_kill_mid_stream.py",
)


#: Folders of slow files whose tests share an expensive fixture of a wider scope (deploy:
#: building and installing the wheel, ~10 s of CPU, package-scoped): kept on one worker, which
#: builds it once (spread over workers, each built it again).
TOGETHER = frozenset({"tests/deploy"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slowest files' tests first: one at the head of each worker's first share (xdist's
    worksteal hands the collection out in contiguous shares, sized as below), the rest of the
    tests in their order after them; a ``TOGETHER`` folder's tests all at the head of one."""
    slow = sorted(
        (item for item in items if _file(item) in SLOW_FIRST),
        key=lambda item: SLOW_FIRST.index(_file(item)),
    )
    blocks: list[list[pytest.Item]] = []
    for item in slow:
        if _group(item) in TOGETHER and blocks and _group(blocks[-1][0]) == _group(item):
            blocks[-1].append(item)
        else:
            blocks.append([item])
    rest = [item for item in items if _file(item) not in SLOW_FIRST]
    workers = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    ordered: list[pytest.Item] = []
    remaining = len(items)
    for share in range(workers):
        size = remaining // (workers - share)
        remaining -= size
        head = [item for block in blocks[share::workers] for item in block]
        ordered += head
        take = max(0, size - len(head))
        ordered += rest[:take]
        del rest[:take]
    items[:] = ordered + rest


def _file(item: pytest.Item) -> str:
    return item.nodeid.split("::")[0]


def _group(item: pytest.Item) -> str:
    return _file(item).rpartition("/")[0]


def pytest_collection_finish(session: pytest.Session) -> None:
    """In a run of many tests (the suite, on each worker), start the process zygote at once
    (tests/processes.py): most such runs start processes, and its seconds of imports then
    overlap with the first tests instead of holding up the first one that starts a process."""
    if len(session.items) >= EAGER_ZYGOTE and os.environ.get(EXEC) != "1":
        processes.prestart()


@pytest.fixture
def clock() -> ManualClock:
    """A clock that moves only when the test says so."""
    return ManualClock()


async def _make_template(server_dsn: str, name: str) -> None:
    await pg_cluster.drop_database(server_dsn, name)
    dsn = await pg_cluster.create_database(server_dsn, name)
    async with PostgresStore(dsn=dsn, min_pool=1, max_pool=1):
        pass  # opening migrates


@pytest.fixture(scope="session")
def pg_template() -> Iterator[PgTemplate]:
    """The session's PostgreSQL server with a migrated template database (or a skip)."""
    with contextlib.ExitStack() as stack:
        try:
            server_dsn = stack.enter_context(pg_cluster.server())
        except pg_cluster.ClusterUnavailable as exc:
            if pg_cluster.required():
                pytest.fail(f"{pg_cluster.REQUIRE_ENV} is set but PostgreSQL is unavailable: {exc}")
            pytest.skip(f"PostgreSQL tests skipped: {exc}")
        prefix = f"pbt_{os.getpid()}"
        template = f"{prefix}_template"
        asyncio.run(_make_template(server_dsn, template))
        stack.callback(lambda: asyncio.run(pg_cluster.drop_database(server_dsn, template)))
        yield PgTemplate(server_dsn, template, prefix)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Backend:
    """Each store backend (PostgreSQL skipped when no server can be had)."""
    if request.param == "postgresql":
        return Backend("postgresql", request.getfixturevalue("pg_template"))
    return Backend(request.param)


@pytest.fixture
async def stores(backend: Backend, tmp_path: Path) -> AsyncIterator[StoreFactory]:
    """A factory of stores on one fresh database of ``backend``; dropped after the test."""
    factory = StoreFactory(backend, tmp_path / "store.sqlite3")
    name = None
    if backend.pg is not None:
        name = backend.pg.next_name()
        factory.dsn = await pg_cluster.create_database(
            backend.pg.server_dsn, name, template=backend.pg.template
        )
    try:
        yield factory
    finally:
        for made in factory.opened:
            await made.aclose()
        if backend.pg is not None and name is not None:
            await pg_cluster.drop_database(backend.pg.server_dsn, name)


@pytest.fixture
async def store(stores: StoreFactory) -> AsyncIterator[BaseStore]:
    """An open, migrated store of each backend on a fresh database."""
    async with stores.new() as opened:
        yield opened


@pytest.fixture
async def pg_dsn(pg_template: PgTemplate) -> AsyncIterator[str]:
    """A fresh, migrated PostgreSQL database (cloned from the template); dropped afterwards."""
    name = pg_template.next_name()
    dsn = await pg_cluster.create_database(
        pg_template.server_dsn, name, template=pg_template.template
    )
    try:
        yield dsn
    finally:
        await pg_cluster.drop_database(pg_template.server_dsn, name)
