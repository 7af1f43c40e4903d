"""A command's claim (the router's ``command:`` lease, bot/runtime/router.py ``_command``):
a command whose run fails on a store fault gives its claim back, so the update handed over
again runs it as soon as the store is back, not once the claim ran out; on both stores."""

from __future__ import annotations

import pytest

from bot.core.events import UserKey
from bot.runtime.router import PRESS_RUN_SECONDS
from tests.adapters.test_telegram_buttons import PRIVATE, SASHA, TOKEN, fake_api, serving
from tests.backends import StoreFactory
from tests.store.helpers import insert_fault


async def _answer_fault(stores: StoreFactory, on: bool) -> None:
    """Make the store refuse (True) or take again (False) every answer's outbox row."""
    await insert_fault(stores, "outbox", on)


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
