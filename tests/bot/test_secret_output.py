"""Values that may hold credentials never reach the console: ``config check``, ``run`` errors,
text and JSON logs. Every test drives the real CLI in a subprocess."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.core.redact import looks_like_env_name, redact_url, url_secrets
from tests.bot.test_cli import _run
from tests.processes import clean_env

PG_PASSWORD = "Qs-pg-pass-7f3a91c2d4"
PROXY_PASSWORD = "proxy-pass-0b9e77aa12"
TG_TOKEN = "5550001:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"
DISCORD_PASSWORD = "dc-proxy-pass-55e1c0"

OFFLINE = '[llm]\nprovider = "offline"\n'


def _write(tmp_path: Path, text: str) -> str:
    (tmp_path / "p.toml").write_text(text)
    return "p.toml"


def _nowhere(secret: str, *texts: str) -> None:
    for text in texts:
        assert secret not in text
        assert secret[:12] not in text  # not even a prefix


async def test_config_check_hides_a_query_string_password(tmp_path: Path) -> None:
    url = f"postgresql://bot@db.example/pb?sslmode=require&password={PG_PASSWORD}"
    config = _write(tmp_path, f'[storage]\nurl = "{url}"\n')
    code, out, err = await _run(["config", "check", "--file-only", "--config", config], tmp_path)
    assert code == 0, err
    assert "postgresql://bot@db.example/pb?sslmode=require&password=***" in out
    _nowhere(PG_PASSWORD, out, err)


async def test_config_check_hides_user_info_of_the_model_base_url(tmp_path: Path) -> None:
    url = f"https://proxyuser:{PROXY_PASSWORD}@llm-proxy.example/v1"
    config = _write(tmp_path, f'[llm]\nbase_url = "{url}"\n')
    code, out, err = await _run(["config", "check", "--file-only", "--config", config], tmp_path)
    assert code == 0, err
    assert "base_url https://proxyuser:***@llm-proxy.example/v1" in out
    _nowhere(PROXY_PASSWORD, out, err)


@pytest.mark.parametrize(
    ("table", "needle"),
    [
        # No platform: pydantic's error input is the whole table, token included.
        (f'persona = "companion"\ntoken = "{TG_TOKEN}"\n', "bots[0].platform: field required"),
        (
            f'platform = "telegram"\npersona = "companion"\nmode = "{TG_TOKEN}"\n',
            "bots[0].mode: Input should be 'polling' or 'webhook'",
        ),
        (
            f'platform = "telegram"\npersona = "companion"\napi_server = ["{TG_TOKEN}"]\n',
            "bots[0].api_server: Input should be a valid string",
        ),
    ],
)
async def test_a_bots_table_holding_a_token_is_never_echoed(
    tmp_path: Path, table: str, needle: str
) -> None:
    config = _write(tmp_path, f"[[bots]]\n{table}")
    code, out, err = await _run(["config", "check", "--file-only", "--config", config], tmp_path)
    assert code == 2
    assert needle in err
    _nowhere(TG_TOKEN, out, err)
    _nowhere(TG_TOKEN.split(":")[1], out, err)


@pytest.mark.parametrize("command", [["config", "check", "--file-only"], ["run"]])
async def test_a_token_pasted_into_token_env_is_rejected_unprinted(
    tmp_path: Path, command: list[str]
) -> None:
    config = _write(
        tmp_path,
        f'{OFFLINE}[[bots]]\nplatform = "telegram"\npersona = "companion"\n'
        f'token_env = "{TG_TOKEN}"\n',
    )
    code, out, err = await _run([*command, "--config", config], tmp_path)
    assert code == 2
    assert "bots[0].token_env: must name an environment variable" in err
    _nowhere(TG_TOKEN.split(":")[1], out, err)


async def test_run_startup_errors_and_json_logs_hide_url_credentials(tmp_path: Path) -> None:
    """The store is unreachable: the error names it without the password; the Discord entry's
    proxy password (in a DEBUG line about its endpoints) is redacted from the JSON logs."""
    url = f"postgresql://bot@127.0.0.1:1/pb?password={PG_PASSWORD}"
    api_base = f"http://relay:{DISCORD_PASSWORD}@127.0.0.1:1/api/v10"
    config = _write(
        tmp_path,
        f'{OFFLINE}[storage]\nurl = "{url}"\n[logging]\nlevel = "DEBUG"\n'
        f'[[bots]]\nplatform = "discord"\npersona = "companion"\napi_base = "{api_base}"\n',
    )
    env = clean_env(DISCORD_BOT_TOKEN="MTIz.discord-token-for-the-secret-test")
    code, out, err = await _run(
        ["--log-format", "json", "run", "--config", config], tmp_path, env=env
    )
    assert code == 1, err
    lines = err.strip().splitlines()
    assert lines[-1].startswith("personabot: cannot connect to PostgreSQL at ")
    assert "password=***" in lines[-1]
    logs = [json.loads(line) for line in lines[:-1]]
    assert any("uses http://relay:" in entry["message"] for entry in logs)
    _nowhere(PG_PASSWORD, out, err)
    _nowhere(DISCORD_PASSWORD, out, err)


_PASSWORDS = st.text(
    alphabet=st.characters(min_codepoint=33, max_codepoint=126, exclude_characters="&#/?@%"),
    min_size=8,
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(password=_PASSWORDS, where=st.sampled_from(["userinfo", "query"]))
def test_redact_url_never_keeps_the_password(password: str, where: str) -> None:
    quoted = quote(password, safe="")
    url = (
        f"postgresql://bot:{quoted}@db:5432/pb"
        if where == "userinfo"
        else f"postgresql://bot@db:5432/pb?sslmode=require&password={quoted}"
    )
    shown = redact_url(url)
    # Exactly the URL without its password, whatever the password is (one that spells
    # "password", the query key, once looked kept).
    assert shown == (
        "postgresql://bot:***@db:5432/pb"
        if where == "userinfo"
        else "postgresql://bot@db:5432/pb?sslmode=require&password=***"
    )
    assert password in url_secrets(url)


def test_env_names_pass_and_tokens_do_not() -> None:
    for name in ("TELEGRAM_BOT_TOKEN", "MIRA_TG", "DISCORD_BOT_TOKEN_2026", "my_token"):
        assert looks_like_env_name(name), name
    for token in (TG_TOKEN, "MTIz.GfAkEt.abc", "sk-ant-api03-abc", "aB3dE5gH7jK9mN1pQ3sT5vX7"):
        assert not looks_like_env_name(token), token


@pytest.mark.parametrize(
    "param", ["bot_token", "client_secret", "api-key", "X-Api-Key", "access-token", "sig"]
)
async def test_a_credential_in_any_credential_like_query_parameter_is_hidden(
    tmp_path: Path, param: str
) -> None:
    """Review 12: only exact names (``token``, ``password``...) were masked, so a token given as
    ``?bot_token=`` or ``?api-key=`` was printed by ``config check`` and by ``chat``."""
    url = f"postgresql://bot@127.0.0.1:1/pb?sslmode=disable&{param}={PG_PASSWORD}"
    config = _write(tmp_path, f'{OFFLINE}[storage]\nurl = "{url}"\n')
    code, out, err = await _run(["config", "check", "--file-only", "--config", config], tmp_path)
    assert code == 0, err
    assert f"{param}=***" in out
    _nowhere(PG_PASSWORD, out, err)
    code, out, err = await _run(["chat", "--config", config], tmp_path)
    assert code == 1
    assert "cannot connect to PostgreSQL" in err
    _nowhere(PG_PASSWORD, out, err)


async def test_a_known_secret_anywhere_in_a_url_is_hidden_by_config_check(
    tmp_path: Path,
) -> None:
    """Review 12: a bot token (set in the environment) pasted into a harmless-looking part of
    storage.url was printed by ``config check`` and the ``chat`` banner, which bypassed the
    redaction every error line gets."""
    url = f"postgresql://bot@127.0.0.1:1/pb?application_name={TG_TOKEN}"
    config = _write(
        tmp_path,
        f'{OFFLINE}[storage]\nurl = "{url}"\n[[bots]]\nplatform = "telegram"\n'
        'persona = "companion"\n',
    )
    env = clean_env(TELEGRAM_BOT_TOKEN=TG_TOKEN)
    code, out, err = await _run(
        ["config", "check", "--file-only", "--config", config], tmp_path, env=env
    )
    assert code == 0, err
    assert "application_name=[redacted]" in out
    _nowhere(TG_TOKEN, out, err)
    code, out, err = await _run(["chat", "--config", config], tmp_path, env=env)
    assert "cannot connect to PostgreSQL" in err
    _nowhere(TG_TOKEN, out, err)


async def test_a_malformed_json_environment_override_is_a_config_error(
    tmp_path: Path,
) -> None:
    """Review 12: a PERSONABOT_* override that is not valid JSON (a nested table) crashed with
    pydantic-settings' traceback instead of a config error naming the variable."""
    env = clean_env(PERSONABOT_STORAGE='{"url": "postgresql://bot:' + PG_PASSWORD + '@db/pb"')
    code, out, err = await _run(["config", "check", "--file-only"], tmp_path, env=env)
    assert code == 2, err
    assert "Traceback" not in err
    assert "PERSONABOT_STORAGE" in err
    _nowhere(PG_PASSWORD, out, err)
