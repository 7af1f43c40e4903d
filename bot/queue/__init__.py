"""The coalescing queue: ingest, due timers, leases and the final check (docs/architecture.md)."""

from bot.queue.ingest import Ingestor
from bot.queue.scheduler import RunTurn, Scheduler

__all__ = ["Ingestor", "RunTurn", "Scheduler"]
