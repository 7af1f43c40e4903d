"""The cut-off's registry (bot/queue/cutoff.py) when another process announces input: each
generation checks the store, its checks never overlap, and a failed check cuts nothing."""

from __future__ import annotations

import asyncio
import logging

import pytest

from bot.core.errors import StoreError
from bot.core.events import ConversationKey
from bot.queue.cutoff import Cutoffs, NewerInput

C1 = ConversationKey("telegram", "1")
C2 = ConversationKey("telegram", "2")


def never(_newer: NewerInput) -> bool:
    return False


class Store:
    """A stale check whose answers the test gives, one at a time."""

    def __init__(self) -> None:
        self.asked = 0
        self.answers: asyncio.Queue[bool | Exception] = asyncio.Queue()
        self.waiting = asyncio.Event()

    async def stale(self) -> bool:
        self.asked += 1
        self.waiting.set()
        answer = await self.answers.get()
        self.waiting.clear()
        if isinstance(answer, Exception):
            raise answer
        return answer


async def _until_asked(store: Store) -> None:
    async with asyncio.timeout(5):
        await store.waiting.wait()


async def test_announcements_during_a_check_make_one_more_check_not_many() -> None:
    cutoffs, store = Cutoffs(), Store()
    with cutoffs.watch(C1, never, store.stale) as cut:
        cutoffs.announced(C1)
        await _until_asked(store)
        for _ in range(5):  # a burst of input while the first read runs
            cutoffs.announced(C1)
        await store.answers.put(False)  # the first read: not yet stale
        await asyncio.sleep(0)
        await _until_asked(store)
        assert store.asked == 2
        await store.answers.put(True)
        async with asyncio.timeout(5):
            await cut.wait()
        cutoffs.announced(C1)  # cut already: nothing more to ask
        await asyncio.sleep(0)
    assert store.asked == 2 and cutoffs.checks == 2


async def test_only_the_announced_conversations_generations_check() -> None:
    cutoffs, one, two = Cutoffs(), Store(), Store()
    with cutoffs.watch(C1, never, one.stale), cutoffs.watch(C2, never, two.stale) as cut2:
        cutoffs.announced(C2)
        await _until_asked(two)
        assert one.asked == 0
        await two.answers.put(True)
        async with asyncio.timeout(5):
            await cut2.wait()
        cutoffs.announced(None)  # the listener reconnected: every generation not cut looks
        await _until_asked(one)
        assert (one.asked, two.asked) == (1, 1)
        await one.answers.put(False)


async def test_a_failed_check_cuts_nothing_and_a_later_one_still_can(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cutoffs, store = Cutoffs(), Store()
    with cutoffs.watch(C1, never, store.stale) as cut, caplog.at_level(logging.WARNING):
        cutoffs.announced(C1)
        await _until_asked(store)
        await store.answers.put(StoreError("the database is unavailable"))
        for _ in range(3):
            await asyncio.sleep(0)
        assert not cut.is_set()
        assert "could not check the store for newer input" in caplog.text
        cutoffs.announced(C1)
        await _until_asked(store)
        await store.answers.put(True)
        async with asyncio.timeout(5):
            await cut.wait()


async def test_a_generation_that_ends_cancels_its_check() -> None:
    cutoffs, store = Cutoffs(), Store()
    with cutoffs.watch(C1, never, store.stale) as cut:
        cutoffs.announced(C1)
        await _until_asked(store)
    assert cutoffs.running(C1) == 0
    await store.answers.put(True)  # the answer comes after the generation ended
    for _ in range(3):
        await asyncio.sleep(0)
    assert not cut.is_set() and store.answers.qsize() == 1  # nobody took it: cancelled
