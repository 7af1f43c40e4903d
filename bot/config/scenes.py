"""``[bots.scene]``: a bot's personas speak together in each of its chats (docs/scenes.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from bot.config.fields import EnvName, Section
from bot.core.scenes import Strategy


class SceneSettings(Section):
    """The rules of a scene; its cast is the bot's ``personas`` (each persona's ``aliases``
    and ``talkativeness`` say how people call it and how readily it joins)."""

    # Who speaks when nobody was addressed: natural (by talkativeness), pooled (one who has
    # not spoken since the last human message), list (everyone in cast order), manual (only
    # the addressed).
    strategy: Strategy = "natural"
    # "model": when nobody was addressed and the strategy chooses (natural, pooled), one
    # small model call picks the speakers among the cast (docs/scenes.md#director); its
    # model (default: the first cast member's) and provider (default: that persona's).
    director: Literal["rules", "model"] = "rules"
    director_model: str = ""
    director_provider: str | None = None
    # Speakers per human turn at most.
    max_speakers: int = Field(default=2, ge=1, le=10)
    # Personas talking on without a human: off unless enabled; then at most
    # max_autonomous_turns persona lines (every one counts) until a human writes.
    autonomous: bool = False
    max_autonomous_turns: int = Field(default=4, ge=1, le=50)
    autonomous_delay_seconds: float = Field(default=5.0, ge=0, le=3600)
    # Persona lines per rolling hour at most; caps hit this many times within an hour mute
    # the scene for mute_minutes (an admin's /stop mutes it too, /stop off ends that).
    max_lines_per_hour: int = Field(default=60, ge=1, le=10_000)
    breaker_trips: int = Field(default=3, ge=1, le=100)
    mute_minutes: float = Field(default=30.0, gt=0, le=7 * 24 * 60)
    # How each persona is seen (docs/scenes.md#platforms): auto = as itself where the
    # platform allows (a Discord webhook per channel when the bot may manage webhooks; on
    # Telegram the persona's own bot account from ``accounts``), else under a bold name
    # header; header = always the name header on the bot's own account.
    voices: Literal["auto", "header"] = "auto"
    # Telegram: persona id -> the environment variable holding that persona's own bot token
    # (it only sends; the bot's own token receives). Personas without one use the header.
    accounts: dict[str, EnvName] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _director_keys_need_the_model(self) -> SceneSettings:
        if self.director == "rules" and (self.director_model or self.director_provider):
            raise ValueError(
                'director_model, director_provider: set only with director = "model" (the '
                "rules alone choose now, and the model would be ignored)"
            )
        return self
