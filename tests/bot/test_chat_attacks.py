"""From review 35b: ``personabot chat`` attacked (issue 35, an operator's first hour)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from tests.bot.chat_process import Terminal, piped_chat, terminal_chat
from tests.fakes.messages_api import FakeMessagesAPI
from tests.processes import clean_env, run

pytestmark = pytest.mark.timeout(60)

#: OSC 0 (window title), OSC 52 (write the clipboard), CSI 2J (clear the screen), OSC 8 (a
#: hyperlink whose shown text hides its target).
HOSTILE = (
    "ok \x1b]0;PWNED\x07\x1b]52;c;ZXZpbA==\x07\x1b[2J\x1b[31mRED\x1b[0m "
    "\x1b]8;;http://evil.example/\x07click\x1b]8;;\x07 end"
)


async def test_model_output_cannot_send_terminal_escape_sequences(tmp_path: Path) -> None:
    """The model's text is printed as text: no ESC (or other C0/C1 control) reaches the
    terminal, so a reply cannot set the title, write the clipboard (OSC 52) or clear the
    screen."""
    async with FakeMessagesAPI(reply_text=HOSTILE) as api:
        env = clean_env(ANTHROPIC_API_KEY="sk-test", PERSONABOT_LLM__BASE_URL=api.base_url)
        proc = await piped_chat(tmp_path, env)
        out, err = await asyncio.wait_for(proc.communicate(b"hello\n"), timeout=40)
    assert proc.returncode == 0, err.decode()
    assert "RED" in out.decode()
    assert b"\x1b" not in out, out


async def test_a_card_persona_name_and_greeting_cannot_send_escape_sequences(
    tmp_path: Path,
) -> None:
    """A downloaded card's name and greeting are printed on every line of the chat."""
    (tmp_path / "p.toml").write_text(
        '[llm]\nprovider = "offline"\n[[personas]]\nid = "evil"\n'
        'name = "Evil\\u001b]0;PWN\\u0007"\nsystem = "x"\n'
        'first_message = ["hi \\u001b]52;c;ZXZpbA==\\u0007"]\n',
        encoding="utf-8",
    )
    proc = await piped_chat(tmp_path, clean_env(), "--config", "p.toml")
    out, err = await asyncio.wait_for(proc.communicate(b"hello\n"), timeout=40)
    assert proc.returncode == 0, err.decode()
    assert b"\x1b" not in out, out


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
async def test_piped_input_cut_short_by_sigterm_is_not_reported_as_success(
    tmp_path: Path, stop: signal.Signals
) -> None:
    """``timeout 30 personabot chat < script`` (or a supervisor's SIGTERM) with the model
    down: three lines are left unanswered (two never even read), yet the run exits 0 and
    prints nothing about them."""
    async with FakeMessagesAPI() as api:
        api.hold = asyncio.Event()  # the model never answers
        env = clean_env(
            ANTHROPIC_API_KEY="sk-test",
            PERSONABOT_LLM__BASE_URL=api.base_url,
            PERSONABOT_QUEUE__SHUTDOWN_GRACE_SECONDS="1",  # the held turn's grace period
        )
        proc = await piped_chat(tmp_path, env)
        assert proc.stdin is not None
        proc.stdin.write(b"one\ntwo\nthree\n")
        await proc.stdin.drain()
        await asyncio.wait_for(api.received.wait(), timeout=30)  # "one" is with the model
        proc.send_signal(stop)
        out, err = await asyncio.wait_for(proc.communicate(), timeout=40)
        api.hold.set()
    assert proc.returncode == 1, (out.decode(), err.decode())
    assert "Stopped: 1 message went unanswered; kept" in out.decode(), out.decode()
    assert "input after line 1 was not read" in out.decode(), out.decode()


def test_help_in_capitals_lists_quit_too(tmp_path: Path) -> None:
    """``/HELP`` is answered as /help (commands are case-insensitive), but without /quit."""
    done = run(
        [sys.executable, "-m", "bot", "chat"], input="/HELP\n", cwd=tmp_path, env=clean_env()
    )
    assert "Mira: Commands:" in done.stdout, done.stdout
    assert "/quit - leave the chat" in done.stdout, done.stdout


async def test_the_chat_log_is_readable_by_its_owner_only_even_when_it_existed(
    tmp_path: Path,
) -> None:
    """README: on a terminal the records go to personabot-chat.log, "readable by its owner
    only". A file left there world-readable (or a symlink planted in a shared directory) is
    appended to as it is: the records (names, chats, errors) land in a 0644 file, or in
    whatever file the link points to."""

    victim = tmp_path / "elsewhere.txt"
    victim.write_text("someone else's file\n")
    victim.chmod(0o644)
    (tmp_path / "personabot-chat.log").symlink_to(victim)
    async with FakeMessagesAPI() as api:
        api.fail_next(status=529)  # one warning gets logged
        env = clean_env(
            ANTHROPIC_API_KEY="sk-test",
            PERSONABOT_LLM__BASE_URL=api.base_url,
            PERSONABOT_LLM__MAX_RETRIES="0",
            PERSONABOT_QUEUE__DEBOUNCE_SECONDS="0.1",
        )
        proc, master = await terminal_chat(tmp_path, env)
        terminal = Terminal(master)
        try:
            await asyncio.to_thread(terminal.read_until, b"\n> ")
            os.write(master, b"hello\n")
            await asyncio.to_thread(terminal.read_until, b"Mira: hello")
            os.write(master, b"/quit\n")
            await asyncio.wait_for(proc.wait(), timeout=30)
        finally:
            os.close(master)
    assert victim.read_text() == "someone else's file\n", "records written through the link"


def test_a_reader_that_goes_away_ends_a_piped_chat_promptly(tmp_path: Path) -> None:
    """``personabot chat < lines | head -3``: once stdout is a broken pipe nothing can be
    shown any more, yet the chat keeps retrying the turn (a BrokenPipeError traceback in
    the log every second) for max_wait + timeout (68 s by default) and then some, ~100 s in
    all, and exits 0."""
    import subprocess
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "bot", "chat"], cwd=tmp_path, env=clean_env(),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("".join(f"line {n}\n" for n in range(1, 51)).encode())
    proc.stdin.close()
    for _ in range(3):
        proc.stdout.readline()
    proc.stdout.close()  # `head -3` is done
    started = time.monotonic()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(
            f"still running {time.monotonic() - started:.0f} s after its reader went away"
        ) from None
