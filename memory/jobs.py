"""What memory's background jobs share: one task per key at a time (``Jobs``), and a gate that
keeps a job to one process at a time and pauses it after a failure (``JobGate``).

Memory work is derived from data, never queued in process (docs/architecture.md#prompt): a task
lost in a crash is found again by the next turn or sweep, so these tasks hold nothing that
must survive. Leases keep two processes from doing the same job at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable

from bot.core.clock import Clock
from bot.store.contracts import LeaseStore

log = logging.getLogger("personabot.memory")

#: How long ``Jobs.aclose`` lets running work finish before it cancels it.
_CLOSE_GRACE_SECONDS = 5.0


class Jobs:
    """Background memory work, at most one task per key (a session's compaction, the sweep)."""

    def __init__(self) -> None:
        self._tasks: dict[Hashable, asyncio.Task[None]] = {}

    def start(self, key: Hashable, work: Callable[[], Awaitable[object]], *, what: str) -> None:
        """Run ``work()`` in the background unless the task of ``key`` still runs (then that
        one will find this work too: it reads the data afresh). Its result is dropped; a
        failure is logged as ``what`` failed."""
        running = self._tasks.get(key)
        if running is not None and not running.done():
            return
        self._tasks[key] = asyncio.create_task(self._logged(key, work, what))

    async def _logged(
        self, key: Hashable, work: Callable[[], Awaitable[object]], what: str
    ) -> None:
        try:
            await work()
        except Exception:
            log.exception("%s failed", what)
        finally:
            # Before the task is done, so ``start`` never sees a finished task under its key.
            self._tasks.pop(key, None)

    async def wait_idle(self) -> None:
        """Wait until no background work is running (started so far or meanwhile)."""
        while tasks := list(self._tasks.values()):
            await asyncio.gather(*tasks, return_exceptions=True)

    async def aclose(self) -> None:
        """Wait briefly for running work, then cancel what is left."""
        tasks = list(self._tasks.values())
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=_CLOSE_GRACE_SECONDS)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)


class JobGate:
    """Whether a memory job may run now: never in two processes at once (a lease per job, one
    holder per process), and not again for a while after it failed (the model, a limit)."""

    def __init__(
        self,
        *,
        store: LeaseStore,
        clock: Clock,
        holder: str | None = None,
        lease_seconds: float = 60.0,
        retry_after_failure: float = 60.0,
    ) -> None:
        self._store = store
        self._clock = clock
        self._holder = holder or f"memory-{uuid.uuid4().hex[:12]}"
        self._lease_seconds = lease_seconds
        self._retry_after_failure = retry_after_failure
        self._failed_until: dict[str, float] = {}

    @contextlib.asynccontextmanager
    async def held(self, name: str) -> AsyncIterator[bool]:
        """Hold the lease ``name`` for the body; yields whether it was free (False: another
        process runs this job now, the body must skip it)."""
        lease = await self._store.acquire_lease(
            name, self._holder, self._lease_seconds, self._clock.now()
        )
        try:
            yield lease is not None
        finally:
            if lease is not None:
                await self._store.release_lease(lease)

    def waiting(self, key: str) -> bool:
        """Whether the job ``key`` failed less than ``retry_after_failure`` seconds ago."""
        return self._failed_until.get(key, 0.0) > self._clock.now()

    def failed(self, key: str) -> None:
        """The job ``key`` failed now: it waits ``retry_after_failure`` seconds."""
        self._failed_until[key] = self._clock.now() + self._retry_after_failure
