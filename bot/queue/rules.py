"""The queue's rules (versions, due_at, re-arming, the final verdict): see bot/core/queue_rules.py.

They are pure functions in the core because the stores apply them inside their transactions
and the stores are a lower layer than this package; this module is their name in the queue.
"""

from bot.core.queue_rules import ArmedTimer, arm, final_verdict, settle

__all__ = ["ArmedTimer", "arm", "final_verdict", "settle"]
