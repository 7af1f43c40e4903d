"""Bounds on what a turn may take: ``[queue]`` (coalescing a burst into one turn), ``[access]``
(who may write), ``[limits]`` (spending) and ``[tools]`` (the tool loop)."""

from __future__ import annotations

from typing import Final

from pydantic import Field, field_validator, model_validator

from bot.config.fields import PlatformId, Section, shown
from bot.core.i18n import N_


class QueueSettings(Section):
    """Coalescing of rapid-fire messages into one turn (docs/architecture.md#queue)."""

    debounce_seconds: float = Field(default=1.5, ge=0)
    max_wait_seconds: float = Field(default=8.0, gt=0)
    lease_seconds: float = Field(default=30.0, gt=0)
    max_concurrent_turns: int = Field(default=16, ge=1)
    scan_interval_seconds: float = Field(default=1.0, gt=0)
    shutdown_grace_seconds: float = Field(default=10.0, ge=0)
    # One turn answers at most this many messages (the rest get the next turn) ...
    max_turn_messages: int = Field(default=50, ge=1, le=1000)
    # ... and this many tokens of them (longer messages are cut, with a visible marker).
    max_turn_tokens: int = Field(default=4000, ge=200)
    # /readyz answers 503 while a due turn has waited longer than this for a slot: the process
    # is overloaded (docs/scaling.md#overload). 0: never for that reason.
    max_backlog_age_seconds: float = Field(default=60.0, ge=0)
    # A reply's generation is cut as soon as this process stores newer input that makes it
    # stale (docs/architecture.md#queue rule 9); false: it runs to its end and is discarded.
    cut_stale: bool = True

    @model_validator(mode="after")
    def _debounce_within_cap(self) -> QueueSettings:
        if self.debounce_seconds > self.max_wait_seconds:
            raise ValueError(
                f"debounce_seconds ({self.debounce_seconds}) must not exceed "
                f"max_wait_seconds ({self.max_wait_seconds})"
            )
        return self


class AccessSettings(Section):
    """Who may use the bots (defaults for every bot entry)."""

    allow_users: list[PlatformId] = Field(default_factory=list)
    allow_chats: list[PlatformId] = Field(default_factory=list)
    admins: list[PlatformId] = Field(default_factory=list)
    denied_reply: str = ""

    @field_validator("denied_reply")
    @classmethod
    def _denied_shown(cls, text: str) -> str:
        return shown(text)


MAX_TURN_LIMIT: Final = 1_000_000_000
MAX_TOKEN_LIMIT: Final = 10**15


class LimitSettings(Section):
    """Spending limits, enforced in the store so that they hold across processes."""

    # Bounded so the store can count against them (a value past a 64-bit integer failed
    # every turn of everyone); 0 = unlimited.
    user_turns_per_hour: int = Field(default=0, ge=0, le=MAX_TURN_LIMIT)
    user_turns_per_day: int = Field(default=0, ge=0, le=MAX_TURN_LIMIT)
    bot_tokens_per_day: int = Field(default=0, ge=0, le=MAX_TOKEN_LIMIT)
    user_input_tokens_per_day: int = Field(default=0, ge=0, le=MAX_TOKEN_LIMIT)
    # Money: dollars a bot may spend per UTC day, and one person over every bot (the calls
    # priced by [llm.prices] when charged; every model a persona or memory uses needs a
    # price then, 0 for a free local one). 0 = unlimited.
    bot_dollars_per_day: float = Field(default=0.0, ge=0, le=1e9)
    user_dollars_per_day: float = Field(default=0.0, ge=0, le=1e9)
    max_input_chars: int = Field(default=8000, ge=100)
    export_every_minutes: float = Field(default=10, ge=0)
    # Built-in: translated into the persona's language; an operator's own text is kept.
    limit_message: str = N_(
        "You've reached the message limit for now. You can continue after {until} (UTC); "
        "your messages are kept."
    )

    @field_validator("limit_message")
    @classmethod
    def _limit_shown(cls, text: str) -> str:
        # Filled with .format(until=...) when a person hits a limit: a placeholder the bot
        # does not fill failed the turn then (KeyError), and the person heard nothing.
        try:
            text.format(until="2026-01-01 12:00")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(
                f"bad placeholder ({exc}); use {{until}} (double braces for a literal brace)"
            ) from None
        return shown(text)


class ToolSettings(Section):
    """Bounds of the tool loop of one turn, of turn hooks and of plugin commands
    (bot/runtime/tools.py, bot/runtime/commands.py)."""

    max_steps: int = Field(default=6, ge=1, le=100)
    max_calls: int = Field(default=12, ge=1, le=1000)
    max_seconds: float = Field(default=60.0, gt=0, le=3600)
    max_tokens: int = Field(default=100_000, ge=1, le=10**9)
    call_timeout_seconds: float = Field(default=15.0, gt=0, le=3600)
    max_result_chars: int = Field(default=16_000, ge=100, le=1_000_000)
    hook_timeout_seconds: float = Field(default=5.0, gt=0, le=600)
    command_timeout_seconds: float = Field(default=10.0, gt=0, le=600)
