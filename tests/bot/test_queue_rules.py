"""The queue's rules (bot.queue.rules) as properties: what a person writing a burst sees."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from bot.core.events import QueuePolicy
from bot.queue.rules import arm, final_verdict, settle

seconds = st.floats(min_value=0, max_value=10_000, allow_nan=False)
policies = st.builds(
    QueuePolicy,
    debounce=st.floats(min_value=0, max_value=60, allow_nan=False),
    max_wait=st.floats(min_value=0, max_value=600, allow_nan=False),
)


@settings(max_examples=60)
@given(policies, st.lists(seconds, min_size=1, max_size=20))
def test_a_burst_is_answered_after_the_debounce_but_never_later_than_the_cap(
    policy: QueuePolicy, gaps: list[float]
) -> None:
    """Each new message pushes the timer to ``now + debounce``, but never past the first
    message's time plus ``max_wait``, and the burst keeps its first message's time."""
    now, first = 0.0, None
    for version, gap in enumerate(gaps, start=1):
        now += gap
        timer = arm(policy, now, first, version)
        first = timer.first_pending_at
        assert first == 0.0 + gaps[0]
        assert timer.due_at <= first + policy.max_wait
        assert timer.due_at <= now + policy.debounce
        assert timer.due_at in (now + policy.debounce, first + policy.max_wait)
        assert timer.armed_version == version


@settings(max_examples=40)
@given(policies, seconds, seconds, st.integers(min_value=1, max_value=10**6))
def test_what_is_still_pending_after_a_turn_gets_its_own_timer(
    policy: QueuePolicy, first: float, span: float, version: int
) -> None:
    assert settle(policy, None) is None  # nothing pending: the timer goes
    timer = settle(policy, (first, first + span, version))
    assert timer is not None
    assert timer.first_pending_at == first
    assert timer.due_at == policy.due_at(first + span, first)
    assert timer.armed_version == version


@settings(max_examples=60)
@given(policies, st.booleans(), st.booleans(), seconds, seconds)
def test_the_final_check(
    policy: QueuePolicy, leased: bool, newer: bool, first: float, waited: float
) -> None:
    """A lost lease never records; newer input discards the reply until the cap has passed."""
    verdict = final_verdict(
        policy, still_leased=leased, newer_pending=newer, first_pending_at=first, now=first + waited
    )
    if not leased:
        assert verdict == "fenced"
    elif newer and first + waited < first + policy.max_wait:
        assert verdict == "discarded"
    else:
        assert verdict == "recorded"
