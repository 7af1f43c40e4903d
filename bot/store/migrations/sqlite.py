"""Versioned schema of the SQLite store (bot/store/migrations/schema.py in SQLite types)."""

from __future__ import annotations

from typing import Final

from bot.store.migrations.schema import ColumnTypes, render

TYPES: Final = ColumnTypes(
    serial="INTEGER",  # INTEGER PRIMARY KEY is the rowid
    bigint="INTEGER",
    real="REAL",
    boolean="INTEGER",
    true="1",
    false="0",
    is_pending="pending = 1",
    not_private="is_private = 0",
    not_pending="pending = 0",
    blank_text="trim(text, ' ' || char(9, 10, 13)) = ''",
    blob="BLOB",
)

MIGRATIONS: Final[tuple[tuple[int, str], ...]] = render(TYPES)
