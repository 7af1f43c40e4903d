"""The App's runtime (real store, queue, pipeline, router) driven by a manual clock."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence, Sized
from dataclasses import dataclass, field
from typing import Any

from bot.app import App
from bot.app.build import Seams
from bot.config import (
    AccessSettings,
    BotSettings,
    InitiativeSettings,
    LimitSettings,
    LLMSettings,
    McpServerSettings,
    MediaConfig,
    MemorySettings,
    PersonaSettings,
    PriceSettings,
    QueueSettings,
    RetentionSettings,
    ScheduleSettings,
    Secrets,
    Settings,
    ToolSettings,
    TranscriptionConfig,
)
from bot.core.clock import Clock, ManualClock
from bot.core.events import ConversationKey, Inbound
from bot.core.llm import BaseLLM
from bot.core.media import Quote
from bot.mcp import McpServers
from bot.queue import Ingestor, Scheduler
from bot.runtime.access import AccessPolicy
from bot.runtime.exports import Exports
from bot.runtime.extensions import Extensions
from bot.runtime.limits import LimitPolicy
from bot.runtime.pipeline import GapPolicy, Pipeline
from bot.runtime.router import Router
from bot.runtime.tools import ToolPolicy
from bot.store.base import BaseStore
from memory.assemble import Budget, PersonaPin
from memory.service import Memory, MemoryPolicy
from tests.fakes.outlet import RecordingOutlet
from tests.store.helpers import in_flight

BOT = "default"
# Platform message ids unique across every harness of a test run (a reused id is a
# duplicate delivery by design).
_MESSAGE_IDS = itertools.count(1)
# Stores of every harness alive now: with two "processes", one's step must wait for both.
SHARED_STORES: list[BaseStore] = []
PIN = PersonaPin(
    name="Mira", system="You are Mira.", first_message=("Hi, I'm Mira.",), model="test-model"
)
# The persona of PIN; its id is the bot key, as the metrics labels of these tests expect.
PERSONA = PersonaSettings.model_construct(
    id=BOT, name=PIN.name, system=PIN.system, first_message=list(PIN.first_message), model=PIN.model
)


@dataclass
class Harness:
    """One process's worth of runtime around a store."""

    store: BaseStore
    clock: ManualClock
    llm: BaseLLM
    outlet: RecordingOutlet
    pipeline: Pipeline
    scheduler: Scheduler[ConversationKey]
    router: Router
    ingestor: Ingestor
    memory: Memory
    exports: Exports
    counter: list[int] = field(default_factory=lambda: [0])
    #: Check-ins and reminders (None: not wired, no bot uses them).
    agenda: Scheduler[Any] | None = None
    #: The MCP servers (None: none configured).
    mcp: McpServers | None = None

    async def say(
        self,
        conversation: ConversationKey,
        text: str,
        *,
        author: str = "u1",
        name: str = "Sasha",
        message_id: str | None = None,
        private: bool = True,
        triggers: bool = True,
        quote: Quote | None = None,
    ) -> None:
        """A user message arriving from an adapter (``private=False``: in a group;
        ``triggers=False``: group chatter that neither mentions nor replies to the bot)."""
        self.counter[0] = next(_MESSAGE_IDS)
        await self.router(
            Inbound(
                conversation=conversation,
                author_id=author,
                display_name=name,
                text=text,
                platform_message_id=message_id or f"m{self.counter[0]}",
                is_private=private,
                triggers_reply=triggers,
                quote=quote,
            )
        )
        await settle(self.store)

    async def advance(self, seconds: float, step: float | None = None) -> None:
        """Move the clock ``seconds`` on, letting the scheduler and turns run at each moment
        something waits for: the clock jumps from one sleeper's deadline to the next and
        everything settles at each stop. ``step`` moves in fixed strides instead (each one
        wakes every sleeper due within it, in deadline order): for long stretches of hours,
        where the scheduler's periodic scan would make one stop per scan interval."""
        target = self.clock.now() + seconds
        await settle(*SHARED_STORES, self.store)
        while (now := self.clock.now()) < target - 1e-9:
            if step is None:
                deadline = self.clock.next_deadline()
                stop = target if deadline is None else min(target, max(deadline, now))
            else:
                stop = min(target, now + step)
            await self.clock.advance(stop - now)
            await settle(*SHARED_STORES, self.store)


