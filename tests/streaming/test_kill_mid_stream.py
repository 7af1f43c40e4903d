"""A SIGKILL while a reply streams into a Telegram draft, then a restart: the person gets
exactly one final message, equal to the recorded reply (real `personabot run` processes, the
fake Bot API and the fake Messages API streaming slowly)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sqlite3
import sys
from pathlib import Path

import pytest

from tests.fakes.messages_api import FakeMessagesAPI
from tests.fakes.telegram_api import FakeTelegramAPI, TgChat, TgUser
from tests.processes import DROPPED, Running, clean_env, spawn

pytestmark = pytest.mark.timeout(120)
TOKEN = "5550011:AAStream-kill-token-abcdefghijklmnop"
USER = TgUser(4242, "Ann")
REPLY = " ".join(["Steep", "the", "leaves", "gently", "and", "wait", "a", "little"] * 6) + "."


def _config(tmp_path: Path, tg: FakeTelegramAPI, claude: FakeMessagesAPI) -> Path:
    path = tmp_path / "personabot.toml"
    path.write_text(
        f"""
[storage]
url = {json.dumps(f"sqlite:///{tmp_path / 'bots.sqlite3'}")}

[llm]
provider = "anthropic"
base_url = "{claude.base_url}"
max_retries = 0

[queue]
debounce_seconds = 0.2
max_wait_seconds = 2
lease_seconds = 2
scan_interval_seconds = 0.2
shutdown_grace_seconds = 1

[[bots]]
platform = "telegram"
persona = "companion"
api_server = "{tg.base_url}"
stream = "auto"
stream_interval_seconds = 0.3
"""
    )
    return path


async def _run(tmp_path: Path, config: Path, log: Path) -> Running:
    with log.open("wb") as stderr:  # the child keeps its own copy of the descriptor
        return await _spawn(tmp_path, config, stderr)


async def _spawn(tmp_path: Path, config: Path, stderr: object) -> Running:
    env = clean_env(
        drop=(*DROPPED, "TELEGRAM_"), TELEGRAM_BOT_TOKEN=TOKEN, ANTHROPIC_API_KEY="sk-test-kill"
    )
    return await spawn(
        sys.executable,
        "-m",
        "bot",
        "run",
        "--config",
        str(config),
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=stderr,  # type: ignore[arg-type]
    )


def _recorded(db: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        rows = conn.execute("SELECT text FROM messages WHERE role = 'assistant'").fetchall()
    return [str(r[0]) for r in rows]


async def test_sigkill_mid_stream_then_restart_gives_exactly_one_final_reply(
    tmp_path: Path,
) -> None:
    async with FakeTelegramAPI() as tg, FakeMessagesAPI() as claude:
        tg.add_bot(TOKEN, "stream_kill_bot")
        claude.reply_next(REPLY)  # the stream the SIGKILL cuts
        claude.reply_next(REPLY)  # the turn again, after the restart
        claude.token_interval = 0.1  # ~10 s of streaming
        config = _config(tmp_path, tg, claude)
        first = await _run(tmp_path, config, tmp_path / "first.log")
        second = None
        chat = TgChat.private(USER)
        try:
            await tg.wait_for(lambda: tg.polls_started(TOKEN), within=40, what="polling")
            tg.push_message(TOKEN, chat, USER, "how should I steep this tea?")
            await tg.wait_for(lambda: len(tg.drafts(TOKEN, chat.id)) >= 2, within=30, what="drafts")
            first.send_signal(signal.SIGKILL)  # mid-stream: no final check, no message
            await first.wait()
            assert tg.sent_messages(TOKEN, chat.id) == []
            second = await _run(tmp_path, config, tmp_path / "second.log")
            await tg.wait_for(
                lambda: tg.sent_messages(TOKEN, chat.id), within=60, what="the final reply"
            )
            await asyncio.sleep(1.5)  # a second final message would arrive by now
            finals = [m.visible_text for m in tg.sent_messages(TOKEN, chat.id)]
        finally:
            for proc in (first, second):
                if proc is not None and proc.returncode is None:
                    proc.send_signal(signal.SIGTERM)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(proc.wait(), 15)
                    if proc.returncode is None:
                        proc.kill()
    assert finals == [REPLY]
    assert _recorded(tmp_path / "bots.sqlite3") == [REPLY]
    assert claude.call_count == 2
