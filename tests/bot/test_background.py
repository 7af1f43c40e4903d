"""The runtime's tasks, owned in one place (bot/app/build/background.py): stopped the last
started first, each waited for; a task that fails is logged once and stops ``personabot
run`` (exit code 1) instead of leaving it serving without that task."""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from adapters.base import BaseAdapter
from bot.app import App
from bot.app.build import Background, stores
from bot.app.chat import EXIT_UNANSWERED, run_chat
from bot.config import BotSettings, PersonaSettings, Secrets, Settings
from bot.core.errors import StoreError
from bot.core.events import ConversationKey, Reply
from bot.core.ports import InboundHandler
from bot.llm.offline import OfflineLLM
from bot.store.sqlite import SQLiteStore


async def test_tasks_stop_last_started_first_and_a_stoppable_one_finishes_its_work() -> None:
    background = Background()
    seen: list[str] = []
    stop = asyncio.Event()

    async def loop(name: str) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            seen.append(f"{name} cancelled")

    async def scheduler() -> None:
        await stop.wait()
        await asyncio.sleep(0.05)  # running turns finish within the grace period
        seen.append("scheduler drained")

    background.start("sweeper", loop("sweeper"))
    background.start("scheduler", scheduler(), stop=stop.set)
    background.start("watch", loop("watch"))
    await asyncio.sleep(0)
    await background.aclose()
    assert seen == ["watch cancelled", "scheduler drained", "sweeper cancelled"]


async def test_a_failing_task_is_logged_once_and_sets_failed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    background = Background()

    async def broken() -> None:
        raise RuntimeError("the listening connection is gone")

    async def fine() -> None:
        await asyncio.Event().wait()

    other = background.start("sweeper", fine())
    with caplog.at_level(logging.ERROR, logger="personabot.app"):
        background.start("wake-ups", broken())
        async with asyncio.timeout(5):
            await background.failed.wait()
        assert not other.done()  # stopped by whoever owns the runtime, in order
        await background.aclose()  # the failure was reported; closing does not raise it
    assert background.failures == ["wake-ups"]
    assert caplog.messages == ["wake-ups stopped: the listening connection is gone"]
    assert other.cancelled()


class _FailingAdapter(BaseAdapter):
    """A platform whose connection breaks soon after it started receiving."""

    async def run(self, handler: InboundHandler) -> None:
        await asyncio.sleep(0.2)
        raise ConnectionError("the platform closed the connection")

    async def send(self, reply: Reply) -> None:
        raise AssertionError("nothing to send")

    @contextlib.asynccontextmanager
    async def _typing(self) -> AsyncIterator[None]:
        yield

    def typing(self, conversation: ConversationKey) -> contextlib.AbstractAsyncContextManager[None]:
        return self._typing()


async def test_run_stops_with_exit_code_1_when_a_bots_task_fails(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings.model_validate(
        {
            "storage": {"url": f"sqlite:///{tmp_path / 'db.sqlite3'}"},
            "llm": {"provider": "offline"},
            "queue": {"shutdown_grace_seconds": 1},
            "bots": [{"platform": "flaky", "persona": "companion"}],
        }
    )

    def flaky(entry: BotSettings, persona: PersonaSettings, secrets: Secrets) -> BaseAdapter:
        return _FailingAdapter(bot_key=entry.key)

    app = App(settings, Secrets({}), llm=OfflineLLM())
    app.platform("flaky", flaky)
    with caplog.at_level(logging.INFO):
        async with asyncio.timeout(30):
            code = await app.run()
    assert code == 1
    assert "bot flaky-companion stopped: the platform closed the connection" in caplog.messages
    assert "stopped (exit 1)" in caplog.messages


class _NoAnnouncements(SQLiteStore):
    """A store whose announcements of armed timers break at once (as a lost connection)."""

    async def listen_timers(
        self,
        on_timer: Callable[[str | None, float | None], None],
        on_input: Callable[[ConversationKey | None], None] | None = None,
    ) -> None:
        raise StoreError("the listening connection is gone")


async def test_chat_stops_with_exit_code_1_when_a_runtime_task_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The chat does not sit waiting for replies its runtime can no longer give."""
    path = tmp_path / "db.sqlite3"
    settings = Settings.model_validate(
        {"storage": {"url": f"sqlite:///{path}"}, "llm": {"provider": "offline"}}
    )
    monkeypatch.setattr(stores, "build_store", lambda _: _NoAnnouncements(path=path))
    read, write = os.pipe()  # input that never ends by itself
    stdin = os.fdopen(read, encoding="utf-8")
    try:
        with caplog.at_level(logging.ERROR):
            async with asyncio.timeout(20):
                code = await run_chat(
                    App(settings, Secrets({})),
                    persona_id=None,
                    stdin=stdin,
                    stdout=io.StringIO(),
                    interactive=False,
                )
    finally:
        os.close(write)  # the reading thread sees the end of input and lets go of stdin
        stdin.close()
    assert code == EXIT_UNANSWERED
    assert "wake-ups stopped: the listening connection is gone" in caplog.messages
