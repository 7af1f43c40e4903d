"""The memory settings of one bot, as every memory job reads them (docs/architecture.md#prompt)."""

from __future__ import annotations

from dataclasses import dataclass

from bot.core.llm import DEFAULT_PROVIDER
from bot.core.scenes import CastMember
from memory.assemble import Budget


@dataclass(frozen=True, slots=True)
class MemoryPolicy:
    """Memory settings of one bot (its persona's overrides applied)."""

    budget: Budget
    summary_model: str
    # The configured provider of summaries and extraction (bot/llm/router.py).
    summary_provider: str = DEFAULT_PROVIDER
    private_memory_in_groups: bool = False
    extract_after_idle_seconds: float = 300.0
    share_across_groups: bool = False
    # Images shown per request at most (the newest; 0 = none): docs/architecture.md#media.
    max_images: int = 6
    # A scene's cast (docs/scenes.md#memory): what a person tells one persona, only that
    # persona learns. Empty: not a scene.
    cast: tuple[CastMember, ...] = ()
