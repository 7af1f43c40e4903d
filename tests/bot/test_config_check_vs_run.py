"""Issue 35 item 3, from review 35a: ``config check`` names everything ``run`` refuses at start.

Each case below is a file and an environment for which ``personabot config check`` printed
"configuration OK" (exit 0) while ``personabot run`` then stopped at start, before connecting
to anything, with a config error (exit 2) or a traceback (exit 1). The check is where an
operator should learn it (docs/deploy.md: check both together before starting).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bot.test_cli import _run
from tests.processes import clean_env, spawn

API_KEY = "sk-ant-test-0000000000000000000000"
TELEGRAM = "123456:ABCdefGHIjklMNOpqrSTUvwxYZ012345678"

BASE = """
[storage]
url = "sqlite:///rev.sqlite3"

[[personas]]
id = "companion"
name = "Mira"
system = "You are Mira."
first_message = ["Hi"]
"""

TELEGRAM_BOT = """
[[bots]]
platform = "telegram"
persona = "companion"
token_env = "TELEGRAM_BOT_TOKEN"
"""

DISCORD_BOT = """
[[bots]]
platform = "discord"
persona = "companion"
token_env = "DISCORD_BOT_TOKEN"
"""

WEBHOOK = """mode = "webhook"
webhook_url = "https://bot.example.org/telegram/webhook"
secret_token_env = "TELEGRAM_WEBHOOK_SECRET"
"""

CASES = {
    # run: "telegram bot 'telegram-companion': the token is malformed"
    "malformed telegram token": (BASE + TELEGRAM_BOT, {"TELEGRAM_BOT_TOKEN": "abc"}),
    # run: "TELEGRAM_WEBHOOK_SECRET: not set in the environment (webhook secret of bot ...)"
    "webhook secret unset": (BASE + TELEGRAM_BOT + WEBHOOK, {}),
    # run: "TELEGRAM_WEBHOOK_SECRET: the webhook secret must be 1-256 characters of ..."
    "webhook secret invalid": (
        BASE + TELEGRAM_BOT + WEBHOOK,
        {"TELEGRAM_WEBHOOK_SECRET": "not allowed!"},
    ),
    # run: "web: PERSONABOT_WEB_TOKEN is too short (16 characters at least)"
    "console token too short": (
        '[web]\nlisten = "127.0.0.1:18123"\n' + BASE + TELEGRAM_BOT,
        {"PERSONABOT_WEB_TOKEN": "short"},
    ),
    # run: "bots.discord-companion: set both shard_id and shard_count, or neither"
    "discord shard_id alone": (BASE + DISCORD_BOT + "shard_id = 1\n", {}),
    # run: "bots.discord-companion.shard_id: must be below shard_count (2)"
    "discord shard_id too high": (BASE + DISCORD_BOT + "shard_id = 3\nshard_count = 2\n", {}),
    # run: "storage.url: unsupported scheme 'mysql' (use sqlite:///path or ...)"
    "storage scheme": (
        BASE.replace("sqlite:///rev.sqlite3", "mysql://db.example/x") + TELEGRAM_BOT,
        {},
    ),
    # run: OSError traceback "error while attempting to bind on address ... in use", exit 1
    "web and observability on one port": (
        '[web]\nlisten = "127.0.0.1:18124"\n[observability]\nlisten = "127.0.0.1:18124"\n'
        + BASE
        + TELEGRAM_BOT,
        {"PERSONABOT_WEB_TOKEN": "0123456789abcdef0123"},
    ),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_config_check_names_what_run_refuses_at_start(tmp_path: Path, case: str) -> None:
    text, extra = CASES[case]
    (tmp_path / "p.toml").write_text(text)
    base = {
        "ANTHROPIC_API_KEY": API_KEY,
        "TELEGRAM_BOT_TOKEN": TELEGRAM,
        "DISCORD_BOT_TOKEN": "xxxxx.yyyy.zzzz",
    }
    env = clean_env(**(base | extra))
    code, out, err = await _run(["config", "check", "--config", "p.toml"], tmp_path, env=env)
    assert code == 2, f"config check said OK, but run refuses at start:\n{out}"
    assert "Traceback" not in err
    assert NAMED[case] in err, err
    assert all(value not in err for value in extra.values() if len(value) > 5)


#: What config check names for each case (the same words run used to stop with).
NAMED = {
    "malformed telegram token": "the token is malformed",
    "webhook secret unset": "TELEGRAM_WEBHOOK_SECRET: not set in the environment",
    "webhook secret invalid": "the webhook secret must be 1-256 characters",
    "console token too short": "PERSONABOT_WEB_TOKEN is too short",
    "discord shard_id alone": "set both shard_id and shard_count",
    "discord shard_id too high": "shard_id: must be below shard_count (2)",
    "storage scheme": "storage.url: not a storage URL",
    "web and observability on one port": "port 18124 is observability.listen's too",
}


async def test_a_secret_pasted_into_a_listen_key_is_not_echoed(tmp_path: Path) -> None:
    """README: configuration errors quote an input value only when it is a number or a short
    plain word; web.listen's validator quotes any value whole."""
    key = "sk-ant-api03-" + "Zq8vJ2mKx9LwP4nR7tY1uB3cD5eF6gH8iJ0kL2mN4oP6qR8sT0uV2wX4yZ6aB8"
    (tmp_path / "p.toml").write_text(f'[web]\nlisten = "{key}"\n' + BASE)
    code, out, err = await _run(
        ["config", "check", "--file-only", "--config", "p.toml"], tmp_path, env=clean_env()
    )
    assert code == 2
    assert key not in out + err


