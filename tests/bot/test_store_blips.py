"""End-of-turn writes the store refuses for a moment (SQLite's write lock held by another
program past the busy timeout, a dropped PostgreSQL connection): the lease release, its
renewals and the outbox marks are retried, on the manual clock (tests/review23 has the same on
a real locked SQLite file)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from bot.core.clock import ManualClock
from bot.core.errors import StoreError
from bot.core.events import ConversationKey
from bot.core.queue_rules import turn_lease
from bot.core.tasks import Background
from bot.queue import lease as leases
from bot.store.base import BaseStore
from tests.fakes.llm import GatedLLM
from tests.harness import BOT, harness, settle

C1 = ConversationKey("telegram", "100", BOT)


class Blip:
    """Makes one store method raise StoreError while ``down``, or for its next ``times`` calls."""

    def __init__(self, store: BaseStore, method: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.down = False
        self.times = 0
        self.failed = 0
        real: Callable[..., Awaitable[Any]] = getattr(store, method)

        async def flaky(*args: Any, **kwargs: Any) -> Any:
            if self.down or self.times > 0:
                self.times = max(0, self.times - 1)
                self.failed += 1
                raise StoreError("SQLite failed: database is locked")
            return await real(*args, **kwargs)

        monkeypatch.setattr(store, method, flaky)


async def step(clock: ManualClock, store: BaseStore, seconds: float) -> None:
    """Let work reach its next wait on the clock (store calls run in a thread), then move it."""
    await settle(store)
    await clock.advance(seconds)
    await settle(store)


async def test_a_refused_release_is_retried_and_the_next_turn_is_not_held_back(
    store: BaseStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    blip = Blip(store, "release_lease", monkeypatch)
    blip.times = 2  # the release at the end of the turn, and its first retry
    async with harness(store, clock, GatedLLM()) as h:
        await h.say(C1, "first")
        await h.advance(1.5)  # the debounce: the turn runs now, its release is refused
        assert h.outlet.texts() == ["reply to: first"]
        assert blip.failed == 1 and h.pipeline.releases.pending == 1  # the turn itself ended
        await h.advance(0.3)  # retries after 0.05 s (refused) and 0.1 s more
        assert blip.failed == 2 and h.pipeline.releases.pending == 0
        assert await store.lease_expires_at(turn_lease(C1)) == 0  # released
        await h.say(C1, "second")
        await h.advance(1.6)  # answered after the debounce, not after the lease's 30 s
        assert h.outlet.texts() == ["reply to: first", "reply to: second"]


async def test_a_late_release_retry_never_frees_a_lease_taken_over_meanwhile(
    store: BaseStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    blip = Blip(store, "release_lease", monkeypatch)
    blip.down = True
    later = Background()
    mine = await store.acquire_lease("x", "a", 5, clock.now())
    assert mine is not None
    # Released with ttl 10: the retries go on past this lease's own expiry (5 s), as they
    # would for a lease renewed since it was read.
    await leases.release(store, mine, ttl=10, clock=clock, later=later)
    assert later.pending == 1
    await step(clock, store, 6)  # expired; another worker takes it over
    theirs = await store.acquire_lease("x", "b", 30, clock.now())
    assert theirs is not None and theirs.token > mine.token
    blip.down = False
    await step(clock, store, 1.1)  # the next retry runs, fenced by holder and token
    await later.settle()
    assert await store.lease_expires_at("x") == theirs.expires_at  # still theirs
    assert await store.acquire_lease("x", "c", 30, clock.now()) is None


async def test_a_release_retry_stops_once_the_lease_would_have_expired(
    store: BaseStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    blip = Blip(store, "release_lease", monkeypatch)
    blip.down = True
    later = Background()
    mine = await store.acquire_lease("x", "a", 5, clock.now())
    assert mine is not None
    await leases.release(store, mine, ttl=5, clock=clock, later=later)
    for _ in range(60):
        await step(clock, store, 0.1)
    assert later.pending == 0  # gave up at the expiry: the lease is free by then anyway
    tries = blip.failed
    assert 5 < tries < 20  # backoff 0.05 s doubling up to 1 s, not a spin
    await later.aclose()


async def test_a_refused_renewal_is_retried_and_the_lease_kept(
    store: BaseStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    blip = Blip(store, "renew_lease", monkeypatch)
    blip.times = 2
    mine = await store.acquire_lease("x", "a", 3, clock.now())
    assert mine is not None
    async with leases.renewing(store, mine, ttl=3, clock=clock) as lost:
        await step(clock, store, 1.0)  # the first renewal is refused
        await step(clock, store, 0.05)  # and its first retry
        await step(clock, store, 0.1)  # the second retry renews
        assert blip.failed == 2 and not lost.is_set()
        assert await store.lease_expires_at("x") == pytest.approx(clock.now() + 3)
        for _ in range(10):
            await step(clock, store, 1.0)  # and it goes on renewing
        assert not lost.is_set()
    # Leaving the block raised nothing: the refused renewal did not fail the turn.
    assert await store.acquire_lease("x", "b", 3, clock.now()) is None


async def test_a_renewal_refused_until_the_lease_expired_counts_as_lost(
    store: BaseStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    blip = Blip(store, "renew_lease", monkeypatch)
    blip.down = True
    mine = await store.acquire_lease("x", "a", 3, clock.now())
    assert mine is not None
    async with leases.renewing(store, mine, ttl=3, clock=clock) as lost:
        for _ in range(40):
            await step(clock, store, 0.1)
        assert lost.is_set()
        failed = blip.failed
        await step(clock, store, 5)
        assert blip.failed == failed  # no renewal after the loss


async def test_a_refused_outbox_mark_is_retried_and_the_reply_confirmed(
    store: BaseStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    blip = Blip(store, "mark_sent", monkeypatch)
    blip.times = 2
    async with harness(store, clock, GatedLLM()) as h:
        await h.say(C1, "first")
        await h.advance(2.0)
        assert h.outlet.texts() == ["reply to: first"]
        assert blip.failed == 2
        # Confirmed: the next start does not take it for a crash mid-send.
        assert await store.uncertain_outbox(clock.now() + 1) == []
        assert h.pipeline.releases.pending == 0
        await h.say(C1, "second")
        await h.advance(1.6)
        assert h.outlet.texts() == ["reply to: first", "reply to: second"]
