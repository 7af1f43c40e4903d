"""Outbound pacing: one lane per chat, shared by everything that posts into that chat.

A platform limits how fast a bot may post into one chat (Telegram: about one message a second,
twenty a minute in a group) and answers a flood with a pause it expects to be honoured
(``retry_after``). :class:`Pacer` keeps one lane per key (a chat) for every sender that posts
there (several turns, several bot accounts of one scene): each send asks for a turn first.

Invariants:
- turns of one lane are granted in the order they were asked for (``asyncio.Lock`` is FIFO and
  never lets a newcomer barge past a woken waiter), and a turn is held until its send and
  retries are done, so sends of one chat reach the platform in that order;
- a granted turn respects the lane's pause, its ``interval`` since the last message (edits
  are not messages: they wait for the window only) and ``per_window`` sends per ``window``
  seconds; it is counted when granted, before the send, so a lane never over-commits;
- a pause only ever grows (``pause`` keeps the later end), so a waiter that wakes re-checks
  and never sends inside a pause set while it slept;
- every wait goes through the injected :class:`~bot.core.clock.Clock`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Callable, Hashable
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

from bot.core.clock import Clock

K = TypeVar("K", bound=Hashable)

#: Waits shorter than this count as none: a float sum that lands a hair short of a deadline
#: must not make a waiter sleep again for an instant a manual clock never reaches.
_EPSILON: Final = 1e-6
_MAX_LANES: Final = 1024


@dataclass(frozen=True, slots=True)
class PaceLimits:
    """How fast one chat may be posted into."""

    interval: float = 1.0  # seconds between two messages (edits excluded)
    per_window: int = 20  # messages and edits ...
    window: float = 60.0  # ... per this many seconds


class _Lane:
    """One chat's state. ``users`` counts turns asked for and not yet finished (waiting or
    sending): a lane with users is never forgotten, so two lanes never exist for one key."""

    __slots__ = ("last_message", "limits", "lock", "paused_until", "sent", "users")

    def __init__(self, limits: PaceLimits | None) -> None:
        self.limits = limits
        self.lock = asyncio.Lock()
        self.users = 0
        self.paused_until = float("-inf")
        self.last_message = float("-inf")
        self.sent: deque[float] = deque(maxlen=limits.per_window if limits else 0)

    def delay(self, now: float, *, spaced: bool, reserve: int = 0) -> float:
        """Seconds until a send may go (0.0: now). ``reserve`` window slots are left unused."""
        delay = self.paused_until - now
        limits = self.limits
        if limits is None:
            return max(delay, 0.0)
        if spaced:
            delay = max(delay, self.last_message + limits.interval - now)
        while self.sent and self.sent[0] <= now - limits.window + _EPSILON:
            self.sent.popleft()
        allowed = limits.per_window - reserve
        if len(self.sent) >= allowed:
            # The send may go once all but ``allowed - 1`` of the window's sends expired.
            delay = max(delay, self.sent[len(self.sent) - allowed] + limits.window - now)
        return max(delay, 0.0)

    async def wait(self, clock: Clock, *, spaced: bool) -> None:
        """Sleep until the limits let a send go, then count it. The caller holds ``lock``, so
        what it waited for cannot be used up by another turn; a pause set meanwhile is seen
        on waking (hence the loop)."""
        while (delay := self.delay(clock.now(), spaced=spaced)) > _EPSILON:
            await clock.sleep(delay)
        self.count(clock.now(), spaced=spaced)

    def count(self, now: float, *, spaced: bool) -> None:
        if self.limits is not None:
            self.sent.append(now)
            if spaced:
                self.last_message = now

    def idle(self, now: float) -> bool:
        """Nothing it remembers could delay a send any more."""
        window = self.limits.window if self.limits else 0.0
        latest = max(self.sent[-1] if self.sent else float("-inf"), self.last_message)
        return self.users == 0 and self.paused_until <= now and latest <= now - window


@dataclass(frozen=True, slots=True)
class Turn:
    """A granted turn in a lane (held until the ``async with`` ends)."""

    _lane: _Lane
    _clock: Clock
    _spaced: bool

    async def again(self) -> None:
        """Wait until the lane lets this send go once more (after a flood pause), keeping the
        turn: no later sender of the chat goes first. Counts the retried send."""
        await self._lane.wait(self._clock, spaced=self._spaced)


class Pacer(Generic[K]):
    """FIFO, rate-limited turns per key; one instance may be shared by several senders.

    ``limits(key)`` is the key's pacing (None: not paced, only paused after a flood).
    """

    def __init__(self, *, clock: Clock, limits: Callable[[K], PaceLimits | None]) -> None:
        self._clock = clock
        self._limits = limits
        self._lanes: dict[K, _Lane] = {}

    @contextlib.asynccontextmanager
    async def turn(self, key: K, *, spaced: bool = True) -> AsyncIterator[Turn]:
        """Wait for this key's turn (behind those who asked first) and for its limits; hold it
        for the body (the send and its retries). ``spaced=False``: an edit, no ``interval``."""
        lane = self._lane(key)
        lane.users += 1
        try:
            async with lane.lock:
                await lane.wait(self._clock, spaced=spaced)
                yield Turn(lane, self._clock, spaced)
        finally:
            lane.users -= 1

    def try_take(self, key: K, *, spaced: bool, reserve: int = 0) -> float:
        """Take a send's slot now without waiting (0.0), or the seconds until one may free
        (nothing taken). For sends that are skipped rather than delayed (previews): a busy
        paced lane refuses, since who asked first goes first; ``reserve`` window slots are
        left to the sends that wait."""
        lane = self._lane(key)
        now = self._clock.now()
        delay = lane.delay(now, spaced=spaced, reserve=reserve)
        if lane.limits is not None and lane.users:
            delay = max(delay, lane.limits.interval)
        if delay > _EPSILON:
            return delay
        # No await between the check and the count: nobody can take this slot in between.
        lane.count(now, spaced=spaced)
        return 0.0

    def pause(self, key: K, seconds: float) -> None:
        """Nobody sends to ``key`` for ``seconds`` from now (a flood's ``retry_after``); a
        pause already running longer is kept."""
        lane = self._lane(key)
        lane.paused_until = max(lane.paused_until, self._clock.now() + seconds)

    def paused_for(self, key: K) -> float:
        """Seconds left of the key's pause (0.0: none)."""
        lane = self._lanes.get(key)
        return 0.0 if lane is None else max(lane.paused_until - self._clock.now(), 0.0)

    def _lane(self, key: K) -> _Lane:
        lane = self._lanes.get(key)
        if lane is None:
            if len(self._lanes) >= _MAX_LANES:
                now = self._clock.now()
                for idle in [k for k, old in self._lanes.items() if old.idle(now)]:
                    del self._lanes[idle]  # bounded memory: lanes that remember nothing useful
            lane = self._lanes[key] = _Lane(self._limits(key))
        return lane