async def eventually(
    check: Callable[[], bool | Awaitable[bool]], what: str, within: float = 5.0
) -> None:
    """Wait (real time, bounded by ``within``) for work that runs off the manual clock: HTTP
    calls to the fake servers, tools, another process; ``check`` may be a coroutine."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        done = check()
        if not isinstance(done, bool):
            done = await done
        if done:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"never happened within {within} s: {what}")
        await asyncio.sleep(0.01)


async def settle(*stores: BaseStore, quiet_polls: int = 4) -> None:
    """Let every task run until it waits on the clock or a gate, not on store I/O.

    Store calls run in a thread; the store counts them. Quiet means no call running or
    queued over several consecutive polls (a waiter takes the lock on the next iteration).
    """
    quiet = 0
    deadline = asyncio.get_running_loop().time() + 5.0
    while quiet < quiet_polls and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.001)
        quiet = quiet + 1 if all(in_flight(s) == 0 for s in stores) else 0


#: Consecutive idle loop iterations ``idle`` waits for (more than a hand-off needs).
IDLE_POLLS = 3


async def idle(*stores: BaseStore, polls: int = IDLE_POLLS) -> None:
    """Return once the event loop is idle: nothing ready to run but this coroutine, and no
    store call running or queued, over ``polls`` consecutive loop iterations. Every task then
    waits on the clock, a gate or a future the test resolves, as after ``settle``, without
    its fixed quiet period: a chain of hand-offs between tasks (an event set, a task woken,
    a task created) keeps the loop's ready queue non-empty, however many iterations it takes
    and however loaded the machine; store I/O (threads, sockets) is counted by the stores.

    For runtimes whose only work off the loop is store I/O: an HTTP call or another
    thread is not seen (``settle``'s quiet period or ``eventually`` wait for those).
    """
    loop = asyncio.get_running_loop()
    # The loop's queue of ready callbacks (CPython's selector and proactor loops): no public
    # API tells whether another task can run now.
    ready: Sized = getattr(loop, "_ready")  # noqa: B009
    deadline = loop.time() + 5.0
    quiet = 0
    storing = False
    while quiet < polls and loop.time() < deadline:
        # Waiting on a store's thread or socket: give it real time (a spin would hold the GIL).
        await asyncio.sleep(0.0005 if storing else 0)
        storing = any(in_flight(s) for s in stores)
        quiet = 0 if storing or ready else quiet + 1


def harness_settings(
    *,
    debounce: float,
    max_wait: float,
    lease: float,
    memory_policy: MemoryPolicy | None,
    gap_policy: GapPolicy | None,
    access: AccessPolicy | None,
    limits: LimitPolicy | None,
    trouble_notice: str,
    forget_deletes_messages: bool,
    export_every: float,
    plugins: Sequence[str] = (),
    tool_policy: ToolPolicy | None = None,
    media: MediaConfig | None = None,
    transcription: TranscriptionConfig | None = None,
    persona: PersonaSettings = PERSONA,
    schedule: ScheduleSettings | None = None,
    cut_stale: bool = True,
    mcp_servers: Sequence[McpServerSettings] = (),
    bots: Sequence[BotSettings] = (),
    cast: Sequence[PersonaSettings] = (),
) -> Settings:
    """The Settings that make the App wire what this harness describes.

    Sections are built with ``model_construct``: tests use values the TOML would refuse (a
    debounce past ``max_wait``, a window of 2) to reach edge cases quickly.
    """
    policy = memory_policy or MemoryPolicy(budget=Budget(), summary_model=PIN.model)
    budget = policy.budget
    gaps = gap_policy or GapPolicy()
    spend = limits or LimitPolicy()
    return Settings.model_construct(
        llm=LLMSettings.model_construct(
            trouble_notice=trouble_notice, prices={"gated": PriceSettings(input=3.0, output=15.0)}
        ),
        queue=QueueSettings.model_construct(
            debounce_seconds=debounce,
            max_wait_seconds=max_wait,
            lease_seconds=lease,
            scan_interval_seconds=0.5,
            shutdown_grace_seconds=1.0,
            max_turn_tokens=budget.turn_tokens,
            cut_stale=cut_stale,
        ),
        memory=MemorySettings.model_construct(
            window_messages=budget.window_messages,
            window_max_messages=budget.window_max_messages or None,
            prompt_budget_tokens=budget.prompt_tokens,
            summary_budget_tokens=budget.summary_tokens,
            user_memory_budget_tokens=budget.memory_tokens,
            summary_model=policy.summary_model,
            private_memory_in_groups=policy.private_memory_in_groups,
            share_across_groups=policy.share_across_groups,
            extract_after_idle_minutes=policy.extract_after_idle_seconds / 60,
        ),
        retention=RetentionSettings.model_construct(
            gap_policy=gaps.policy,
            tell_user_message=gaps.tell_user_message,
            refuse_message=gaps.refuse_message,
            forget_deletes_messages=forget_deletes_messages,
        ),
        access=AccessSettings.model_construct(
            allow_users=sorted(access.allow_users) if access else [],
            allow_chats=sorted(access.allow_chats) if access else [],
            admins=sorted(access.admins) if access else [],
            denied_reply=access.denied_reply if access else "",
        ),
        limits=LimitSettings.model_construct(
            user_turns_per_hour=spend.user_turns_per_hour,
            user_turns_per_day=spend.user_turns_per_day,
            bot_tokens_per_day=spend.bot_tokens_per_day,
            user_input_tokens_per_day=spend.user_input_tokens_per_day,
            bot_dollars_per_day=spend.bot_dollars_per_day,
            user_dollars_per_day=spend.user_dollars_per_day,
            limit_message=spend.message,
            max_input_chars=budget.max_input_chars,
            export_every_minutes=export_every / 60,
        ),
        personas=[persona, *(p for p in cast if p.id != persona.id)],
        bots=list(bots),
        plugins=list(plugins),
        schedule=schedule or ScheduleSettings(),
        tools=ToolSettings.model_construct(**dataclasses.asdict(tool_policy or ToolPolicy())),
        media=media or MediaConfig(),
        transcription=transcription or TranscriptionConfig(),
        mcp_servers=list(mcp_servers),
    )


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
    plugins: Sequence[str] = (),
    extend: Callable[[App], None] | None = None,
    extensions: Extensions | None = None,
    tool_policy: ToolPolicy | None = None,
    media: MediaConfig | None = None,
    transcription: TranscriptionConfig | None = None,
    initiative: InitiativeSettings | None = None,
    schedule: ScheduleSettings | None = None,
    persona: PersonaSettings = PERSONA,
    cut_stale: bool = True,
    mcp_servers: Sequence[McpServerSettings] = (),
    environ: Mapping[str, str] | None = None,
    bots: Sequence[BotSettings] = (),
    cast: Sequence[PersonaSettings] = (),
) -> AsyncIterator[Harness]:
    """The App's runtime on ``store`` (owned by the caller) with a manual clock and a
    recording outlet; on exit the scheduler stops and waits for turns."""
    outlet = outlet or RecordingOutlet(clock)
    if initiative is not None:
        persona = persona.model_copy(update={"initiative": initiative})
    settings = harness_settings(
        persona=persona,
        schedule=schedule,
        debounce=debounce,
        max_wait=max_wait,
        lease=lease,
        memory_policy=memory_policy,
        gap_policy=gap_policy,
        access=access,
        limits=limits,
        trouble_notice=trouble_notice,
        forget_deletes_messages=forget_deletes_messages,
        export_every=export_every,
        plugins=plugins,
        tool_policy=tool_policy,
        media=media,
        transcription=transcription,
        cut_stale=cut_stale,
        mcp_servers=mcp_servers,
        bots=bots,
        cast=cast,
    )
    app = App(settings, Secrets(environ or {}), clock=clock, llm=llm)
    if extensions is not None:
        app.extend(extensions)
    if extend is not None:
        extend(app)  # registers as an embedding program would, before the runtime starts
    seams = Seams(holder=holder, turn_clock=pipeline_clock, memory_llm=memory_llm, background=False)
    async with app.running({BOT: (persona, outlet)}, store=store, seams=seams) as rt:
        assert rt.ingestor is not None and rt.memory is not None and rt.exports is not None
        SHARED_STORES.append(store)
        try:
            yield Harness(
                store,
                clock,
                llm,
                outlet,
                rt.pipeline,
                rt.scheduler,
                rt.router,
                rt.ingestor,
                rt.memory,
                rt.exports,
                agenda=rt.agenda,
                mcp=rt.mcp,
            )
        finally:
            SHARED_STORES.remove(store)
