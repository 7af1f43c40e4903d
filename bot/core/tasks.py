"""Background work tied to a block (started on entry, cancelled and awaited on exit), work that
outlives its caller until it is done or closed, work bounded by a clock, and a store write
retried until it succeeds or a deadline."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from bot.core.clock import Clock
from bot.core.errors import SelfCancelled, StoreError

T = TypeVar("T")

log = logging.getLogger("personabot.tasks")

#: The first retry of a failed store write waits this long; each next one twice as long.
RETRY_FIRST_SECONDS = 0.05
#: The longest wait between two retries.
RETRY_CAP_SECONDS = 1.0


@contextlib.asynccontextmanager
async def running(work: Coroutine[Any, Any, None], *, name: str) -> AsyncIterator[None]:
    """Run ``work`` for the body of the ``async with`` (typing indicators, lease renewal);
    on every exit path it is cancelled and awaited, so nothing outlives the block."""
    task = asyncio.create_task(work, name=name)
    try:
        yield
    finally:
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            # The work's own cancellation ends here; the caller's, should it come while
            # this waits for the work, goes on: swallowed, the caller (an adapter's consumer
            # being stopped) would go on running and never stop.
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise


class Background:
    """Work that outlives the call that started it (a write retried after a turn ended), kept
    until it is done; ``aclose`` (the process stops) cancels and awaits what is left."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    def start(self, work: Coroutine[Any, Any, None], *, name: str) -> None:
        """Run ``work`` in the background (closed: not at all). Its failure is logged."""
        if self._closed:
            work.close()
            return
        task = asyncio.create_task(work, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s failed", task.get_name(), exc_info=task.exception())

    @property
    def pending(self) -> int:
        """Work still running."""
        return len(self._tasks)

    async def settle(self) -> None:
        """Wait until all work (started so far or meanwhile) is done (for drains and tests)."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def aclose(self) -> None:
        """Start nothing more; cancel and await what is running."""
        self._closed = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def persist(
    clock: Clock, write: Callable[[], Awaitable[T]], *, until: float, what: str
) -> tuple[T] | None:
    """``write``'s result (in a 1-tuple), retried while it raises StoreError (the store busy or
    unreachable for a moment) after waits of 0.05 s doubling up to 1 s on ``clock``; None once
    ``until`` passed on ``clock`` without success (logged). Only for writes that are safe to
    repeat: one that failed after its commit (a connection lost on the reply) runs again.
    """
    delay = RETRY_FIRST_SECONDS
    while True:
        try:
            return (await write(),)
        except StoreError as exc:
            left = until - clock.now()
            if left <= 0:
                log.warning("%s: gave up retrying (%s)", what, exc)
                return None
            log.info("%s failed (%s); retrying in %.2fs", what, exc, min(delay, left))
            await clock.sleep(min(delay, left))
            delay = min(RETRY_CAP_SECONDS, delay * 2)


async def within(clock: Clock, seconds: float, work: Awaitable[T]) -> T:
    """The result of ``work``, or TimeoutError once ``seconds`` passed on ``clock``
    (SelfCancelled when ``work`` raised CancelledError while the caller was not cancelled).

    On a timeout (or when the caller is cancelled) ``work`` is cancelled and not awaited: a
    coroutine that ignores cancellation must not hold up the caller. Its late outcome is
    retrieved, so nothing is reported as never retrieved.
    """
    task = asyncio.ensure_future(work)
    timer = asyncio.ensure_future(clock.sleep(seconds))
    try:
        await asyncio.wait({task, timer}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        timer.cancel()
        if not task.done():
            task.cancel()
            task.add_done_callback(_retrieve)
    if not task.done():
        raise TimeoutError(f"not done within {seconds:g} s")
    if task.cancelled():
        # The work cancelled itself (raised CancelledError, e.g. awaiting a cancelled task):
        # the caller was not cancelled, so for it this is a failure, not a cancellation.
        raise SelfCancelled("the work raised CancelledError without being cancelled")
    return task.result()


def cancelling() -> bool:
    """Whether the running task is being cancelled (a CancelledError is then really ours)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()
