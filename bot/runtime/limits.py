"""Spending limits (per-user turns per hour/day, per-bot tokens per day), kept in the store so
that they hold across processes, with one friendly notice per limit period."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from bot.core.clock import Clock
from bot.core.events import Turn, UserKey
from bot.store.contracts import LeaseStore, UsageStore

log = logging.getLogger("personabot.limits")

DAY = 86400.0


class LimitsStore(UsageStore, LeaseStore, Protocol):
    """What the limits read and write: turn reservations and usage, and the lease that sends
    one notice per limit period."""


@dataclass(frozen=True, slots=True)
class LimitPolicy:
    """The limits in force (0 = unlimited)."""

    user_turns_per_hour: int = 0
    user_turns_per_day: int = 0
    bot_tokens_per_day: int = 0
    message: str = "You've reached the message limit for now. You can continue after {until}."
    # Input tokens (uncached + cache writes + cache reads) of replies and memory tasks charged
    # to one person per UTC day, over every bot of the store.
    user_input_tokens_per_day: int = 0

    @property
    def active(self) -> bool:
        """Whether any limit is set."""
        return bool(
            self.user_turns_per_hour
            or self.user_turns_per_day
            or self.bot_tokens_per_day
            or self.user_input_tokens_per_day
        )


@dataclass(frozen=True, slots=True)
class Admission:
    """Which authors of a turn may be answered; reservations to give back if no reply.

    ``granted`` False: nobody is answered (the bot's budget is spent, or every author is
    limited). Otherwise the messages of the ``held`` authors are kept as context without an
    answer, and everyone else is answered.
    """

    granted: bool
    reservations: tuple[int, ...] = ()
    limit: str | None = None
    notices: tuple[str, ...] = ()
    held: tuple[str, ...] = ()

    @property
    def notice(self) -> str | None:
        """The notices to send, as one text (None when there is none)."""
        return "\n".join(self.notices) if self.notices else None


def _day_start(now: float) -> float:
    return now - now % DAY


def _when(at: float) -> str:
    return dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%d %H:%M")


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Limits:
    """Admits turns under the configured limits; admins are exempt."""

    store: LimitsStore
    clock: Clock
    policy: LimitPolicy
    is_admin: Callable[[str, str], bool]

    async def admit(self, turn: Turn) -> Admission:
        """Check the bot's daily tokens, then each non-admin author's own limits: a limited
        author's messages are held back, never the others' (one person cannot silence a
        group)."""
        policy = self.policy
        if not policy.active:
            return Admission(True)
        conversation = turn.session.conversation
        now = self.clock.now()
        people = [a for a in turn.authors if not self.is_admin(conversation.bot, a)]
        if not people:
            return Admission(True)
        if await self._bot_budget_spent(conversation.bot, now):
            until = _day_start(now) + DAY
            notice = await self._notice_once(f"budget:{conversation}", until, now)
            return Admission(
                False, limit="bot_tokens_per_day", notices=() if notice is None else (notice,)
            )
        granted: list[int] = []
        held: list[str] = []
        notices: list[str] = []
        limit: str | None = None
        for author in people:
            user = UserKey(conversation.platform, author)
            lifted, which = await self._person_limit(user, conversation.bot, now, granted)
            if lifted is None:
                continue
            held.append(author)
            limit = which
            log.info("user %s reached a %s limit until %s", author, which, _when(lifted))
            notice = await self._notice_once(f"user:{user.platform}:{author}", lifted, now)
            if notice is not None:
                notices.append(self._addressed(turn, author, notice))
        answered = [a for a in turn.authors if a not in held]
        return Admission(
            bool(answered),
            reservations=tuple(granted),
            limit=limit,
            notices=tuple(notices),
            held=tuple(held),
        )

    async def allow_task(self, bot: str, platform: str, authors: Sequence[str]) -> bool:
        """Whether a memory task (summary, extraction) over these people's messages may call
        the model now: the bot's daily tokens and each non-admin author's input budget."""
        policy = self.policy
        now = self.clock.now()
        if policy.bot_tokens_per_day and await self._bot_budget_spent(bot, now):
            return False
        if policy.user_input_tokens_per_day:
            for author in authors:
                if self.is_admin(bot, author):
                    continue
                used = await self.store.input_tokens_since(
                    UserKey(platform, author), _day_start(now)
                )
                if used >= policy.user_input_tokens_per_day:
                    return False
        return True

    async def _bot_budget_spent(self, bot: str, now: float) -> bool:
        if not self.policy.bot_tokens_per_day:
            return False
        used = await self.store.usage_since(_day_start(now), bot)
        return used.input_tokens + used.output_tokens >= self.policy.bot_tokens_per_day

    async def _person_limit(
        self, user: UserKey, bot: str, now: float, granted: list[int]
    ) -> tuple[float | None, str]:
        """When the person may continue and which limit holds them (None: not limited); a
        granted turn reservation is appended to ``granted``."""
        policy = self.policy
        if policy.user_input_tokens_per_day:
            used = await self.store.input_tokens_since(user, _day_start(now))
            if used >= policy.user_input_tokens_per_day:
                return _day_start(now) + DAY, "user_input_tokens"
        if not (policy.user_turns_per_hour or policy.user_turns_per_day):
            return None, ""
        reservation = await self.store.reserve_turn(
            user,
            bot,
            now,
            per_hour=policy.user_turns_per_hour,
            per_day=policy.user_turns_per_day,
        )
        if reservation.id is None:
            return reservation.until or now + 3600, "user_turns"
        granted.append(reservation.id)
        return None, ""

    @staticmethod
    def _addressed(turn: Turn, author: str, notice: str) -> str:
        """In a group the notice names the person it is about."""
        if all(m.is_private for m in turn.messages):
            return notice
        name = next(m.display_name for m in turn.messages if m.author_id == author)
        return f"{name}: {notice}"

    async def release(self, admission: Admission) -> None:
        """Give back the reservations of a turn that did not reply."""
        for rid in admission.reservations:
            await self.store.release_turn(rid)

    async def _notice_once(self, key: str, until: float, now: float) -> str | None:
        """The limit message, the first time this limit is hit in its period (a lease that
        lives until the limit lifts remembers it across processes)."""
        lease = await self.store.acquire_lease(
            f"limit-notice:{key}", "limits", max(60.0, until - now), now
        )
        if lease is None:
            return None
        return self.policy.message.format(until=_when(until))
