"""``personabot chat`` reads like a conversation (issue 35, item 7): piped input is answered in
input order, /help lists /quit, input left unanswered ends the run with a non-zero exit, and on
a terminal the log records stay out of the conversation and Ctrl-D leaves a clean line."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bot.chat_process import Terminal, piped_chat, terminal_chat
from tests.fakes.messages_api import FakeMessagesAPI
from tests.processes import clean_env, run

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def readme_run(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    """The README's piped example, with a /help: one process for the tests that read it."""
    return run(
        [sys.executable, "-m", "bot", "chat"],
        input="hello\n/help\n/new\nagain\n",
        cwd=tmp_path_factory.mktemp("readme"),
        env=clean_env(),
    )


def test_piped_input_is_answered_in_input_order(
    readme_run: subprocess.CompletedProcess[str],
) -> None:
    """hello is answered before /new runs; the transcript reads in the order it was typed."""
    assert readme_run.returncode == 0, readme_run.stderr
    said = [line for line in readme_run.stdout.splitlines() if line.startswith("Mira: ")]
    expected = [
        "Mira: Hi, I'm Mira.",
        "Mira: [offline model] You said: hello",
        "Mira: Commands:",
        "Mira: New session started (#2)",
        "Mira: [offline model] You said: again",
    ]
    assert len(said) == len(expected), said
    assert all(line.startswith(start) for line, start in zip(said, expected, strict=True)), said


def test_help_lists_quit(readme_run: subprocess.CompletedProcess[str]) -> None:
    """/help names every command the chat accepts, /quit too (the console handles it)."""
    help_text = readme_run.stdout.split("Mira: Commands:")[1].split("Mira: New session")[0]
    assert "/new - " in help_text
    assert "/quit - leave the chat" in help_text


async def test_piped_input_the_model_never_answers_exits_non_zero(tmp_path: Path) -> None:
    """The model is overloaded for good: the run neither hangs nor claims success; it says how
    many messages went unanswered and exits 1 (they stay stored for the next start)."""
    async with FakeMessagesAPI() as api:
        api.fail_next(status=529, times=100)
        env = clean_env(
            ANTHROPIC_API_KEY="sk-test",
            PERSONABOT_LLM__BASE_URL=api.base_url,
            PERSONABOT_LLM__MAX_RETRIES="0",
            PERSONABOT_LLM__TIMEOUT_SECONDS="1",
            PERSONABOT_QUEUE__DEBOUNCE_SECONDS="0.1",
            PERSONABOT_QUEUE__MAX_WAIT_SECONDS="0.5",
        )
        proc = await piped_chat(tmp_path, env)
        out, err = await asyncio.wait_for(proc.communicate(b"one\ntwo\n"), timeout=40)
    assert proc.returncode == 1, err.decode()
    assert "2 messages went unanswered" in out.decode()
    assert "You said" not in out.decode()


async def _chat_on_a_terminal(
    cwd: Path, env: dict[str, str], line: bytes, answer: bytes, last: bytes
) -> tuple[int, str]:
    """Run ``personabot chat`` on a pseudo-terminal: type ``line``, wait for ``answer`` and the
    prompt after it, then type ``last`` (Ctrl-D, /quit). The exit code and all it showed."""
    proc, master = await terminal_chat(cwd, env)
    terminal = Terminal(master)
    try:
        await asyncio.to_thread(terminal.read_until, b"\n> ")
        os.write(master, line + b"\n")
        await asyncio.to_thread(terminal.read_until, answer + b"\r\n> ")
        os.write(master, last)
        code = await asyncio.wait_for(proc.wait(), timeout=30)
        seen = await asyncio.to_thread(terminal.read_until, b"never shown", 2)
    finally:
        os.close(master)
    return code, seen.decode()


