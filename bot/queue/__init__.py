"""The coalescing queue (docs/architecture.md#queue).

- ``ingest``: store a message, bump the conversation's version, arm its timer;
- ``scheduler``: run the turns whose timers are due;
- ``lease``: acquire, renew while a turn runs, release (fencing tokens);
- ``rules``: the rules themselves, pure functions (due time, re-arming after a turn, the final
  check's verdict), which every store backend applies inside its transactions
  (``bot/store/sql/queue.py``: ``finish_turn``, ``skip_turn``, timers).
"""

from bot.queue.ingest import Ingestor
from bot.queue.scheduler import RunTurn, Scheduler

__all__ = ["Ingestor", "RunTurn", "Scheduler"]
