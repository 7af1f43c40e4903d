"""Injectable time: the system clock for production, a manual clock for tests and benchmarks."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Protocol


class Clock(Protocol):
    """Wall-clock seconds since the epoch, and a way to wait on that clock."""

    def now(self) -> float:
        """Current time in seconds since the epoch."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` on this clock."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> float:
        """Current wall-clock time."""
        return time.time()

    async def sleep(self, seconds: float) -> None:
        """Sleep on the event loop."""
        await asyncio.sleep(max(0.0, seconds))


class ManualClock:
    """A clock that moves only when told to; sleepers wake when it passes their deadline."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        """Current manual time."""
        return self._now

    async def sleep(self, seconds: float) -> None:
        """Wait until the clock has been advanced by ``seconds``."""
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + seconds, next(self._seq), fut))
        await fut

    def next_deadline(self) -> float | None:
        """The earliest deadline of a sleeper still waiting, or None (nobody sleeps)."""
        while self._sleepers and self._sleepers[0][2].done():
            heapq.heappop(self._sleepers)  # a sleeper cancelled while it waited
        return self._sleepers[0][0] if self._sleepers else None

    async def advance(self, seconds: float) -> None:
        """Move time forward, waking sleepers in deadline order, and let them run."""
        target = self._now + seconds
        while self._sleepers and self._sleepers[0][0] <= target:
            deadline, _, fut = heapq.heappop(self._sleepers)
            self._now = max(self._now, deadline)
            if not fut.done():
                fut.set_result(None)
            for _ in range(5):
                await asyncio.sleep(0)
        self._now = target
        for _ in range(5):
            await asyncio.sleep(0)