async def test_on_a_terminal_ctrl_d_ends_the_prompt_line(tmp_path: Path) -> None:
    """Ctrl-D at the prompt ends the prompt's line, so the shell's prompt starts on its own."""
    code, seen = await _chat_on_a_terminal(
        tmp_path,
        clean_env(),
        b"hello",
        b"(prompt layers: persona, turn; 0 earlier messages in the window)",
        b"\x04",
    )
    assert code == 0, seen
    assert seen.endswith("> \r\n"), repr(seen[-40:])


async def test_on_a_terminal_logs_go_to_a_file_named_at_start(tmp_path: Path) -> None:
    """The model fails once (a warning is logged) and then answers: the terminal shows the
    conversation only; its opening line names the file the records went to."""
    async with FakeMessagesAPI() as api:
        api.fail_next(status=529)
        env = clean_env(
            ANTHROPIC_API_KEY="sk-test",
            PERSONABOT_LLM__BASE_URL=api.base_url,
            PERSONABOT_LLM__MAX_RETRIES="0",
            PERSONABOT_QUEUE__DEBOUNCE_SECONDS="0.1",
        )
        code, seen = await _chat_on_a_terminal(
            tmp_path, env, b"good evening", b"Mira: good evening", b"/quit\n"
        )
    assert code == 0, seen
    assert "; log: personabot-chat.log;" in seen.split("\r\n")[0]
    assert "Mira: good evening" in seen
    assert "WARNING" not in seen and "model unavailable" not in seen
    assert "model unavailable" in (tmp_path / "personabot-chat.log").read_text()
    # ... and its last line says that there is something to read there.
    assert re.search(r"\r\n\d+ warnings or errors were logged to personabot-chat\.log\.\r\n$", seen)


async def test_on_a_terminal_ctrl_c_with_everything_answered_exits_0(tmp_path: Path) -> None:
    """Ctrl-C is one of the ways to leave: with nothing left unanswered it is no failure."""
    proc, master = await terminal_chat(tmp_path, clean_env())
    terminal = Terminal(master)
    try:
        await asyncio.to_thread(terminal.read_until, b"\n> ")
        os.write(master, b"hello\n")
        # The offline model's answer ends with the layers it got, then the prompt is back.
        await asyncio.to_thread(terminal.read_until, b"in the window)\r\n> ")
        proc.send_signal(signal.SIGINT)
        code = await asyncio.wait_for(proc.wait(), timeout=30)
        seen = await asyncio.to_thread(terminal.read_until, b"never shown", 2)
    finally:
        os.close(master)
    assert code == 0, seen.decode()
    assert b"unanswered" not in seen and b"not read" not in seen


async def test_piped_a_slow_reply_is_printed_once_and_whole(tmp_path: Path) -> None:
    """A reply the model would stream for longer than max_wait + timeout: a piped transcript
    shows each reply once, complete. Streamed, the first was printed as it came, then thrown
    away by the final check once the next line had gone in (to be printed again at the next
    start), and the run ended with both lines unanswered."""
    reply = "one two three four five six seven eight nine ten eleven twelve"
    async with FakeMessagesAPI(reply_text=reply) as api:
        api.token_interval = 0.25  # about 3 s of streaming, past the 1.5 s limit
        env = clean_env(
            ANTHROPIC_API_KEY="sk-test",
            PERSONABOT_LLM__BASE_URL=api.base_url,
            PERSONABOT_LLM__TIMEOUT_SECONDS="1",
            PERSONABOT_QUEUE__MAX_WAIT_SECONDS="0.5",
            PERSONABOT_QUEUE__DEBOUNCE_SECONDS="0.1",
        )
        proc = await piped_chat(tmp_path, env)
        out, err = await asyncio.wait_for(proc.communicate(b"first\nsecond\n"), timeout=40)
    said = [line for line in out.decode().splitlines() if line.startswith("Mira: ")]
    assert said[1:] == [f"Mira: {reply}"] * 2, (out.decode(), err.decode())
    assert "[dropped]" not in out.decode()
    assert proc.returncode == 0, err.decode()
