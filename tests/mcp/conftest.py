"""Fixtures of the MCP tests: a SQLite store, the fake Messages API and its client, the test
MCP server (tests/fakes/mcp_server.py) as stdio settings or as a running HTTP process."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bot.config import McpServerSettings
from bot.llm.anthropic import AnthropicLLM
from bot.store.sqlite import SQLiteStore
from tests.fakes.messages_api import FakeMessagesAPI

#: The checkout (the stdio server is run as ``python -m tests.fakes.mcp_server`` from it).
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    async with SQLiteStore(path=tmp_path / "store.sqlite3") as opened:
        yield opened


@pytest.fixture
async def api() -> AsyncIterator[FakeMessagesAPI]:
    async with FakeMessagesAPI() as fake:
        yield fake


@pytest.fixture
async def llm(api: FakeMessagesAPI) -> AsyncIterator[AnthropicLLM]:
    client = AnthropicLLM(api_key="sk-test", base_url=api.base_url, max_retries=0)
    yield client
    await client.aclose()


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    """The file the test server's ``add_note`` appends to."""
    return tmp_path / "notes.txt"


@pytest.fixture
def stdio_server(notes: Path) -> Callable[..., McpServerSettings]:
    """Settings of the test server started over stdio (keys override the defaults)."""

    def make(**keys: Any) -> McpServerSettings:
        entry: dict[str, Any] = {
            "name": "facts",
            "command": sys.executable,
            "args": ["-m", "tests.fakes.mcp_server", "--notes", str(notes)],
            "cwd": str(ROOT),
            "tools": ["lookup", "add_note"],
            "effects": "read_only",
            "tool_effects": {"add_note": "effectful"},
            **keys,
        }
        if "add_note" not in entry["tools"]:
            entry.pop("tool_effects")
        return McpServerSettings(**entry)

    return make


@dataclass
class HttpServer:
    """The test server running over streamable HTTP."""

    url: str
    process: asyncio.subprocess.Process


@contextlib.asynccontextmanager
async def http_server(env: dict[str, str]) -> AsyncIterator[HttpServer]:
    """Start the test server on a free port; stopped on exit."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.fakes.mcp_server",
        "--transport",
        "http",
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        async with asyncio.timeout(30):
            line = (await process.stdout.readline()).decode()
        assert line.startswith("listening on "), line
        yield HttpServer(f"http://127.0.0.1:{int(line.split()[-1])}/mcp", process)
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()
