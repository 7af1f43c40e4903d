"""When the persona may write first: the pure rules of check-ins and reminders.

docs/initiatives.md explains the settings; the runtime that applies these rules is
``bot/runtime/initiatives.py``. Times are epoch seconds (UTC); local times are read in the
person's time zone (``/timezone``, else a memory fact, else the configured default).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, timezone, tzinfo
from typing import Final, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from bot.core.events import ConversationKey, MessageOrigin

_CLOCK: Final = re.compile(r"^\s*([01]?\d|2[0-3]):([0-5]\d)\s*$")
_OFFSET: Final = re.compile(r"^(?:UTC|GMT)?\s*([+-])(\d{1,2})(?::?([0-5]\d))?$", re.I)
#: The furthest ahead a reminder may be set.
MAX_AHEAD_SECONDS: Final = 366 * 86400.0


class ZoneError(ValueError):
    """A time zone name nobody can read."""


def zone(name: str) -> tzinfo:
    """The time zone named ``name``: an IANA name (``Europe/Berlin``), ``UTC``, or a fixed
    offset (``UTC+2``, ``+05:30``); ZoneError otherwise."""
    text = name.strip()
    if text.upper() in {"UTC", "GMT", "Z"}:
        return UTC
    match = _OFFSET.match(text)
    if match is not None:
        hours, minutes = int(match[2]), int(match[3] or 0)
        if hours > 14 or (hours == 14 and minutes):
            raise ZoneError(f"{name!r}: an offset is at most 14 hours")
        sign = -1 if match[1] == "-" else 1
        return timezone(sign * timedelta(hours=hours, minutes=minutes))
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_+-]*(?:/[A-Za-z0-9_+-]+){0,2}", text):
        raise ZoneError(f"{name!r}: not a time zone name (e.g. Europe/Berlin, UTC+2)")
    try:
        return ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError):
        raise ZoneError(f"{name!r}: unknown time zone (e.g. Europe/Berlin, UTC+2)") from None


def zone_name(name: str) -> str:
    """The canonical spelling of a readable zone name (ZoneError otherwise)."""
    found = zone(name)
    if isinstance(found, ZoneInfo):
        return found.key
    if found is UTC:
        return "UTC"
    offset = found.utcoffset(None) or timedelta()
    minutes = int(offset.total_seconds() // 60)
    sign = "-" if minutes < 0 else "+"
    hours, rest = divmod(abs(minutes), 60)
    return f"UTC{sign}{hours:02d}:{rest:02d}"


@dataclass(frozen=True, slots=True)
class QuietHours:
    """A daily local-time window in which the persona never writes first (may wrap midnight;
    start == end: no quiet hours)."""

    start: int  # minutes after local midnight
    end: int

    @classmethod
    def parse(cls, text: str) -> QuietHours:
        """``"22:00-08:00"`` -> QuietHours; ValueError on anything else."""
        first, sep, second = text.partition("-")
        a, b = _CLOCK.match(first), _CLOCK.match(second)
        if not sep or a is None or b is None:
            raise ValueError(f"{text!r}: expected HH:MM-HH:MM, e.g. 22:00-08:00")
        return cls(int(a[1]) * 60 + int(a[2]), int(b[1]) * 60 + int(b[2]))

    def contains(self, local: datetime) -> bool:
        """Whether this local time is quiet."""
        minute = local.hour * 60 + local.minute
        if self.start == self.end:
            return False
        if self.start < self.end:
            return self.start <= minute < self.end
        return minute >= self.start or minute < self.end

    def __str__(self) -> str:
        return (
            f"{self.start // 60:02d}:{self.start % 60:02d}-{self.end // 60:02d}:{self.end % 60:02d}"
        )


@dataclass(frozen=True, slots=True)
class InitiativePolicy:
    """``[personas.initiative]``: when the persona may check in after silence."""

    enabled: bool = False
    after_idle_seconds: float = 24 * 3600.0
    quiet: QuietHours = QuietHours(22 * 60, 8 * 60)
    max_unanswered: int = 1
    min_interval_seconds: float = 24 * 3600.0
    groups: bool = False  # private chats only unless set


def local_at(instant: float, tz: tzinfo) -> datetime:
    """The local wall time of an instant."""
    return datetime.fromtimestamp(instant, tz)


def _wall(day: date, minute: int, tz: tzinfo) -> float:
    """The instant of a local wall time (a time skipped by a clock change reads as the same
    time in the offset before it, i.e. shifted forward; a repeated one as its first pass)."""
    local = datetime.combine(day, time(minute // 60, minute % 60), tzinfo=tz)
    return local.timestamp()


def after_quiet(instant: float, tz: tzinfo, quiet: QuietHours) -> float:
    """``instant`` when it is not quiet there, else the end of that quiet period."""
    local = local_at(instant, tz)
    if not quiet.contains(local):
        return instant
    day = local.date()
    for offset in (0, 1):
        end = _wall(day + timedelta(days=offset), quiet.end, tz)
        if end > instant:
            return end
    return instant + 86400.0  # unreachable: the end comes within a day


def check_in_due(
    policy: InitiativePolicy,
    *,
    last_user_at: float,
    last_initiative_at: float | None,
    tz: tzinfo,
    now: float | None = None,
) -> float:
    """When the next check-in may be written: ``after_idle`` of silence since the person's
    last message and since the last check-in, ``min_interval`` since that check-in, not
    before ``now`` (when given), and never in quiet hours (moved to their end).

    ``now`` matters for an overdue check-in (re-armed after a skip or a retry, or due while
    no process ran): the quiet hours that count are those of the moment it would be
    written, not those of the moment it first fell due."""
    due = last_user_at + policy.after_idle_seconds
    if last_initiative_at is not None:
        due = max(
            due,
            last_initiative_at + policy.after_idle_seconds,
            last_initiative_at + policy.min_interval_seconds,
        )
    if now is not None:
        due = max(due, now)
    return after_quiet(due, tz, policy.quiet)


@dataclass(frozen=True, slots=True)
class CheckinCap:
    """``[schedule] max_checkins_per_day``: at most ``limit`` check-ins written by one bot,
    over all its chats, in any ``window`` seconds (``limit`` 0: no cap)."""

    limit: int = 0
    window: float = 86400.0

    def frees_at(self, recent: Sequence[float]) -> float | None:
        """When the bot may write its next check-in, given the times of its check-ins written
        after ``now - window`` (at least the newest ``limit`` of them): None when it may now,
        else the moment the oldest of its last ``limit`` leaves the window."""
        if self.limit <= 0 or len(recent) < self.limit:
            return None
        return sorted(recent, reverse=True)[self.limit - 1] + self.window


#: The decision noted on a check-in postponed by the cap (``CheckinCap``).
CAPPED: Final = "not now: the bot's check-ins for the day are used up"

Blocker = Literal["off", "inactive", "group", "unanswered"]


def blocked_by(
    policy: InitiativePolicy,
    *,
    enabled: bool,
    active: bool,
    private: bool,
    unanswered: int,
) -> Blocker | None:
    """Why no check-in may be written in this chat at all now (None: it may, when due)."""
    if not enabled:
        return "off"
    if not active:
        return "inactive"
    if not private and not policy.groups:
        return "group"
    if unanswered >= policy.max_unanswered:
        return "unanswered"
    return None


class WhenError(ValueError):
    """A reminder time nobody can read or that cannot be kept."""


def reminder_due(at: str, tz: tzinfo, now: float) -> float:
    """The instant of a local date-time ``YYYY-MM-DDTHH:MM`` (seconds optional) in ``tz``;
    WhenError when unreadable, past, or more than a year ahead."""
    try:
        parsed = datetime.fromisoformat(at.strip())
    except ValueError:
        raise WhenError(
            f"{at!r}: give the local date and time as YYYY-MM-DDTHH:MM, e.g. 2026-12-03T09:00"
        ) from None
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(tz).replace(tzinfo=None)
    due = parsed.replace(tzinfo=tz).timestamp()
    if not math.isfinite(due) or due <= now:
        shown = local_at(now, tz).strftime("%Y-%m-%dT%H:%M")
        raise WhenError(f"{at!r} is in the past (it is {shown} there now)")
    if due - now > MAX_AHEAD_SECONDS:
        raise WhenError(f"{at!r}: a reminder can be set at most a year ahead")
    return due


def describe_local(instant: float, tz: tzinfo) -> str:
    """``Thu 3 Dec 2026, 09:00`` in ``tz``."""
    local = local_at(instant, tz)
    return f"{local:%a} {local.day} {local:%b %Y, %H:%M}"


def utc_text(instant: float) -> str:
    """An instant as ``2026-12-03 08:00 UTC``."""
    return datetime.fromtimestamp(instant, UTC).strftime("%Y-%m-%d %H:%M UTC")


# -- what the store keeps (docs/initiatives.md) ----------------------------------------------

AgendaKind = MessageOrigin
ReminderStatus = Literal["pending", "sent", "cancelled", "failed"]


@dataclass(frozen=True, slots=True)
class InitiativeState:
    """What the check-in rules read of one conversation, from one snapshot."""

    version: int  # the conversation's version: the final check compares it
    active: bool  # False when the platform refuses delivery (blocked)
    enabled: bool  # /checkins
    due_at: float | None
    sent_at: float | None  # the last check-in
    last_user_at: float | None  # the person's last message (None: nobody ever wrote)
    person: str | None  # its author
    private: bool  # whether that message came in a private chat
    unanswered: int  # check-ins since the person's last message
    pending: bool  # a turn waits for a reply
    session_no: int | None  # the open session
    persona: str | None = None  # the chat's persona (its newest session's; None: the default)


@dataclass(frozen=True, slots=True)
class NewReminder:
    """A reminder to store with the reply that agreed to it."""

    user_id: str
    about: str
    due_at: float
    timezone: str


@dataclass(frozen=True, slots=True)
class Reminder:
    """A stored reminder."""

    id: int
    conversation: ConversationKey
    user_id: str
    about: str
    due_at: float
    timezone: str
    status: ReminderStatus
    created_at: float
    note: str | None = None


@dataclass(frozen=True, slots=True)
class DueItem:
    """A check-in or a reminder that falls due (``reminder``: which one)."""

    kind: AgendaKind
    conversation: ConversationKey
    due_at: float
    reminder: int | None = None