async def test_a_secret_pasted_into_storage_url_is_not_printed(tmp_path: Path) -> None:
    """``storage.url = "<an API key>"``: config check said OK and printed it in the summary."""
    key = "sk-ant-api03-" + "Zq8vJ2mKx9LwP4nR7tY1uB3cD5eF6gH8iJ0kL2mN4oP6qR8sT0uV2wX4yZ6aB8"
    (tmp_path / "p.toml").write_text(BASE.replace("sqlite:///rev.sqlite3", key))
    code, out, err = await _run(
        ["config", "check", "--file-only", "--config", "p.toml"], tmp_path, env=clean_env()
    )
    assert key not in out + err
    assert code == 2


@pytest.mark.parametrize(
    ("variable", "value", "key"),
    [
        ("PERSONABOT_QUEUE", '{"debounce_seconds": "x"}', "queue.debounce_seconds"),
        ("PERSONABOT_BOTS", '[{"platform": "telegram"}]', "bots[0].persona"),
    ],
)
async def test_a_json_override_is_attributed_to_its_variable(
    tmp_path: Path, variable: str, value: str, key: str
) -> None:
    """A problem set by a JSON-valued PERSONABOT_... variable was reported under the file,
    which holds no such value."""
    (tmp_path / "p.toml").write_text(BASE + TELEGRAM_BOT)
    code, _out, err = await _run(
        ["config", "check", "--file-only", "--config", "p.toml"],
        tmp_path,
        env=clean_env(**{variable: value}),
    )
    assert code == 2
    line = next(line for line in err.splitlines() if key in line)
    assert variable in line, line


async def test_one_run_names_the_environment_problems_with_the_file_problems(
    tmp_path: Path,
) -> None:
    """A key typo in the file hid the unset ANTHROPIC_API_KEY and the bot's unset token
    (named only on the next run, after the typo was fixed): problems came in rounds."""
    (tmp_path / "p.toml").write_text(
        BASE.replace("[storage]", "[queue]\ndebounce_secnds = 2\n[storage]") + TELEGRAM_BOT
    )
    code, _out, err = await _run(
        ["config", "check", "--config", "p.toml"], tmp_path, env=clean_env()
    )
    assert code == 2
    assert "debounce_secnds" in err
    assert "ANTHROPIC_API_KEY" in err
    assert "TELEGRAM_BOT_TOKEN" in err


