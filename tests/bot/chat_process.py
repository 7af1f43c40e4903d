"""``personabot chat`` as a process, piped or on a pseudo-terminal, for the chat's tests."""

from __future__ import annotations

import asyncio
import os
import pty
import select
import sys
import time
from pathlib import Path

from tests.fakes.messages_api import FakeMessagesAPI
from tests.processes import Running, clean_env, spawn


def model_env(api: FakeMessagesAPI, **extra: str) -> dict[str, str]:
    """:func:`~tests.processes.clean_env` talking to the fake Messages API ``api``."""
    return clean_env(ANTHROPIC_API_KEY="sk-test", PERSONABOT_LLM__BASE_URL=api.base_url, **extra)


async def piped_chat(cwd: Path, env: dict[str, str], *args: str) -> Running:
    """``python -m bot chat ARGS`` with stdin, stdout and stderr piped."""
    return await spawn(
        sys.executable, "-m", "bot", "chat", *args, cwd=cwd, env=env,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def terminal_chat(cwd: Path, env: dict[str, str]) -> tuple[Running, int]:
    """``python -m bot chat`` on a pseudo-terminal: the process and the terminal's master fd."""
    master, slave = pty.openpty()
    proc = await spawn(
        sys.executable, "-m", "bot", "chat", cwd=cwd, env=env,
        stdin=slave, stdout=slave, stderr=slave,
    )  # fmt: skip
    os.close(slave)
    return proc, master


class Terminal:
    """The master side of a pseudo-terminal: what a person at that terminal sees."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.seen = b""

    def read_until(self, needle: bytes, within: float = 30.0) -> bytes:
        """Everything shown so far, once ``needle`` appeared (or the program ended)."""
        deadline = time.monotonic() + within
        while needle not in self.seen and time.monotonic() < deadline:
            ready, _, _ = select.select([self.fd], [], [], deadline - time.monotonic())
            if not ready:
                break
            try:
                chunk = os.read(self.fd, 4096)
            except OSError:  # the program ended: the terminal is gone
                break
            if not chunk:
                break
            self.seen += chunk
        return self.seen
