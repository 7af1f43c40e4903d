"""Tools through the real entry point: ``personabot chat`` as a process, plugins named in the
TOML, Claude through the real SDK against the fake Messages API (issue 14 acceptance)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
import pty
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path

from tests.fakes.messages_api import FakeMessagesAPI
from tests.processes import DROPPED, Running, clean_env, spawn

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

# A plugin as a user would write it: a side-effecting tool and a lookup that waits for a file
# (so that the test can send more input while the model's turn is still running).
NOTES_PLUGIN = '''
import asyncio
from pathlib import Path

from bot.app import App


def setup(app: App) -> None:
    here = Path(app.options["dir"])

    @app.tool(side_effects=True)
    async def save_note(text: str) -> None:
        """Save a note for the user."""
        with (here / "notes.txt").open("a") as notes:
            notes.write(text + "\\n")

    @app.tool
    async def contacts(name: str) -> str:
        """A contact's phone number."""
        while not (here / "gate").exists():
            await asyncio.sleep(0.02)
        return "+47 000"
'''


def _config(tmp_path: Path, api: FakeMessagesAPI, plugins: str, queue: str = "") -> Path:
    path = tmp_path / "personabot.toml"
    path.write_text(
        f"""{plugins}
[storage]
url = "sqlite:///{tmp_path / "bots.sqlite3"}"

[llm]
provider = "anthropic"
base_url = "{api.base_url}"
max_retries = 0

[queue]
debounce_seconds = 0.2
max_wait_seconds = 2
scan_interval_seconds = 0.2
shutdown_grace_seconds = 2
{queue}
[[personas]]
id = "mira"
name = "Mira"
system = "You are Mira."
first_message = ["Hi, I'm Mira."]
model = "claude-test"
""",
        encoding="utf-8",
    )
    return path


def _env(tmp_path: Path) -> dict[str, str]:
    return clean_env(
        drop=(*DROPPED, "TELEGRAM_", "PYTHONPATH"),
        PYTHONPATH=os.pathsep.join(str(p) for p in (tmp_path, EXAMPLES, ROOT)),
        ANTHROPIC_API_KEY="sk-test-entry-point",
    )


async def _chat(tmp_path: Path, config: Path, stdin: int = asyncio.subprocess.PIPE) -> Running:
    return await spawn(
        sys.executable, "-m", "bot", "chat", "--config", str(config),
        cwd=tmp_path, env=_env(tmp_path), stdin=stdin,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def _eventually(check: Callable[[], bool], what: str) -> None:
    for _ in range(1500):
        if check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"never happened: {what}")


def _user_texts(db_path: Path) -> list[str]:
    if not db_path.exists():
        return []
    with contextlib.closing(sqlite3.connect(db_path)) as db:
        rows = db.execute("SELECT text FROM messages WHERE role = 'user' ORDER BY id").fetchall()
    return [text for (text,) in rows]


async def test_chat_calls_the_example_plugin_tool_and_sends_one_reply(tmp_path: Path) -> None:
    async with FakeMessagesAPI() as api:
        api.tool_use_next("current_time", {"utc_offset_hours": 2})
        api.reply_next("It is evening where you are.")
        config = _config(tmp_path, api, 'plugins = ["personabot_dice"]\n')
        proc = await _chat(tmp_path, config)
        out, err = await asyncio.wait_for(proc.communicate(b"what time is it?\n"), 60)
    assert proc.returncode == 0, err.decode()
    assert out.decode().count("It is evening where you are.") == 1
    assert api.call_count == 2
    first, second = api.requests
    assert "current_time" in [t["name"] for t in first.tools]
    [result] = second.tool_results
    when = datetime.datetime.fromisoformat(result["content"])
    assert when.utcoffset() == datetime.timedelta(hours=2)


async def test_chat_a_turn_discarded_by_newer_input_leaves_no_side_effect(
    tmp_path: Path,
) -> None:
    """Typed on a terminal (the live chat: piped input waits for each answer, so no newer
    input can arrive while a turn runs), a line sent while the model works discards its turn
    (by the final check: the cut-off, which would cancel it at once, is off here)."""
    (tmp_path / "notes_plugin.py").write_text(NOTES_PLUGIN, encoding="utf-8")
    plugins = f'plugins = ["notes_plugin"]\n\n[plugin_options.notes_plugin]\ndir = "{tmp_path}"\n'
    terminal, stdin = pty.openpty()
    try:
        async with FakeMessagesAPI() as api:
            api.tool_use_next(
                "save_note", {"text": "call Ola"}, calls=[("contacts", {"name": "Ola"})]
            )
            api.reply_next("Noted: call Ola.")  # generated while newer input arrived: discarded
            api.reply_next("Noted, and his number is +47 000.")
            config = _config(tmp_path, api, plugins, "cut_stale = false\n")
            proc = await _chat(tmp_path, config, stdin=stdin)
            os.close(stdin)
            os.write(terminal, b"remind me to call Ola\n")
            await _eventually(lambda: api.call_count == 1, "the first model call")
            os.write(terminal, b"and find his number\n")
            db = tmp_path / "bots.sqlite3"
            await _eventually(lambda: len(_user_texts(db)) == 2, "the second message stored")
            (tmp_path / "gate").touch()  # the turn goes on, now with stale input
            os.write(terminal, b"\x04")  # Ctrl-D: input ends
            out, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        os.close(terminal)
    assert proc.returncode == 0, err.decode()
    text = out.decode()
    # The console prints a reply as it is written: the discarded one may have been shown,
    # but then only as a stream marked dropped, never as a reply.
    assert text.count("Noted: call Ola.") == text.count("Noted: call Ola. [dropped]")
    assert text.count("Noted, and his number is +47 000.") == 1
    assert api.call_count == 3
    assert not (tmp_path / "notes.txt").exists()  # the discarded turn's effect never happened
