"""``llm.provider = "openai"``: what ``config check`` says about its endpoint and key, and the
client the registry builds (the provider itself: tests/llm/test_openai_provider.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.app.build.registries import build_llm
from bot.app.cli import main
from bot.config import LLMSettings, RunNeeds, Secrets, Settings
from bot.core.errors import ConfigError
from bot.llm.openai import OpenAICompatLLM

KEY = "sk-or-v1-0123456789abcdef0123"
BOT = '[[bots]]\nplatform = "telegram"\npersona = "ada"\n'
PERSONA = (
    '[[personas]]\nid = "ada"\nname = "Ada"\nsystem = "You are Ada."\nfirst_message = ["Hi!"]\n'
)


def _config(tmp_path: Path, llm: str) -> Path:
    path = tmp_path / "personabot.toml"
    path.write_text(f"[llm]\n{llm}\n{PERSONA}{BOT}", encoding="utf-8")
    return path


def _check(tmp_path: Path, llm: str, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "123456:telegram-test-token")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return main(["config", "check", "--config", str(_config(tmp_path, llm))])


def test_the_openai_provider_without_base_url_is_named_by_config_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _check(tmp_path, 'provider = "openai"', {}, monkeypatch)
    err = capsys.readouterr().err
    assert code == 2
    assert "base_url: required with provider = 'openai'" in err


def test_an_unset_key_variable_is_named_and_the_anthropic_key_is_not_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    llm = 'provider = "openai"\nbase_url = "https://or.example/api/v1"\napi_key_env = "OR_KEY"'
    monkeypatch.delenv("OR_KEY", raising=False)
    code = _check(tmp_path, llm, {}, monkeypatch)
    err = capsys.readouterr().err
    assert code == 2
    assert "llm.api_key_env: OR_KEY is not set in the environment" in err
    assert "ANTHROPIC_API_KEY" not in err
    assert err.count("OR_KEY is not set") == 1  # once, not again by the provider's factory


def test_with_the_key_set_config_check_passes_and_never_shows_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    llm = 'provider = "openai"\nbase_url = "http://127.0.0.1:11434/v1"\napi_key_env = "OR_KEY"'
    code = _check(tmp_path, llm, {"OR_KEY": KEY}, monkeypatch)
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "model provider: openai (base_url http://127.0.0.1:11434/v1)" in out.out
    assert KEY not in out.out + out.err


def test_a_local_endpoint_needs_no_key_at_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _check(
        tmp_path, 'provider = "openai"\nbase_url = "http://127.0.0.1:11434/v1"', {}, monkeypatch
    )
    assert code == 0, capsys.readouterr().err


async def test_the_registry_builds_the_client_with_the_key_from_the_environment() -> None:
    llm = LLMSettings(provider="openai", base_url="http://127.0.0.1:1/v1", api_key_env="OR_KEY")
    settings = Settings(llm=llm)
    assert RunNeeds.of(settings).problems(Secrets({"OR_KEY": KEY}), empty_ok=True) == []
    built = build_llm(settings, Secrets({"OR_KEY": KEY}), offline_fallback=True)
    try:
        assert isinstance(built, OpenAICompatLLM) and built.name == "openai"
    finally:
        await built.aclose()
    with pytest.raises(ConfigError, match="OR_KEY is not set"):
        build_llm(settings, Secrets({}), offline_fallback=True)  # no silent offline model
