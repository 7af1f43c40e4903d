"""A manual clock that says when something starts waiting on it, and a driver that jumps it
to each waiter's deadline: paced sends run in clock time without real waiting or polling."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from bot.core.clock import ManualClock

T = TypeVar("T")


class SignallingClock(ManualClock):
    """A ManualClock whose ``asleep`` event is set each time someone starts to sleep on it."""

    def __init__(self) -> None:
        super().__init__()
        self.asleep = asyncio.Event()

    async def sleep(self, seconds: float) -> None:
        """Sleep on the manual clock, telling the driver first."""
        # Set before the sleeper is queued, but the driver runs only once this coroutine
        # suspends, by which time the deadline is in the heap.
        self.asleep.set()
        await super().sleep(seconds)

    async def next_sleeper(self) -> None:
        """Return once someone sleeps on the clock (at once if someone does already)."""
        self.asleep.clear()
        if self.next_deadline() is None:
            await self.asleep.wait()


async def drive(clock: SignallingClock, work: Awaitable[T]) -> T:
    """Run ``work``, moving the clock to each sleeper's deadline as soon as one waits (and
    only then), until ``work`` is done. Every other task of the test moves with it."""
    task = asyncio.ensure_future(work)
    try:
        while not task.done():
            sleeper = asyncio.ensure_future(clock.next_sleeper())
            await asyncio.wait({task, sleeper}, return_when=asyncio.FIRST_COMPLETED)
            if not sleeper.done():
                sleeper.cancel()
                await asyncio.gather(sleeper, return_exceptions=True)
                continue
            deadline = clock.next_deadline()
            if deadline is not None:
                await clock.advance(max(deadline - clock.now(), 0.0))
        return task.result()
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
