"""Store backends under test: what the fixtures in conftest.py hand to tests."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path

from bot.store.base import BaseStore
from bot.store.postgres import PostgresStore
from bot.store.sqlite import SQLiteStore

_names = itertools.count(1)


@dataclass(frozen=True, slots=True)
class PgTemplate:
    """A server on which test databases are created, and the migrated template to clone."""

    server_dsn: str
    template: str
    prefix: str

    def next_name(self) -> str:
        """A database name no other test (or concurrent test session) uses."""
        return f"{self.prefix}_{next(_names)}"


@dataclass(frozen=True, slots=True)
class Backend:
    """A store backend under test."""

    name: str
    pg: PgTemplate | None = None


@dataclass
class StoreFactory:
    """Stores of one backend on one fresh database: two stores act as two processes."""

    backend: Backend
    path: Path
    dsn: str = ""
    opened: list[BaseStore] = field(default_factory=list)

    def new(self, **options: object) -> BaseStore:
        """An unopened store on the shared database (use ``async with``)."""
        made: BaseStore
        if self.backend.name == "sqlite":
            made = SQLiteStore(path=self.path, **options)  # type: ignore[arg-type]
        else:
            made = PostgresStore(dsn=self.dsn, **options)  # type: ignore[arg-type]
        self.opened.append(made)
        return made
