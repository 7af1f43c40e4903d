"""Review of issue 23: commands inside a failed getUpdates batch run once (the promise:
"commands run once"). Real aiogram polling, the fake Bot API, the real runtime, both stores."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

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

__all__ = ["store_url"]


async def test_export_inside_a_failed_batch_runs_once(
    tmp_path: Path, store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, "personabot.telegram")
    llm = GatedLLM(answer=lambda r: "ok")
    fault = _fault(store_url)
    async with batch_bot(tmp_path, store_url, llm) as rig:
        api = rig.api
        await fault(True)
        ann = TgChat.private(ANN)
        api.push_message(TOKEN, ann, ANN, "hello")
        api.push_message(TOKEN, ann, ANN, "/export")
        api.push_message(TOKEN, TgChat.private(CAROL), CAROL, FAULT_TEXT)
        await eventually(_logged(caplog, "not stored", times=2), what="two attempts")
        await fault(False)
        await api.wait_for(lambda: api.pending_updates(TOKEN) == 0, what="the ack")
        await api.wait_for(lambda: api.sent_documents(TOKEN), what="the export")
        await rig.quiet(rig.key(TgChat.private(CAROL)))
        await rig.quiet(rig.key(ann))
        # One /export, one answer: the file, and no second run (a second file, or a
        # refusal "you asked recently" for the person's one request).
        assert len(api.sent_documents(TOKEN)) == 1
        texts = [r for r in rig.replies(ann) if r != "ok"]
        assert texts == [], texts


async def test_the_same_export_update_twice_in_one_batch_runs_once(
    tmp_path: Path, store_url: str
) -> None:
    llm = GatedLLM(answer=lambda r: "ok")
    async with batch_bot(tmp_path, store_url, llm) as rig:
        api = rig.api
        ann = TgChat.private(ANN)
        update = api.message_update(ann, ANN, "/export")
        api.push(TOKEN, update)
        api.push(TOKEN, update)  # a flaky proxy hands the same update out twice
        api.push_message(TOKEN, ann, ANN, "and hello")
        await api.wait_for(lambda: api.pending_updates(TOKEN) == 0, what="the ack")
        await api.wait_for(lambda: api.sent_documents(TOKEN), what="the export")
        await rig.quiet(rig.key(ann))
        assert len(api.sent_documents(TOKEN)) == 1
        assert [r for r in rig.replies(ann) if r != "ok"] == []
