"""Leases of the queue: acquire, renew while a turn runs, release (docs/architecture.md#queue).

A lease is a compare-and-swap row with a fencing token that grows on every takeover; the
final check refuses a reply whose token is no longer the stored one, so a worker that lost
its lease (paused, partitioned) can never record or send.

A release or renewal the store refuses for a moment (SQLite's write lock held by another
program past the busy timeout, a dropped PostgreSQL connection) is retried, never just given
up: an unreleased lease would hold the conversation's next turn back until it expires.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from bot.core.clock import Clock
from bot.core.errors import StoreError
from bot.core.events import Lease
from bot.core.tasks import RETRY_FIRST_SECONDS, Background, persist, running
from bot.store.contracts import LeaseStore

log = logging.getLogger("personabot.queue")


async def acquire(
    store: LeaseStore, name: str, *, holder: str, ttl: float, clock: Clock
) -> Lease | None:
    """Take the lease if it is free or expired; None when another worker holds it."""
    return await store.acquire_lease(name, holder, ttl, clock.now())


async def release(
    store: LeaseStore, lease: Lease, *, ttl: float, clock: Clock, later: Background
) -> None:
    """Free the lease if it is still ours (its token stays, so the next one is larger).

    A failed release is retried by ``later``, in the background (the caller's scheduler slot
    is free at once), with backoff until it succeeds or the lease has expired anyway. Each
    retry is fenced like the first try (the row must still have our holder and token): a
    lease that expired and was taken over meanwhile has a larger token, and is never freed
    by a late retry of ours.
    """
    try:
        await store.release_lease(lease)
    except StoreError as exc:
        # The lease may have been renewed since ``lease`` was read: its expiry is at most
        # ``ttl`` from now (retrying past the real expiry is harmless, it is fenced).
        until = max(lease.expires_at, clock.now() + ttl)
        log.warning("lease %s not released (%s); retrying in the background", lease.name, exc)
        later.start(_release_later(store, lease, clock, until), name=f"release {lease.name}")


async def _release_later(store: LeaseStore, lease: Lease, clock: Clock, until: float) -> None:
    await clock.sleep(RETRY_FIRST_SECONDS)  # the store just failed: not again at once
    released = await persist(
        clock, lambda: store.release_lease(lease), until=until, what=f"release of {lease.name}"
    )
    if released is not None:
        log.info("lease %s released on a retry", lease.name)


@contextlib.asynccontextmanager
async def renewing(
    store: LeaseStore, lease: Lease, *, ttl: float, clock: Clock
) -> AsyncIterator[asyncio.Event]:
    """Renew the lease every third of ``ttl`` while the body runs; yields an event set once
    the lease is lost.

    Two renewals may fail before the lease expires; a renewal the store refuses for a moment
    is retried until the lease expires (then it counts as lost: another worker may take it).
    A lost lease only stops the renewal: the body goes on (the event lets it stop showing a
    streamed preview), and the final check then fences its result.
    """
    lost = asyncio.Event()

    async def renew() -> None:
        current: Lease | None = lease
        while current is not None:
            await clock.sleep(ttl / 3)
            current = await _renewed(store, current, ttl, clock)
        lost.set()
        log.warning("lost lease %s while generating", lease.name)

    async with running(renew(), name=f"renew {lease.name}"):
        yield lost


async def _renewed(store: LeaseStore, lease: Lease, ttl: float, clock: Clock) -> Lease | None:
    """The lease renewed (None: lost), retried until it expires while the store fails.

    A renewal that raised may have committed (a connection lost on the reply): its retry
    finds the same holder and token and renews again, so it is safe to repeat.
    """
    renewed = await persist(
        clock,
        lambda: store.renew_lease(lease, ttl, clock.now()),
        until=lease.expires_at,
        what=f"renewal of lease {lease.name}",
    )
    return None if renewed is None else renewed[0]
