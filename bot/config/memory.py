"""What the model sees of a conversation and how long it is kept: ``[memory]``,
``[sessions]`` and ``[retention]`` (docs/architecture.md#prompt, #retention)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from bot.config.fields import Section
from bot.core.i18n import N_


class SessionSettings(Section):
    """When a conversation's session ends by itself."""

    idle_timeout_minutes: float = Field(default=0, ge=0)
    daily_reset_hour: int | None = Field(default=None, ge=0, le=23)
    timezone_offset_hours: float = Field(default=0, ge=-14, le=14)


class MemorySettings(Section):
    """What the model sees of the conversation (docs/architecture.md#prompt)."""

    window_messages: int = Field(default=24, ge=2, le=10_000)
    # Where the window is folded into the summary (unset: twice window_messages): larger folds
    # less often, so a cached prompt prefix lives longer, and every prompt is longer
    # (docs/architecture.md#prompt, "Keeping the summary").
    window_max_messages: int | None = Field(default=None, ge=3, le=20_000)
    prompt_budget_tokens: int = Field(default=6000, ge=256)
    summary_budget_tokens: int = Field(default=800, ge=50)
    user_memory_budget_tokens: int = Field(default=600, ge=50)
    summary_model: str | None = None
    # The provider of summaries and extraction (a name of [llm.providers], or "default");
    # unset: the persona's provider when summary_model is unset too, else [llm]'s.
    provider: str | None = None
    private_memory_in_groups: bool = False
    share_across_groups: bool = False
    extract_after_idle_minutes: float = Field(default=5.0, ge=0)
    sweep_interval_seconds: float = Field(default=30.0, gt=0)
    # 1-hour prompt-cache entries for prompts that only append (docs/architecture.md#prompt);
    # false: 5-minute entries only (e.g. a gateway that refuses the "ttl" field).
    cache_hour: bool = True

    @property
    def fold_at(self) -> int:
        """The window's most messages before a fold (``window_max_messages``, else twice
        ``window_messages``): ``memory.assemble.Budget.fold_at``."""
        return self.window_max_messages or 2 * self.window_messages

    @model_validator(mode="after")
    def _fold_after_the_window(self) -> MemorySettings:
        if self.window_max_messages is not None and (
            self.window_max_messages <= self.window_messages
        ):
            raise ValueError(
                f"window_max_messages ({self.window_max_messages}) must be more than "
                f"window_messages ({self.window_messages}): the window grows to it, then is "
                "folded down to window_messages"
            )
        return self


class RetentionSettings(Section):
    """How long messages are kept and what the model is told about missing ones
    (docs/architecture.md#retention)."""

    mode: Literal["session", "message"] = "session"
    days: float = Field(default=30, ge=0)
    gap_policy: Literal["note", "tell_user", "refuse"] = "note"
    interval_minutes: float = Field(default=60, gt=0)
    batch_size: int = Field(default=500, ge=1, le=1_000_000)
    forget_deletes_messages: bool = False
    tell_user_message: str = N_(
        "Some messages of this conversation (turns {turns}) are no longer available to me. "
        "If something from them matters, please tell me again."
    )
    refuse_message: str = N_(
        "Part of this conversation (turns {turns}) is no longer available, so I can't "
        "continue it reliably. A human will take over; you can also send /new to start over."
    )

    @field_validator("tell_user_message", "refuse_message")
    @classmethod
    def _gap_placeholders(cls, text: str) -> str:
        try:
            text.format(turns="15-16", first=15, last=16)
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(
                f"bad placeholder ({exc}); use {{turns}}, {{first}} or {{last}} "
                "(double braces for a literal brace)"
            ) from None
        return text
