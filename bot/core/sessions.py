"""Session lifecycle rules: when an open session has expired by itself (pure functions)."""

from __future__ import annotations

import math

from bot.core.events import SessionPolicy


def expiry_reason(
    policy: SessionPolicy, *, opened_at: float, last_activity_at: float, now: float
) -> str | None:
    """Why a session opened/last active at these times has ended by ``now``, or None."""
    if policy.idle_seconds is not None and now - last_activity_at >= policy.idle_seconds:
        return "idle"
    if policy.daily_reset_hour is not None:
        boundary = last_reset_before(now, policy.daily_reset_hour, policy.utc_offset_hours)
        if opened_at < boundary:
            return "daily"
    return None


def last_reset_before(now: float, hour: int, utc_offset_hours: float) -> float:
    """The latest daily reset instant at or before ``now`` (epoch seconds)."""
    offset = utc_offset_hours * 3600.0
    local = now + offset
    day_start = math.floor(local / 86400.0) * 86400.0
    reset = day_start + hour * 3600.0
    if reset > local:
        reset -= 86400.0
    return reset - offset
