"""A streamed reply through the wired runtime (bot/app/build.py), the real Anthropic client
and the fake Messages API speaking server-sent events, shown by the console adapter: the text
is printed as it comes and completed by the recorded reply; a stream that breaks midway leaves
no reply and is retried; a turn discarded by newer input is marked dropped."""

from __future__ import annotations

import asyncio
import io
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from adapters.console.adapter import ConsoleAdapter
from bot.app.build import runtime
from bot.config import PersonaSettings, QueueSettings, Settings, StorageSettings
from bot.core.events import ConversationKey
from bot.llm.anthropic import AnthropicLLM
from tests.fakes.messages_api import FakeMessagesAPI

pytestmark = pytest.mark.timeout(60)
PERSONA = PersonaSettings(id="mira", name="Mira", system="You are Mira.", first_message=["Hi"])
KEY = "console-mira"
REPLY = "Tea is best brewed at about eighty degrees, for three minutes, then enjoyed slowly."


async def eventually(check: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = time.monotonic() + 15
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


@pytest.fixture
async def api() -> AsyncIterator[FakeMessagesAPI]:
    async with FakeMessagesAPI() as server:
        yield server


def settings(tmp_path: Path) -> Settings:
    return Settings(
        storage=StorageSettings(url=f"sqlite:///{tmp_path / 'stream.sqlite3'}"),
        queue=QueueSettings(
            debounce_seconds=0.1,
            max_wait_seconds=1.0,
            scan_interval_seconds=0.2,
            shutdown_grace_seconds=2.0,
        ),
        personas=[PERSONA],
    )


def _console(out: io.StringIO) -> ConsoleAdapter:
    """The terminal chat of Ann with Mira, printing into ``out``."""
    return ConsoleAdapter(
        bot_key=KEY,
        persona_name="Mira",
        user_id="u1",
        display_name="Ann",
        stdin=io.StringIO(),
        stdout=out,
    )


async def _replies(rt_store: object, conversation: ConversationKey) -> list[str]:
    from bot.store.base import BaseStore

    assert isinstance(rt_store, BaseStore)
    session = await rt_store.current_session(conversation)
    if session is None:
        return []
    return [m.text for m in await rt_store.messages(session.key) if m.role == "assistant"]


async def test_a_streamed_reply_is_printed_as_it_comes_and_recorded_once(
    tmp_path: Path, api: FakeMessagesAPI
) -> None:
    api.reply_next(REPLY)
    api.token_interval = 0.05  # ~16 tokens: about 0.8 s of streaming
    out = io.StringIO()
    console = _console(out)
    llm = AnthropicLLM(api_key="sk-test", base_url=api.base_url, max_retries=0)
    async with runtime(settings(tmp_path), llm=llm, adapters={KEY: (PERSONA, console)}) as rt:
        printed: list[str] = []

        async def streaming() -> bool:
            printed.append(out.getvalue())
            return console.replies_sent == 1

        await rt.router(console.inbound("how do I brew tea?"))
        await eventually(streaming, "the reply")
        assert await _replies(rt.store, console.conversation) == [REPLY]
    await llm.aclose()
    assert api.last_request.streamed
    # Part of the reply was on screen before the reply was complete, and the line ends as
    # one reply: printed once, not repeated by the final delivery.
    partial = [p for p in printed if "Mira: Tea" in p and REPLY not in p]
    assert partial, printed
    assert out.getvalue().count("Mira: ") == 1
    assert out.getvalue().strip().endswith(REPLY)


async def test_a_stream_that_breaks_midway_records_nothing_and_is_answered_on_retry(
    tmp_path: Path, api: FakeMessagesAPI
) -> None:
    api.reply_next(REPLY)  # consumed by the broken stream
    api.fail_midstream_next(after_tokens=5, kind="overloaded_error")
    api.reply_next("Second try: eighty degrees, three minutes.")
    api.token_interval = 0.02
    out = io.StringIO()
    console = _console(out)
    llm = AnthropicLLM(api_key="sk-test", base_url=api.base_url, max_retries=0)
    async with runtime(settings(tmp_path), llm=llm, adapters={KEY: (PERSONA, console)}) as rt:
        await rt.router(console.inbound("how do I brew tea?"))

        async def answered() -> bool:
            return bool(await _replies(rt.store, console.conversation)) and (
                "three minutes." in out.getvalue()
            )

        await eventually(answered, "the retried reply")
        replies = await _replies(rt.store, console.conversation)
    await llm.aclose()
    assert replies == ["Second try: eighty degrees, three minutes."]  # no half reply recorded
    assert api.call_count == 2
    text = out.getvalue()
    assert text.count("Second try: eighty degrees, three minutes.") == 1
    # What was printed of the broken stream (if anything) is marked dropped, never completed.
    assert "eighty degrees, for three minutes" not in text
    broken = text.split("Second try")[0]
    assert "Mira: Tea" not in broken or "[dropped]" in broken
