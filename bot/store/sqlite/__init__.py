"""SQLite store (aiosqlite): the embedded default. One file, WAL, foreign keys on (media rows
go with their message), secure_delete on (deleted rows are overwritten in the file).

Every write runs in ``BEGIN IMMEDIATE``: the write lock is taken at the start of the
transaction, so two processes on one file serialize their read-modify-write sequences
(ingest, lease CAS, final check) instead of failing half-way on a lock upgrade. The parts
are the shared ones (bot/store/sql); this package adds the connection and ingest.
"""

from __future__ import annotations

from bot.store.sql.media import MediaPart
from bot.store.sql.people import PeoplePart
from bot.store.sql.queue import QueuePart
from bot.store.sql.retention import RetentionPart
from bot.store.sql.sessions import SessionsPart
from bot.store.sqlite._core import SQLiteCore, sqlite_path
from bot.store.sqlite._ingest import IngestPart


class SQLiteStore(
    SessionsPart, IngestPart, QueuePart, MediaPart, RetentionPart, PeoplePart, SQLiteCore
):
    """The BaseStore contract on one SQLite file; each part holds one concern."""


__all__ = ["SQLiteStore", "sqlite_path"]
