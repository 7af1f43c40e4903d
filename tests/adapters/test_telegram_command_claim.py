"""A command's claim (the router's ``command:`` lease, bot/runtime/router.py ``_command``):
a command whose run fails on a store fault gives its claim back, so the update handed over
again runs it as soon as the store is back, not once the claim ran out; on both stores."""

from __future__ import annotations

import asyncio
import logging

import pytest

from bot.core.events import UserKey
from bot.runtime.router import CLAIM_SECONDS
from tests.adapters.test_telegram_buttons import (
    ERASED,
    PRIVATE,
    SASHA,
    TOKEN,
    fake_api,
    key,
    serving,
)
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
    without waiting for the claim of the failed run to run out."""
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
        caplog.set_level(logging.INFO, "personabot.router")
        await rig.until(lambda: len(rig.texts(PRIVATE)) > before, "the answer")
        # The failed run gave its claim back: the run handed over again never waited for it.
        assert not [r for r in caplog.records if "being run elsewhere" in r.getMessage()]
        await rig.until(lambda: rig.api.pending_updates(TOKEN) == 0, "the acknowledgement")
        answers = rig.texts(PRIVATE)[before:]
        assert len(answers) == 1 and answers[0].startswith("Your time zone is Europe/Berlin")
        assert await store.timezone_of(UserKey("telegram", str(SASHA.id))) == "Europe/Berlin"


async def test_a_command_redelivered_after_its_process_died_mid_run_is_answered(
    stores: StoreFactory,
) -> None:
    """A process took a command's claim and died running it (a crash, SIGKILL): its update
    was never acknowledged and comes again after the restart. The claim it left is not
    "done": the command waits for it to run out (at most CLAIM_SECONDS) and then runs,
    answered once, instead of being skipped and acknowledged unanswered."""
    async with fake_api() as rig, stores.new() as store, serving(rig, store):
        await rig.command(PRIVATE, SASHA, "/help")
        before = len(rig.texts(PRIVATE))
        mid = 9001
        left = await store.acquire_lease(
            f"command:{key(PRIVATE)}:{mid}", "command", CLAIM_SECONDS, rig.clock.now()
        )
        assert left is not None  # the dead process's claim, never renewed again
        taken = rig.clock.now()
        rig.api.push_message(TOKEN, PRIVATE, SASHA, "/timezone Europe/Berlin", message_id=mid)
        await rig.until(lambda: len(rig.texts(PRIVATE)) > before, "the answer")
        assert rig.clock.now() - taken >= CLAIM_SECONDS  # not before the claim ran out
        await rig.until(lambda: rig.api.pending_updates(TOKEN) == 0, "the acknowledgement")
        answers = rig.texts(PRIVATE)[before:]
        assert len(answers) == 1 and answers[0].startswith("Your time zone is Europe/Berlin")


async def test_a_press_redelivered_after_its_process_died_mid_run_erases(
    stores: StoreFactory,
) -> None:
    """The same for a button: the process that took the press's claim died before erasing;
    the press comes again after the restart and erases, once, once that claim ran out
    (it was answered "Already done." and nothing was erased)."""
    async with fake_api() as rig, stores.new() as store, serving(rig, store):
        question = await rig.command(PRIVATE, SASHA, "/forget")
        name = f"press:{key(PRIVATE)}:{question.message_id}:/forget confirm"
        assert await store.acquire_lease(name, "press", CLAIM_SECONDS, rig.clock.now())
        answer = await rig.press(PRIVATE, SASHA, question)
        assert answer.params.get("text") is None  # not "Already done."
        await rig.until(lambda: any(t.startswith(ERASED) for t in rig.texts(PRIVATE)), "erased")
        assert sum(t.startswith(ERASED) for t in rig.texts(PRIVATE)) == 1


async def test_a_claim_on_a_store_clock_ahead_is_still_a_run_not_done(
    stores: StoreFactory,
) -> None:
    """PostgreSQL's leases expire on the database's clock, which may run seconds ahead of the
    host's: a running claim then seems to have more than CLAIM_SECONDS left. It is still a
    run (here, of a process that died), not a press done: the press is not answered
    "Already done." and erases once the claim runs out."""
    async with fake_api() as rig, stores.new() as store, serving(rig, store):
        question = await rig.command(PRIVATE, SASHA, "/forget")
        name = f"press:{key(PRIVATE)}:{question.message_id}:/forget confirm"
        ahead = CLAIM_SECONDS + 5.0  # renewed just now by a store whose clock is 5 s ahead
        assert await store.acquire_lease(name, "press", ahead, rig.clock.now())
        answer = await rig.press(PRIVATE, SASHA, question)
        assert answer.params.get("text") is None  # not "Already done."
        await rig.until(lambda: any(t.startswith(ERASED) for t in rig.texts(PRIVATE)), "erased")


async def test_a_store_fault_while_the_watcher_runs_the_command_is_tried_again(
    stores: StoreFactory,
) -> None:
    """The command redelivered after a crash waits in the background for the dead claim;
    when it runs, the store refuses its answer for a while: the watcher looks again and
    answers once the store is back (it ended for good, and the acknowledged command was
    never answered)."""
    async with fake_api() as rig, stores.new() as store, serving(rig, store):
        await rig.command(PRIVATE, SASHA, "/help")
        before = len(rig.texts(PRIVATE))
        mid = 9002
        name = f"command:{key(PRIVATE)}:{mid}"
        assert await store.acquire_lease(name, "command", CLAIM_SECONDS, rig.clock.now())
        await _answer_fault(stores, True)
        rig.api.push_message(TOKEN, PRIVATE, SASHA, "/timezone Europe/Berlin", message_id=mid)
        await rig.until(lambda: rig.api.pending_updates(TOKEN) == 0, "the acknowledgement")
        for _ in range(2 * int(CLAIM_SECONDS)):  # past the dead claim: the run is refused
            await rig.clock.advance(1.0)
            await asyncio.sleep(0.01)
        await _answer_fault(stores, False)
        await rig.until(lambda: len(rig.texts(PRIVATE)) > before, "the answer")
        answers = rig.texts(PRIVATE)[before:]
        assert len(answers) == 1 and answers[0].startswith("Your time zone is Europe/Berlin")
