"""``bot.core.tasks.running``: work that lives exactly as long as a block (lease renewal,
typing indicators)."""

from __future__ import annotations

import asyncio

from bot.core.tasks import running


async def test_a_caller_stopped_while_the_work_winds_down_still_stops() -> None:
    """The caller (an adapter's consumer running a command under a renewed claim) is
    cancelled at the moment the block ends and waits for its work to wind down: the
    caller's cancellation is not swallowed with the work's, so the caller stops (a consumer
    that swallowed it went on reading events and its bot never shut down)."""
    started = asyncio.Event()
    winding = asyncio.Event()
    release = asyncio.Event()
    after_block: list[str] = []

    async def work() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            winding.set()
            await release.wait()  # takes a moment to wind down
            raise

    async def caller() -> None:
        async with running(work(), name="work"):
            await started.wait()
        after_block.append("went on")
        await asyncio.Event().wait()  # a consumer waiting for its next event

    task = asyncio.create_task(caller())
    await winding.wait()  # the block ended; the caller waits for the work
    task.cancel()  # the caller is stopped now
    release.set()
    done, _ = await asyncio.wait({task}, timeout=5)
    assert done and task.cancelled()
    assert after_block == []


async def test_the_work_s_own_cancellation_ends_with_the_block() -> None:
    """Without a cancellation of the caller, the block ends normally and the caller goes on."""
    started = asyncio.Event()

    async def work() -> None:
        started.set()
        await asyncio.Event().wait()

    async with running(work(), name="work"):
        await started.wait()
    assert True  # reached: the work's CancelledError did not escape the block
