"""The coalescing queue's rules as pure functions (docs/architecture.md#queue).

Written once here and applied by every store backend inside its transactions (the stores
are a lower layer than ``bot.queue``, so the rules live in the core; ``bot.queue.rules``
is their public name). A store reads the values, a rule decides, the store writes.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.core.events import ConversationKey, FinishOutcome, QueuePolicy


def turn_lease(conversation: ConversationKey) -> str:
    """The lease that serializes turns of one conversation across workers and processes.

    The store's claim spells the same name in SQL (``bot.store.cols.TURN_LEASE_SQL``); a test
    holds the two equal for any key.
    """
    return f"turn:{conversation}"


@dataclass(frozen=True, slots=True)
class ArmedTimer:
    """What a conversation's timer should hold: when it fires and since when input waits."""

    due_at: float
    first_pending_at: float
    armed_version: int


def arm(
    policy: QueuePolicy, now: float, first_pending_at: float | None, version: int
) -> ArmedTimer:
    """New input that asks for a reply arms or extends the timer (rules 1 and 2).

    The burst's first pending time is kept (the hard cap counts from it); the due time is
    ``min(now + debounce, first_pending_at + max_wait)``; the timer belongs to ``version``.
    """
    first = now if first_pending_at is None else first_pending_at
    return ArmedTimer(policy.due_at(now, first), first, version)


def settle(policy: QueuePolicy, pending: tuple[float, float, int] | None) -> ArmedTimer | None:
    """After a turn closed (answered or skipped), the timer for what is still pending.

    ``pending`` is (first created_at, last created_at, highest version) of the conversation's
    pending messages, or None when nothing is pending: then the timer goes, unless input newer
    than the turn's v0 armed it (the store keeps a timer with ``armed_version > v0``). Else the
    timer restarts from those messages' own times: a new burst gets its own debounce and cap.
    """
    if pending is None:
        return None
    first, last, version = pending
    return ArmedTimer(policy.due_at(last, first), first, version)


def final_verdict(
    policy: QueuePolicy,
    *,
    still_leased: bool,
    newer_pending: bool,
    first_pending_at: float,
    now: float,
) -> FinishOutcome:
    """What the final check decides about a generated reply (queue rules 5 and 6).

    Fenced when the lease token is no longer ours (someone took the turn over): nothing is
    written. Discarded when newer input joined the turn's session while the model ran and the
    hard cap has not passed: the next attempt covers everything. Else recorded.
    """
    if not still_leased:
        return "fenced"
    if newer_pending and now < first_pending_at + policy.max_wait:
        return "discarded"
    return "recorded"
