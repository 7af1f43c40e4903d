"""The extraction sweep: finds the sessions that went quiet or ended with messages not yet
learned from, and has memory/extraction.py learn from each (docs/architecture.md#prompt).

What is due is read from the store each time (the extraction mark), so a sweep lost in a crash
or skipped for a busy lease is made up by the next one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from bot.core.clock import Clock
from bot.store.contracts import MemoryStore
from memory.extraction import Extraction
from memory.jobs import Jobs
from memory.policy import MemoryPolicy

#: A session is quiet after this long without a message, unless the bots' policies say.
_QUIET_SECONDS: Final = 300.0


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Sweep:
    """Runs extraction over every session that is due, now or in the background."""

    store: MemoryStore
    extraction: Extraction
    jobs: Jobs
    clock: Clock
    policy_for: Callable[[str], MemoryPolicy]

    def schedule(self, bots: Sequence[str] | None = None) -> None:
        """Run one sweep in the background now (e.g. when a session ends); none while one
        runs (it reads what is due afresh, so it finds this session too)."""
        self.jobs.start(_SWEEP, lambda: self.extract_due(bots), what="memory sweep")

    async def extract_due(self, bots: Sequence[str] | None = None, limit: int = 20) -> int:
        """Learn from quiet or closed sessions; return how many sessions were processed."""
        done = 0
        now = self.clock.now()
        quiet = min(
            (self.policy_for(b).extract_after_idle_seconds for b in bots or ()),
            default=_QUIET_SECONDS,
        )
        for session, mark in await self.store.sessions_to_extract(now - quiet, limit, bots):
            if await self.extraction.extract(session, mark):
                done += 1
        return done


#: The sweep's key among memory's background jobs (one sweep at a time).
_SWEEP: Final = "sweep"
