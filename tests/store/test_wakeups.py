"""Wake-ups across processes on PostgreSQL (docs/scaling.md#wake-ups), in real time.

A timer armed in one process is announced to the others at commit; their scheduler sets its
alarm to the due time and claims the turn then, not at its next scan. Announcements are a
shortcut: a listening connection that is killed comes back by itself and asks for a look at
the store, and the scan still finds what was announced while it was down.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import asyncpg
import pytest

from bot.app.build import memory_on, turn_parts
from bot.core.clock import SystemClock
from bot.core.events import ConversationKey, Inbound, QueuePolicy
from bot.llm.offline import OfflineLLM
from bot.queue import Scheduler
from bot.runtime.pipeline import BotProfile, Bots, Pipeline
from bot.store.base import BaseStore
from bot.store.postgres import PostgresStore
from bot.store.postgres._wakeups import parse, parse_input
from memory.assemble import Budget, PersonaPin
from memory.service import MemoryPolicy
from tests import pg_cluster
from tests.fakes.outlet import RecordingOutlet

BOT = "b"
PIN = PersonaPin(name="Mira", system="You are Mira.", first_message=("Hello!",), model="offline")
POLICY = QueuePolicy(debounce=0.2, max_wait=2.0)


def key(i: int) -> ConversationKey:
    return ConversationKey("telegram", f"chat-{i}", None, BOT)


class Heard:
    """What a listener passed on, with an event per announcement."""

    def __init__(self) -> None:
        self.items: list[tuple[str | None, float | None]] = []
        self.changed = asyncio.Event()

    def __call__(self, bot: str | None, due_at: float | None) -> None:
        self.items.append((bot, due_at))
        self.changed.set()

    async def until(self, count: int, within: float = 10.0) -> None:
        async with asyncio.timeout(within):
            while len(self.items) < count:
                self.changed.clear()
                await self.changed.wait()


@contextlib.asynccontextmanager
async def listening(store: BaseStore, heard: Heard) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(store.listen_timers(heard))
    try:
        await heard.until(1)  # connected: the first call asks for a look at the store
        assert heard.items[0] == (None, None)
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def test_announcements_are_parsed_and_garbage_is_refused() -> None:
    assert parse("bot with spaces 1700000000.25") == ("bot with spaces", 1700000000.25)
    assert parse("1700000000.25") is None  # no bot
    assert parse("b not-a-number") is None


async def test_a_timer_armed_or_moved_elsewhere_is_announced_with_its_due_time(
    pg_dsn: str,
) -> None:
    async with PostgresStore(dsn=pg_dsn) as a, PostgresStore(dsn=pg_dsn) as b:
        heard = Heard()
        async with listening(a, heard):
            result = await b.ingest(Inbound(key(1), "u", "Sasha", "hi", "p1"), 1000.0, POLICY)
            await heard.until(2)
            assert heard.items[1] == (BOT, result.due_at)
            await b.rearm_timer(key(1), 5000.5)
            await heard.until(3)
            assert heard.items[2] == (BOT, 5000.5)


def test_input_announcements_name_a_conversation_and_garbage_is_refused() -> None:
    assert parse_input('["b", "telegram", "42", ""]') == ConversationKey(
        "telegram", "42", None, "b"
    )
    assert parse_input('["b b", "discord", "1", "t 9"]') == ConversationKey(
        "discord", "1", "t 9", "b b"
    )
    for garbage in ("", "b 1700000000.25", "[1, 2, 3, 4]", '["b", "telegram", "42"]', "{}"):
        assert parse_input(garbage) is None


async def test_the_conversation_of_a_timer_armed_elsewhere_is_announced(pg_dsn: str) -> None:
    """Migration 17: besides the due time, the armed timer's conversation, so that a process
    with a generation of it running checks it (docs/architecture.md#queue rule 9)."""
    threaded = ConversationKey("discord", "chan", "thread 7", BOT)
    async with PostgresStore(dsn=pg_dsn) as a, PostgresStore(dsn=pg_dsn) as b:
        heard, inputs = Heard(), list[ConversationKey | None]()
        changed = asyncio.Event()

        def on_input(conversation: ConversationKey | None) -> None:
            inputs.append(conversation)
            changed.set()

        async def until(count: int) -> None:
            async with asyncio.timeout(10):
                while len(inputs) < count:
                    changed.clear()
                    await changed.wait()

        task = asyncio.create_task(a.listen_timers(heard, on_input))
        try:
            await until(1)
            assert inputs == [None]  # connected: every running generation looks
            await b.ingest(Inbound(threaded, "u", "Sasha", "hi", "p1"), 1000.0, POLICY)
            await until(2)
            await b.ingest(Inbound(key(3), "u", "Sasha", "hi", "p2"), 1000.0, POLICY)
            await until(3)
            assert inputs[1:] == [threaded, key(3)]
            await heard.until(3)  # the timers' own announcements are as before
            assert [bot for bot, _ in heard.items[1:]] == [BOT, BOT]
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def test_a_killed_listening_connection_comes_back_and_asks_for_a_look(
    pg_dsn: str,
) -> None:
    async with PostgresStore(dsn=pg_dsn) as a, PostgresStore(dsn=pg_dsn) as b:
        heard = Heard()
        async with listening(a, heard) as task:
            admin = await asyncpg.connect(pg_dsn)
            try:
                killed = await admin.fetchval(
                    "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE application_name = 'personabot listener'"
                )
            finally:
                await admin.close()
            assert killed == 1
            await heard.until(2)  # reconnected (after a backoff): look at the store now
            assert heard.items[1] == (None, None)
            assert not task.done()
            result = await b.ingest(Inbound(key(2), "u", "Sasha", "hi", "p2"), 1000.0, POLICY)
            await heard.until(3)
            assert heard.items[2] == (BOT, result.due_at)


def _pipeline(store: BaseStore, outlet: RecordingOutlet, clock: SystemClock) -> Pipeline:
    """The real pipeline of one process on ``store``, with the offline model."""
    profile = BotProfile(
        key=BOT,
        pin=PIN,
        queue=POLICY,
        memory=MemoryPolicy(budget=Budget(), summary_model=PIN.model),
        outlet=outlet,
        lease_seconds=10.0,
    )
    llm = OfflineLLM()
    memory = memory_on(store=store, llm=llm, clock=clock, policy_for=lambda _bot: profile.memory)
    return Pipeline(
        store=store,
        parts=turn_parts(
            store, llm=llm, clock=clock, memory=memory, outlet_for=Bots({BOT: profile}).outlet_for
        ),
        bots=Bots({BOT: profile}),
    )


async def _replies(outlet: RecordingOutlet, count: int, within: float) -> list[str]:
    for _ in range(int(within / 0.02)):
        if len(outlet.texts()) >= count:
            break
        await asyncio.sleep(0.02)
    return outlet.texts()


async def test_the_scheduler_survives_its_database_refusing_connections(pg_dsn: str) -> None:
    """A flaky network: the database drops every connection and refuses new ones for a
    moment. The scheduler's store calls fail meanwhile; its loop must log, back off and go
    on (it used to end, and the process never answered anybody again)."""
    clock = SystemClock()
    outlet = RecordingOutlet(clock)
    name = urlsplit(pg_dsn).path.lstrip("/")
    admin = await asyncpg.connect(pg_cluster.with_database(pg_dsn, "postgres"))
    try:
        async with PostgresStore(dsn=pg_dsn, connect_timeout=1.0) as b:
            pipeline = _pipeline(b, outlet, clock)
            scheduler = Scheduler(
                store=b,
                clock=clock,
                run_turn=pipeline.run_turn,
                bots=[BOT],
                scan_interval=0.2,
                claims=pipeline,
            )
            running = asyncio.create_task(scheduler.run())
            try:
                await asyncio.sleep(0.3)
                await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
                await admin.fetchval(
                    "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = $1",
                    name,
                )
                await asyncio.sleep(1.0)  # several scans meet a database that refuses them
                assert not running.done()
                await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
                async with PostgresStore(dsn=pg_dsn) as a:
                    await a.ingest(
                        Inbound(key(1), "u", "Sasha", "still there?", "p1"), clock.now(), POLICY
                    )
                replies = await _replies(outlet, 1, within=5.0)
                assert len(replies) == 1 and "still there?" in replies[0]
            finally:
                scheduler.stop()
                await running
    finally:
        await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        await admin.close()


@pytest.mark.parametrize("announced", [True, False], ids=["listening", "scan only"])
async def test_another_process_claims_a_turn_when_it_falls_due_not_at_its_scan(
    pg_dsn: str, announced: bool
) -> None:
    """Process B has no ingest of its own and a 30 s scan: only the announcement of A's timer
    can make it answer within seconds (without listening it does not, which shows the test
    can fail)."""
    clock = SystemClock()
    outlet = RecordingOutlet(clock)
    async with PostgresStore(dsn=pg_dsn) as a, PostgresStore(dsn=pg_dsn) as b:
        pipeline = _pipeline(b, outlet, clock)
        scheduler = Scheduler(
            store=b,
            clock=clock,
            run_turn=pipeline.run_turn,
            bots=[BOT],
            scan_interval=30.0,
            claims=pipeline,
        )
        heard = Heard()

        def wake(bot: str | None, due_at: float | None) -> None:
            heard(bot, due_at)
            scheduler.wake(due_at)

        listener = asyncio.create_task(b.listen_timers(wake)) if announced else None
        if listener is not None:
            await heard.until(1)
        running = asyncio.create_task(scheduler.run())
        try:
            await asyncio.sleep(0.1)  # B's scheduler has looked once and sleeps for 30 s
            sent = clock.now()
            await a.ingest(Inbound(key(1), "u", "Sasha", "hello there", "p1"), sent, POLICY)
            await _replies(outlet, 1, within=5.0)  # far under the 30 s scan
            if announced:
                assert len(outlet.texts()) == 1 and "hello there" in outlet.texts()[0]
                assert scheduler.lost_claims == 0
            else:
                assert outlet.texts() == []
        finally:
            scheduler.stop()
            await running
            if listener is not None:
                listener.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await listener
