"""Repeated SIGTERM/SIGINT during shutdown, on a real ``personabot run`` process.

The process polls the fake Telegram Bot API and calls the fake Messages API (real aiogram,
real anthropic SDK) with a slow model, so a turn is generating when the signals arrive.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sqlite3
import sys
import time
from pathlib import Path

from tests.fakes.messages_api import FakeMessagesAPI
from tests.fakes.telegram_api import FakeTelegramAPI, TgChat, TgUser
from tests.processes import DROPPED, Running, clean_env, spawn

TOKEN = "5550003:AASignal-test-token-abcdefghijklmnopq"
USER = TgUser(777, "Ana")


def _config(tmp_path: Path, api: FakeTelegramAPI, llm: FakeMessagesAPI) -> Path:
    path = tmp_path / "personabot.toml"
    path.write_text(
        f"""
[storage]
url = "sqlite:///{tmp_path / "bots.sqlite3"}"

[llm]
base_url = {json.dumps(llm.base_url)}
max_retries = 0
timeout_seconds = 120

[queue]
debounce_seconds = 0.2
max_wait_seconds = 2
scan_interval_seconds = 0.2
lease_seconds = 60
shutdown_grace_seconds = 15

[memory]
extract_after_idle_minutes = 10000

[logging]
level = "INFO"

[[personas]]
id = "mira"
name = "Mira"
system = "You are Mira."
first_message = ["Hi, I'm Mira."]
model = "claude-test"

