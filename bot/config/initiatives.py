"""When the persona writes first: ``[personas.initiative]`` (check-ins after a silence) and
``[schedule]`` (time zones, reminders, the per-bot cap) (docs/initiatives.md)."""

from __future__ import annotations

from pydantic import Field, field_validator

from bot.config.fields import Section
from bot.core.agenda import QuietHours, ZoneError, zone_name


class InitiativeSettings(Section):
    """``[personas.initiative]``: when the persona may write first after a silence
    (docs/initiatives.md)."""

    enabled: bool = False
    after_idle_hours: float = Field(default=24.0, gt=0, le=24 * 365)
    # Local time in the person's zone; "" for none.
    quiet_hours: str = "22:00-08:00"
    max_unanswered: int = Field(default=1, ge=1, le=10)
    min_interval_hours: float = Field(default=24.0, ge=0, le=24 * 365)
    groups: bool = False

    @field_validator("quiet_hours")
    @classmethod
    def _quiet(cls, text: str) -> str:
        if text.strip():
            QuietHours.parse(text)
        return text.strip()


class ScheduleSettings(Section):
    """Time zones and reminders (docs/initiatives.md)."""

    # For people who set none (/timezone) and have none in memory.
    timezone: str = "UTC"
    # The remind_me tool and /reminders.
    reminders: bool = False
    max_reminders_per_person: int = Field(default=20, ge=1, le=1000)
    # Check-ins one bot may write in any 24 hours, over all its chats (0 = no cap); past it
    # a due check-in waits until the oldest of the day's leaves the window.
    max_checkins_per_day: int = Field(default=0, ge=0, le=1_000_000)
    scan_interval_seconds: float = Field(default=10.0, gt=0, le=3600)

    @field_validator("timezone")
    @classmethod
    def _zone(cls, text: str) -> str:
        try:
            return zone_name(text)
        except ZoneError as exc:
            raise ValueError(str(exc)) from None
