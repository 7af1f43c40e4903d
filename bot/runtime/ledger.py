"""A reply turn's ledger of effectful outside calls (docs/tools.md#effectful-tools).

personabot cannot undo what an outside tool did, so such a call is made inside the turn (the
model needs its result) under three rules: a **fresh check** right before it (no newer input
that the final check would discard the turn for, and the lease still ours: renewed by its
compare-and-swap), a **record** written before it is made (``tool_calls``: a retry of the
same turn after a crash, a takeover or a regeneration finds it and never makes it again),
and **commitment**: once one is made, newer input no longer cuts or discards the turn (the
reply that reports what was done is recorded; the newer input is the next turn's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bot.core.clock import Clock
from bot.core.events import Lease, ToolCallRecord, Turn
from bot.store.contracts import LeaseStore, QueueStore, ToolCallStore


@dataclass(slots=True, kw_only=True, eq=False)
class TurnLedger:
    """The ledger of one reply turn (``CallLedger`` of bot/runtime/tools.py)."""

    store: ToolCallStore
    queue: QueueStore
    leases: LeaseStore
    clock: Clock
    turn: Turn
    lease: Lease
    ttl: float
    max_wait: float
    #: Set once an effectful call is made: the turn is committed.
    committed: bool = False
    #: The calls an earlier attempt of this turn recorded (:meth:`load_earlier`).
    earlier: tuple[ToolCallRecord, ...] = ()

    async def load_earlier(self) -> tuple[ToolCallRecord, ...]:
        """What earlier attempts of this turn (a failed model, a crash, a takeover) recorded:
        the attempt's prompt tells the model of them, and none of their tools is called again
        under other arguments (a model that words the same action anew must not repeat it)."""
        first = self.turn.messages[0].id
        self.earlier = tuple(await self.store.tool_calls_of(self.turn.session.conversation, first))
        return self.earlier

    def made_before(self, tool: str, key: str) -> ToolCallRecord | None:
        """An earlier attempt's call of ``tool`` under other arguments (None: none)."""
        return next((r for r in self.earlier if r.tool == tool and r.key != key), None)

    async def fresh(self) -> str | None:
        turn, now = self.turn, self.clock.now()
        # Past the hard cap the final check records whatever arrived (queue rule 6).
        if now < turn.first_pending_at + self.max_wait and await self.queue.newer_input(
            turn.session, turn.version
        ):
            return "newer messages arrived while you answered; the next answer decides"
        if await self.leases.renew_lease(self.lease, self.ttl, now) is None:
            return "this turn was handed to another worker"
        return None

    async def begin(self, tool: str, key: str) -> tuple[bool, ToolCallRecord]:
        first = self.turn.messages[0].id
        return await self.store.begin_tool_call(
            self.turn.session.conversation, first, key, tool, self.clock.now()
        )

    async def finish(self, record: ToolCallRecord, ok: bool, result: str) -> None:
        status: Literal["done", "failed"] = "done" if ok else "failed"
        await self.store.finish_tool_call(record.id, status, result, self.clock.now())