[[bots]]
platform = "telegram"
persona = "mira"
token_env = "MIRA_TG"
api_server = "{api.base_url}"
""",
        encoding="utf-8",
    )
    return path


def _env() -> dict[str, str]:
    return clean_env(drop=(*DROPPED, "TELEGRAM_"), MIRA_TG=TOKEN, ANTHROPIC_API_KEY="test")


def _rows(tmp_path: Path, sql: str) -> list[tuple[object, ...]]:
    with contextlib.closing(sqlite3.connect(tmp_path / "bots.sqlite3")) as db:
        return list(db.execute(sql).fetchall())


async def _start(
    tmp_path: Path, config: Path, log: str, api: FakeTelegramAPI
) -> tuple[Running, Path]:
    err_path = tmp_path / log
    with err_path.open("wb") as err:
        proc = await spawn(
            sys.executable, "-m", "bot", "run", "--config", str(config),
            cwd=tmp_path, env=_env(), stdout=asyncio.subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
    polls = api.polls_started(TOKEN)
    try:
        await api.wait_for(lambda: api.polls_started(TOKEN) > polls, within=40, what="polling")
    except BaseException:
        proc.kill()  # a process that never polled is not left running after the test
        await proc.wait()
        raise
    return proc, err_path


async def _stopped(proc: Running, within: float) -> int:
    try:
        return await asyncio.wait_for(proc.wait(), timeout=within)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"personabot run did not exit within {within}s") from None


async def test_repeated_sigterm_is_ignored_and_the_running_turn_is_answered(
    tmp_path: Path,
) -> None:
    async with FakeTelegramAPI() as api, FakeMessagesAPI(latency=3.0) as llm:
        api.add_bot(TOKEN, "mira_bot")
        proc, err = await _start(tmp_path, _config(tmp_path, api, llm), "run.log", api)
        try:
            api.push_message(TOKEN, TgChat.private(USER), USER, "hello there")
            await api.wait_for(lambda: llm.call_count == 1, what="the model call")
            signalled = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            await asyncio.sleep(0.5)
            proc.send_signal(signal.SIGTERM)  # a supervisor signalling the process group
            await asyncio.sleep(0.3)
            proc.send_signal(signal.SIGTERM)
            code = await _stopped(proc, within=20)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        elapsed = time.monotonic() - signalled
        log = err.read_text()
        assert code == 0, log[-3000:]
        assert elapsed >= 2.0  # it waited for the generation instead of dying
        (reply,) = api.sent_messages(TOKEN)
        assert "hello there" in reply.visible_text  # the echo of the fake model
        assert llm.call_count == 1
        assert log.count("SIGTERM received again during shutdown: ignored") == 2
        assert _rows(tmp_path, "SELECT COUNT(*) FROM messages WHERE pending = 1") == [(0,)]


async def test_second_sigint_cancels_the_turn_and_the_restart_answers_it_once(
    tmp_path: Path,
) -> None:
    async with FakeTelegramAPI() as api, FakeMessagesAPI(latency=60.0) as llm:
        api.add_bot(TOKEN, "mira_bot")
        config = _config(tmp_path, api, llm)
        proc, err = await _start(tmp_path, config, "first.log", api)
        try:
            api.push_message(TOKEN, TgChat.private(USER), USER, "are you there?")
            await api.wait_for(lambda: llm.call_count == 1, what="the model call")
            proc.send_signal(signal.SIGINT)
            await asyncio.sleep(0.5)
            signalled = time.monotonic()
            proc.send_signal(signal.SIGINT)
            code = await _stopped(proc, within=10)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        log = err.read_text()
        assert code == 130, log[-3000:]
        assert time.monotonic() - signalled < 5  # not the 15 s grace, not the 60 s model
        assert "second SIGINT: cancelling running turns now" in log
        assert api.sent_messages(TOKEN) == []
        assert _rows(tmp_path, "SELECT text FROM messages WHERE pending = 1") == [
            ("are you there?",)
        ]
        # The lease was released: the restart does not wait for it to expire (60 s).
        assert _rows(tmp_path, "SELECT expires_at FROM leases WHERE name LIKE 'turn:%'") == [(0.0,)]
        llm.latency = 0.0
        proc, err = await _start(tmp_path, config, "second.log", api)
        try:
            await api.wait_for(lambda: api.sent_messages(TOKEN), within=15, what="the reply")
            await asyncio.sleep(1.0)  # room for a duplicate, if there were one
            proc.send_signal(signal.SIGTERM)
            code = await _stopped(proc, within=20)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert code == 0, err.read_text()[-3000:]
        (reply,) = api.sent_messages(TOKEN)
        assert "are you there?" in reply.visible_text
        assert llm.call_count == 2  # the cancelled call and the answered one
        assert _rows(tmp_path, "SELECT COUNT(*) FROM messages WHERE pending = 1") == [(0,)]


def _catches_sigterm(pid: int) -> bool:
    """Whether the process has a handler for SIGTERM (Linux: SigCgt in /proc/PID/status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    mask = next(
        int(line.split()[1], 16) for line in status.splitlines() if line.startswith("SigCgt")
    )
    return bool(mask & (1 << (signal.SIGTERM - 1)))


async def test_a_sigterm_while_starting_stops_cleanly_with_a_log_line(tmp_path: Path) -> None:
    """SIGTERM as soon as the process handles it at all (while it still imports and sets up
    the bots): a clean exit 0 that says what happened, no kill by signal, no traceback."""
    async with FakeTelegramAPI() as api, FakeMessagesAPI() as llm:
        api.add_bot(TOKEN, "mira_bot")
        err_path = tmp_path / "start.log"
        with err_path.open("wb") as err:
            proc = await spawn(
                sys.executable, "-m", "bot", "run", "--config", str(_config(tmp_path, api, llm)),
                cwd=tmp_path, env=_env(), stdout=asyncio.subprocess.DEVNULL, stderr=err,
            )  # fmt: skip
        try:
            deadline = time.monotonic() + 30
            while not _catches_sigterm(proc.pid):
                assert time.monotonic() < deadline, "personabot run never handled SIGTERM"
                await asyncio.sleep(0.005)
            proc.send_signal(signal.SIGTERM)
            code = await _stopped(proc, within=30)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    log = err_path.read_text()
    assert code == 0, log[-3000:]
    assert "SIGTERM received: shutting down" in log
    assert "stopped (exit 0)" in log
    assert "Traceback" not in log
