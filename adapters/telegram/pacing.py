"""Telegram's flood limits as a :class:`~bot.core.pacing.Pacer` policy, keyed by chat id.

Groups and channels (negative ids): at most one message per :data:`GROUP_INTERVAL` seconds
and :data:`GROUP_PER_MINUTE` messages and edits per :data:`GROUP_WINDOW` seconds. Private
chats (positive ids) are not paced: one person talks to the bot there, and a reply is the
answer they are waiting for, so delaying it only makes them wait; a 429's ``retry_after``
still pauses a private chat like any other.

One pacer may serve several bot accounts (one per persona of a scene): all of them post
into the same group, and Telegram's limits are per group, so they share its lanes.
"""

from __future__ import annotations

import asyncio
import time
from typing import Final

from bot.core.clock import Clock
from bot.core.pacing import PaceLimits, Pacer

GROUP_INTERVAL: Final = 1.0
GROUP_PER_MINUTE: Final = 20
GROUP_WINDOW: Final = 60.0


class MonotonicClock:
    """The event loop's kind of time: a wall-clock step (NTP, DST) never stretches a wait."""

    def now(self) -> float:
        """Monotonic seconds."""
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        """Sleep on the event loop."""
        await asyncio.sleep(max(0.0, seconds))


class TelegramPacer(Pacer[int]):
    """The pacer of Telegram chats: groups paced, private chats only paused after a 429."""

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        interval: float = GROUP_INTERVAL,
        per_minute: int = GROUP_PER_MINUTE,
    ) -> None:
        group = PaceLimits(interval=interval, per_window=per_minute, window=GROUP_WINDOW)
        super().__init__(
            clock=clock or MonotonicClock(),
            limits=lambda chat_id: group if chat_id < 0 else None,
        )
        self.group_limits: Final = group
