"""The event loop's own latency: how long something held it (docs/deploy.md#monitoring).

One event loop carries every bot, the queue, the memory tasks and the operator console of a
process, so a callback that runs for a second (a console page of a big conversation, a
plugin doing blocking work, a huge prompt assembled in one go) delays every chat by a
second. The watch asks the loop to wake it every ``interval`` and records how much later
it woke; a stall over ``warn_after`` is logged with its length, so it is seen, not guessed.

This measures the real loop, so it reads the loop's own monotonic clock, never the
injected turn clock (which a test may hold still).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Final

from bot.metrics import Metrics

log = logging.getLogger("personabot.loop")

#: How often the watch wakes (the smallest stall it can see).
INTERVAL: Final = 0.02
#: A stall at least this long is logged as a warning.
WARN_AFTER: Final = 0.5


async def watch_event_loop(
    metrics: Metrics,
    *,
    interval: float = INTERVAL,
    warn_after: float = WARN_AFTER,
    rounds: int | None = None,
) -> None:
    """Observe every wake-up's lateness into ``personabot_event_loop_stall_seconds`` until
    cancelled (or after ``rounds`` wake-ups); warn about each stall of at least
    ``warn_after`` seconds."""
    loop = asyncio.get_running_loop()
    count = itertools.count() if rounds is None else range(rounds)
    for _ in count:
        asked = loop.time() + interval
        await asyncio.sleep(interval)
        late = max(0.0, loop.time() - asked)
        metrics.event_loop_stall.observe(late)
        if late >= warn_after:
            log.warning(
                "the event loop was held for %.2f s: every chat of this process waited that "
                "long (personabot_event_loop_stall_seconds)",
                late,
            )
