"""The personabot command line, run as a real process the way an operator runs it."""

from __future__ import annotations

import asyncio
import getpass
import json
import signal
import sqlite3
import sys
from pathlib import Path

import pytest

from tests.bot.chat_process import piped_chat
from tests.fakes.messages_api import FakeMessagesAPI
from tests.processes import clean_env, spawn

SECRET = "sk-ant-test-Zm9vYmFyYmF6cXV4-very-secret"


async def _run(
    args: list[str], cwd: Path, stdin: str = "", env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    proc = await spawn(
        sys.executable,
        "-m",
        "bot",
        *args,
        cwd=cwd,
        env=env or clean_env(),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin.encode()), timeout=50)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_piped_chat_answers_twice_in_two_sessions(tmp_path: Path) -> None:
    """The acceptance line: hello, /new, again -> two replies; one conversation, two sessions."""
    code, out, err = await _run(["chat"], tmp_path, "hello\n/new\nagain\n")
    assert code == 0, err
    assert "using the offline model" in out
    replies = [line for line in out.splitlines() if line.startswith("Mira: [offline model]")]
    assert replies == [
        "Mira: [offline model] You said: hello",
        "Mira: [offline model] You said: again",
    ]
    assert "Traceback" not in err
    db = sqlite3.connect(tmp_path / "personabot.sqlite3")
    assert db.execute("SELECT COUNT(*) FROM conversations").fetchone() == (1,)
    sessions = db.execute("SELECT session_no, status FROM sessions ORDER BY session_no").fetchall()
    assert sessions == [(1, "closed"), (2, "open")]
    by_session = db.execute(
        "SELECT s.session_no, m.role, m.text FROM messages m "
        "JOIN sessions s ON s.id = m.session_id ORDER BY s.session_no, m.turn"
    ).fetchall()
    db.close()
    assert [(n, role) for n, role, _ in by_session] == [
        (1, "user"),
        (1, "assistant"),
        (2, "user"),
        (2, "assistant"),
    ]


async def test_chat_remembers_the_session_across_restarts(tmp_path: Path) -> None:
    """A second run continues the same session: the window carries the first run's messages."""
    await _run(["chat"], tmp_path, "my name is Ada\n")
    code, out, _ = await _run(["chat"], tmp_path, "what is my name?\n")
    assert code == 0
    assert "2 earlier messages in the window" in out


async def test_config_check_summarises(tmp_path: Path) -> None:
    code, out, _ = await _run(["config", "check", "--file-only"], tmp_path)
    assert code == 0
    assert "configuration OK" in out and "companion: Mira" in out


async def test_config_check_refuses_what_run_would_refuse(tmp_path: Path) -> None:
    """Issue 35, item 3: no [[bots]], an unset token, an unset API key or console token all
    passed `config check` ("configuration OK") and `run` then refused. All of them now, one
    line each, naming the variable, never a value."""
    (tmp_path / "bots.toml").write_text(
        '[web]\nlisten = "127.0.0.1:0"\n[[bots]]\nplatform = "telegram"\npersona = "companion"\n'
        '[[bots]]\nplatform = "discord"\npersona = "companion"\ntoken_env = "MY_DISCORD"\n'
    )
    code, out, err = await _run(["config", "check", "--config", "bots.toml"], tmp_path)
    assert code == 2 and "configuration OK" not in out
    lines = err.strip().splitlines()
    assert len(lines) == 4, lines
    assert "TELEGRAM_BOT_TOKEN is not set in the environment" in lines[0]
    assert "MY_DISCORD is not set in the environment" in lines[1]
    assert lines[2].startswith("personabot: config error: ANTHROPIC_API_KEY: not set")
    assert "PERSONABOT_WEB_TOKEN is not set in the environment" in lines[3]
    code, _, err = await _run(["config", "check"], tmp_path)  # the bundled example
    assert code == 2 and "bots: no [[bots]] entries" in err
    env = clean_env(
        TELEGRAM_BOT_TOKEN="123:abc",
        MY_DISCORD="d" * 30,
        ANTHROPIC_API_KEY="sk-test",
        PERSONABOT_WEB_TOKEN="w" * 20,
    )
    code, out, err = await _run(["config", "check", "--config", "bots.toml"], tmp_path, env=env)
    assert (code, err) == (0, "") and "configuration OK" in out
    assert "sk-test" not in out and "123:abc" not in out


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[storage]\nurll = 1\n", "storage.urll: unknown key (did you mean 'url'?)"),
        ('[[bots]]\nplatform = "discord"\npersona = "nobody"\n', "bots[0].persona: no persona"),
        ("{ not toml", "not valid TOML"),
    ],
)
async def test_bad_config_is_one_line_without_traceback(
    tmp_path: Path, text: str, needle: str
) -> None:
    (tmp_path / "bad.toml").write_text(text)
    code, _out, err = await _run(
        ["config", "check", "--file-only", "--config", "bad.toml"], tmp_path
    )
    assert code == 2
    assert needle in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


