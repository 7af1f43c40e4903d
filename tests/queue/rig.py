"""A claiming process in-process: the real PostgreSQL store, the real Pipeline as the
scheduler's TurnClaims (counted), the offline model and a recording outlet."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field

from bot.app.build import memory_on, turn_parts
from bot.core.clock import SystemClock
from bot.core.events import ClaimedTurn, Claims, ConversationKey, Inbound, QueuePolicy
from bot.llm.offline import OfflineLLM
from bot.queue import Scheduler
from bot.runtime.pipeline import BotProfile, Bots, Pipeline, TurnOutcome
from bot.store.base import BaseStore
from memory.assemble import Budget, PersonaPin
from memory.service import MemoryPolicy
from tests.fakes.outlet import RecordingOutlet

PIN = PersonaPin(name="Mira", system="You are Mira.", first_message=("Hello!",), model="offline")
POLICY = QueuePolicy(debounce=0.0, max_wait=1.0)


def key(i: int, bot: str = "b") -> ConversationKey:
    return ConversationKey("telegram", f"chat-{i}", None, bot)


async def say(store: BaseStore, conversation: ConversationKey, at: float, pid: str) -> None:
    await store.ingest(Inbound(conversation, "u", "Sasha", f"hi {pid}", pid), at, POLICY)


@dataclass
class Counted:
    """The pipeline's TurnClaims, counting the store queries the scheduler makes."""

    pipeline: Pipeline
    claims: int = 0
    looks: int = 0
    gate: asyncio.Event | None = None
    started: list[ConversationKey] = field(default_factory=list)

    async def claim(self, now: float, limit: int, skip: Sequence[ConversationKey]) -> Claims:
        self.claims += 1
        return await self.pipeline.claim(now, limit, skip)

    async def next_claim_at(self, now: float, skip: Sequence[ConversationKey]) -> float | None:
        self.looks += 1
        return await self.pipeline.next_claim_at(now, skip)

    async def run_claimed(self, turn: ClaimedTurn) -> TurnOutcome:
        self.started.append(turn.conversation)
        if self.gate is not None:
            await self.gate.wait()
        return await self.pipeline.run_claimed(turn)


@dataclass
class Proc:
    scheduler: Scheduler[ConversationKey]
    counted: Counted
    outlet: RecordingOutlet
    task: asyncio.Task[None]
    holder: str


@contextlib.asynccontextmanager
async def claiming(
    store: BaseStore,
    *,
    bots: Sequence[str] = ("b",),
    scan: float = 0.5,
    slots: int = 16,
    lease: float = 10.0,
    gate: asyncio.Event | None = None,
    listen: bool = False,
) -> AsyncIterator[Proc]:
    """A running claim-mode scheduler on ``store`` (stopped on exit)."""
    clock = SystemClock()
    outlet = RecordingOutlet(clock)
    profiles = {
        bot: BotProfile(
            key=bot,
            pin=PIN,
            queue=POLICY,
            memory=MemoryPolicy(budget=Budget(), summary_model=PIN.model),
            outlet=outlet,
            lease_seconds=lease,
        )
        for bot in bots
    }
    llm = OfflineLLM()
    memory = memory_on(store=store, llm=llm, clock=clock, policy_for=lambda b: profiles[b].memory)
    hosted_bots = Bots(profiles)
    pipeline = Pipeline(
        store=store,
        parts=turn_parts(
            store, llm=llm, clock=clock, memory=memory, outlet_for=hosted_bots.outlet_for
        ),
        bots=hosted_bots,
    )
    counted = Counted(pipeline, gate=gate)
    scheduler: Scheduler[ConversationKey] = Scheduler(
        store=store,
        clock=clock,
        run_turn=pipeline.run_turn,
        bots=list(bots),
        scan_interval=scan,
        max_concurrent=slots,
        claims=counted,
    )
    listener = None
    if listen:
        hosted = frozenset(bots)

        def wake(bot: str | None, due_at: float | None) -> None:
            if bot is None or bot in hosted:
                scheduler.wake(due_at)

        listener = asyncio.create_task(store.listen_timers(wake))
    task = asyncio.create_task(scheduler.run())
    try:
        yield Proc(scheduler, counted, outlet, task, pipeline.holder)
    finally:
        scheduler.abort()
        if listener is not None:
            listener.cancel()
        for t in (task, listener):
            if t is not None:
                with contextlib.suppress(BaseException):
                    await t


async def until(check: Callable[[], bool], within: float, what: str) -> None:
    """Poll ``check`` until it holds; fail after ``within`` seconds."""
    deadline = asyncio.get_running_loop().time() + within
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what}")
        await asyncio.sleep(0.02)
