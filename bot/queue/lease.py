"""Leases of the queue: acquire, renew while a turn runs, release (docs/architecture.md#queue).

A lease is a compare-and-swap row with a fencing token that grows on every takeover; the
final check refuses a reply whose token is no longer the stored one, so a worker that lost
its lease (paused, partitioned) can never record or send.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from bot.core.clock import Clock
from bot.core.events import Lease
from bot.core.tasks import running
from bot.store.contracts import LeaseStore

log = logging.getLogger("personabot.queue")


async def acquire(
    store: LeaseStore, name: str, *, holder: str, ttl: float, clock: Clock
) -> Lease | None:
    """Take the lease if it is free or expired; None when another worker holds it."""
    return await store.acquire_lease(name, holder, ttl, clock.now())


async def release(store: LeaseStore, lease: Lease) -> None:
    """Free the lease if it is still ours (its token stays, so the next one is larger)."""
    await store.release_lease(lease)


@contextlib.asynccontextmanager
async def renewing(
    store: LeaseStore, lease: Lease, *, ttl: float, clock: Clock
) -> AsyncIterator[asyncio.Event]:
    """Renew the lease every third of ``ttl`` while the body runs; yields an event set once
    the lease is lost.

    Two renewals may fail before the lease expires. A lost lease only stops the renewal:
    the body goes on (the event lets it stop showing a streamed preview), and the final
    check then fences its result.
    """
    lost = asyncio.Event()

    async def renew() -> None:
        current: Lease | None = lease
        while current is not None:
            await clock.sleep(ttl / 3)
            current = await store.renew_lease(current, ttl, clock.now())
        lost.set()
        log.warning("lost lease %s while generating", lease.name)

    async with running(renew(), name=f"renew {lease.name}"):
        yield lost
