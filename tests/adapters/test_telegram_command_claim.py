"""A command's claim (the router's ``command:`` lease, bot/runtime/router.py ``_command``):
a command whose run fails on a store fault gives its claim back, so the update handed over
again runs it as soon as the store is back, not once the claim ran out; on both stores."""

from __future__ import annotations

import sqlite3

import asyncpg
import pytest

from bot.core.events import UserKey
from bot.runtime.router import PRESS_RUN_SECONDS
from tests.adapters.test_telegram_buttons import PRIVATE, SASHA, TOKEN, fake_api, serving
from tests.backends import StoreFactory

_SQLITE_FAULT = (
    "CREATE TRIGGER answer_fault BEFORE INSERT ON outbox "
    "BEGIN SELECT RAISE(ABORT, 'injected fault'); END"
)
_PG_FAULT = (
    "CREATE FUNCTION answer_fault() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "RAISE EXCEPTION 'injected fault'; END $$; CREATE TRIGGER answer_fault BEFORE INSERT "
    "ON outbox FOR EACH ROW EXECUTE FUNCTION answer_fault()"
)


async def _answer_fault(stores: StoreFactory, on: bool) -> None:
    """Make the store refuse (True) or take again (False) every answer's outbox row."""
    if not stores.dsn:
        db = sqlite3.connect(stores.path, isolation_level=None)
        try:
            db.execute(_SQLITE_FAULT if on else "DROP TRIGGER answer_fault")
        finally:
            db.close()
        return
    conn = await asyncpg.connect(stores.dsn)
    try:
        off = "DROP TRIGGER answer_fault ON outbox; DROP FUNCTION answer_fault()"
        await conn.execute(_PG_FAULT if on else off)
    finally:
        await conn.close()


async def test_a_command_cut_short_by_a_store_fault_runs_again_once_the_store_is_back(
    stores: StoreFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """The command ran but its answer could not be recorded: the update is not
    acknowledged, comes again, and once the store takes answers again it is answered, once,
    at once (not after the claim of the failed run ran out)."""
    async with fake_api() as rig, stores.new() as store, serving(rig, store):
        await rig.command(PRIVATE, SASHA, "/help")  # the schema and the chat, in place
        before = len(rig.texts(PRIVATE))
        await _answer_fault(stores, True)
        rig.api.push_message(TOKEN, PRIVATE, SASHA, "/timezone Europe/Berlin")
        # The adapter hands the update over again (backing off on its clock): twice refused.
        await rig.until(
            lambda: sum("not stored" in r.getMessage() for r in caplog.records) >= 2,
            "the update handed over again",
        )
        assert rig.api.pending_updates(TOKEN) == 1  # not acknowledged
        await _answer_fault(stores, False)
        back = rig.clock.now()
        await rig.until(lambda: len(rig.texts(PRIVATE)) > before, "the answer")
        assert rig.clock.now() - back < PRESS_RUN_SECONDS, "answered only once the claim ran out"
        await rig.until(lambda: rig.api.pending_updates(TOKEN) == 0, "the acknowledgement")
        answers = rig.texts(PRIVATE)[before:]
        assert len(answers) == 1 and answers[0].startswith("Your time zone is Europe/Berlin")
        assert await store.timezone_of(UserKey("telegram", str(SASHA.id))) == "Europe/Berlin"
