"""``[personas.voice]``: a persona that answers with its voice (docs/voices.md). The key is
never here: ``api_key_env`` names the environment variable that holds it."""

from __future__ import annotations

import urllib.parse
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from bot.config.fields import EnvName, Section, base_url
from bot.config.plugins import NAME_PATTERN

#: ``voice-notes``: a reply to a turn with a voice or video note is spoken; ``always``: every
#: reply is (where the platform can send voice messages).
SpeakWhen = Literal["voice-notes", "always"]


class VoiceSettings(Section):
    """How and when a persona speaks its replies (docs/voices.md)."""

    # "openai": the built-in client of an OpenAI-compatible POST /audio/speech; or one a
    # plugin registers with app.synthesizer (its own keys in ``options``).
    provider: str = Field(default="openai", pattern=NAME_PATTERN)
    options: dict[str, Any] = Field(default_factory=dict)
    url: str = ""  # e.g. "https://api.openai.com/v1" or "http://127.0.0.1:8880/v1"
    api_key_env: EnvName | None = None
    model: str = Field(default="gpt-4o-mini-tts", min_length=1, max_length=200)
    voice: str = Field(min_length=1, max_length=200)  # "alloy", "af_heart", ...
    # Telegram and Discord voice messages are Ogg Opus; Telegram also plays MP3.
    format: Literal["opus", "mp3"] = "opus"
    speed: float | None = Field(default=None, ge=0.25, le=4.0)
    instructions: str | None = Field(default=None, min_length=1, max_length=2000)
    when: SpeakWhen = "voice-notes"
    # Synthesis taking longer than this: the reply goes out as text (nothing is lost).
    timeout_seconds: float = Field(default=20.0, gt=0, le=300)
    # A longer reply goes out as text, unsynthesised (bounds cost and the listener's time;
    # OpenAI takes at most 4096 characters).
    max_chars: int = Field(default=1000, ge=1, le=4096)
    # The reply's text goes with the voice message (Telegram: its caption when it fits,
    # else messages after it; Discord: the message the audio is attached to).
    show_text: bool = True
    # Dollars per million characters spoken (OpenAI tts-1: 15). Charged to the people the
    # reply answers, toward the money limits; unset: the cost is unknown (a money limit
    # then refuses the configuration).
    price_per_million_chars: float | None = Field(default=None, ge=0)

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        base_url(url, example="http://127.0.0.1:8880/v1", none=", e.g. https://api.openai.com/v1")
        parts = urllib.parse.urlsplit(url)
        if parts.username or parts.password:
            raise ValueError(
                "must not hold credentials: put the key in the environment and name its "
                "variable in api_key_env"
            )
        return url

    @model_validator(mode="before")
    @classmethod
    def _no_key_here(cls, data: Any) -> Any:
        # A key pasted into the file gets a clear answer (never quoting it), not "extra input".
        if isinstance(data, dict):
            for name in ("api_key", "key", "token"):
                if name in data:
                    raise ValueError(
                        f"{name}: the key never goes in the file; put it in the environment "
                        "and name its variable in api_key_env"
                    )
        return data

    @model_validator(mode="after")
    def _openai_needs_url(self) -> VoiceSettings:
        if self.provider == "openai" and not self.url:
            raise ValueError(
                "url: required with provider = 'openai' (the server's base up to /v1, e.g. "
                "https://api.openai.com/v1)"
            )
        return self
