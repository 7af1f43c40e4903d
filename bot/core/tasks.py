"""Background work tied to a block: started on entry, always cancelled and awaited on exit."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from typing import Any


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
