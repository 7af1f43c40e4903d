"""Run a job in one process only, elected by a lease in the store.

Telegram answers 409 to a second ``getUpdates`` per token, so in polling mode exactly one
process may poll. Every process runs an :class:`Exclusive`: the one holding the lease runs the
job and renews the lease; the others stand by and take over once it expires (the holder died
or lost the store). A holder that fails to renew stops its job at once, so two pollers never
overlap for longer than one renewal round.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

from bot.core.clock import Clock
from bot.core.events import Lease
from bot.store.contracts import LeaseStore

log = logging.getLogger("personabot.election")


def process_holder() -> str:
    """A lease holder name that says which process holds it (host, pid, random suffix)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Exclusive:
    """Runs ``job`` only while this process holds the lease ``name``."""

    def __init__(
        self,
        *,
        store: LeaseStore,
        clock: Clock,
        name: str,
        ttl: float,
        holder: str | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._name = name
        self._ttl = ttl
        self.holder = holder or process_holder()
        self.leading = False

    async def run(self, job: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Stand by, lead while elected, stand by again if the lease is lost; until cancelled.

        An error of the job itself propagates (after the lease is released).
        """
        standby = max(0.1, self._ttl / 10)
        while True:
            lease = await self._store.acquire_lease(
                self._name, self.holder, self._ttl, self._clock.now()
            )
            if lease is None:
                await self._clock.sleep(standby)
                continue
            log.info("%s: elected (%s)", self._name, self.holder)
            self.leading = True
            work = asyncio.create_task(job(), name=f"{self._name} job")
            try:
                lost = await self._hold(lease, work)
            finally:
                self.leading = False
                if not work.done():
                    work.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await work
                await self._store.release_lease(lease)
            if not lost:
                work.result()  # the job ended by itself: re-raise its error, if any
                return
            log.warning("%s: lease lost; standing by", self._name)

    async def _hold(self, lease: Lease, work: asyncio.Task[None]) -> bool:
        """Renew every third of the TTL while the job runs; True when the lease was lost."""
        current: Lease | None = lease
        while current is not None:
            sleeper = asyncio.create_task(self._clock.sleep(self._ttl / 3))
            done, _ = await asyncio.wait({work, sleeper}, return_when=asyncio.FIRST_COMPLETED)
            if work in done:
                sleeper.cancel()
                return False
            current = await self._store.renew_lease(current, self._ttl, self._clock.now())
        return True
