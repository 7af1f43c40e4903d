"""Spending limits (per-user turns per hour/day, input tokens and dollars per day; per-bot
tokens and dollars per day), kept in the store so that they hold across processes, with one
friendly notice per limit period. Dollars are what the calls cost when they were charged
(``model_usage.cost``, priced by ``[llm.prices]``)."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from bot.core.clock import Clock
from bot.core.events import Turn, UserKey
from bot.core.i18n import N_, Texts
from bot.runtime.languages import Languages
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
    message: str = N_("You've reached the message limit for now. You can continue after {until}.")
    # Input tokens (uncached + cache writes + cache reads) of replies and memory tasks charged
    # to one person per UTC day, over every bot of the store.
    user_input_tokens_per_day: int = 0
    # Dollars per UTC day: of one bot, and charged to one person over every bot.
    bot_dollars_per_day: float = 0.0
    user_dollars_per_day: float = 0.0

    @property
    def active(self) -> bool:
        """Whether any limit is set."""
        return bool(
            self.user_turns_per_hour
            or self.user_turns_per_day
            or self.bot_tokens_per_day
            or self.user_input_tokens_per_day
            or self.bot_dollars_per_day
            or self.user_dollars_per_day
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
    #: The notice's language: the turn's persona's (docs/i18n.md).
    languages: Languages = field(default_factory=Languages)

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
        # The notices' language: the turn's persona's (docs/i18n.md).
        texts = self.languages.texts(conversation.bot, turn.persona)
        spent = await self._bot_budget_spent(conversation.bot, now)
        if spent is not None:
            until = _day_start(now) + DAY
            notice = await self._notice_once(f"budget:{conversation}", until, now, texts)
            told = () if notice is None else (texts.finish(notice),)
            return Admission(False, limit=spent, notices=told)
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
            notice = await self._notice_once(f"user:{user.platform}:{author}", lifted, now, texts)
            if notice is not None:
                notices.append(texts.finish(self._addressed(turn, author, notice)))
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
        the model now: the bot's daily budgets and each non-admin author's (input tokens,
        dollars)."""
        now = self.clock.now()
        if await self._bot_budget_spent(bot, now) is not None:
            return False
        for author in authors:
            if self.is_admin(bot, author):
                continue
            if await self._daily_limit(UserKey(platform, author), now) is not None:
                return False
        return True

    async def _bot_budget_spent(self, bot: str, now: float) -> str | None:
        """Which of the bot's daily budgets is spent (None: neither)."""
        policy = self.policy
        if not (policy.bot_tokens_per_day or policy.bot_dollars_per_day):
            return None
        used = await self.store.usage_since(_day_start(now), bot)
        tokens = policy.bot_tokens_per_day
        if tokens and used.input_tokens + used.output_tokens >= tokens:
            return "bot_tokens_per_day"
        if policy.bot_dollars_per_day and used.cost >= policy.bot_dollars_per_day:
            return "bot_dollars_per_day"
        return None

    async def _daily_limit(self, user: UserKey, now: float) -> str | None:
        """Which of the person's daily budgets (input tokens, dollars) is spent (None:
        neither)."""
        policy = self.policy
        if policy.user_input_tokens_per_day:
            used = await self.store.input_tokens_since(user, _day_start(now))
            if used >= policy.user_input_tokens_per_day:
                return "user_input_tokens"
        if policy.user_dollars_per_day:
            spent = await self.store.cost_since(user, _day_start(now))
            if spent >= policy.user_dollars_per_day:
                return "user_dollars"
        return None

    async def _person_limit(
        self, user: UserKey, bot: str, now: float, granted: list[int]
    ) -> tuple[float | None, str]:
        """When the person may continue and which limit holds them (None: not limited); a
        granted turn reservation is appended to ``granted``."""
        policy = self.policy
        daily = await self._daily_limit(user, now)
        if daily is not None:
            return _day_start(now) + DAY, daily
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

    async def _notice_once(self, key: str, until: float, now: float, texts: Texts) -> str | None:
        """The limit message, the first time this limit is hit in its period (a lease that
        lives until the limit lifts remembers it across processes)."""
        lease = await self.store.acquire_lease(
            f"limit-notice:{key}", "limits", max(60.0, until - now), now
        )
        if lease is None:
            return None
        # The built-in text is translated; an operator's own ([limits] message) is kept.
        return texts(self.policy.message).format(until=_when(until))
