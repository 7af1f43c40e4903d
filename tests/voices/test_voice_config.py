"""``[personas.voice]`` is checked when the file loads, with one clear line per problem, and
never shows a key pasted into it (docs/voices.md#settings)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.app import App
from bot.app.build.voices import build_voices, builtin_synthesizers
from bot.config import Secrets, load_settings
from bot.core.errors import ConfigError

PERSONA = """
[[personas]]
id = "mira"
name = "Mira"
system = "You are Mira."
first_message = ["Hi."]
"""
KEY = "sk-proj-THISISAREALLOOKINGKEY1234567890"


def _problems(tmp_path: Path, voice: str, extra: str = "") -> list[str]:
    path = tmp_path / "personabot.toml"
    path.write_text(extra + PERSONA + "[personas.voice]\n" + voice, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    return [line.split(": ", 1)[1] for line in caught.value.lines()]


@pytest.mark.parametrize(
    ("voice", "expected"),
    [
        ('url = "https://api.openai.com/v1"\n', "personas[0].voice.voice: field required"),
        ('voice = "alloy"\n', "personas[0].voice.url: required with provider = 'openai'"),
        (
            f'voice = "alloy"\nurl = "https://api.openai.com/v1"\napi_key = "{KEY}"\n',
            "personas[0].voice.api_key: the key never goes in the file",
        ),
        (
            f'voice = "alloy"\nurl = "https://api.openai.com/v1"\napi_key_env = "{KEY}"\n',
            "personas[0].voice.api_key_env: must name an environment variable",
        ),
        (
            'voice = "alloy"\nurl = "https://api.openai.com/v1?key=1"\n',
            "personas[0].voice.url: must not have a query or fragment",
        ),
        (
            'voice = "alloy"\nurl = "https://user:pw@api.openai.com/v1"\n',
            "personas[0].voice.url: must not hold credentials",
        ),
        (
            'voice = "alloy"\nurl = "https://api.openai.com/v1"\nwhen = "sometimes"\n',
            "personas[0].voice.when: Input should be 'voice-notes' or 'always'",
        ),
        (
            'voice = "alloy"\nurl = "https://api.openai.com/v1"\nformat = "wav"\n',
            "personas[0].voice.format: Input should be 'opus' or 'mp3'",
        ),
        (
            'voice = "alloy"\nurl = "https://api.openai.com/v1"\nmax_chars = 5000\n',
            "personas[0].voice.max_chars: Input should be less than or equal to 4096",
        ),
        (
            'voice = "alloy"\nurl = "https://api.openai.com/v1"\ntimeout_seconds = 0\n',
            "personas[0].voice.timeout_seconds: Input should be greater than 0",
        ),
        (
            'voice = "alloy"\nurl = "https://api.openai.com/v1"\nvoce = "x"\n',
            "personas[0].voice.voce: unknown key",
        ),
    ],
)
def test_a_bad_voice_is_one_clear_line(tmp_path: Path, voice: str, expected: str) -> None:
    problems = _problems(tmp_path, voice)
    assert len(problems) == 1, problems
    assert problems[0].startswith(expected), problems
    assert KEY not in problems[0]


def test_a_money_limit_needs_the_voice_priced(tmp_path: Path) -> None:
    limits = '[limits]\nuser_dollars_per_day = 1.0\n[llm.prices."claude-sonnet-5-5"]\n'
    limits += "input = 3.0\noutput = 15.0\n"
    voice = 'voice = "alloy"\nurl = "http://127.0.0.1:8880/v1"\n'
    problems = _problems(tmp_path, voice, limits)
    assert any(
        "personas[0].voice.price_per_million_chars: a money limit is set" in p for p in problems
    )


def _valid(tmp_path: Path, voice: str) -> Path:
    path = tmp_path / "ok.toml"
    path.write_text(PERSONA + "[personas.voice]\n" + voice, encoding="utf-8")
    return path


def test_an_unknown_provider_names_what_is_installed(tmp_path: Path) -> None:
    path = _valid(tmp_path, 'provider = "elevenlabs"\nvoice = "Rachel"\n')
    with pytest.raises(ConfigError) as caught:
        App.from_toml(path, environ={})
    (problem,) = caught.value.problems
    assert problem.startswith("personas[0].voice.provider: no text-to-speech provider 'elevenlabs'")
    assert "installed: openai" in problem


async def test_an_unset_key_variable_is_named_at_start_never_a_value(tmp_path: Path) -> None:
    path = _valid(
        tmp_path, 'voice = "alloy"\nurl = "https://api.openai.com/v1"\napi_key_env = "TTS_KEY"\n'
    )
    settings = load_settings(path)
    with pytest.raises(ConfigError) as caught:
        build_voices(settings, Secrets({}), builtin_synthesizers())
    assert caught.value.problems == (
        "personas[0].voice.api_key_env: the environment variable TTS_KEY is unset",
    )
    unset = "personas[0].voice.api_key_env: the environment variable TTS_KEY is unset"
    assert unset in await App.from_toml(path, environ={}).start_problems()  # config check
    voices = build_voices(settings, Secrets({"TTS_KEY": KEY}), builtin_synthesizers())
    assert list(voices) == ["mira"]
    assert "TTS_KEY" in settings.secret_names()  # its value is redacted from every log line
