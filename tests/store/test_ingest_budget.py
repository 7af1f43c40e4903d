"""The ingest path's statement budget (issue 23), counted by the stores' own statement trace
on both stores, so that it cannot grow silently: a message to an existing conversation costs
at most five statements and one transaction, alone or in a batch
(docs/architecture.md#ingest-in-batches).

Transaction control (BEGIN, COMMIT) is counted as transactions, everything else as
statements. Each store is held to what it does today (SQLite five: one read, then the
version, the session's turn, the message and the timer; PostgreSQL three: the conversation's
lock, one read, one write), so a change that adds a statement fails here first.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from bot.core.events import ConversationKey, Inbound, QueuePolicy
from tests.backends import StoreFactory

Q = QueuePolicy(debounce=1.0, max_wait=5.0)
STATEMENTS_PER_MESSAGE = 5  # issue 23's budget
TRANSACTIONS_PER_MESSAGE = 1


def _today(stores: StoreFactory) -> int:
    """Statements a message costs on this store now (at most the budget)."""
    return 3 if stores.dsn else STATEMENTS_PER_MESSAGE


@dataclass
class Counter:
    """Statements the store's connections ran, split into transaction control and work."""

    seen: list[str] = field(default_factory=list)

    def __call__(self, sql: str) -> None:
        self.seen.append(sql)

    @property
    def transactions(self) -> int:
        return sum(_control(s) == "BEGIN" for s in self.seen)

    @property
    def statements(self) -> list[str]:
        return [s for s in self.seen if _control(s) is None]

    async def take(self) -> tuple[int, list[str]]:
        """(transactions, statements) since the last take, then start afresh."""
        for _ in range(3):  # asyncpg calls its query loggers soon after, from the loop
            await asyncio.sleep(0)
        found = (self.transactions, self.statements)
        self.seen.clear()
        return found


def _control(sql: str) -> str | None:
    word = sql.strip().split(None, 1)[0].rstrip(";").upper() if sql.strip() else ""
    return word if word in ("BEGIN", "COMMIT", "ROLLBACK") else None


def _key(i: int) -> ConversationKey:
    return ConversationKey("telegram", str(1000 + i), None, "mira")


def _msg(i: int, n: int, *, reply: bool = True) -> Inbound:
    return Inbound(_key(i), f"u{i}", f"Person {i}", f"message {n}", f"m{i}-{n}", reply)


async def test_a_message_to_an_existing_conversation_stays_within_the_budget(
    stores: StoreFactory,
) -> None:
    trace = Counter()
    async with stores.new(trace=trace) as store:
        await store.ingest(_msg(0, 1), 1000.0, Q)  # creates the conversation and its session
        await trace.take()
        for n, reply in ((2, True), (3, False), (4, True)):
            result = await store.ingest(_msg(0, n, reply=reply), 1000.0 + n, Q)
            assert result.stored
            transactions, statements = await trace.take()
            assert transactions == TRANSACTIONS_PER_MESSAGE, statements
            assert len(statements) <= _today(stores), "\n".join(statements)
            assert sum(s.startswith("INSERT INTO messages") for s in statements) == (
                0 if stores.dsn else 1  # PostgreSQL writes it inside one WITH statement
            )
        # A second delivery costs less and writes nothing.
        again = await store.ingest(_msg(0, 4), 1010.0, Q)
        assert not again.stored
        transactions, statements = await trace.take()
        assert transactions == 1 and len(statements) <= 2, statements
        assert not [s for s in statements if s.lstrip().upper().startswith(("INSERT", "UPDATE"))]


async def test_a_batch_is_one_transaction_within_the_budget_per_message(
    stores: StoreFactory,
) -> None:
    trace = Counter()
    people = 40
    async with stores.new(trace=trace) as store:
        await store.ingest_many([(_msg(i, 1), Q) for i in range(people)], 1000.0)
        await trace.take()
        # Steady state: every conversation exists; some people send two at once.
        batch = [(_msg(i, 2), Q) for i in range(people)] + [(_msg(i, 3), Q) for i in range(10)]
        results = await store.ingest_many(batch, 1001.0)
        assert all(r.stored for r in results)
        transactions, statements = await trace.take()
        assert transactions == 1
        assert len(statements) <= _today(stores) * len(batch), len(statements)
        if stores.dsn:
            # PostgreSQL: the locks, the read, and one write a message sent as one pipelined
            # round trip (asyncpg's logger sees the round trips: three for the batch).
            assert len(statements) == 3, statements
        else:  # SQLite: the read, then each write once per conversation or once in all
            assert len(statements) == 1 + 3 * people + 1, len(statements)
        assert [r.version for r in results[people:]] == [3] * 10  # in order, per conversation
        for i in range(10):
            session = await store.current_session(_key(i))
            assert session is not None
            texts = [m.text for m in await store.messages(session.key)]
            assert texts == ["message 1", "message 2", "message 3"]
