"""A stateful property-based test of the queue over both stores (issue 13).

Hypothesis drives the real Ingestor, Scheduler, Pipeline, Router and commands on a real
SQLite file or a real PostgreSQL database, with a manual clock and a scripted model whose
every call waits until a rule answers it (success, empty, blank, refusal, unavailable, rate
limited, rejected). Rules interleave ingest, duplicate delivery, clock steps, answers, turns
started by a second process (lease contention), stalls (renewals starve, so the lease expires
and is taken over), crashes (cancelled, or killed with the lease held) and restarts with outbox
recovery, and ``/new``. Every step is checked:

- no message is answered twice (no duplicate stored, no answered message submitted again, no
  outbox row sent twice);
- no reply is sent by a worker whose lease was taken over, or whose input went stale before
  the hard cap;
- no empty or whitespace-only reply is recorded or sent;
- every sent reply was recorded by the final check;
- no pending message is left without an armed timer, and no turn fails with an exception.

At teardown the model heals and the clock passes every timer: every message must then be
answered (its reply delivered once) or closed out for a reason the run explains (a rejected
turn, or a session reset by ``/new``).

Clock steps wake one sleeper at a time and let the store settle in between, so a run is
deterministic enough for Hypothesis to replay and shrink it.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import os
import re
from collections import Counter
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import bot.core.errors
from bot.app.build import memory_on, turn_parts
from bot.core.clock import ManualClock
from bot.core.errors import ModelRejected, ModelUnavailable, RateLimited
from bot.core.events import ConversationKey, Inbound, QueuePolicy, Reply, StoredMessage
from bot.core.llm import BaseLLM, ModelRequest, ModelResult, Usage
from bot.llm.offline import OfflineLLM
from bot.queue import Ingestor, Scheduler
from bot.queue.cutoff import Cutoffs
from bot.runtime.commands import Commands
from bot.runtime.delivery import Delivery
from bot.runtime.pipeline import (
    DEFAULT_REJECTED,
    BotProfile,
    Bots,
    Pipeline,
    ReplyPolicies,
)
from bot.runtime.router import Router
from bot.store.base import BaseStore
from bot.store.postgres import PostgresStore
from bot.store.sqlite import SQLiteStore
from memory.assemble import Budget
from memory.service import Memory, MemoryPolicy
from tests import pg_cluster
from tests.backends import Backend
from tests.fakes.outlet import RecordingOutlet
from tests.harness import PIN, idle

T = TypeVar("T")

BOT = "default"
DEBOUNCE = 1.5
MAX_WAIT = 8.0
LEASE = 10.0
SCAN = 2.0
QUEUE = QueuePolicy(debounce=DEBOUNCE, max_wait=MAX_WAIT)
CONVERSATIONS = tuple(ConversationKey("telegram", f"chat{i}") for i in range(3))
AUTHORS = ("u1", "u2", "u3")
TROUBLE = "One moment, I will answer as soon as I can."
# The permanent rejection of one request; after issue 13 its own class (bot.core.errors).
REQUEST_REJECTED: type[ModelRejected] = getattr(bot.core.errors, "RequestRejected", ModelRejected)

EXAMPLES = 30  # each backend's run stays under ~30 s on a 2-core machine
STEPS = 25
MUST_REACH = (
    "answer ok",
    "answer empty",
    "answer blank",
    "answer refusal",
    "answer unavailable",
    "answer ratelimited",
    "answer rejected",
    "takeover",
    "crash mid-turn",
    "kill mid-turn",
    "/new with pending messages",
    "newer input cut a generation",
)

TOKEN = re.compile(r"\bm(\d+)\b")
CALL_MARK = re.compile(r"«c(\d+)»")


def _a_turns_reply(text: str) -> bool:
    """Not a notice or a command answer (outbox rows too, but never in the transcript)."""
    return text not in (TROUBLE, DEFAULT_REJECTED) and not text.startswith("New session started")


Outcome = Literal["ok", "empty", "blank", "refusal", "unavailable", "ratelimited", "rejected"]
# Two rules share the model's outcomes, so a fixed seed answers calls often enough to reach
# every kind of answer (one rule among nine rarely did).
ANSWERS: tuple[Outcome, ...] = ("ok", "empty", "blank", "refusal")
FAILURES: tuple[Outcome, ...] = ("unavailable", "ratelimited", "rejected")


class StepClock(ManualClock):
    """A manual clock that can wake its sleepers one at a time (deterministic interleaving)."""

    def wake_next(self) -> None:
        """Move to the earliest deadline and wake that one sleeper."""
        deadline, _, fut = heapq.heappop(self._sleepers)
        self._now = max(self._now, deadline)
        fut.set_result(None)


class ProcessClock:
    """One process's view of the shared clock; its sleeps can be held (a stall) or never
    return again (a killed process)."""

    def __init__(self, base: StepClock) -> None:
        self._base = base
        self._awake = asyncio.Event()
        self._awake.set()
        self.dead = False

    def now(self) -> float:
        """The shared time."""
        return self._base.now()

    async def sleep(self, seconds: float) -> None:
        """Sleep on the shared clock, then wait while the process is stalled or dead."""
        await self._base.sleep(seconds)
        await self._awake.wait()

    def stall(self) -> None:
        """Hold every sleep that ends from now on (no renewals, no scheduler ticks)."""
        self._awake.clear()

    def resume(self) -> None:
        """Let held sleeps return (never for a dead process)."""
        if not self.dead:
            self._awake.set()

    @property
    def stalled(self) -> bool:
        """Whether sleeps are held."""
        return not self._awake.is_set()


@dataclass
class Call:
    """One reply call to the scripted model."""

    id: int
    process: str
    conversation: ConversationKey
    session_id: int
    turn: frozenset[int]  # message numbers of the new turn (pending when the call started)
    started_seq: int  # messages ingested before the call started
    cap: float  # the turn's hard cap (from its oldest message): stale replies pass after it
    future: asyncio.Future[ModelResult]
    outcome: Outcome | None = None
    superseded: bool = False  # another call of the conversation started meanwhile
    stale: bool = False  # newer input of its session was pending when it was answered


@dataclass
class Sent:
    """A reply an outlet delivered, with the call being answered when it was sent."""

    process: str
    reply: Reply
    at: float
    context: Call | None


@dataclass
class Board:
    """Every model call of the run, shared by the scripted models of all processes."""

    calls: list[Call] = field(default_factory=list)
    auto: bool = False  # the healed model: answer at once, successfully
    resolving: Call | None = None
    problems: list[str] = field(default_factory=list)
    arriving: list[Call] = field(default_factory=list)  # made since the step began

    def register(self, reached: Counter[str]) -> None:
        """Number the calls made since the last registration and add them to the board, in
        the order of their conversations (arrival order within one conversation).

        Turns of different conversations that fall due together run concurrently, and which
        of them reaches the model first depends on the timing of their store I/O (on
        PostgreSQL, the server's replies on separate connections), not on anything the state
        machine chose. Numbered in arrival order, the same steps replayed could list the
        waiting calls in another order, so that a rule's draw answered another conversation
        and the run went on differently (FlakyStrategyDefinition). Registered once a step has
        settled, in a fixed order, they are the same on every replay.
        """
        arrived, self.arriving = self.arriving, []
        for call in sorted(arrived, key=lambda c: CONVERSATIONS.index(c.conversation)):
            for other in self.calls:
                if other.conversation == call.conversation and not other.future.done():
                    # A second call of one conversation means its lease was taken over.
                    other.superseded = True
                    reached["takeover"] += 1
            call.id = len(self.calls) + 1
            self.calls.append(call)


class ScriptedLLM(BaseLLM):
    """A process's model: each reply call waits for the test to choose its answer."""

    name = "scripted"

    def __init__(self, machine: QueueMachine, process: str) -> None:
        self._machine = machine
        self._process = process
        #: Set when the process cancels its own tasks (a crash, the end of the run).
        self.cancelling = False

    async def complete(self, request: ModelRequest) -> ModelResult:
        """Register the call (and check what it was given), then wait for the answer."""
        machine = self._machine
        board = machine.board
        mentioned = {int(n) for n in TOKEN.findall(request.messages[-1].text)}
        if not mentioned:
            board.problems.append(f"a reply call without any new message: {request.messages}")
            raise ModelUnavailable("test: unexpected request")
        conversation = machine.messages[min(mentioned)].conversation
        pending = await machine.pending(conversation)
        answered = await machine.answered(conversation)
        again = sorted(mentioned & answered)
        if again:
            board.problems.append(f"answered messages submitted again: m{again}")
        turn = frozenset(mentioned & set(pending))
        if not turn:
            board.problems.append(f"a reply call whose messages are not pending: m{mentioned}")
        sessions = {pending[n].session.session_id for n in turn}
        if len(sessions) > 1:
            board.problems.append(f"one turn spans sessions {sessions}")
        loop = asyncio.get_running_loop()
        call = Call(
            id=0,  # numbered when the board registers it
            process=self._process,
            conversation=conversation,
            session_id=min(sessions, default=0),
            turn=turn,
            started_seq=len(machine.messages),
            cap=min((machine.messages[n].at for n in turn), default=0.0) + MAX_WAIT,
            future=loop.create_future(),
        )
        board.arriving.append(call)
        if board.auto:
            board.register(machine.reached)
            self.settle_call(call, "ok")
        try:
            return await call.future
        finally:
            if not call.future.done():
                call.future.cancel()  # the turn was cancelled: a crash, shutdown or a cut
            # A cancelled task cancels the future it awaits: a cancellation the process did
            # not start itself is newer input cutting the generation (rule 9).
            if call.future.cancelled() and not self.cancelling:
                machine.reached["newer input cut a generation"] += 1

    @staticmethod
    def settle_call(call: Call, outcome: Outcome) -> None:
        """Answer a waiting call."""
        call.outcome = outcome
        fut = call.future
        if outcome == "ok":
            fut.set_result(ModelResult(f"reply «c{call.id}»", Usage(10, 5), "scripted"))
        elif outcome == "empty":
            fut.set_result(ModelResult("", Usage(10, 0), "scripted", "end_turn"))
        elif outcome == "blank":
            fut.set_result(ModelResult(" \n\t ", Usage(10, 1), "scripted", "end_turn"))
        elif outcome == "refusal":
            fut.set_result(ModelResult("", Usage(10, 0), "scripted", "refusal"))
        elif outcome == "unavailable":
            fut.set_exception(ModelUnavailable("test: overloaded", status=529))
        elif outcome == "ratelimited":
            fut.set_exception(RateLimited("test: slow down", retry_after=3.0))
        else:
            fut.set_exception(REQUEST_REJECTED("test: prompt is too long", status=400))


class CheckedOutlet(RecordingOutlet):
    """Records each send with its process and the call being answered at the time."""

    def __init__(self, machine: QueueMachine, process: str) -> None:
        super().__init__(machine.clock)
        self._machine = machine
        self._process = process

    async def send(self, reply: Reply) -> None:
        """Record the reply."""
        await super().send(reply)
        self._machine.sent.append(
            Sent(self._process, reply, self._machine.clock.now(), self._machine.board.resolving)
        )


@dataclass(frozen=True, slots=True)
class Message:
    """A user message the test sent, as the platform knows it."""

    number: int
    inbound: Inbound
    at: float

    @property
    def conversation(self) -> ConversationKey:
        """Where it was sent."""
        return self.inbound.conversation


class Process:
    """One personabot process on the shared database: store, pipeline, router; role A runs a
    scheduler, role B only runs turns the test starts."""

    def __init__(self, machine: QueueMachine, role: str, generation: int) -> None:
        self.role = role
        self.name = f"{role}{generation}"
        self.machine = machine
        self.clock = ProcessClock(machine.clock)
        self.store = machine.new_store()
        self.llm = ScriptedLLM(machine, self.name)
        self.outlet = CheckedOutlet(machine, self.name)
        # Newer input stored here cuts this process's stale generations (rule 9).
        self.cutoffs = Cutoffs()
        self.turns: dict[ConversationKey, asyncio.Task[str]] = {}
        self.scheduler: Scheduler | None = None
        self.scheduler_task: asyncio.Task[None] | None = None
        self.pipeline: Pipeline
        self.router: Router
        self.memory: Memory

    async def start(self) -> None:
        """Open the store, recover the outbox, and (role A) start the scheduler."""
        await self.store.open()
        profile = BotProfile(
            key=BOT,
            pin=PIN,
            queue=QUEUE,
            memory=MemoryPolicy(budget=Budget(), summary_model="test-model"),
            outlet=self.outlet,
            lease_seconds=LEASE,
        )
        self.memory = memory_on(
            store=self.store,
            llm=OfflineLLM(),
            clock=self.clock,
            policy_for=lambda _: profile.memory,
        )
        bots = Bots({BOT: profile})
        self.pipeline = Pipeline(
            store=self.store,
            parts=turn_parts(
                self.store,
                llm=self.llm,
                clock=self.clock,
                memory=self.memory,
                outlet_for=bots.outlet_for,
                holder=self.name,
                cutoffs=self.cutoffs,
            ),
            bots=bots,
            policies=ReplyPolicies(trouble_notice=TROUBLE),
        )
        await self.pipeline.recover_outbox(older_than=self.clock.now())
        wake = None
        if self.role == "A":
            self.scheduler = Scheduler(
                store=self.store,
                clock=self.clock,
                run_turn=self.pipeline.run_turn,
                bots=[BOT],
                scan_interval=SCAN,
                # Raced, not claimed: a claim passes over a lease row another transaction
                # holds (SKIP LOCKED) and looks again after a backoff on the clock, so whether
                # a turn starts within a step would depend on the real timing of process B's
                # transactions, which a replaying state machine cannot allow. Claims have
                # their own tests (tests/store/test_claims.py, tests/review20, the
                # multi-process tests, the App harness).
            )
            wake = self.scheduler.wake
        ingestor = Ingestor(
            store=self.store,
            clock=self.clock,
            policy_for=lambda _: QUEUE,
            wake=wake,
            cutoffs=self.cutoffs,
        )
        commands = Commands(
            store=self.store,
            clock=self.clock,
            greeting=lambda session, _: PIN.greeting(session.key),
            memory=self.memory,
        )
        self.router = Router(
            ingestor=ingestor,
            commands=commands,
            outlets={BOT: self.outlet},
            store=self.store,
            clock=self.clock,
            memory=self.memory,
            metrics=self.pipeline.metrics,
            delivery=Delivery(
                store=self.store, clock=self.clock, outlet_for={BOT: self.outlet}.get
            ),
        )
        if self.scheduler is not None:
            self.scheduler_task = asyncio.create_task(self.scheduler.run(), name=self.name)

    def tasks(self) -> list[asyncio.Task[Any]]:
        """Every task running for this process."""
        running: list[asyncio.Task[Any]] = [t for t in self.turns.values() if not t.done()]
        if self.scheduler is not None:
            running += [t for t in self.scheduler._running.values() if not t.done()]
        if self.scheduler_task is not None and not self.scheduler_task.done():
            running.append(self.scheduler_task)
        return running

    async def cancel(self) -> None:
        """Cancel everything running here (leases are released by the pipeline's finally)."""
        self.llm.cancelling = True  # what is cancelled from here on is not cut
        tasks = self.tasks()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def close(self) -> None:
        """Cancel what runs and close the store."""
        await self.cancel()
        await self.memory.aclose()
        await self.store.aclose()


class TurnFailures(logging.Handler):
    """Collects log records that carry an exception: a turn or task that crashed."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        """Keep records with exception info."""
        if record.exc_info:
            self.records.append(f"{record.name}: {record.getMessage()} ({record.exc_info[1]!r})")


class QueueMachine(RuleBasedStateMachine):
    """The queue of one fresh database under random interleavings."""

    backend: ClassVar[Backend]
    root: ClassVar[Path]
    _examples: ClassVar[itertools.count[int]] = itertools.count(1)
    reached: ClassVar[Counter[str]]  # what the run exercised (checked by the test)

    def __init__(self) -> None:
        super().__init__()
        self.runner = asyncio.Runner()
        self.clock = StepClock()
        self.board = Board()
        self.messages: dict[int, Message] = {}
        self.sent: list[Sent] = []
        self.checked_sends = 0
        self.generations = itertools.count(1)
        self.dead: list[Process] = []
        self.broken = False
        self.resets: list[tuple[ConversationKey, int]] = []  # (conversation, messages before)
        self.failures = TurnFailures()
        logging.getLogger("personabot").addHandler(self.failures)
        example = next(self._examples)
        self.path = self.root / f"example{example}.sqlite3"
        self.db_name: str | None = None
        self.dsn = ""
        self.stores: list[BaseStore] = []
        self.run(self._open())

    # -- plumbing -------------------------------------------------------------------------------

    def run(self, coro: Awaitable[T]) -> T:
        """Run a coroutine on the machine's loop; a failure marks the run broken."""

        async def main() -> T:
            return await coro

        try:
            return self.runner.run(main())
        except BaseException:
            self.broken = True
            raise

    def new_store(self) -> BaseStore:
        """An unopened store on the example's database."""
        made: BaseStore
        if self.backend.pg is None:
            made = SQLiteStore(path=self.path)
        else:
            made = PostgresStore(dsn=self.dsn, min_pool=1, max_pool=2)
        self.stores.append(made)
        return made

    async def _open(self) -> None:
        pg = self.backend.pg
        if pg is not None:
            self.db_name = pg.next_name()
            self.dsn = await pg_cluster.create_database(
                pg.server_dsn, self.db_name, template=pg.template
            )
        self.observer = self.new_store()
        await self.observer.open()
        self.a = Process(self, "A", next(self.generations))
        await self.a.start()
        self.b = Process(self, "B", next(self.generations))
        await self.b.start()

    async def settle(self) -> None:
        """Let every task run until it waits on the clock or on the model (the loop idle, no
        store call in flight: tests/harness.py idle); then register the model calls made
        meanwhile (Board.register)."""
        await idle(*self.stores)
        self.board.register(self.reached)

    async def advance(self, seconds: float) -> None:
        """Move the clock, waking one sleeper at a time and settling after each."""
        target = self.clock.now() + seconds
        while (deadline := self.clock.next_deadline()) is not None and deadline <= target:
            self.clock.wake_next()
            await self.settle()
        await self.clock.advance(target - self.clock.now())
        await self.settle()

    def live(self) -> list[Process]:
        """Processes that are running (stalled or not)."""
        return [self.a, self.b]

    def process(self, role: str) -> Process:
        """The running process of a role."""
        return self.a if role == "A" else self.b

    async def pending(self, conversation: ConversationKey) -> dict[int, StoredMessage]:
        """Pending user messages of a conversation, by message number."""
        return {self._number(m): m for m in await self._user_messages(conversation, "pending")}

    async def answered(self, conversation: ConversationKey) -> set[int]:
        """Message numbers of answered user messages."""
        return {self._number(m) for m in await self._user_messages(conversation, "answered")}

    async def _user_messages(
        self, conversation: ConversationKey, which: Literal["pending", "answered", "closed", "all"]
    ) -> list[StoredMessage]:
        # Pending is the stored flag, not "not in history": a message closed out because the
        # model rejected it is left out of history too (it is never submitted again, not even
        # as context), and it is closed, not pending.
        pending = await self._pending_ids()
        out: list[StoredMessage] = []
        for session in await self.observer.list_sessions(conversation):
            for m in await self.observer.messages(session.key):
                if m.role != "user":
                    continue
                kind = "pending" if m.id in pending else "answered" if m.answered else "closed"
                if which in (kind, "all"):
                    out.append(m)
        return out

    async def _pending_ids(self) -> set[int]:
        """Ids of every message stored as pending (no store method lists them across sessions).

        Read through the observer's own connection, so that settle() waits for the read.
        """
        store = self.observer
        assert isinstance(store, SQLiteStore | PostgresStore)
        async with store._read() as db:
            rows = await db.fetch(f"SELECT id FROM messages WHERE pending = {store.dialect.true}")
        return {int(r[0]) for r in rows}

    @staticmethod
    def _number(message: StoredMessage) -> int:
        found = TOKEN.search(message.text)
        assert found is not None, message
        return int(found.group(1))

    def waiting_calls(self) -> list[Call]:
        """Unanswered calls of running processes."""
        names = {p.name for p in self.live()}
        return [c for c in self.board.calls if not c.future.done() and c.process in names]

    # -- rules ----------------------------------------------------------------------------------

    @initialize(authors=st.lists(st.sampled_from(AUTHORS), min_size=1, max_size=3))
    def first_turns(self, authors: list[str]) -> None:
        """Every run starts with turns waiting on the model (a fixed seed reaches answers)."""
        for conversation, author in zip(CONVERSATIONS, authors, strict=False):
            self.ingest(conversation=conversation, author=author, via="A")
        self.run(self.advance(DEBOUNCE))

    @rule(
        conversation=st.sampled_from(CONVERSATIONS),
        author=st.sampled_from(AUTHORS),
        via=st.sampled_from(("A", "B")),
    )
    def ingest(self, conversation: ConversationKey, author: str, via: str) -> None:
        """A user message arrives (at either process)."""
        number = len(self.messages) + 1
        inbound = Inbound(
            conversation=conversation,
            author_id=author,
            display_name=author.upper(),
            text=f"m{number} from {author}",
            platform_message_id=f"p{number}",
            is_private=False,
            mentions_bot=True,
        )
        self.messages[number] = Message(number, inbound, self.clock.now())

        async def go() -> None:
            await self.process(via).router(inbound)
            await self.settle()

        self.run(go())

    @precondition(lambda self: bool(self.messages))
    @rule(data=st.data(), via=st.sampled_from(("A", "B")))
    def redeliver(self, data: st.DataObject, via: str) -> None:
        """The platform delivers an earlier message again."""
        message = data.draw(st.sampled_from(sorted(self.messages.values(), key=lambda m: m.number)))

        async def go() -> None:
            before = await self.observer.conversation_version(message.conversation)
            await self.process(via).router(message.inbound)
            await self.settle()
            after = await self.observer.conversation_version(message.conversation)
            assert after == before, f"duplicate delivery of m{message.number} bumped the version"

        self.run(go())

    @rule(seconds=st.sampled_from((0.5, DEBOUNCE, 3.0, MAX_WAIT + 0.5, LEASE + 1.0)))
    def wait(self, seconds: float) -> None:
        """Time passes (debounce, hard cap, retry backoff, lease expiry)."""
        self.run(self.advance(seconds))

    @precondition(lambda self: bool(self.waiting_calls()))
    @rule(data=st.data(), outcome=st.sampled_from(ANSWERS))
    def answer(self, data: st.DataObject, outcome: Outcome) -> None:
        """The model answers one waiting call (newer input may have arrived meanwhile)."""
        self._settle_call(data, outcome)

    @precondition(lambda self: bool(self.waiting_calls()))
    @rule(data=st.data(), outcome=st.sampled_from(FAILURES))
    def fail(self, data: st.DataObject, outcome: Outcome) -> None:
        """The model call of one waiting turn fails (for now, or for good)."""
        self._settle_call(data, outcome)

    def _settle_call(self, data: st.DataObject, outcome: Outcome) -> None:
        call = data.draw(st.sampled_from(self.waiting_calls()))
        self.reached[f"answer {outcome}"] += 1

        async def go() -> None:
            pending = await self.pending(call.conversation)
            call.stale = self.clock.now() < call.cap and any(
                n > call.started_seq and m.session.session_id == call.session_id
                for n, m in pending.items()
            )
            if call.stale:
                self.reached["answer to stale input"] += 1
            self.board.resolving = call
            try:
                ScriptedLLM.settle_call(call, outcome)
                await self.settle()
            finally:
                self.board.resolving = None

        self.run(go())

    @precondition(lambda self: bool(self.messages))
    @rule(conversation=st.sampled_from(CONVERSATIONS))
    def second_process_turn(self, conversation: ConversationKey) -> None:
        """Process B tries a turn (busy while A holds the lease; takes over once it expired)."""
        b = self.b
        running = b.turns.get(conversation)
        if running is not None and not running.done():
            return

        async def go() -> None:
            b.turns[conversation] = asyncio.create_task(b.pipeline.run_turn(conversation))
            await self.settle()

        self.run(go())

    # Preconditions keep steps from being no-ops: with a fixed seed every step counts.

    @precondition(lambda self: not all(p.clock.stalled for p in self.live()))
    @rule(data=st.data())
    def stall(self, data: st.DataObject) -> None:
        """A process stops getting scheduled on time: no renewals, no ticks."""
        role = data.draw(st.sampled_from([p.role for p in self.live() if not p.clock.stalled]))
        self.process(role).clock.stall()

    @precondition(lambda self: any(p.clock.stalled for p in self.live()))
    @rule(data=st.data())
    def resume(self, data: st.DataObject) -> None:
        """A stalled process runs again."""
        role = data.draw(st.sampled_from([p.role for p in self.live() if p.clock.stalled]))

        async def go() -> None:
            self.process(role).clock.resume()
            await self.settle()

        self.run(go())

    @precondition(lambda self: bool(self.waiting_calls()))
    @rule(data=st.data(), kill=st.booleans())
    def crash_and_restart(self, data: st.DataObject, kill: bool) -> None:
        """A process dies mid-turn (cancelled: leases released; killed: leases held until they
        expire) and a new one starts on the same database and recovers the outbox."""
        busy = sorted({c.process[0] for c in self.waiting_calls()})
        role = data.draw(st.sampled_from(busy))
        old = self.process(role)
        self.reached["kill mid-turn" if kill else "crash mid-turn"] += 1

        async def go() -> None:
            if kill:
                old.clock.dead = True
                old.clock.stall()
                self.dead.append(old)  # frozen: its waiting calls are never answered
            else:
                await old.close()
            new = Process(self, role, next(self.generations))
            if role == "A":
                self.a = new
            else:
                self.b = new
            await new.start()
            await self.settle()

        self.run(go())

    @rule(conversation=st.sampled_from(CONVERSATIONS), via=st.sampled_from(("A", "B")))
    def new_session(self, conversation: ConversationKey, via: str) -> None:
        """Someone sends /new."""
        self.resets.append((conversation, len(self.messages)))
        inbound = Inbound(conversation, "u1", "U1", "/new", None, is_private=False)

        async def go() -> None:
            if await self.pending(conversation):
                self.reached["/new with pending messages"] += 1
            await self.process(via).router(inbound)
            await self.settle()

        self.run(go())

    # -- invariants -----------------------------------------------------------------------------

    @invariant()
    def queue_promises_hold(self) -> None:
        """Checked after every step."""

        self.run(self._check())

    async def _check(self) -> None:
        board = self.board
        assert not board.problems, board.problems
        assert not self.failures.records, self.failures.records
        for process in self.live():
            for conversation, task in process.turns.items():
                if task.done() and not task.cancelled() and task.exception() is not None:
                    raise AssertionError(f"turn of {conversation} on {process.name} failed") from (
                        task.exception()
                    )
        sent_ids = await self._check_sent()
        twice = [i for i, n in sent_ids.items() if n > 1]
        assert not twice, f"outbox rows sent more than once: {twice}"
        for conversation in CONVERSATIONS:
            stored = await self._user_messages(conversation, "all")
            ids = Counter(m.platform_message_id for m in stored)
            assert all(n == 1 for n in ids.values()), f"a delivery stored twice: {ids}"
            pending = await self._user_messages(conversation, "pending")
            if pending:
                timer = await self.observer.timer(conversation)
                assert timer is not None, (
                    f"{conversation}: m{sorted(self._number(m) for m in pending)} pending "
                    "without an armed timer (never answered)"
                )

    async def _check_sent(self) -> Counter[int]:
        """Every sent reply is non-empty, recorded, and from a call neither fenced nor stale."""
        calls = {c.id: c for c in self.board.calls}
        sent_ids: Counter[int] = Counter()
        recorded: Counter[str] = Counter()
        for conversation in CONVERSATIONS:
            for session in await self.observer.list_sessions(conversation):
                for m in await self.observer.messages(session.key):
                    if m.role == "assistant":
                        assert m.text.strip(), f"an empty reply was recorded: {m}"
                        recorded[m.text] += 1
        for sent in self.sent:
            text = sent.reply.text
            assert text.strip(), f"{sent.process} sent an empty message: {sent.reply}"
            # One outbound path: notices and command answers are outbox rows too.
            assert sent.reply.outbox_id is not None, f"sent outside the outbox: {text!r}"
            sent_ids[sent.reply.outbox_id] += 1
            if not _a_turns_reply(text):
                continue
            assert recorded[text] > 0, f"{sent.process} sent a reply never recorded: {text!r}"
            mark = CALL_MARK.search(text)
            call = calls[int(mark.group(1))] if mark else sent.context
            if call is None:
                continue
            assert not call.superseded, (
                f"{sent.process} sent {text!r} after its lease was taken over (call {call.id})"
            )
            assert not call.stale, (
                f"{sent.process} sent {text!r} although newer input was pending (call {call.id})"
            )
        return sent_ids

    # -- teardown -------------------------------------------------------------------------------

    def teardown(self) -> None:
        """Heal the model, let every timer pass, check liveness; then close everything."""
        try:
            if not self.broken:
                self.run(self._heal_and_check())
        finally:
            logging.getLogger("personabot").removeHandler(self.failures)
            with contextlib.suppress(BaseException):
                self.run(self._close())
            self.runner.close()

    async def _heal_and_check(self) -> None:
        self.board.auto = True
        for process in self.live():
            process.clock.resume()
        for call in self.waiting_calls():
            ScriptedLLM.settle_call(call, "ok")
        await self.settle()
        for _ in range(20):
            busy = self.waiting_calls() or any([await self.pending(c) for c in CONVERSATIONS])
            if not busy:
                break
            await self.advance(LEASE + 5.0)
        await self._check()
        left = {c: sorted(await self.pending(c)) for c in CONVERSATIONS}
        assert not any(left.values()), f"never answered after the model healed: {left}"
        recorded: Counter[str] = Counter()
        explained = self._closures()
        for conversation in CONVERSATIONS:
            for session in await self.observer.list_sessions(conversation):
                for m in await self.observer.messages(session.key):
                    if m.role == "assistant":
                        recorded[m.text] += 1
            for m in await self._user_messages(conversation, "closed"):
                number = self._number(m)
                assert number in explained, f"m{number} was closed out with no reason"
        delivered = Counter(s.reply.text for s in self.sent if _a_turns_reply(s.reply.text))
        assert delivered == recorded, (
            f"recorded replies not delivered exactly once: recorded {recorded}, sent {delivered}"
        )

    def _closures(self) -> set[int]:
        """Messages the run gives a reason to close out without a reply of their own."""
        closed = set()
        for call in self.board.calls:
            if call.outcome in ("rejected", "empty", "blank", "refusal"):
                closed |= call.turn
        for conversation, before in self.resets:
            closed |= {
                n
                for n, m in self.messages.items()
                if n <= before and m.conversation == conversation
            }
        return closed

    async def _close(self) -> None:
        for process in [*self.dead, self.a, self.b]:
            with contextlib.suppress(Exception):
                await process.close()
        for store in self.stores:
            with contextlib.suppress(Exception):
                await store.aclose()
        pg = self.backend.pg
        if pg is not None and self.db_name is not None:
            await pg_cluster.drop_database(pg.server_dsn, self.db_name)


@pytest.mark.timeout(120)
def test_queue_keeps_its_promises_under_random_interleavings(
    backend: Backend, tmp_path: Path
) -> None:
    """Random interleavings of the queue's events never break its promises (issue 13)."""
    _run_machine(backend, tmp_path)


def _run_machine(backend: Backend, tmp_path: Path) -> None:
    if backend.pg is not None:
        backend.pg.next_name()  # the cluster is up (the fixture skipped or failed otherwise)
    reached: Counter[str] = Counter()
    machine = type(
        "QueueMachineOn" + backend.name.capitalize(),
        (QueueMachine,),
        {"backend": backend, "root": tmp_path, "reached": reached},
    )
    # CI runs a fixed sequence of examples (a random seed would make a failure come and go);
    # PERSONABOT_EXPLORE=N runs N examples from a random seed instead, to look for new bugs.
    explore = int(os.environ.get("PERSONABOT_EXPLORE", "0"))
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=explore or EXAMPLES,
            stateful_step_count=STEPS,
            derandomize=not explore,
            deadline=None,
            database=None,
            report_multiple_bugs=False,
            # Shrinking a failing run takes minutes on this machine: opt in to get the
            # minimal sequence (PERSONABOT_SHRINK=1); the unshrunk failing run is printed.
            phases=[Phase.explicit, Phase.generate]
            + ([Phase.shrink] if os.environ.get("PERSONABOT_SHRINK") else []),
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
    # The fixed seed must still reach the paths the queue's promises are about; when a change
    # of the rules or of Hypothesis loses one, bias the strategies again.
    missing = [what for what in MUST_REACH if not reached[what] and not explore]
    assert not missing, f"the examples never reached {missing}: {dict(reached)}"
