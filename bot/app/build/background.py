"""The runtime's background work, owned in one place (docs/architecture.md#plugins).

Every task a runtime starts (the schedulers, the wake-ups, the memory sweeper, the retention
worker, and in ``personabot run`` the bots' receivers and the loop watch) is started through
its ``Background``, which keeps a reference to each (never fire-and-forget), records the
first failure and stops them all, the last started first, waiting for each. A task that
fails is logged once and sets ``failed``: ``personabot run`` and ``chat`` then stop (exit code
1) instead of serving on with, say, no scheduler.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Coroutine
from typing import Any

from bot.app.build.parts import Parts
from bot.app.build.services import build_retention
from bot.app.build.turns import Agenda
from bot.core.clock import Clock
from bot.core.events import ConversationKey
from bot.queue import Scheduler
from bot.queue.cutoff import Cutoffs
from memory.retention.worker import Retention
from memory.service import Memory

log = logging.getLogger("personabot.app")


class Background:
    """The tasks of one runtime: started in order, stopped in reverse order."""

    def __init__(self) -> None:
        self._jobs: list[tuple[asyncio.Task[None], Callable[[], object] | None]] = []
        #: Set when a task ended by an exception (each is logged once, with its name).
        self.failed = asyncio.Event()
        self.failures: list[str] = []

    def start(
        self,
        name: str,
        work: Coroutine[Any, Any, None],
        *,
        stop: Callable[[], object] | None = None,
    ) -> asyncio.Task[None]:
        """Run ``work`` as the task ``name``. At close it is asked to ``stop`` (and waited
        for: a scheduler lets running turns finish within the grace period), else cancelled."""
        task = asyncio.create_task(work, name=name)
        task.add_done_callback(self._ended)
        self._jobs.append((task, stop))
        return task

    def _ended(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or (exc := task.exception()) is None:
            return
        log.error("%s stopped: %s", task.get_name(), exc)
        self.failures.append(task.get_name())
        self.failed.set()

    async def cancel(self, tasks: Collection[asyncio.Task[None]]) -> None:
        """Cancel ``tasks`` now and wait for them; the others go on."""
        self._jobs = [job for job in self._jobs if job[0] not in tasks]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def aclose(self) -> None:
        """Stop every task, the last started first, each finished before the next stops.

        A failure was logged when it happened; it is not raised again here. Cancelling the
        caller cancels the task it waits for (as ``await task`` would).
        """
        while self._jobs:
            task, stop = self._jobs.pop()
            if stop is None:
                task.cancel()
            else:
                stop()
            await asyncio.gather(task, return_exceptions=True)


def start_work(
    background: Background,
    parts: Parts,
    memory: Memory,
    queue: tuple[Scheduler[ConversationKey], Agenda | None],
    *,
    sweeps: bool,
    retention: bool,
    cutoffs: Cutoffs | None = None,
) -> None:
    """Start the runtime's work. Stopped in reverse at exit: the agenda, then the scheduler
    (running turns get the shutdown grace period), then the loops, which are cancelled.
    ``cutoffs``: the running generations another process's input may cut."""
    settings, clock = parts.settings, parts.clock
    scheduler, agenda = queue
    bots = list(parts.hosted.profiles)
    if sweeps:
        interval = settings.memory.sweep_interval_seconds
        background.start("memory sweeper", sweep_memory(memory, clock, bots, interval))
    if retention:
        worker = build_retention(settings, parts.store, memory, clock, parts.metrics)
        every = settings.retention.interval_minutes * 60
        background.start("retention", retain(worker, clock, every))
    background.start("wake-ups", relay_wake_ups(parts, scheduler, cutoffs))
    background.start("scheduler", scheduler.run(), stop=scheduler.stop)
    if agenda is not None:
        runner = agenda.scheduler
        background.start("check-ins and reminders", runner.run(), stop=runner.stop)


async def relay_wake_ups(
    parts: Parts, scheduler: Scheduler[ConversationKey], cutoffs: Cutoffs | None
) -> None:
    """Timers armed by any process (PostgreSQL's announcements) set the scheduler's alarm,
    and have this process's generations of their conversation check for newer input."""
    hosted = frozenset(parts.hosted.profiles)

    def announced(bot: str | None, due_at: float | None) -> None:
        if bot is None or bot in hosted:
            scheduler.wake(due_at)

    await parts.store.listen_timers(announced, None if cutoffs is None else cutoffs.announced)


async def retain(worker: Retention, clock: Clock, interval: float) -> None:
    """Run retention on its schedule, forever (cancelled at shutdown)."""
    while True:
        try:
            await worker.run_once()
        except Exception:
            log.exception("retention run failed")
        await clock.sleep(interval)


async def sweep_memory(memory: Memory, clock: Clock, bots: list[str], interval: float) -> None:
    """Learn user memory from quiet and closed sessions, forever (cancelled at shutdown)."""
    while True:
        try:
            await memory.extract_due(bots)
        except Exception:
            log.exception("memory sweep failed")
        await clock.sleep(interval)
