"""The generic pacer on a manual clock: FIFO turns, pauses that only grow, a cancelled waiter
that gives its place up, and what sends that never wait (previews) may take."""

from __future__ import annotations

import asyncio

import pytest

from bot.core.pacing import PaceLimits, Pacer
from tests.fakes.clock import SignallingClock, drive

pytestmark = pytest.mark.timeout(10)

LIMITS = PaceLimits(interval=1.0, per_window=3, window=10.0)


def paced(clock: SignallingClock) -> Pacer[str]:
    return Pacer(clock=clock, limits=lambda chat: None if chat.startswith("dm") else LIMITS)


async def test_turns_go_in_asked_order_within_the_interval_and_the_window() -> None:
    clock = SignallingClock()
    pacer = paced(clock)
    start = clock.now()
    granted: list[tuple[int, float]] = []

    async def send(number: int) -> None:
        async with pacer.turn("group"):
            granted.append((number, clock.now() - start))

    await drive(clock, asyncio.gather(*(send(n) for n in range(5))))
    assert granted == [(0, 0), (1, 1), (2, 2), (3, 10), (4, 11)]


async def test_a_pause_only_grows_and_a_retry_keeps_its_turn() -> None:
    clock = SignallingClock()
    pacer = paced(clock)
    start = clock.now()
    order: list[tuple[str, float]] = []

    async def flooded() -> None:
        async with pacer.turn("group") as turn:
            pacer.pause("group", 5)
            pacer.pause("group", 2)  # a shorter pause never shortens the running one
            await turn.again()
            order.append(("retry", clock.now() - start))

    async def later() -> None:
        async with pacer.turn("group"):
            order.append(("later", clock.now() - start))

    await drive(clock, asyncio.gather(flooded(), later()))
    assert order == [("retry", 5), ("later", 6)]
    assert pacer.paused_for("group") == 0


async def test_a_cancelled_waiter_gives_its_place_up() -> None:
    clock = SignallingClock()
    pacer = paced(clock)
    async with pacer.turn("group"):
        pass
    waiting = asyncio.create_task(_hold(pacer))
    await clock.next_sleeper()
    behind = asyncio.create_task(_hold(pacer))
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    await drive(clock, behind)  # the lane was released: the next in line gets it


async def _hold(pacer: Pacer[str]) -> None:
    async with pacer.turn("group"):
        pass


async def test_unpaced_keys_never_wait_except_for_a_pause() -> None:
    clock = SignallingClock()
    pacer = paced(clock)
    for _ in range(10):
        async with pacer.turn("dm-ann"):
            pass
        assert pacer.try_take("dm-ann", spaced=True) == 0.0
    pacer.pause("dm-ann", 3)
    assert pacer.try_take("dm-ann", spaced=True) == pytest.approx(3)
    assert clock.next_deadline() is None


async def test_try_take_leaves_the_reserve_to_turns() -> None:
    clock = SignallingClock()
    pacer = paced(clock)
    assert pacer.try_take("group", spaced=False, reserve=1) == 0.0
    assert pacer.try_take("group", spaced=False, reserve=1) == 0.0
    assert pacer.try_take("group", spaced=False, reserve=1) == pytest.approx(10)  # reserved
    await asyncio.wait_for(_hold(pacer), 5)  # a turn gets the reserved slot at once
    assert pacer.try_take("group", spaced=False) == pytest.approx(10)


async def test_try_take_refuses_while_a_turn_is_held() -> None:
    clock = SignallingClock()
    pacer = paced(clock)
    entered, release = asyncio.Event(), asyncio.Event()

    async def sending() -> None:
        async with pacer.turn("group", spaced=False):
            entered.set()
            await release.wait()

    task = asyncio.create_task(sending())
    await entered.wait()
    assert pacer.try_take("group", spaced=False) == pytest.approx(1)  # who asked first goes
    release.set()
    await task
    assert pacer.try_take("group", spaced=False) == 0.0
