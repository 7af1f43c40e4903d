"""Shared fixtures: real stores on real files, a manual clock."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.clock import ManualClock
from bot.store.base import BaseStore
from bot.store.sqlite import SQLiteStore

BACKENDS = ["sqlite"]


@pytest.fixture
def clock() -> ManualClock:
    """A clock that moves only when the test says so."""
    return ManualClock()


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BaseStore]:
    """An open, migrated store of each backend on a fresh database."""
    backend = request.param
    assert backend == "sqlite"
    async with SQLiteStore(path=tmp_path / "store.sqlite3") as opened:
        yield opened
