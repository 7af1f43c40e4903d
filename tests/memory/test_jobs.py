"""What memory's jobs share (memory/jobs.py, memory/stored.py): one background task per key, a
failure logged and not blocking the next run, a job paused after a failure and leased to one
process, and a person's record rewritten by compare-and-swap that reports when every attempt
lost to another writer."""

from __future__ import annotations

import asyncio
import logging

import pytest

from bot.core.clock import ManualClock
from bot.core.errors import StoreError
from bot.core.events import UserKey
from bot.store.base import BaseStore
from memory import stored
from memory.erasure import Eraser
from memory.jobs import JobGate, Jobs
from memory.records import MemoryItem, UserMemory
from memory.stored import Rewrite

ADA = UserKey("telegram", "11")


async def test_one_task_per_key_and_a_failure_is_logged_and_frees_the_key(
    caplog: pytest.LogCaptureFixture,
) -> None:
    jobs = Jobs()
    gate = asyncio.Event()
    ran: list[str] = []

    async def work(name: str) -> None:
        ran.append(name)
        await gate.wait()

    jobs.start("a", lambda: work("a1"), what="job a")
    jobs.start("a", lambda: work("a2"), what="job a")  # a1 still runs: dropped
    jobs.start("b", lambda: work("b1"), what="job b")
    await asyncio.sleep(0)
    assert ran == ["a1", "b1"]
    gate.set()
    await jobs.wait_idle()

    async def fail() -> None:
        raise RuntimeError("boom")

    with caplog.at_level(logging.ERROR, logger="personabot.memory"):
        jobs.start("a", fail, what="job a")
        await jobs.wait_idle()
    assert "job a failed" in caplog.text
    jobs.start("a", lambda: work("a3"), what="job a")  # the failed task left its key
    await jobs.wait_idle()
    assert ran == ["a1", "b1", "a3"]
    await jobs.aclose()


async def test_wait_idle_waits_for_work_started_meanwhile() -> None:
    jobs = Jobs()
    done: list[str] = []

    async def second() -> None:
        await asyncio.sleep(0)
        done.append("second")

    async def first() -> None:
        await asyncio.sleep(0)
        jobs.start("second", second, what="second")
        done.append("first")

    jobs.start("first", first, what="first")
    await jobs.wait_idle()
    assert done == ["first", "second"]


async def test_the_gate_pauses_a_failed_job_and_holds_one_lease_per_job(
    store: BaseStore, clock: ManualClock
) -> None:
    gate = JobGate(store=store, clock=clock, retry_after_failure=60.0)
    assert not gate.waiting("summary:x")
    gate.failed("summary:x")
    assert gate.waiting("summary:x") and not gate.waiting("extract:x")
    await clock.advance(61)
    assert not gate.waiting("summary:x")
    other = JobGate(store=store, clock=clock)  # another process
    async with gate.held("summary:x") as held, other.held("summary:x") as also:
        assert held and not also
    async with other.held("summary:x") as held:
        assert held  # released when the first one's body ended


def _record(*values: str) -> UserMemory:
    return UserMemory(items=tuple(MemoryItem("semantic", "interest", v, (1,)) for v in values))


async def test_a_rewrite_with_nothing_to_change_writes_nothing(
    store: BaseStore, clock: ManualClock
) -> None:
    await store.set_user_memory(ADA, _record("chess").to_json(), clock.now())
    _, version = await store.read_user_memory(ADA)
    assert await stored.rewrite_memory(store, ADA, lambda _: None, clock) is Rewrite.UNCHANGED
    assert (await store.read_user_memory(ADA))[1] == version
    written = await stored.rewrite_memory(store, ADA, lambda r: _record("go"), clock)
    assert written is Rewrite.WRITTEN
    assert [i.value for i in (await stored.user_memory(store, ADA)).items] == ["go"]


async def test_a_rewrite_that_always_loses_is_busy_and_erases_nothing(
    store: BaseStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store.set_user_memory(ADA, _record("chess", "go").to_json(), clock.now())
    read = store.read_user_memory

    async def read_then_another_writer_wins(user: UserKey) -> tuple[str | None, int]:
        # Another process (an extraction) writes between every read and its compare-and-swap.
        raw, version = await read(user)
        assert raw is not None
        await store.set_user_memory(user, raw, clock.now(), expected_version=version)
        return raw, version

    monkeypatch.setattr(store, "read_user_memory", read_then_another_writer_wins)
    eraser = Eraser(store=store, clock=clock)
    with pytest.raises(StoreError, match="busy"):
        await eraser.forget_item(ADA, "semantic", "interest", "chess")
    monkeypatch.undo()
    assert [i.value for i in (await stored.user_memory(store, ADA)).items] == ["chess", "go"]
    assert await eraser.forget_item(ADA, "semantic", "interest", "chess")
    assert not await eraser.forget_item(ADA, "semantic", "interest", "chess")
    assert [i.value for i in (await stored.user_memory(store, ADA)).items] == ["go"]
