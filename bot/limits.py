"""Spending limits (per-user turns per hour/day, per-bot tokens per day), kept in the store so
that they hold across processes, with one friendly notice per limit period."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass

from bot.clock import Clock
from bot.events import Turn, UserKey
from bot.store.base import BaseStore

log = logging.getLogger("personabot.limits")

DAY = 86400.0


@dataclass(frozen=True, slots=True)
class LimitPolicy:
    """The limits in force (0 = unlimited)."""

    user_turns_per_hour: int = 0
    user_turns_per_day: int = 0
    bot_tokens_per_day: int = 0
    message: str = "You've reached the message limit for now. You can continue after {until}."

    @property
    def active(self) -> bool:
        """Whether any limit is set."""
        return bool(self.user_turns_per_hour or self.user_turns_per_day or self.bot_tokens_per_day)


@dataclass(frozen=True, slots=True)
class Admission:
    """Whether a turn may call the model; reservations to give back if it does not reply."""

    granted: bool
    reservations: tuple[int, ...] = ()
    limit: str | None = None
    notice: str | None = None


def _day_start(now: float) -> float:
    return now - now % DAY


def _when(at: float) -> str:
    return dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%d %H:%M")


class Limits:
    """Admits turns under the configured limits; admins are exempt."""

    def __init__(
        self,
        *,
        store: BaseStore,
        clock: Clock,
        policy: LimitPolicy,
        is_admin: Callable[[str, str], bool],
    ) -> None:
        self._store = store
        self._clock = clock
        self._policy = policy
        self._is_admin = is_admin

    async def admit(self, turn: Turn) -> Admission:
        """Check the bot's daily tokens, then reserve a turn for every non-admin author."""
        policy = self._policy
        if not policy.active:
            return Admission(True)
        conversation = turn.session.conversation
        now = self._clock.now()
        people = [a for a in turn.authors if not self._is_admin(conversation.bot, a)]
        if not people:
            return Admission(True)
        if policy.bot_tokens_per_day:
            used = await self._store.usage_since(_day_start(now), conversation.bot)
            if used.input_tokens + used.output_tokens >= policy.bot_tokens_per_day:
                until = _day_start(now) + DAY
                notice = await self._notice_once(f"budget:{conversation}", until, now)
                return Admission(False, limit="bot_tokens_per_day", notice=notice)
        granted: list[int] = []
        for author in people:
            user = UserKey(conversation.platform, author)
            reservation = await self._store.reserve_turn(
                user,
                conversation.bot,
                now,
                per_hour=policy.user_turns_per_hour,
                per_day=policy.user_turns_per_day,
            )
            if reservation.id is None:
                for rid in granted:
                    await self._store.release_turn(rid)
                until = reservation.until or now + 3600
                notice = await self._notice_once(f"user:{user.platform}:{author}", until, now)
                log.info("user %s reached a turn limit until %s", author, _when(until))
                return Admission(False, limit="user_turns", notice=notice)
            granted.append(reservation.id)
        return Admission(True, reservations=tuple(granted))

    async def release(self, admission: Admission) -> None:
        """Give back the reservations of a turn that did not reply."""
        for rid in admission.reservations:
            await self._store.release_turn(rid)

    async def _notice_once(self, key: str, until: float, now: float) -> str | None:
        """The limit message, the first time this limit is hit in its period (a lease that
        lives until the limit lifts remembers it across processes)."""
        lease = await self._store.acquire_lease(
            f"limit-notice:{key}", "limits", max(60.0, until - now), now
        )
        if lease is None:
            return None
        return self._policy.message.format(until=_when(until))
