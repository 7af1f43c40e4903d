"""The command line's rough edges an operator meets in the first hour (issue 35, item 8):
``--version``, ``--log-format`` after the command, an unknown platform named as such, a
pipe closed early, and no migration log lines around ``prompt``'s answer."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.app.admin import _bot_for, user_memory
from bot.app.cli import EXIT_PIPE, _parser
from bot.config import Secrets, Settings, load_settings
from bot.core.errors import ConfigError
from tests.cards.cards import personabot
from tests.processes import clean_env


def test_version_and_the_log_format_before_or_after_the_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = _parser()
    with pytest.raises(SystemExit) as done:
        parser.parse_args(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.startswith("personabot ")
    assert parser.parse_args(["run", "--log-format", "json"]).log_format == "json"
    assert parser.parse_args(["--log-format", "json", "run"]).log_format == "json"
    assert parser.parse_args(["run"]).log_format is None


async def test_an_unknown_platform_is_named_not_answered_as_if_empty() -> None:
    """``prompt --platform whatsapp`` said "named None"; ``memory show --platform telgram``
    answered "nothing is remembered", exit 0, as if the person had been forgotten."""
    settings = Settings.model_validate({"bots": [{"platform": "telegram", "persona": "companion"}]})
    with pytest.raises(ConfigError, match=r"no bot on 'whatsapp' here \(platforms: console, "):
        _bot_for(settings, "whatsapp", None)
    with pytest.raises(ConfigError, match=r"no telegram bot named 'other' \(bots: telegram-"):
        _bot_for(settings, "telegram", "other")
    with pytest.raises(ConfigError, match=r"no console bot named 'nosuch' \(bots: console-comp"):
        _bot_for(settings, "console", "nosuch")
    assert _bot_for(settings, "console", "companion")[0] == "console-companion"
    from bot.app.app import App

    app = App(settings, Secrets({}))
    with pytest.raises(ConfigError, match=r"'telgram' is not a platform \(did you mean 'telegr"):
        await user_memory(app, io.StringIO(), action="show", platform="telgram", user="1")


def test_a_closed_pipe_ends_quietly_and_prompt_prints_only_its_answer(tmp_path: Path) -> None:
    """``config check | head`` ended in a BrokenPipeError traceback; ``prompt`` in a new
    directory printed 14 migration lines and an internal key around its one-line answer."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written
    try:
        done = subprocess.run(
            [sys.executable, "-m", "bot", "config", "check", "--file-only"],
            cwd=tmp_path,
            env=clean_env(),
            stdin=subprocess.DEVNULL,
            stdout=write,
            stderr=subprocess.PIPE,
            timeout=50,
            check=False,
        )
    finally:
        os.close(write)
    assert done.returncode == EXIT_PIPE and b"Traceback" not in done.stderr, done.stderr
    code, out, err = personabot("prompt", "--platform", "console", "--chat", "me", cwd=tmp_path)
    # On stderr, as errors are (review 35a): `prompt > file` leaves no prompt-looking file.
    assert code == 1 and out == ""
    assert err == (
        "nothing to preview: chat 'me' on console has no open session with bot "
        "console-companion yet (write to it first)\n"
    )