async def test_run_without_api_key_fails_clearly(tmp_path: Path) -> None:
    code, _, err = await _run(["run"], tmp_path)
    assert code == 2
    assert "ANTHROPIC_API_KEY: not set" in err


async def test_secret_never_reaches_output_or_store(tmp_path: Path) -> None:
    """Claude rejects the key; the error is logged loudly but the key appears nowhere."""
    async with FakeMessagesAPI() as api:
        api.fail_next(status=401, message=f"invalid x-api-key {SECRET}", times=5)
        env = clean_env(
            ANTHROPIC_API_KEY=SECRET,
            PERSONABOT_LLM__BASE_URL=api.base_url,
            PERSONABOT_LLM__MAX_RETRIES="0",
            PERSONABOT_LOGGING__LEVEL="DEBUG",
            PERSONABOT_QUEUE__DEBOUNCE_SECONDS="0.1",
        )
        code, out, err = await _run(["chat"], tmp_path, "hello\n", env=env)
        assert api.call_count >= 1
        assert api.requests[0].api_key == SECRET  # it was really used
    assert code == 1  # "hello" went unanswered
    assert "1 message went unanswered" in out
    assert "authentication failed" in err.lower()
    assert SECRET not in out and SECRET not in err
    assert SECRET[:20] not in err
    for path in tmp_path.iterdir():
        assert SECRET.encode() not in path.read_bytes()


async def test_sigterm_exits_cleanly_and_keeps_unanswered_input(tmp_path: Path) -> None:
    """SIGTERM while the model is still writing: the message stays, and the run says so and
    exits 1 (input left unanswered is no success, signal or not); the next start answers it,
    labelled as the answer to that earlier message (issue 35, item 7)."""
    async with FakeMessagesAPI() as api:
        api.hold = asyncio.Event()  # the model never answers in the first run
        env = clean_env(
            ANTHROPIC_API_KEY="sk-test",
            PERSONABOT_LLM__BASE_URL=api.base_url,
            PERSONABOT_LLM__MAX_RETRIES="0",
            PERSONABOT_QUEUE__SHUTDOWN_GRACE_SECONDS="0.5",
        )
        proc = await piped_chat(tmp_path, env)
        assert proc.stdin is not None
        proc.stdin.write(b"remember me\n")
        await proc.stdin.drain()
        await asyncio.wait_for(api.received.wait(), timeout=30)  # the model was asked
        proc.send_signal(signal.SIGTERM)
        out, err = await asyncio.wait_for(proc.communicate(), timeout=30)
    assert proc.returncode == 1, err.decode()
    assert b"Mira: remember me" not in out
    assert b"Stopped: 1 message went unanswered; kept" in out
    code, out2, _ = await _run(["chat"], tmp_path, "")
    assert code == 0
    late = out2.splitlines()
    answer = late.index("Mira: [offline model] You said: remember me")
    assert late[answer - 1] == "(to your earlier message: remember me)"


async def test_prompt_and_memory_admin_commands(tmp_path: Path) -> None:
    """An operator can preview the next prompt and see or erase what is remembered."""
    user = getpass.getuser()
    await _run(["chat"], tmp_path, "my name is Ada\nI work as a nurse\n/new\n")
    await _run(["chat"], tmp_path, "")  # at start, the memory sweep learns from session 1
    code, out, _ = await _run(["memory", "show", "--platform", "console", "--user", user], tmp_path)
    assert code == 0
    assert "name: Ada" in out and "occupation: nurse" in out
    await _run(["chat"], tmp_path, "hello\n")
    code, out, _ = await _run(["prompt", "--platform", "console", "--chat", user], tmp_path)
    assert code == 0
    assert "persona" in out and "[cache breakpoint]" in out
    assert '"name": ["Ada"]' in out  # the user memory layer
    assert "hello" in out  # the window
    code, out, _ = await _run(
        ["memory", "forget", "--platform", "console", "--user", user], tmp_path
    )
    assert code == 0 and "erased 2 item(s)" in out
    # The same erasure as /forget: reminders and the time zone go, messages per the setting.
    assert "deleted 0 reminder(s) and the time zone setting" in out
    assert "messages kept (retention.forget_deletes_messages is off)" in out
    code, out, _ = await _run(["memory", "show", "--platform", "console", "--user", user], tmp_path)
    assert "nothing is remembered" in out


