"""The store of ``[storage]``: which backend, and who opens and closes it.

``build_store`` is looked up in this module at call time by both builders below:
bench/_load_runtime.py replaces it to trace every statement of ``personabot run``.
"""

from __future__ import annotations

import contextlib

from bot.config import Settings
from bot.core.errors import ConfigError
from bot.store.base import BaseStore
from bot.store.postgres import PostgresStore, is_postgres_url
from bot.store.sqlite import SQLiteStore, sqlite_path


def build_store(settings: Settings) -> BaseStore:
    """The configured store backend.

    PostgreSQL decides lease expiry by the database server's clock, so that processes on
    several machines never disagree about who holds a conversation.
    """
    storage = settings.storage
    url = storage.url
    if url.startswith("sqlite:"):
        return SQLiteStore(path=sqlite_path(url), busy_timeout_ms=storage.busy_timeout_ms)
    if is_postgres_url(url):
        return PostgresStore(
            dsn=url,
            min_pool=storage.min_pool_size,
            max_pool=storage.max_pool_size,
            use_db_clock=True,
            connect_timeout=storage.connect_timeout_seconds,
        )
    scheme = url.split(":", 1)[0]
    raise ConfigError(
        [
            f"storage.url: unsupported scheme {scheme!r} "
            "(use sqlite:///path or postgresql://user@host/db)"
        ]
    )


async def open_store(
    settings: Settings, given: BaseStore | None, exits: contextlib.AsyncExitStack
) -> BaseStore:
    """The runtime's store, open: ``given`` is opened (if it is not) and left to its owner to
    close; else the configured one, closed by ``exits``."""
    if given is not None:
        await given.open()
        return given
    return await exits.enter_async_context(build_store(settings))
