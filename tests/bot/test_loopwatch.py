"""bot/runtime/loopwatch.py: a callback that holds the event loop is seen (the histogram)
and told (a warning with its length); wake-ups of a free loop are not."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from bot.metrics import Metrics
from bot.runtime.loopwatch import watch_event_loop


def _late(metrics: Metrics) -> tuple[float, float]:
    """(wake-ups, those later than 100 ms)."""
    lines = metrics.exposition().decode().splitlines()

    def value(prefix: str) -> float:
        return next(float(line.split()[-1]) for line in lines if line.startswith(prefix))

    count = value("personabot_event_loop_stall_seconds_count")
    return count, count - value('personabot_event_loop_stall_seconds_bucket{le="0.1"}')


async def test_a_held_event_loop_is_measured_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    metrics = Metrics()
    caplog.set_level(logging.WARNING, "personabot.loop")
    await watch_event_loop(metrics, interval=0.005, warn_after=0.2, rounds=3)
    assert _late(metrics) == (3, 0) and not caplog.records  # a free loop
    watch = asyncio.create_task(watch_event_loop(metrics, interval=0.005, warn_after=0.2, rounds=1))
    await asyncio.sleep(0)  # the watch asks to be woken in 5 ms ...
    time.sleep(0.3)  # noqa: ASYNC251 - ... and this holds the loop, as a blocking call would
    await watch
    assert _late(metrics) == (4, 1)
    (record,) = caplog.records
    held = float(record.getMessage().split("held for ")[1].split(" s")[0])
    assert 0.25 <= held < 5
