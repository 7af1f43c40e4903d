"""Versioned schema of the PostgreSQL store (bot/store/migrations/schema.py in PostgreSQL
types: BIGSERIAL/BIGINT ids, DOUBLE PRECISION for epoch seconds, BOOLEAN flags). Each version
is applied in one transaction under an advisory lock (see ``PostgresStore``).
"""

from __future__ import annotations

from typing import Final

from bot.store.migrations.schema import ColumnTypes, render

# Key of the transaction-level advisory lock taken while migrating, so that several processes
# starting together migrate once ("personabot" as a number; any stable 64-bit value would do).
MIGRATION_LOCK: Final = 0x70657273_6F6E6162

TYPES: Final = ColumnTypes(
    serial="BIGSERIAL",
    bigint="BIGINT",
    real="DOUBLE PRECISION",
    boolean="BOOLEAN",
    true="TRUE",
    false="FALSE",
    is_pending="pending",
    not_private="NOT is_private",
    not_pending="NOT pending",
    blank_text="btrim(text, E' \\t\\n\\r') = ''",
    blob="BYTEA",
)

MIGRATIONS: Final[tuple[tuple[int, str], ...]] = render(TYPES)
