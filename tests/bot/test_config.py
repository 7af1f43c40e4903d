"""Configuration: the example documents every key, bad files give one clear line each."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from pydantic import BaseModel

from bot.config import (
    DiscordBotSettings,
    Secrets,
    Settings,
    TelegramBotSettings,
    load_settings,
)
from bot.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "config.example.toml"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "personabot.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_example_loads_and_equals_the_defaults() -> None:
    """The bundled example is valid and its values are the built-in defaults."""
    loaded = load_settings(EXAMPLE)
    assert loaded == Settings()
    assert loaded.queue.debounce_seconds == 1.5
    assert loaded.personas[0].first_message


def _keys(model: type[BaseModel], prefix: str = "") -> set[str]:
    keys: set[str] = set()
    for name, field in model.model_fields.items():
        keys.add(prefix + name)
        inner = field.annotation
        for candidate in (inner, *getattr(inner, "__args__", ())):
            if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                keys |= _keys(candidate, f"{prefix}{name}.")
    return keys


def test_example_documents_every_key_with_a_comment() -> None:
    """Every settings key appears in the example (set or commented out) after a comment."""
    text = EXAMPLE.read_text(encoding="utf-8")
    lines = text.splitlines()
    keys = (
        _keys(Settings) | _keys(TelegramBotSettings, "bots.") | _keys(DiscordBotSettings, "bots.")
    )
    for key in sorted(keys):
        leaf = key.rsplit(".", 1)[-1]
        pattern = re.compile(rf"^#?\s*(\[\[?(\w+\.)?{leaf}(\]|\.)|{leaf}\s*=)")
        hits = [i for i, line in enumerate(lines) if pattern.match(line.strip())]
        assert hits, f"{key} is not documented in config.example.toml"
        i = hits[0]
        if lines[i].lstrip("# ").startswith("["):
            continue  # a section header needs no comment of its own
        assert lines[i - 1].lstrip().startswith("#"), f"{key} has no comment above it"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "[queue]\ndebounce_secnds = 2\n",
            "queue.debounce_secnds: unknown key (did you mean 'debounce_seconds'?)",
        ),
        (
            '[[personas]]\nid = "a"\nname = "A"\nsystem = "s"\nfirst_message = ["hi"]\n'
            '[[bots]]\nplatform = "telegram"\npersona = "ghost"\n',
            "bots[0].persona: no persona with id 'ghost' (known: a)",
        ),
        (
            '[[personas]]\nid = "a"\nname = "A"\nsystem = "s"\n',
            "personas[0].first_message: field required",
        ),
        (
            '[[personas]]\nid = "a"\nname = "A"\nfirst_message = ["hi"]\n',
            "personas[0].system: required when description and personality are empty",
        ),
        (
            '[[bots]]\nid = "t"\nplatform = "telegram"\npersonas = ["companion", "ghost"]\n',
            "bots[0].personas: no persona with id 'ghost' (known: companion)",
        ),
        (
            '[[bots]]\nplatform = "telegram"\npersona = "b"\npersonas = ["companion"]\n',
            "bots[0].persona: 'b' is not one of personas",
        ),
        ('[[bots]]\nplatform = "telegram"\n', "bots[0].persona: required (or personas = [...])"),
        ("this is = not toml ]\n", "not valid TOML"),
        (
            "[queue]\ndebounce_seconds = 9\n",
            "debounce_seconds (9.0) must not exceed max_wait_seconds",
        ),
        ('[llm]\napi_key = "sk-live-123"\n', "llm.api_key: unknown key"),
        (
            '[[bots]]\nplatform = "telegram"\npersona = "companion"\nmdoe = "webhook"\n',
            "bots[0].mdoe: unknown key (did you mean 'mode'?)",
        ),
        ('[[bots]]\npersona = "companion"\n', "bots[0].platform: field required"),
        (
            '[[bots]]\nplatform = "telegram"\npersona = "companion"\nmode = "webhook"\n',
            "bots[0].webhook_url: required when mode = 'webhook'",
        ),
    ],
)
def test_bad_config_names_key_and_problem(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(_write(tmp_path, text))
    message = str(info.value)
    assert expected in message
    assert "\n" not in message
    assert "sk-live-123" not in message


def test_binary_file_is_not_toml(tmp_path: Path) -> None:
    path = tmp_path / "x.toml"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ConfigError, match="not a TOML file"):
        load_settings(path)


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        load_settings(tmp_path / "nope.toml")


def test_environment_overrides_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, "[queue]\ndebounce_seconds = 1.0\nmax_wait_seconds = 5\n")
    monkeypatch.setenv("PERSONABOT_QUEUE__DEBOUNCE_SECONDS", "2.5")
    settings = load_settings(path)
    assert settings.queue.debounce_seconds == 2.5
    assert settings.queue.max_wait_seconds == 5  # the rest of the section stays from the file


def test_persona_overrides_apply_to_that_persona_only(tmp_path: Path) -> None:
    text = (
        '[[personas]]\nid = "slow"\nname = "S"\nsystem = "s"\nfirst_message = ["hi"]\n'
        "[personas.queue]\ndebounce_seconds = 3\n"
        '[[personas]]\nid = "fast"\nname = "F"\nsystem = "s"\nfirst_message = ["hi"]\n'
    )
    settings = load_settings(_write(tmp_path, text))
    assert settings.queue_for(settings.persona("slow")).debounce_seconds == 3
    assert settings.queue_for(settings.persona("fast")).debounce_seconds == 1.5


def test_secrets_come_only_from_the_environment() -> None:
    secrets = Secrets({"ANTHROPIC_API_KEY": "  ", "TELEGRAM_BOT_TOKEN": "123:abcdef"})
    assert secrets.anthropic_api_key is None  # blank counts as unset
    assert secrets.get("TELEGRAM_BOT_TOKEN") == "123:abcdef"
    assert "123:abcdef" in secrets.values()
    assert "api_key" not in tomllib.loads(EXAMPLE.read_text()).get("llm", {})