def test_every_configuration_problem_is_a_line_of_its_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 35, item 4: problems came joined with '; ' on one line. Each is a line now,
    naming the file and the key."""
    from bot.app.cli import main

    config = tmp_path / "personabot.toml"
    config.write_text(
        "[queue]\ndebounce_secnds = 2\n[memory]\nwindow_mesages = 3\n[logging]\nlevel = 5\n",
        encoding="utf-8",
    )
    assert main(["config", "check", "--file-only", "--config", str(config)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3, lines
    assert all(line.startswith(f"personabot: config error: {config}: ") for line in lines)
    assert any("queue.debounce_secnds: unknown key" in line for line in lines)
    assert any("memory.window_mesages: unknown key" in line for line in lines)
    assert any(line.split(": ", 3)[-1].startswith("logging.level") for line in lines)


def test_a_typo_in_an_environment_override_is_blamed_on_the_variable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 35, item 4: ``PERSONABOT_QUEUE__DEBOUNCE_SECNDS=2`` was reported as an unknown
    key of the TOML file, which holds no such thing."""
    from bot.app.cli import main

    config = tmp_path / "personabot.toml"
    config.write_text("[memory]\nwindow_mesages = 3\n", encoding="utf-8")
    monkeypatch.setenv("PERSONABOT_QUEUE__DEBOUNCE_SECNDS", "2")
    assert main(["config", "check", "--file-only", "--config", str(config)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert sorted(lines) == [
        f"personabot: config error: {config}: memory.window_mesages: unknown key (did you mean "
        "'window_messages'?)",
        "personabot: config error: PERSONABOT_QUEUE__DEBOUNCE_SECNDS (environment): "
        "queue.debounce_secnds: unknown key (did you mean 'debounce_seconds'?)",
    ]


def test_five_typos_are_five_lines_of_one_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 35, item 4: five typos took three runs; a persona reference and a platform name
    were checked only once every key was right. Now one run names all five, each with its
    source, the variable's under the variable."""
    path = tmp_path / "personabot.toml"
    path.write_text(
        "[storage]\nurll = 'x'\n[queue]\ndebounce_secs = 1\n"
        '[[personas]]\nid = "seraphina"\nname = "S"\nsystem = "S."\nfirst_message = ["Hi"]\n'
        '[[bots]]\nplatform = "telgram"\npersona = "seraphina"\n'
        '[[bots]]\nplatform = "discord"\npersona = "serafina"\n'
    )
    monkeypatch.setenv("PERSONABOT_MEMORY__WINDOW_MESAGES", "5")
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    lines = caught.value.lines()
    assert lines == [
        f"{path}: storage.urll: unknown key (did you mean 'url'?)",
        f"{path}: queue.debounce_secs: unknown key (did you mean 'debounce_seconds'?)",
        "PERSONABOT_MEMORY__WINDOW_MESAGES (environment): memory.window_mesages: unknown key "
        "(did you mean 'window_messages'?)",
        f"{path}: bots[1].persona: no persona with id 'serafina' (known: seraphina; did you "
        "mean 'seraphina'?)",
        f"{path}: bots[0].platform: unknown platform 'telgram' (installed: discord, telegram; "
        "a plugin can add more; did you mean 'telegram'?)",
    ], lines


def test_config_check_and_run_refuse_the_same_file_in_one_round(tmp_path: Path) -> None:
    """Keys right, but a platform typo (found once plugins load) and an unset token and key:
    `config check` and `run` each name all of them at once, the same lines."""
    (tmp_path / "personabot.toml").write_text(
        '[[bots]]\nplatform = "telegrm"\npersona = "companion"\n'
        '[[bots]]\nplatform = "discord"\npersona = "companion"\n'
    )
    code, out, err = personabot("config", "check", cwd=tmp_path)
    assert code == 2 and "configuration OK" not in out
    lines = err.strip().splitlines()
    assert lines[0].startswith("personabot: config error: bots[0].platform: unknown platform")
    assert "DISCORD_BOT_TOKEN is not set" in lines[1] and "ANTHROPIC_API_KEY" in lines[2]
    assert len(lines) == 3, lines
    code, _, run_err = personabot("run", cwd=tmp_path)
    assert code == 2 and run_err == err


def test_a_random_looking_value_in_a_wrong_key_is_not_echoed(tmp_path: Path) -> None:
    """Review 35a: the "short plain word" rule echoed a 32-character hex token pasted into
    a number's key (``openssl rand -hex 16``); a plain word or number still is."""
    token = "a2908c40b1c2d3e4f5a6b7c8d9e0f1a2"
    path = tmp_path / "personabot.toml"
    path.write_text(f'[queue]\ndebounce_seconds = "{token}"\nmax_wait_seconds = "soon"\n')
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    text = "\n".join(caught.value.lines())
    assert token not in text and "queue.debounce_seconds" in text
    assert "(got 'soon')" in text


def test_a_configuration_file_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    """Review 35b: a TOML saved with a BOM (Windows editors) was "Invalid statement (at line
    1, column 1)", naming nothing an operator could see."""
    path = tmp_path / "personabot.toml"
    path.write_bytes("\ufeff[queue]\ndebounce_seconds = 2\n".encode())
    assert load_settings(path).queue.debounce_seconds == 2


def test_a_file_with_only_plugin_bots_and_a_typo_still_names_the_missing_key(
    tmp_path: Path,
) -> None:
    """The environment is checked in the same round as a typo, also when every bot is on a
    plugin's platform (no built-in token to name): the missing Anthropic key is named."""
    path = tmp_path / "personabot.toml"
    path.write_text(
        'plugins = ["p"]\n[queue]\ndebounce_secnds = 1\n'
        '[[bots]]\nplatform = "jsonl"\npersona = "companion"\n'
    )
    with pytest.raises(ConfigError) as caught:
        load_settings(path, needs=Secrets({}))
    lines = caught.value.lines()
    assert any("debounce_secnds" in line for line in lines)
    assert any(line.startswith("ANTHROPIC_API_KEY: not set") for line in lines), lines
