"""Review of issue 23: what a failed batch handed over again does to a /forget that ran
inside it. Real aiogram polling against the fake Bot API, the real runtime, both stores.

The review first read the kept message as "undone by the retry"; it is /forget's documented
behaviour for a message still waiting for its answer (it says so), the same without batches:
a message and a /forget in one batch are stored in that order, so the message is pending when
/forget runs. The test pins that the retry changes none of it."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from bot.config import RetentionSettings
from tests.adapters.test_telegram import ANN, TOKEN, eventually
from tests.adapters.test_telegram_batches import (
    CAROL,
    FAULT_TEXT,
    _fault,
    _logged,
    batch_bot,
    store_url,
)
from tests.fakes.llm import GatedLLM
from tests.fakes.telegram_api import TgChat

__all__ = ["store_url"]  # the fixture, re-exported for pytest

SECRET = "my home address is 5 Elm Street"


async def test_forget_inside_a_failed_batch_runs_once_and_keeps_what_it_said_it_kept(
    tmp_path: Path, store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, "personabot.telegram")
    llm = GatedLLM(answer=lambda r: "noted")
    fault = _fault(store_url)
    async with batch_bot(
        tmp_path, store_url, llm, retention=RetentionSettings(forget_deletes_messages=True)
    ) as rig:
        api = rig.api
        await fault(True)
        ann = TgChat.private(ANN)
        api.push_message(TOKEN, ann, ANN, SECRET)  # one getUpdates answer: three updates
        api.push_message(TOKEN, ann, ANN, "/forget confirm")
        api.push_message(TOKEN, TgChat.private(CAROL), CAROL, FAULT_TEXT)
        await eventually(_logged(caplog, "not stored", times=2), what="two attempts")
        await fault(False)
        await api.wait_for(lambda: api.pending_updates(TOKEN) == 0, what="the ack")
        await rig.quiet(rig.key(TgChat.private(CAROL)))
        await rig.quiet(rig.key(ann))
        forgot = [r for r in rig.replies(ann) if "erased" in r]
        assert len(forgot) == 1, rig.replies(ann)  # /forget ran once, not again on retry
        # The message before /forget was stored just before it ran (arrival order), still
        # waiting for its answer: /forget keeps such messages and says so (privacy.py);
        # the retried batch neither stores it twice nor erases it behind the person's back.
        assert "Kept: 1 message of yours still waiting for my answer" in forgot[0]
        assert (await rig.stored_texts(rig.key(ann))).count(SECRET) == 1
        assert sum(SECRET in r.messages[-1].text for r in llm.requests) == 1
