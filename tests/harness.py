"""A wired runtime (real store, queue, pipeline, router) driven by a manual clock."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from bot.core.clock import Clock, ManualClock
from bot.core.events import ConversationKey, Inbound, QueuePolicy
from bot.core.llm import BaseLLM
from bot.metrics import Metrics, Price
from bot.queue import Ingestor, Scheduler
from bot.runtime.access import AccessPolicy
from bot.runtime.commands import Commands, export_document
from bot.runtime.exports import ExportPolicy, Exports
from bot.runtime.limits import LimitPolicy, Limits
from bot.runtime.pipeline import BotProfile, GapPolicy, Pipeline
from bot.runtime.router import Router
from bot.runtime.stats import usage_report
from bot.runtime.usage import Accounting
from bot.store.base import BaseStore
from memory.assemble import Budget, PersonaPin
from memory.service import Memory, MemoryPolicy
from tests.fakes.outlet import RecordingOutlet

BOT = "default"
# Platform message ids unique across every harness of a test run (a reused id is a
# duplicate delivery by design).
_MESSAGE_IDS = itertools.count(1)
# Stores of every harness alive now: with two "processes", one's step must wait for both.
SHARED_STORES: list[BaseStore] = []
PIN = PersonaPin(
    name="Mira", system="You are Mira.", first_message=("Hi, I'm Mira.",), model="test-model"
)


@dataclass
class Harness:
    """One process's worth of runtime around a store."""

    store: BaseStore
    clock: ManualClock
    llm: BaseLLM
    outlet: RecordingOutlet
    pipeline: Pipeline
    scheduler: Scheduler
    router: Router
    ingestor: Ingestor
    memory: Memory
    exports: Exports
    counter: list[int] = field(default_factory=lambda: [0])

    async def say(
        self,
        conversation: ConversationKey,
        text: str,
        *,
        author: str = "u1",
        name: str = "Sasha",
        message_id: str | None = None,
        private: bool = True,
    ) -> None:
        """A user message arriving from an adapter (``private=False``: in a group)."""
        self.counter[0] = next(_MESSAGE_IDS)
        await self.router(
            Inbound(
                conversation=conversation,
                author_id=author,
                display_name=name,
                text=text,
                platform_message_id=message_id or f"m{self.counter[0]}",
                is_private=private,
            )
        )
        await settle(self.store)

    async def advance(self, seconds: float, step: float = 0.1) -> None:
        """Move the clock in small steps, letting the scheduler and turns run between them."""
        remaining = seconds
        while remaining > 1e-9:
            delta = min(step, remaining)
            await self.clock.advance(delta)
            await settle(*SHARED_STORES, self.store)
            remaining -= delta


async def settle(*stores: BaseStore, quiet_polls: int = 4) -> None:
    """Let every task run until it waits on the clock or a gate, not on store I/O.

    Store calls run in a thread; the store counts them. Quiet means no call running or
    queued over several consecutive polls (a waiter takes the lock on the next iteration).
    """
    quiet = 0
    deadline = asyncio.get_running_loop().time() + 5.0
    while quiet < quiet_polls and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.001)
        quiet = quiet + 1 if all(s.in_flight == 0 for s in stores) else 0


@contextlib.asynccontextmanager
async def harness(
    store: BaseStore,
    clock: ManualClock,
    llm: BaseLLM,
    *,
    debounce: float = 1.5,
    max_wait: float = 8.0,
    lease: float = 30.0,
    outlet: RecordingOutlet | None = None,
    holder: str | None = None,
    pipeline_clock: Clock | None = None,
    memory_policy: MemoryPolicy | None = None,
    memory_llm: BaseLLM | None = None,
    gap_policy: GapPolicy | None = None,
    access: AccessPolicy | None = None,
    limits: LimitPolicy | None = None,
    trouble_notice: str = "",
    forget_deletes_messages: bool = False,
    export_every: float = 600.0,
) -> AsyncIterator[Harness]:
    """Start a scheduler on ``store``; stop it (and wait for turns) on exit."""
    outlet = outlet or RecordingOutlet(clock)
    profile = BotProfile(
        key=BOT,
        pin=PIN,
        queue=QueuePolicy(debounce=debounce, max_wait=max_wait),
        memory=memory_policy or MemoryPolicy(budget=Budget(), summary_model="test-model"),
        outlet=outlet,
        lease_seconds=lease,
    )
    spending = (
        None
        if limits is None
        else Limits(
            store=store,
            clock=pipeline_clock or clock,
            policy=limits,
            is_admin=lambda _, user: access is not None and access.is_admin(user),
        )
    )
    metrics = Metrics()
    accounting = Accounting(
        store=store, clock=pipeline_clock or clock, metrics=metrics, limits=spending
    )
    memory = Memory(
        store=store,
        llm=memory_llm or llm,
        clock=pipeline_clock or clock,
        policy_for=lambda _: profile.memory,
        account=accounting,
    )
    pipeline = Pipeline(
        store=store,
        llm=llm,
        clock=pipeline_clock or clock,
        memory=memory,
        profiles={BOT: profile},
        holder=holder,
        gap_policy=gap_policy,
        limits=spending,
        metrics=metrics,
        accounting=accounting,
        trouble_notice=trouble_notice,
    )
    scheduler = Scheduler(
        store=store, clock=clock, run_turn=pipeline.run_turn, bots=[BOT], scan_interval=0.5
    )
    ingestor = Ingestor(
        store=store, clock=clock, policy_for=lambda _: profile.queue, wake=scheduler.wake
    )
    exports = Exports(
        store=store,
        clock=pipeline_clock or clock,
        outlet_for=lambda _: outlet,
        build=lambda user, conversation: export_document(memory, user, conversation),
        policy=ExportPolicy(every_seconds=export_every),
        holder=holder,
    )
    commands = Commands(
        store=store,
        clock=clock,
        greeting=lambda _: "\n".join(PIN.first_message),
        memory=memory,
        exports=exports,
        forget_deletes_messages=forget_deletes_messages,
        is_admin=lambda _, user: access is not None and access.is_admin(user),
        usage_report=lambda bot: usage_report(store, clock, {"gated": Price(3.0, 15.0)}, bot),
    )
    router = Router(
        ingestor=ingestor,
        commands=commands,
        outlets={BOT: outlet},
        store=store,
        clock=clock,
        memory=memory,
        access=None if access is None else {BOT: access},
        metrics=pipeline.metrics,
    )
    task = asyncio.create_task(scheduler.run())
    SHARED_STORES.append(store)
    try:
        yield Harness(
            store, clock, llm, outlet, pipeline, scheduler, router, ingestor, memory, exports
        )
    finally:
        SHARED_STORES.remove(store)
        await exports.aclose(grace=1.0)
        scheduler.stop()
        await scheduler.drain(grace=1.0)
        await memory.aclose()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