async def test_config_check_never_shows_the_database_password(tmp_path: Path) -> None:
    (tmp_path / "pg.toml").write_text('[storage]\nurl = "postgresql://bot:hunter2secret@db/pb"\n')
    code, out, err = await _run(["config", "check", "--file-only", "--config", "pg.toml"], tmp_path)
    assert code == 0
    assert "postgresql://bot:***@db/pb" in out
    assert "hunter2secret" not in out + err


async def test_json_logs_for_collectors(tmp_path: Path) -> None:
    env = clean_env(PERSONABOT_LOGGING__LEVEL="DEBUG", PERSONABOT_QUEUE__DEBOUNCE_SECONDS="0.1")
    code, _, err = await _run(["--log-format", "json", "chat"], tmp_path, "hello\n", env=env)
    assert code == 0
    lines = [json.loads(line) for line in err.splitlines() if line.strip()]
    assert lines and all({"time", "level", "logger", "message"} <= set(x) for x in lines)
    turn = [
        x for x in lines if x["logger"] == "personabot.pipeline" and "message(s)" in x["message"]
    ]
    assert turn and "in=" in turn[0]["message"]


async def test_prompt_shows_the_check_in_layer_when_one_is_due(tmp_path: Path) -> None:
    """Issue 17: with a check-in due, `personabot prompt` shows its note and send/skip choice."""
    user = getpass.getuser()
    (tmp_path / "checkins.toml").write_text(
        "[[personas]]\n"
        'id = "mira"\nname = "Mira"\nsystem = "You are Mira."\nfirst_message = ["Hi."]\n'
        "[personas.initiative]\n"
        'enabled = true\nafter_idle_hours = 0.0002\nquiet_hours = ""\n'
    )
    config = ["--config", "checkins.toml"]
    code, _, err = await _run(["chat", *config], tmp_path, "my exam is tomorrow\n")
    assert code == 0, err
    await asyncio.sleep(1.0)  # 0.72 s of silence is due
    code, out, err = await _run(
        ["prompt", *config, "--platform", "console", "--chat", user], tmp_path
    )
    assert code == 0, err
    assert "check-in for" in out and "initiative" in out
    assert "Nobody has written here for" in out and "my exam is tomorrow" in out
    assert "--- tools (any): send, skip" in out


async def test_prompt_says_which_lorebook_entries_fired_and_why_others_did_not(
    tmp_path: Path,
) -> None:
    """Issue 18: `personabot prompt` reports every lorebook entry: fired (and on what), or
    skipped for the budget, for being disabled, or for no key in the recent messages."""
    user = getpass.getuser()
    (tmp_path / "lore.toml").write_text(
        "[[personas]]\n"
        'id = "mira"\nname = "Mira"\ndescription = "A keeper of a lighthouse."\n'
        'first_message = ["Hello."]\n'
        "[personas.lorebook]\ntoken_budget = 40\n"
        "[[personas.lorebook.entries]]\n"
        'name = "dragon"\nkeys = ["dragon"]\ncontent = "Vermithrax sleeps under Kell."\n'
        "priority = 20\n"
        "[[personas.lorebook.entries]]\n"
        # ~37 tokens: within the budget of 40 alone, not beside the dragon's ~14.
        f'name = "mountain lore"\nkeys = ["dragon"]\ncontent = "{"Kell is tall. " * 7}"\n'
        "[[personas.lorebook.entries]]\n"
        'name = "off"\nkeys = ["dragon"]\ncontent = "never"\nenabled = false\n'
        "[[personas.lorebook.entries]]\n"
        'name = "city"\nkeys = ["Eldham"]\ncontent = "A port."\n'
    )
    config = ["--config", "lore.toml"]
    code, _, err = await _run(["chat", *config], tmp_path, "good evening\n")
    assert code == 0, err
    code, out, err = await _run(
        ["prompt", *config, "--platform", "console", "--chat", user, "--message", "the dragon?"],
        tmp_path,
    )
    assert code == 0, err
    assert "fired    'dragon': key 'dragon'" in out
    assert "skipped  'mountain lore': budget" in out
    assert "skipped  'off': disabled" in out and "skipped  'city': no key match" in out
    assert "<lorebook>" in out and "Vermithrax sleeps under Kell." in out
    assert "You are Mira." in out and "Mira's description:\nA keeper of a lighthouse." in out


async def test_prompt_prints_stored_escape_sequences_as_text(tmp_path: Path) -> None:
    """A message holding an escape sequence (OSC 0 sets the window title) is stored as it
    came; ``personabot prompt`` shows it as text, never sends it to the terminal."""
    user = getpass.getuser()
    await _run(["chat"], tmp_path, "hi \x1b]0;PWNED\x07 there\n")
    code, out, _ = await _run(["prompt", "--platform", "console", "--chat", user], tmp_path)
    assert code == 0
    assert "hi \\x1b]0;PWNED\\x07 there" in out
    assert "\x1b" not in out and "\x07" not in out
