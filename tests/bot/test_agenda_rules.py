"""The pure rules of check-ins and reminders (bot/core/agenda.py, issue 17): time zones, quiet
hours across midnight and clock changes, when a check-in may be written, reminder times."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.core.agenda import (
    CheckinCap,
    InitiativePolicy,
    QuietHours,
    WhenError,
    ZoneError,
    after_quiet,
    blocked_by,
    check_in_due,
    local_at,
    reminder_due,
    zone,
    zone_name,
)

ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe"]
# 2026, around both European and American clock changes.
INSTANTS = st.floats(min_value=1_767_225_600.0, max_value=1_798_761_600.0)
MINUTES = st.integers(min_value=0, max_value=24 * 60 - 1)


def test_zone_names_and_offsets_are_read_and_garbage_is_refused() -> None:
    assert zone_name("Europe/Berlin") == "Europe/Berlin"
    assert zone_name("UTC") == "UTC" and zone_name("utc+2") == "UTC+02:00"
    assert zone_name("+05:30") == "UTC+05:30" and zone_name("-03") == "UTC-03:00"
    for bad in ("Mars/Olympus", "../etc/passwd", "", "UTC+15", "Europe/Berlin; DROP"):
        with pytest.raises(ZoneError):
            zone(bad)


def test_quiet_hours_parse_wrap_and_never_when_equal() -> None:
    night = QuietHours.parse("22:00-08:00")
    at = lambda h, m=0: datetime(2026, 12, 1, h, m, tzinfo=UTC)  # noqa: E731
    assert night.contains(at(23)) and night.contains(at(7, 59)) and not night.contains(at(8))
    assert not night.contains(at(21, 59)) and str(night) == "22:00-08:00"
    assert QuietHours.parse("13:00-14:00").contains(at(13, 30))
    assert not QuietHours.parse("09:00-09:00").contains(at(9))
    for bad in ("22-08", "25:00-08:00", "22:00", "night"):
        with pytest.raises(ValueError, match="HH:MM"):
            QuietHours.parse(bad)


@given(
    instant=INSTANTS,
    name=st.sampled_from(ZONES),
    start=MINUTES,
    end=MINUTES,
)
def test_after_quiet_is_never_quiet_never_earlier_and_within_a_day(
    instant: float, name: str, start: int, end: int
) -> None:
    quiet, tz = QuietHours(start, end), zone(name)
    moved = after_quiet(instant, tz, quiet)
    assert instant <= moved < instant + 86400.0
    assert not quiet.contains(local_at(moved, tz))
    if not quiet.contains(local_at(instant, tz)):
        assert moved == instant


def test_a_quiet_window_ending_in_a_skipped_hour_ends_after_the_change() -> None:
    berlin = zone("Europe/Berlin")
    quiet = QuietHours.parse("01:00-02:30")  # 02:30 does not exist on 29 March 2026
    start = datetime(2026, 3, 29, 0, 30, tzinfo=UTC).timestamp()  # 01:30 local (CET)
    moved = after_quiet(start, berlin, quiet)
    assert local_at(moved, berlin).hour == 3 and moved > start


@given(
    last=INSTANTS,
    sent=st.one_of(st.none(), INSTANTS),
    idle=st.floats(min_value=60, max_value=7 * 86400),
    interval=st.floats(min_value=0, max_value=7 * 86400),
    name=st.sampled_from(ZONES),
    now=st.one_of(st.none(), INSTANTS),
)
def test_a_check_in_waits_for_the_silence_the_interval_and_the_end_of_quiet_hours(
    last: float, sent: float | None, idle: float, interval: float, name: str, now: float | None
) -> None:
    policy = InitiativePolicy(enabled=True, after_idle_seconds=idle, min_interval_seconds=interval)
    tz = zone(name)
    due = check_in_due(policy, last_user_at=last, last_initiative_at=sent, tz=tz, now=now)
    assert due >= last + idle
    if sent is not None:
        assert due >= sent + idle and due >= sent + interval
    # Overdue (re-armed after a skip, or due while no process ran): not before now, and
    # the quiet hours of now count, not those of when it first fell due.
    assert now is None or due >= now
    assert not policy.quiet.contains(local_at(due, tz))


def test_each_reason_that_blocks_a_check_in() -> None:
    p = InitiativePolicy(enabled=True, max_unanswered=2)
    ok = {"enabled": True, "active": True, "private": True, "unanswered": 1}
    assert blocked_by(p, **ok) is None  # type: ignore[arg-type]
    assert blocked_by(p, **{**ok, "enabled": False}) == "off"  # type: ignore[arg-type]
    assert blocked_by(p, **{**ok, "active": False}) == "inactive"  # type: ignore[arg-type]
    assert blocked_by(p, **{**ok, "private": False}) == "group"  # type: ignore[arg-type]
    assert blocked_by(p, **{**ok, "unanswered": 2}) == "unanswered"  # type: ignore[arg-type]


def test_reminder_times_are_local_and_bounded() -> None:
    now = datetime(2026, 12, 1, 10, 0, tzinfo=UTC).timestamp()
    berlin = zone("Europe/Berlin")
    due = reminder_due("2026-12-03T09:00", berlin, now)
    assert datetime.fromtimestamp(due, UTC) == datetime(2026, 12, 3, 8, 0, tzinfo=UTC)
    assert (
        reminder_due("2026-12-03T09:00+00:00", berlin, now)
        == datetime(2026, 12, 3, 9, 0, tzinfo=UTC).timestamp()
    )
    with pytest.raises(WhenError, match=r"in the past .*2026-12-01T11:00"):
        reminder_due("2026-12-01T10:30", berlin, now)
    with pytest.raises(WhenError, match="a year ahead"):
        reminder_due("2028-01-01T09:00", berlin, now)
    for bad in ("tomorrow at 9", "2026-13-01T09:00", ""):
        with pytest.raises(WhenError, match="YYYY-MM-DDTHH:MM"):
            reminder_due(bad, berlin, now)


@given(
    st.lists(st.floats(min_value=0.0, max_value=86_399.0), max_size=12),
    st.integers(min_value=0, max_value=6),
)
def test_the_check_in_cap_frees_exactly_when_one_leaves_the_window(
    offsets: list[float], limit: int
) -> None:
    """Check-ins written in the last 24 hours before ``now``: the cap holds while ``limit`` of
    them are in the window, and frees at the first moment fewer are."""
    now, cap = 1_790_000_000.0, CheckinCap(limit)
    recent = [now - offset for offset in offsets]

    def in_window(at: float) -> int:
        return sum(t > at - cap.window for t in recent)

    frees = cap.frees_at(recent)
    if limit == 0 or len(recent) < limit:
        assert frees is None
        return
    assert frees is not None and frees > now
    assert in_window(frees) < limit <= in_window(frees - 1e-3)
