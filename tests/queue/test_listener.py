"""Review of issue 20: the timer listener (bot/store/postgres/_wakeups.py) under a flaky
network, and announcement payloads."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import asyncpg
import pytest

from bot.store.postgres import _wakeups
from bot.store.postgres._wakeups import TimerListener, parse


def test_payloads_a_due_time_postgresql_may_print_and_garbage() -> None:
    assert parse("b 1e+20") == ("b", 1e20)
    assert parse("b.x-y_1 1700000000") == ("b.x-y_1", 1700000000.0)
    assert parse("") is None
    assert parse(" 5") is None
    assert parse("b ") is None


class _Asyncio:
    """The asyncio module as the listener sees it, with its backoff sleeps recorded."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    async def sleep(self, delay: float) -> None:
        self.delays.append(delay)
        await asyncio.sleep(0.01)


async def test_each_loss_of_a_healthy_connection_is_retried_promptly(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    patched = _Asyncio()
    monkeypatch.setattr(_wakeups, "asyncio", patched)
    heard: list[tuple[str | None, float | None]] = []
    listener = TimerListener(
        dsn=pg_dsn, on_timer=lambda b, d: heard.append((b, d)), redact=lambda s: s
    )
    task = asyncio.create_task(listener.run())
    admin = await asyncpg.connect(pg_dsn)
    try:
        for n in range(1, 5):
            deadline = asyncio.get_running_loop().time() + 10
            while listener.connections < n or not listener.listening.is_set():
                assert asyncio.get_running_loop().time() < deadline, "never listened"
                await asyncio.sleep(0.02)
            await admin.fetchval(
                "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = 'personabot listener'"
            )
        deadline = asyncio.get_running_loop().time() + 10
        while listener.connections < 5:
            assert asyncio.get_running_loop().time() < deadline, "never listened again"
            await asyncio.sleep(0.02)
    finally:
        await admin.close()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert heard.count((None, None)) == 5  # each (re)connection asked for a look
    # Every lost connection had been up and healthy: each retry starts from the first delay.
    assert patched.delays == [0.5] * 4
