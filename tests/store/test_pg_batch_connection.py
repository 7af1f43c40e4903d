"""Review of issue 23: PostgreSQL's ingest connection terminated (pg_terminate_backend) in the
middle of a getUpdates batch's transaction. Real aiogram polling, the fake Bot API, the real
runtime on a real PostgreSQL database."""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import pytest

from tests.adapters.test_telegram import ANN, BOB, TOKEN
from tests.adapters.test_telegram_batches import CAROL, DAN, _reply_calls, batch_bot
from tests.fakes.llm import GatedLLM
from tests.fakes.telegram_api import TgChat

SLOW = "the store is slow on this one"
_SLOW_TRIGGER = (
    "CREATE FUNCTION slow_insert() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    f"IF NEW.text = '{SLOW}' THEN PERFORM pg_sleep(3); END IF; RETURN NEW; END $$; "
    "CREATE TRIGGER slow_insert BEFORE INSERT ON messages FOR EACH ROW "
    "EXECUTE FUNCTION slow_insert()"
)


async def _sleeping(conn: asyncpg.Connection) -> list[int]:
    rows = await conn.fetch(
        "SELECT pid FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND pid <> pg_backend_pid()"
    )
    return [int(r[0]) for r in rows]


@pytest.mark.parametrize("everyone", [False, True], ids=["ingest-backend", "every-backend"])
async def test_the_ingest_connection_killed_mid_batch_loses_and_repeats_nothing(
    tmp_path: Path, pg_dsn: str, everyone: bool
) -> None:
    """``every-backend``: every connection of the pool dies at once, idle ones included (what
    a server restart does to the pool)."""
    llm = GatedLLM(answer=lambda r: "got it")
    people = (ANN, BOB, CAROL, DAN)
    texts = ("first of the batch", "second of the batch", SLOW, "after the slow one")
    async with batch_bot(tmp_path, pg_dsn, llm) as rig:
        api = rig.api  # type: ignore[attr-defined]
        admin = await asyncpg.connect(pg_dsn)
        try:
            await admin.execute(_SLOW_TRIGGER)
            for person, text in zip(people, texts, strict=True):  # one getUpdates answer
                api.push_message(TOKEN, TgChat.private(person), person, text)
            pids: list[int] = []
            for _ in range(250):
                if pids := await _sleeping(admin):
                    break
                await asyncio.sleep(0.02)
            assert pids, "the batch never reached the slow insert"
            if everyone:
                pids = [
                    int(r[0])
                    for r in await admin.fetch(
                        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                        "AND pid <> pg_backend_pid()"
                    )
                ]
            for pid in pids:  # mid-transaction: the batch's rows are written, not committed
                assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
            # (Waits for a retry that is sleeping in the trigger again, if any.)
            await admin.execute("DROP TRIGGER slow_insert ON messages; DROP FUNCTION slow_insert()")
        finally:
            await admin.close()
        await api.wait_for(
            lambda: api.pending_updates(TOKEN) == 0, within=15, what="the acknowledgement"
        )
        await api.wait_for(lambda: len(rig.replies()) >= len(texts), within=15, what="replies")
        for person in people:
            await rig.quiet(rig.key(TgChat.private(person)))
        calls = _reply_calls(llm)
        for text in texts:
            assert sum(text in call for call in calls) == 1, (text, calls)
        assert all(len(rig.replies(TgChat.private(p))) == 1 for p in people)
