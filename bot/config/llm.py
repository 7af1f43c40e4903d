"""What reaches a model: ``[llm]`` (the provider, its notices, prices), ``[media]`` (the
images it is shown) and ``[transcription]`` (who turns voice notes into text)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator, model_validator

from bot.config.fields import EnvName, Section, base_url, shown
from bot.config.plugins import NAME_PATTERN
from bot.core.i18n import N_


class PriceSettings(Section):
    """Dollars per million tokens of one model. Cache writes default to 1.25x of input (a
    5-minute entry) and 2x (``cache_write_1h``, a 1-hour entry), reads to 0.1x: Anthropic's
    prices; set them for other providers' rules (0 for a local model, whose tokens cost
    nothing)."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cache_write: float | None = Field(default=None, ge=0)
    cache_read: float | None = Field(default=None, ge=0)
    cache_write_1h: float | None = Field(default=None, ge=0)


DEFAULT_PRICES: dict[str, PriceSettings] = {
    "claude-opus-5-5": PriceSettings(
        input=5.0, output=25.0, cache_write=6.25, cache_read=0.5, cache_write_1h=10.0
    ),
    "claude-sonnet-5-5": PriceSettings(
        input=3.0, output=15.0, cache_write=3.75, cache_read=0.3, cache_write_1h=6.0
    ),
    "claude-haiku-5-5": PriceSettings(
        input=1.0, output=5.0, cache_write=1.25, cache_read=0.1, cache_write_1h=2.0
    ),
}


#: The name of ``[llm]``'s own provider, as personas and ``[memory]`` may name it.
DEFAULT_PROVIDER = "default"


class ProviderSettings(Section):
    """A named model provider (``[llm.providers.NAME]``): a persona, its fallback or the
    memory tasks may use it instead of ``[llm]``'s (docs/providers.md). Unset connection keys
    are ``[llm]``'s."""

    provider: str = Field(pattern=NAME_PATTERN)
    options: dict[str, Any] = Field(default_factory=dict)
    base_url: str | None = None
    api_key_env: EnvName | None = None
    timeout_seconds: float | None = Field(default=None, gt=0)
    max_retries: int | None = Field(default=None, ge=0, le=10)

    @model_validator(mode="after")
    def _openai_needs_url(self) -> ProviderSettings:
        if self.provider == "openai" and not (self.base_url or "").strip():
            raise ValueError("base_url: required with provider = 'openai' (docs/providers.md)")
        return self


class ModelChoice(Section):
    """A model on a provider (a persona's ``fallback``)."""

    model: str = Field(min_length=1)
    # A name of [llm.providers], or "default" ([llm]); unset: the persona's own provider.
    provider: str | None = None


