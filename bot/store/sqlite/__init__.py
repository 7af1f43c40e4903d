"""SQLite store (aiosqlite): the embedded default. One file, WAL, foreign keys on.

Every write runs in ``BEGIN IMMEDIATE``: the write lock is taken at the start of the
transaction, so two processes on one file serialize their read-modify-write sequences
(ingest, lease CAS, final check) instead of failing half-way on a lock upgrade.
"""

from __future__ import annotations

from bot.store.sqlite._core import sqlite_path
from bot.store.sqlite._messages import MessagesPart
from bot.store.sqlite._people import PeoplePart
from bot.store.sqlite._queue import QueuePart
from bot.store.sqlite._retention import RetentionPart
from bot.store.sqlite._sessions import SessionsPart


class SQLiteStore(SessionsPart, MessagesPart, QueuePart, RetentionPart, PeoplePart):
    """The BaseStore contract on one SQLite file; each part holds one concern."""


__all__ = ["SQLiteStore", "sqlite_path"]
