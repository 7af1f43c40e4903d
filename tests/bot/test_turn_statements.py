"""The statement budget of one turn (issue 23, "a leaner turn"), on both stores.

One steady-state turn of a private chat, as ``personabot run`` runs it under load: the claim
(its read and the lease it takes), the pending turn, the summary, the gap check, the window,
the person's memory, the model call's usage, the final check with the reply and its outbox
row, the send (its attempt claimed, then marked sent), the trouble notice check, the lease
released and the summary check after the reply. Every statement is a round trip to the
database (on SQLite a hop to the connection's thread under the store's one lock, which every
turn and every ingest queue for), so the count is the turn's store cost.

SQLite counts through the store's trace callback (``SQLiteStore.trace``): every statement,
``BEGIN`` and ``COMMIT`` included. PostgreSQL counts the statements sent on the pool's
connections (each call of the connection interface, plus ``BEGIN`` and ``COMMIT`` of every
transaction, which asyncpg sends as statements of their own).

The budgets are the figures measured when this test was written; a change that adds a
statement to the turn fails here and must say why in the budget it raises.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import pytest

from bot.core.clock import ManualClock
from bot.core.events import ConversationKey
from bot.store.postgres import _core as pg_core
from bot.store.sqlite import SQLiteStore
from tests.backends import StoreFactory
from tests.fakes.llm import GatedLLM
from tests.harness import harness

C = ConversationKey("telegram", "42")

#: Statements and transactions of one turn. SQLite, 24 in 2 transactions (45 in 7 before issue
#: 23): the claim 5 (its plain read, then BEGIN, the read again, the leases, COMMIT), the
#: pending turn 1, the summary 1, the gap check 1, the window 1, the person's memory 1, the
#: usage 1, the trouble notice check 1, the final check 8 (BEGIN, one read of the
#: conversation, session, version, newer input and lease token, the reply's 4 writes, the
#: timer, COMMIT), the send's attempt 1 and its confirmation 1, the summary check 1, the lease
#: released 1. Single-statement writes run without BEGIN/COMMIT (``SQLCore._write``).
SQLITE_BUDGET = 24
SQLITE_TRANSACTIONS = 2
#: PostgreSQL, 18 in 1 transaction (38 in 7 before): the claim is one statement, the final
#: check 6 (BEGIN, the conversation's lock, the read with the lease's lock, the reply in one
#: statement, the timer, COMMIT); the rest as on SQLite.
POSTGRES_BUDGET = 18
POSTGRES_TRANSACTIONS = 1


class Counted:
    """Statements seen, as text; transactions counted by their BEGIN."""

    def __init__(self) -> None:
        self.statements: list[str] = []

    def __call__(self, sql: str) -> None:
        self.statements.append(" ".join(sql.split()))

    @property
    def transactions(self) -> int:
        return sum(s.upper().startswith("BEGIN") for s in self.statements)

    def clear(self) -> None:
        del self.statements[:]

    def report(self) -> str:
        return "\n".join(f"{i:3d} {s[:160]}" for i, s in enumerate(self.statements, 1))


@contextmanager
def counting_postgres(seen: Counted, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every statement the PostgreSQL store sends: the connection interface's calls, and
    BEGIN/COMMIT around each transaction (``_tx`` and ``_snapshot``)."""

    def counted(name: str) -> Callable[..., Any]:
        original = getattr(pg_core.PgConn, name)

        async def call(self: pg_core.PgConn, sql: str, *args: Any) -> Any:
            seen(sql)
            return await original(self, sql, *args)

        return call

    for name in ("fetch", "fetchrow", "fetchval", "execute", "executemany"):
        monkeypatch.setattr(pg_core.PgConn, name, counted(name))

    def transaction(name: str) -> Callable[..., Any]:
        original = getattr(pg_core.PostgresCore, name)

        @asynccontextmanager
        async def tx(self: pg_core.PostgresCore) -> AsyncIterator[Any]:
            seen("BEGIN")
            async with original(self) as db:
                yield db
            seen("COMMIT")

        return tx

    for name in ("_tx", "_snapshot"):
        monkeypatch.setattr(pg_core.PostgresCore, name, transaction(name))
    yield


async def one_turn(stores: StoreFactory, seen: Counted) -> None:
    """Three turns to warm the conversation up, then a fourth one counted."""
    options: dict[str, Any] = {"trace": seen} if stores.backend.name == "sqlite" else {}
    clock = ManualClock(1_000_000.0)
    async with (
        stores.new(**options) as store,
        harness(store, clock, GatedLLM(), debounce=1.0, trouble_notice="One moment, please.") as h,
    ):
        for n in range(3):
            await h.say(C, f"warm-up {n}")
            await h.advance(2)
            await h.memory.wait_idle()
        await h.say(C, "hello")
        seen.clear()
        # The turn as the scheduler runs it, without the clock's steps (the scheduler's
        # looks between them are not the turn's): claim, run, the summary check.
        claims = await h.pipeline.claim(clock.now() + 2.0, 1, [])
        assert len(claims.turns) == 1
        assert await h.pipeline.run_claimed(claims.turns[0]) == "sent"
        await h.memory.wait_idle()
        assert h.outlet.texts()[-1] == "reply to: hello"
        assert isinstance(store, SQLiteStore) == (stores.backend.name == "sqlite")


async def test_one_turn_stays_within_its_statement_budget(
    stores: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = Counted()
    if stores.backend.name == "sqlite":
        await one_turn(stores, seen)
        budget, transactions = SQLITE_BUDGET, SQLITE_TRANSACTIONS
    else:
        with counting_postgres(seen, monkeypatch):
            await one_turn(stores, seen)
        budget, transactions = POSTGRES_BUDGET, POSTGRES_TRANSACTIONS
    assert len(seen.statements) <= budget, seen.report()
    assert seen.transactions <= transactions, seen.report()
