"""Background work tied to a block (started on entry, cancelled and awaited on exit), and work
bounded by a clock."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Coroutine
from typing import Any, TypeVar

from bot.core.clock import Clock
from bot.core.errors import SelfCancelled

T = TypeVar("T")


@contextlib.asynccontextmanager
async def running(work: Coroutine[Any, Any, None], *, name: str) -> AsyncIterator[None]:
    """Run ``work`` for the body of the ``async with`` (typing indicators, lease renewal);
    on every exit path it is cancelled and awaited, so nothing outlives the block."""
    task = asyncio.create_task(work, name=name)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


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