@pytest.mark.parametrize(
    "variable", ["PERSONABOT_QUEU__DEBOUNCE_SECONDS", "PERSONABOT_QEUE__LEASE_SECONDS"]
)
async def test_a_typo_in_an_override_section_is_named(tmp_path: Path, variable: str) -> None:
    """PERSONABOT_QUEUE__DEBOUNCE_SECNDS is named (issue 35), but a typo in the section part
    was silently ignored: "configuration OK" and the default debounce, the override lost."""
    (tmp_path / "p.toml").write_text(BASE)
    code, out, err = await _run(
        ["config", "check", "--file-only", "--config", "p.toml"],
        tmp_path,
        env=clean_env(**{variable: "2"}),
    )
    assert code == 2, out
    assert variable in err


async def test_run_on_a_port_in_use_says_so_in_one_line(tmp_path: Path) -> None:
    """[observability] listen on a port another process holds: run died with an OSError
    traceback (exit 1), where a store it cannot open is one line naming the reason."""
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        (tmp_path / "p.toml").write_text(
            f'[observability]\nlisten = "127.0.0.1:{port}"\n' + BASE + TELEGRAM_BOT
        )
        env = clean_env(ANTHROPIC_API_KEY=API_KEY, TELEGRAM_BOT_TOKEN=TELEGRAM)
        code, _out, err = await _run(["run", "--config", "p.toml"], tmp_path, env=env)
    assert code == 1
    assert "Traceback" not in err, err
    assert str(port) in err


@pytest.mark.parametrize("section", ["observability", "web"])
async def test_a_bracketed_ipv6_listen_address_is_refused_by_check_or_served_by_run(
    tmp_path: Path, section: str
) -> None:
    """``listen = "[::1]:PORT"`` (the usual way to write an IPv6 host and port): config check
    said OK, and run died at start with ``socket.gaierror`` and a traceback (the host was
    passed to the resolver with its brackets)."""
    import asyncio
    import os
    import signal
    import socket
    import sys

    with socket.socket(socket.AF_INET6) as probe:
        probe.bind(("::1", 0))
        port = probe.getsockname()[1]
    examples = Path(__file__).resolve().parents[2] / "examples"
    (tmp_path / "p.toml").write_text(
        'plugins = ["personabot_extras.jsonl"]\n'
        f'[{section}]\nlisten = "[::1]:{port}"\n[llm]\nprovider = "offline"\n'
        + BASE
        + '[[bots]]\nplatform = "jsonl"\npersona = "companion"\n'
        'options = { inbox = "in.jsonl", outbox = "out.jsonl" }\n'
    )
    (tmp_path / "in.jsonl").write_text("")
    env = clean_env(PYTHONPATH=str(examples), PERSONABOT_WEB_TOKEN="0123456789abcdef0123")
    code, _out, err = await _run(["config", "check", "--config", "p.toml"], tmp_path, env=env)
    if code == 2:
        return  # refused by the check: run and check agree
    assert code == 0, err
    proc = await spawn(
        sys.executable,
        "-m",
        "bot",
        "run",
        "--config",
        "p.toml",
        cwd=tmp_path,
        env=env,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    # Wait for the server's own "... on http://[::1]:PORT" line (or the process's end).
    wanted = b"operator console on" if section == "web" else b"health and metrics on"
    seen = b""
    try:
        assert proc.stderr is not None
        while (line := await asyncio.wait_for(proc.stderr.readline(), timeout=30)) and (
            wanted not in line
        ):
            seen += line
        assert wanted in line, "config check said OK; run stopped at start: " + seen.decode()
        _r, w = await asyncio.open_connection("::1", port)  # it serves there
        w.close()
    finally:
        if proc.returncode is None:
            os.kill(proc.pid, signal.SIGTERM)
        _, stderr = await asyncio.wait_for(proc.communicate(), timeout=30)
    stderr = seen + stderr
    assert b"Traceback" not in stderr, stderr.decode()[-800:]
