"""The scheduler of the coalescing queue: runs due turns.

The scheduler finds due timers through wake-ups that carry their due time (this process's
ingest; on PostgreSQL, other processes' timers announced by the store) and a periodic scan of
the store (the safety net: timers armed before a restart, a lost notification), and runs at
most ``max_concurrent`` turns at a time.

Conversation turns are *claimed* (docs/scaling.md#claims): the store hands each due timer to
one process with its turn lease already taken, at most as many as this process has free
slots. Other due work (check-ins and reminders) is *raced*: every scheduler that sees it due
tries the lease, and the losers back off.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Generic, Protocol, TypeVar

from bot.core.clock import Clock
from bot.core.errors import StoreError
from bot.core.events import ClaimedTurn, Claims, ConversationKey
from bot.metrics import Metrics
from bot.store.contracts import QueueStore

log = logging.getLogger("personabot.queue")

K = TypeVar("K", bound=Hashable)
RunTurn = Callable[[K], Awaitable[str]]
#: Due work up to a time, earliest first, at most ``limit``: (key, due time) pairs.
DueSource = Callable[[float, int], Awaitable[Sequence[tuple[K, float]]]]


class TurnClaims(Protocol):
    """Claim mode: due turns handed over with their leases (the pipeline provides it)."""

    async def claim(self, now: float, limit: int, skip: Sequence[ConversationKey]) -> Claims:
        """Up to ``limit`` due turns, each with its lease taken, none of ``skip``."""

    async def next_claim_at(self, now: float, skip: Sequence[ConversationKey]) -> float | None:
        """When a claim could next take something (None: nothing claimable now)."""

    async def run_claimed(self, turn: ClaimedTurn) -> str:
        """Run a claimed turn under its lease (and release it)."""


class Scheduler(Generic[K]):
    """Runs due turns of the hosted bots, never two at once for one conversation here.

    The work comes from the queue's timers; with ``due`` from another source of due work
    keyed by ``K`` (check-ins and reminders: bot/runtime/initiatives.py), with the same
    wake-ups, scan, concurrency bound and backoff.
    """

    def __init__(
        self,
        *,
        store: QueueStore,
        clock: Clock,
        run_turn: RunTurn[K],
        bots: Sequence[str],
        due: DueSource[K] | None = None,
        scan_interval: float = 1.0,
        max_concurrent: int = 16,
        busy_backoff: float | None = None,
        shutdown_grace: float = 10.0,
        metrics: Metrics | None = None,
        claims: TurnClaims | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._run_turn = run_turn
        self._bots = tuple(bots)
        self._scan_interval = scan_interval
        self._busy_backoff = scan_interval if busy_backoff is None else busy_backoff
        self._grace = shutdown_grace
        self._metrics = metrics
        self._max_concurrent = max_concurrent
        self._slots = asyncio.Semaphore(max_concurrent)
        self._claims = claims
        self._wakeup = asyncio.Event()
        # The earliest due time announced since the last look at the store, and whether a
        # wake-up asked for a look now (a turn ended, a timer of unknown due time).
        self._hint = math.inf
        self._look_now = False
        self._due: DueSource[K] = due or self._due_timers  # type: ignore[assignment]
        self._running: dict[K, asyncio.Task[None]] = {}
        self._skip_until: dict[K, float] = {}
        self._stopping = False
        self.turns_started = 0
        #: Due timers a claim saw taken by another process in between (claim mode).
        self.lost_claims = 0
        # Claim mode: whether the last claim took fewer turns than it had slots for, and how
        # many looks in a row found a timer due that the claim could not take.
        self._claim_short = False
        self._contended = 0

    async def _due_timers(self, now: float, limit: int) -> list[tuple[ConversationKey, float]]:
        timers = await self._store.due_timers(now, limit=limit, bots=self._bots)
        return [(t.conversation, t.due_at) for t in timers]

    def wake(self, due_at: float | None = None) -> None:
        """Tell the scheduler a timer was armed or moved (here or, on PostgreSQL, by another
        process). A due time still ahead only moves the scheduler's alarm earlier: no store
        query until it falls due; without one, the scheduler looks at the store now."""
        if due_at is None:
            self._look_now = True
        else:
            self._hint = min(self._hint, due_at)
        self._wakeup.set()

    @property
    def active(self) -> int:
        """Turns running now."""
        return len(self._running)

    def stop(self) -> None:
        """Stop taking new work (running turns go on)."""
        self._stopping = True
        self._wakeup.set()

    def abort(self) -> None:
        """Stop now: cancel running turns (each releases its lease in the pipeline's
        ``finally``; their messages stay pending with the timer armed)."""
        self.stop()
        for task in list(self._running.values()):
            task.cancel()

    async def run(self) -> None:
        """Loop until stopped: start due turns, then sleep until the next due time or wake-up.

        A store that fails (a dropped connection, a database restarting) never ends the loop:
        the failure is logged and the loop tries again after a backoff, up to the scan
        interval; everything it missed is still in the store.
        """
        failures = 0
        while not self._stopping:
            try:
                await self.tick()
                await self._sleep_until_next()
                failures = 0
            except Exception as exc:
                failures += 1
                delay = min(self._scan_interval, 0.05 * 2**failures)
                if failures == 1 or failures % 100 == 0:
                    if isinstance(exc, StoreError):
                        log.warning("scheduler: the store failed (%s); retrying", exc)
                    else:
                        log.exception("scheduler: unexpected failure; retrying")
                self._wakeup.clear()  # a wake-up left set would make this wait a spin
                await self._wait(delay)
        await self.drain(self._grace)

    async def drain(self, grace: float | None = None) -> None:
        """Wait for running turns; cancel those still running after ``grace`` seconds.

        A cancelled turn releases its lease (the pipeline's ``finally``) and its messages stay
        pending with their timer armed, so the next start picks them up.
        """
        tasks = list(self._running.values())
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=grace)
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _backing_off(self, now: float) -> list[K]:
        return [key for key, until in self._skip_until.items() if until > now]

    async def tick(self) -> int:
        """Start every due turn that is not running or backing off; return how many."""
        now = self._clock.now()
        if self._claims is not None:
            return await self._claim(now)
        started = 0
        for key, due_at in await self._due(now, 200):
            if self._stopping:
                break  # stopped (or aborted) while the timers were read: start nothing new
            if key in self._running or self._skip_until.get(key, 0.0) > now:
                continue
            self._skip_until.pop(key, None)
            self._running[key] = asyncio.create_task(self._turn(key, due_at), name=f"turn {key}")
            started += 1
        return started

    async def _claim(self, now: float) -> int:
        """Claim as many due turns as there are free slots (none without one) and start them."""
        assert self._claims is not None
        free = self._max_concurrent - len(self._running)
        if free < 1 or self._stopping:
            return 0
        skip = [*self._running, *self._backing_off(now)]
        claims = await self._claims.claim(now, free, skip)  # type: ignore[arg-type]
        self._claim_short = len(claims.turns) < free
        self.lost_claims += claims.lost
        for turn in claims.turns:
            key: K = turn.conversation  # type: ignore[assignment]
            self._skip_until.pop(key, None)
            self._running[key] = asyncio.create_task(
                self._turn(key, turn.due_at, turn), name=f"turn {key}"
            )
        return len(claims.turns)

    async def _turn(self, key: K, due_at: float, claimed: ClaimedTurn | None = None) -> None:
        try:
            async with self._slots:
                self.turns_started += 1
                if self._metrics is not None and isinstance(key, ConversationKey):
                    lag = max(0.0, self._clock.now() - due_at)
                    self._metrics.scheduler_lag.labels(*self._metrics.labels(key)).observe(lag)
                if claimed is not None:
                    assert self._claims is not None
                    outcome = await self._claims.run_claimed(claimed)
                else:
                    outcome = await self._run_turn(key)
            if outcome == "busy":
                self._skip_until[key] = self._clock.now() + self._busy_backoff
        except Exception:
            log.exception("turn of %s failed", key)
            self._skip_until[key] = self._clock.now() + self._busy_backoff
        finally:
            self._running.pop(key, None)
            self.wake()  # a slot is free, and this conversation may have more

    async def _next_start(self, now: float) -> float | None:
        """The earliest time this scheduler could start something, from the store."""
        if self._claims is not None:
            if len(self._running) >= self._max_concurrent:
                return None  # no free slot: a turn that ends wakes the loop
            skip = [*self._running, *self._backing_off(now)]
            start: float | None = await self._claims.next_claim_at(now, skip)  # type: ignore[arg-type]
            if start is not None and start <= now and self._claim_short:
                # Due, yet the claim just now could not take it: its lease row is locked (a
                # final check committing, an operator's session, a process stalled inside a
                # transaction). Look again after a backoff that doubles up to the scan
                # interval, never at once (a spin of queries for as long as the lock lasts).
                self._contended += 1
                return now + min(self._scan_interval, 0.01 * 2.0**self._contended)
            self._contended = 0
            return start
        # The earliest timer that this scheduler could start: a timer whose turn is running
        # here, or backing off after a lost CAS, must not hide a newer one that falls due
        # sooner (head-of-line delay).
        upcoming = await self._due(
            now + self._scan_interval, len(self._running) + len(self._skip_until) + 1
        )
        startable = [
            due_at
            for key, due_at in upcoming
            if key not in self._running and self._skip_until.get(key, 0.0) <= now
        ]
        return min(startable, default=None)

    async def _sleep_until_next(self) -> None:
        # Clear before reading the store, never after: a timer armed while the query below
        # runs (another connection, so the query may not see it) sets the event again, and
        # the wait returns at once or moves its alarm instead of sleeping past it (a lost
        # wake-up). What was announced before the clear is in the store the query reads.
        self._wakeup.clear()
        self._hint, self._look_now = math.inf, False
        if self._stopping:
            return  # stopped while the last tick ran: its wake-up was just cleared
        now = self._clock.now()
        deadline = now + self._scan_interval
        start = await self._next_start(now)
        if start is not None:
            deadline = min(deadline, max(now, start))
        backoffs = [t for t in self._skip_until.values() if t > now]
        if backoffs:
            deadline = min([deadline, *backoffs])
        while True:
            if not await self._wait(deadline - self._clock.now()):
                return  # the alarm rang
            self._wakeup.clear()
            hint, self._hint = self._hint, math.inf
            if self._stopping or self._look_now:
                return
            if hint <= self._clock.now():
                return
            # An announced timer still ahead: ring then, without a store query now.
            deadline = min(deadline, hint)

    async def _wait(self, delay: float) -> bool:
        """Wait for a wake-up (True) or ``delay`` seconds (False)."""
        if self._wakeup.is_set():
            return True
        waker = asyncio.create_task(self._wakeup.wait())
        sleeper = asyncio.create_task(self._clock.sleep(max(0.0, delay)))
        try:
            done, _ = await asyncio.wait({waker, sleeper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (waker, sleeper):
                task.cancel()
            await asyncio.gather(waker, sleeper, return_exceptions=True)
        return waker in done
