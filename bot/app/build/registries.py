"""What plugins add to by name: platforms, model providers and transcribers, and the built-in
ones (docs/plugins.md#platforms). The App keeps one registry of each; these build from them."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence

from adapters.base import BaseAdapter
from bot.config import (
    BotSettings,
    LLMSettings,
    PersonaSettings,
    Secrets,
    Settings,
    TranscriptionConfig,
    openai_key_missing,
    unknown_name,
)
from bot.core.errors import ConfigError
from bot.core.llm import DEFAULT_PROVIDER, BaseLLM
from bot.core.media import Transcriber
from bot.llm.offline import OfflineLLM
from bot.llm.router import ProviderRouter
from bot.llm.transcription import OpenAITranscriber, TranscriptionSettings, transcriber_from

#: Makes the adapter of one ``[[bots]]`` entry (docs/plugins.md#platforms).
PlatformFactory = Callable[[BotSettings, PersonaSettings, Secrets], BaseAdapter]
#: Makes the model client of ``[llm]`` (docs/plugins.md#model-providers).
ProviderFactory = Callable[[LLMSettings, Secrets], BaseLLM]
#: Makes the transcriber of ``[transcription] provider = name`` (bot.core.media.Transcriber;
#: one with an ``async aclose()`` is closed when the process stops).
TranscriberFactory = Callable[[TranscriptionConfig, Secrets], Transcriber]


def builtin_platform(name: str) -> PlatformFactory:
    """The ``create_adapter`` of ``adapters.<name>``, imported only when a bot uses it."""

    def create(entry: BotSettings, persona: PersonaSettings, secrets: Secrets) -> BaseAdapter:
        module = importlib.import_module(f"adapters.{name}")
        adapter: BaseAdapter = module.create_adapter(entry, persona, secrets)
        return adapter

    return create


def telegram_platform(personas: Sequence[PersonaSettings]) -> PlatformFactory:
    """Telegram's ``create_adapter``, told every persona's name: a scene's persona accounts
    post under their persona, and a reply to one of them names it (docs/scenes.md)."""
    names = {p.id: p.name for p in personas}

    def create(entry: BotSettings, persona: PersonaSettings, secrets: Secrets) -> BaseAdapter:
        module = importlib.import_module("adapters.telegram")
        adapter: BaseAdapter = module.create_adapter(entry, persona, secrets, names=names)
        return adapter

    return create


def anthropic_provider(llm: LLMSettings, secrets: Secrets) -> BaseLLM:
    """Claude through the Messages API; ConfigError without ``ANTHROPIC_API_KEY``."""
    key = secrets.anthropic_api_key
    if key is None:
        raise ConfigError(
            [
                "ANTHROPIC_API_KEY: not set in the environment (needed by llm.provider = "
                "'anthropic'; set llm.provider = 'offline' to run without Claude)"
            ]
        )
    from bot.llm.anthropic import AnthropicLLM

    return AnthropicLLM(
        api_key=key,
        base_url=llm.base_url,
        timeout_seconds=llm.timeout_seconds,
        max_retries=llm.max_retries,
    )


def openai_provider(llm: LLMSettings, secrets: Secrets) -> BaseLLM:
    """An OpenAI-compatible Chat Completions endpoint at ``llm.base_url`` (docs/providers.md);
    its key, if any, from the variable ``llm.api_key_env`` names."""
    if not llm.base_url:
        raise ConfigError(["llm.base_url: required with llm.provider = 'openai'"])
    key = None
    if llm.api_key_env:
        key = secrets.get(llm.api_key_env)
        if key is None:
            raise ConfigError([openai_key_missing(llm.api_key_env)])
    from bot.llm.openai import OpenAICompatLLM

    return OpenAICompatLLM(
        base_url=llm.base_url,
        api_key=key,
        timeout_seconds=llm.timeout_seconds,
        max_retries=llm.max_retries,
    )


def offline_provider(llm: LLMSettings, secrets: Secrets) -> BaseLLM:
    """The offline model: no network, echoes what it received."""
    return OfflineLLM()


def builtin_platforms(personas: Sequence[PersonaSettings] = ()) -> dict[str, PlatformFactory]:
    """The platforms personabot ships (``personas``: the configured ones, by whose names
    Telegram's persona accounts are known)."""
    return {"telegram": telegram_platform(personas), "discord": builtin_platform("discord")}


def builtin_providers() -> dict[str, ProviderFactory]:
    """The model providers personabot ships."""
    return {
        "anthropic": anthropic_provider,
        "offline": offline_provider,
        "openai": openai_provider,
    }


def unknown(kind: str, key: str, name: str, installed: Mapping[str, object]) -> ConfigError:
    """The error for a platform or provider nobody registered, listing what is installed."""
    return ConfigError([unknown_name(kind, key, name, installed)])


def build_llm(
    settings: Settings,
    secrets: Secrets,
    *,
    offline_fallback: bool,
    providers: Mapping[str, ProviderFactory] | None = None,
) -> BaseLLM:
    """The configured model; without an API key, the offline model only if allowed. With
    ``[llm.providers]`` or a persona's fallback, a router in front of them all (each request
    goes to the provider it names: bot/llm/router.py)."""
    providers = builtin_providers() if providers is None else providers
    default = _provider(settings.llm, "llm.provider", secrets, offline_fallback, providers)
    fallbacks = any(p.fallback is not None for p in settings.personas)
    if not settings.llm.providers and not fallbacks:
        return default
    built = {DEFAULT_PROVIDER: default}
    for name in settings.llm.providers:
        key = f"llm.providers.{name}.provider"
        named = settings.llm.named(name)
        built[name] = _provider(named, key, secrets, offline_fallback, providers)
    return ProviderRouter(built)


def _provider(
    llm: LLMSettings,
    key: str,
    secrets: Secrets,
    offline_fallback: bool,
    providers: Mapping[str, ProviderFactory],
) -> BaseLLM:
    factory = providers.get(llm.provider)
    if factory is None:
        raise unknown("model provider", key, llm.provider, providers)
    if llm.provider == "anthropic" and secrets.anthropic_api_key is None and offline_fallback:
        return OfflineLLM()
    return factory(llm, secrets)


def openai_transcriber(config: TranscriptionConfig, secrets: Secrets) -> OpenAITranscriber:
    """The built-in transcriber: an OpenAI-compatible ``/audio/transcriptions`` client."""
    key = secrets.get(config.api_key_env) if config.api_key_env else None
    if config.api_key_env and key is None:
        raise ConfigError(
            [f"transcription.api_key_env: the environment variable {config.api_key_env} is unset"]
        )
    return transcriber_from(
        TranscriptionSettings(
            url=config.url,
            model=config.model,
            api_key_env=config.api_key_env,
            language=config.language,
            prompt=config.prompt,
            timeout_seconds=config.timeout_seconds,
            max_seconds=config.max_seconds,
        ),
        key,
    )


def builtin_transcribers() -> dict[str, TranscriberFactory]:
    """The transcription providers personabot ships."""
    return {"openai": openai_transcriber}


def build_transcriber(
    settings: Settings,
    secrets: Secrets,
    transcribers: Mapping[str, TranscriberFactory] | None = None,
) -> Transcriber | None:
    """The configured transcriber of voice notes, or None when there is none."""
    config = settings.transcription
    if not config.enabled:
        return None
    transcribers = builtin_transcribers() if transcribers is None else transcribers
    factory = transcribers.get(config.provider)
    if factory is None:
        raise unknown(
            "transcription provider", "transcription.provider", config.provider, transcribers
        )
    return factory(config, secrets)
