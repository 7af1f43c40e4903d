"""The personas' voices (docs/voices.md): the synthesizers plugins add to by name, the
built-in one, and each persona's voice built from its ``[personas.voice]``."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from bot.config import Secrets, Settings, VoiceSettings
from bot.core.errors import ConfigError
from bot.core.speech import Synthesizer, VoiceRequest
from bot.llm.speech import OpenAISpeech
from bot.runtime.voice import PersonaVoice, VoicePolicy

#: Makes the synthesizer of ``[personas.voice] provider = name`` (bot.core.speech.Synthesizer;
#: one with an ``async aclose()`` is closed when the process stops).
SynthesizerFactory = Callable[[VoiceSettings, Secrets], Synthesizer]


def openai_synthesizer(config: VoiceSettings, secrets: Secrets) -> OpenAISpeech:
    """The built-in synthesizer: an OpenAI-compatible ``/audio/speech`` client; its key, if
    any, from the variable ``api_key_env`` names."""
    key = None
    if config.api_key_env:
        key = secrets.get(config.api_key_env)
        if key is None:
            raise ConfigError(
                [f"voice.api_key_env: the environment variable {config.api_key_env} is unset"]
            )
    # The runtime's timeout decides; the client's own is a backstop a little after it.
    return OpenAISpeech(config.url, api_key=key, timeout_seconds=config.timeout_seconds + 5)


def builtin_synthesizers() -> dict[str, SynthesizerFactory]:
    """The text-to-speech providers personabot ships."""
    return {"openai": openai_synthesizer}


def voice_policy(config: VoiceSettings) -> VoicePolicy:
    """When and how a persona speaks, as the runtime reads it."""
    request = VoiceRequest(
        model=config.model,
        voice=config.voice,
        format=config.format,
        speed=config.speed,
        instructions=config.instructions,
    )
    return VoicePolicy(
        request=request,
        when=config.when,
        timeout_seconds=config.timeout_seconds,
        max_chars=config.max_chars,
        show_text=config.show_text,
        price_per_million_chars=config.price_per_million_chars,
    )


def unknown_synthesizers(
    settings: Settings, synthesizers: Mapping[str, SynthesizerFactory]
) -> list[str]:
    """A problem for each persona voice whose provider nobody registered."""
    installed = ", ".join(sorted(synthesizers)) or "none"
    return [
        f"personas[{index}].voice.provider: no text-to-speech provider {p.voice.provider!r} "
        f"(installed: {installed}; a plugin registers one with app.synthesizer)"
        for index, p in enumerate(settings.personas)
        if p.voice is not None and p.voice.provider not in synthesizers
    ]


def build_voices(
    settings: Settings, secrets: Secrets, synthesizers: Mapping[str, SynthesizerFactory]
) -> dict[str, PersonaVoice]:
    """Each persona's voice by persona id (none for a persona without ``[personas.voice]``);
    ConfigError names every persona whose synthesizer cannot be made."""
    problems = unknown_synthesizers(settings, synthesizers)
    if problems:
        raise ConfigError(problems)
    voices: dict[str, PersonaVoice] = {}
    for index, persona in enumerate(settings.personas):
        config = persona.voice
        if config is None:
            continue
        label = f"personas[{index}].voice.provider {config.provider!r}"
        try:
            made = synthesizers[config.provider](config, secrets)
        except ConfigError as exc:
            problems += [f"personas[{index}].{problem}" for problem in exc.problems]
            continue
        except Exception as exc:  # a plugin's factory: its message may hold a key it read
            problems.append(f"{label}: the factory failed: {type(exc).__name__}")
            continue
        if not callable(getattr(made, "synthesize", None)):
            problems.append(
                f"{label}: the factory returned {type(made).__name__}, not a Synthesizer"
            )
            continue
        voices[persona.id] = PersonaVoice(voice_policy(config), made)
    if problems:
        raise ConfigError(problems)
    return voices