class LLMSettings(Section):
    """How the model is reached."""

    # A registered model provider: "anthropic", "offline", "openai" (any OpenAI-compatible
    # Chat Completions endpoint, docs/providers.md) or one a plugin adds.
    provider: str = Field(default="anthropic", pattern=NAME_PATTERN)
    # Keys for a plugin's provider (it validates them); the built-in ones take none.
    options: dict[str, Any] = Field(default_factory=dict)
    # The endpoint; required with "openai" (e.g. "http://127.0.0.1:11434/v1" for Ollama).
    base_url: str | None = None
    # "openai": the NAME of the environment variable holding the endpoint's key (the key is
    # read from the environment only); unset = no key, which local servers accept.
    api_key_env: EnvName | None = None
    timeout_seconds: float = Field(default=60.0, gt=0)
    max_retries: int = Field(default=2, ge=0, le=10)
    retry_max_seconds: float = Field(default=60.0, gt=0)
    # Built-in texts are translated into the persona's language (docs/i18n.md); an
    # operator's own text is sent as written.
    trouble_notice: str = N_("I'm having trouble thinking right now; I'll answer shortly.")
    # Sent (and recorded) instead of a reply without text, e.g. stop_reason "refusal".
    refusal_message: str = Field(
        default="I'd rather not answer that. Shall we talk about something else?", min_length=1
    )
    # Sent when the model rejects a turn for good (e.g. "prompt is too long"); "" = silent.
    rejected_notice: str = N_(
        "Sorry, I couldn't answer your last message (it was refused as too long or "
        "malformed). It is kept; please write it again in shorter parts, or send /new to "
        "start over."
    )
    prices: dict[str, PriceSettings] = Field(default_factory=lambda: dict(DEFAULT_PRICES))
    # More providers by name, for personas, their fallbacks and memory tasks ("default" is
    # this section's own).
    providers: dict[str, ProviderSettings] = Field(default_factory=dict)

    @field_validator("providers")
    @classmethod
    def _provider_names(cls, providers: dict[str, ProviderSettings]) -> dict[str, ProviderSettings]:
        for name in providers:
            if name == DEFAULT_PROVIDER or not re.fullmatch(r"[a-z0-9][a-z0-9_-]{0,31}", name):
                raise ValueError(
                    f"{name!r}: a provider's name is 1-32 lowercase letters, digits, _ and - "
                    f'(and not "{DEFAULT_PROVIDER}", the name of [llm] itself)'
                )
        return providers

    def named(self, name: str | None) -> LLMSettings:
        """The settings a provider factory gets for provider ``name`` (None or "default":
        this section; else the named provider over this section's connection keys)."""
        if name is None or name == DEFAULT_PROVIDER:
            return self
        entry = self.providers[name]
        update: dict[str, Any] = {
            "provider": entry.provider,
            "options": entry.options,
            "base_url": entry.base_url,
            "api_key_env": entry.api_key_env,
        }
        if entry.timeout_seconds is not None:
            update["timeout_seconds"] = entry.timeout_seconds
        if entry.max_retries is not None:
            update["max_retries"] = entry.max_retries
        return self.model_copy(update={**update, "providers": {}})

    def knows(self, name: str | None) -> bool:
        """Whether ``name`` names a provider (None and "default": this section's)."""
        return name is None or name == DEFAULT_PROVIDER or name in self.providers

    @field_validator("prices", mode="after")
    @classmethod
    def _over_defaults(cls, prices: dict[str, PriceSettings]) -> dict[str, PriceSettings]:
        """An operator's prices add to (and override) the documented defaults: pricing one
        local model does not unprice Claude."""
        return {**DEFAULT_PRICES, **prices}

    @field_validator("trouble_notice", "rejected_notice", "refusal_message")
    @classmethod
    def _notices_shown(cls, text: str) -> str:
        return shown(text)

    @model_validator(mode="after")
    def _openai_needs_url(self) -> LLMSettings:
        # Here, not only when the client is built: config check names it.
        if self.provider == "openai" and not (self.base_url or "").strip():
            raise ValueError(
                "base_url: required with provider = 'openai' (the endpoint, e.g. "
                "http://127.0.0.1:11434/v1 for Ollama; docs/providers.md)"
            )
        return self


class MediaConfig(Section):
    """Photos, stickers and voice notes (docs/architecture.md#media)."""

    # Images shown to the model per request at most, the newest (0 = never fetch or show any:
    # the model reads a text stand-in such as "[photo]" instead).
    max_images: int = Field(default=6, ge=0, le=100)
    # Larger files are not downloaded (Telegram lets bots download up to 20 MB).
    max_download_mb: float = Field(default=20.0, gt=0, le=500)
    fetch_timeout_seconds: float = Field(default=20.0, gt=0, le=600)


class TranscriptionConfig(Section):
    """Who transcribes voice notes (docs/transcription.md): by default an OpenAI-compatible
    ``/audio/transcriptions`` server at ``url``; ``url = ""`` with the built-in provider (the
    default): nobody, and the persona is told it cannot listen to voice notes."""

    @property
    def enabled(self) -> bool:
        """Whether voice notes are transcribed at all."""
        return self.provider != "openai" or bool(self.url)

    # "openai": the built-in client of an OpenAI-compatible server; or one a plugin registers
    # with app.transcriber (its own keys in ``options``).
    provider: str = Field(default="openai", pattern=NAME_PATTERN)
    options: dict[str, Any] = Field(default_factory=dict)
    url: str = ""  # e.g. "http://127.0.0.1:8000/v1"
    model: str = Field(default="whisper-1", min_length=1)
    api_key_env: EnvName | None = None
    language: str | None = Field(default=None, pattern=r"^[a-z]{2,3}$")
    prompt: str | None = Field(default=None, max_length=1000)
    timeout_seconds: float = Field(default=60.0, gt=0, le=600)
    # Voice notes longer than this are not transcribed (bounds what transcription costs).
    max_seconds: float = Field(default=300.0, gt=0, le=7200)

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        # What the client refuses at start (bot/llm/transcription.py), said here already.
        return base_url(url, example="http://127.0.0.1:8000/v1", none=', or "" for none')
