"""Issue 12.1 across OS processes on PostgreSQL: one process extracts, the other forgets.

Two real workers (``tests/fakes/worker.py``) share one database and one fake Messages API.
Worker A's extraction model call is held at the fake API while worker B answers /forget;
once the call is let go, A's write must lose and the erasure must stand.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import asyncpg

from tests.bot.test_multiprocess import (  # the workers' harness
    eventually,
    post,
    worker_env,
    workers,
    write_config,
)
from tests.fakes.messages_api import FakeMessagesAPI

__all__ = ["worker_env"]  # a fixture, used by name


async def test_forget_in_one_process_beats_an_extraction_in_another(
    pg_dsn: str, tmp_path: Path, worker_env: dict[str, str]
) -> None:
    async with FakeMessagesAPI() as api:
        config = write_config(
            tmp_path / "personabot.toml",
            dsn=pg_dsn,
            api_url=api.base_url,
            lease=30.0,
            debounce=0.2,
            scan=0.2,
        )
        async with (
            workers(2, config, tmp_path, worker_env) as (a, b),
            aiohttp.ClientSession() as http,
        ):
            await post(http, a, "d1", "my name is Ada", "d1-0")
            await eventually(lambda: len(a.delivered()) + len(b.delivered()) == 1, 20, "a reply")
            api.hold = asyncio.Event()
            extracted = {"semantic": [{"field": "name", "value": "Ada"}]}
            api.reply_next(json.dumps(extracted))
            await post(http, a, "d1", "/new", "d1-1")  # A's sweep starts extracting
            await eventually(lambda: api.call_count == 2, 20, "A's extraction call")
            await post(http, b, "d1", "/forget confirm", "d1-2")
            await eventually(
                lambda: any("Done: I erased" in str(r["text"]) for r in b.delivered()),
                20,
                "B's answer to /forget",
            )
            api.hold.set()  # A's extraction now gets its answer
            db = await asyncpg.connect(pg_dsn)
            try:

                async def marked() -> bool:
                    value = await db.fetchval(
                        "SELECT extracted_turn FROM sessions WHERE session_no = 1"
                    )
                    return bool(value)

                for _ in range(400):  # up to 20 s
                    if await marked():
                        break
                    await asyncio.sleep(0.05)
                else:
                    raise AssertionError("A's extraction never finished")
                record = await db.fetchval(
                    "SELECT record FROM user_memory WHERE platform = 'test' AND user_id = $1",
                    "user-d1",
                )
            finally:
                await db.close()
    stored = json.loads(record)
    assert stored["items"] == []  # nothing read before /forget was written back
    assert stored["forgotten_at"] is not None
