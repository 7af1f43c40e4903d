"""Review of issue 23: SQLite's autocommit writes (outbox marks, lease release) under a write
lock held by another connection past busy_timeout, right after the reply went out. Real
aiogram polling, the fake Bot API, the real runtime on a SQLite file."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

from bot.config import QueueSettings, Settings, StorageSettings
from tests.adapters.test_telegram import ANN, BOB, PERSONA, TOKEN, running
from tests.fakes.llm import GatedLLM
from tests.fakes.telegram_api import FakeTelegramAPI, TgChat


async def test_a_write_lock_right_after_a_send_neither_repeats_nor_loses_replies(
    tmp_path: Path,
) -> None:
    path = tmp_path / "bot.sqlite3"
    settings = Settings(
        storage=StorageSettings(url=f"sqlite:///{path}", busy_timeout_ms=100),
        queue=QueueSettings(debounce_seconds=0.2, max_wait_seconds=2.0, scan_interval_seconds=0.2),
        personas=[PERSONA],
    )
    llm = GatedLLM(answer=lambda r: f"re: {r.messages[-1].text}")
    locker: sqlite3.Connection | None = None
    locks = 0

    async with FakeTelegramAPI() as api:
        api.add_bot(TOKEN, "mira_bot", "Mira")
        dispatch = api._dispatch

        async def locking_dispatch(account: Any, method: str, params: dict[str, Any]) -> Any:
            nonlocal locker, locks
            result = await dispatch(account, method, params)
            if method == "sendMessage" and locker is None and locks < 2:
                # The reply is out; now another process holds the write lock for 1 s.
                locks += 1
                locker = sqlite3.connect(path, isolation_level=None)
                locker.execute("BEGIN IMMEDIATE")

                def unlock() -> None:
                    nonlocal locker
                    assert locker is not None
                    locker.execute("COMMIT")
                    locker.close()
                    locker = None

                asyncio.get_running_loop().call_later(1.0, unlock)
            return result

        api._dispatch = locking_dispatch  # type: ignore[method-assign]
        async with running(tmp_path, api, llm, settings=settings) as rig:
            ann, bob = TgChat.private(ANN), TgChat.private(BOB)
            api.push_message(TOKEN, ann, ANN, "first from Ann")
            await api.wait_for(lambda: locks == 1, what="the first reply")
            api.push_message(TOKEN, bob, BOB, "Bob while locked")  # stored once unlocked
            await api.wait_for(lambda: len(rig.replies()) >= 2 and locker is None, what="both")
            api.push_message(TOKEN, ann, ANN, "second from Ann")
            await api.wait_for(
                lambda: len(rig.replies(ann)) >= 2, what="Ann's second reply", within=8
            )
            await rig.quiet(rig.key(ann))
            await rig.quiet(rig.key(bob))
            assert rig.replies(ann) == ["re: first from Ann", "re: second from Ann"]
            assert rig.replies(bob) == ["re: Bob while locked"]
            assert len([r for r in llm.requests if r.purpose == "reply"]) == 3
