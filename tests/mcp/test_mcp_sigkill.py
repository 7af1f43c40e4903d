"""Issue 38 item 5 against real processes: a `personabot` worker (tests/fakes/worker.py) makes
an effectful MCP call (the test server over stdio appends a note) and is SIGKILLed while the
model writes the reply that reports it; the worker that takes the turn over after the lease
expires answers it without calling the tool again (the call's record, bot/runtime/ledger.py)."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

import aiohttp

from tests.bot.test_multiprocess import eventually, post, workers, write_config
from tests.fakes.messages_api import CannedReply, FakeMessagesAPI
from tests.mcp.conftest import ROOT
from tests.processes import clean_env


def _with_mcp(config: Path, notes: Path) -> Path:
    server = f"""
[[mcp_servers]]
name = "facts"
command = {json.dumps(sys.executable)}
args = ["-m", "tests.fakes.mcp_server", "--notes", {json.dumps(str(notes))}]
cwd = {json.dumps(str(ROOT))}
tools = ["add_note"]
effects = "effectful"
"""
    config.write_text(config.read_text(encoding="utf-8") + server, encoding="utf-8")
    return config


async def test_a_worker_killed_after_an_effectful_call_never_makes_it_twice(
    tmp_path: Path,
) -> None:
    notes = tmp_path / "notes.txt"
    gate = asyncio.Event()  # the reply after the call: held until the first worker is dead
    async with FakeMessagesAPI() as api:
        api.answer_when(
            lambda r: not r.tool_results and "buy milk" in r.last_user_text,
            lambda r: api.tool_use_reply("facts__add_note", {"text": "buy milk"}),
        )
        api.answer_when(lambda r: bool(r.tool_results), CannedReply("Noted: buy milk."), gate=gate)
        config = _with_mcp(
            write_config(
                tmp_path / "personabot.toml",
                dsn=f"sqlite:///{tmp_path / 'bot.sqlite3'}",
                api_url=api.base_url,
                lease=3.0,
                debounce=0.2,
                scan=0.2,
            ),
            notes,
        )
        env = clean_env(ANTHROPIC_API_KEY="test")
        for run in ("a", "b"):
            (tmp_path / run).mkdir()
        async with (
            aiohttp.ClientSession() as http,
            workers(1, config, tmp_path / "a", env) as (first,),
        ):
            await post(http, first, "k1", "note: buy milk", "k1-0")
            await eventually(lambda: notes.exists(), 30, "the effectful call")
            await eventually(lambda: api.call_count >= 2, 15, "the reply being written")
            # The second worker is up, its MCP server's tools offered, while the first
            # still holds the turn's lease; then the first dies mid-reply.
            async with workers(1, config, tmp_path / "b", env) as (second,):
                first.proc.send_signal(signal.SIGKILL)
                await first.proc.wait()
                gate.set()
                await eventually(lambda: bool(second.delivered()), 30, "the takeover's reply")
                delivered = second.delivered()
        calls = [r for r in api.requests if r.tool_results]
    assert first.delivered() == []
    assert [r["text"] for r in delivered] == ["Noted: buy milk."]
    assert notes.read_text() == "buy milk\n"  # made once, by the killed worker
    # The takeover's model asked again; it was shown the recorded result, no call made.
    assert len(calls) == 2
    assert [str(t["content"]) for t in calls[-1].tool_results] == ["noted"]
