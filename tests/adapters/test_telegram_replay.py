"""Updates in the shapes older Bot API servers send, replayed through polling and the webhook:
none stops the bot, and every one that carries text or a caption is answered (issue 19)."""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from adapters.telegram.adapter import create_adapter
from bot.config import Secrets, TelegramBotSettings
from tests.adapters.test_telegram import ANN, BOT, PERSONA, TOKEN, _free_port, running
from tests.fakes.telegram_api import FakeTelegramAPI, TgChat

pytestmark = pytest.mark.timeout(90)
PAYLOADS = Path(__file__).parent / "payloads" / "old_bot_api_updates.json"
#: Texts and captions of the replayed updates: each must reach the model.
SAID = (
    "caption of an old photo",
    "caption of an old document",
    "caption of an old video",
    "a reply to an old photo",
)


def _replayed(api: FakeTelegramAPI) -> list[dict[str, Any]]:
    """The recorded updates, addressed from ANN's private chat (which the fake then knows)."""
    chat = TgChat.private(ANN)
    api.message_update(chat, ANN, "registers the chat")
    updates = []
    for raw in json.loads(PAYLOADS.read_text()):
        update = copy.deepcopy(raw)
        update.pop("update_id")
        for kind in ("message", "callback_query"):
            if kind in update:
                update[kind]["from"] = ANN.to_dict()
        if "message" in update:
            update["message"]["chat"] = chat.to_dict()
            update["message"]["message_id"] += 1000
        updates.append(update)
    return updates


def _said(replies: list[str]) -> set[str]:
    return {text for text in SAID if any(text in reply for reply in replies)}


async def test_recorded_updates_replayed_through_polling_never_stop_the_bot(
    tmp_path: Path,
) -> None:
    async with FakeTelegramAPI() as api:
        api.add_bot(TOKEN, "mira_bot", "Mira")
        async with running(tmp_path, api, debounce=0.05, max_wait=0.1) as rig:
            for update in _replayed(api):
                api.push(TOKEN, update)
            await api.wait_for(lambda: _said(rig.replies()) == set(SAID), what="every text")
            await api.wait_for(lambda: api.pending_updates(TOKEN) == 0, what="the offset")
            api.push_message(TOKEN, TgChat.private(ANN), ANN, "still there?")
            await api.wait_for(
                lambda: any("still there?" in r for r in rig.replies()), what="the next reply"
            )


async def test_recorded_updates_replayed_through_the_webhook_are_all_acknowledged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    port = _free_port()
    secrets = Secrets({"TELEGRAM_BOT_TOKEN": TOKEN, "TG_WEBHOOK_SECRET": "hook-secret"})
    async with FakeTelegramAPI() as api:
        api.add_bot(TOKEN, "mira_bot", "Mira")
        entry = TelegramBotSettings(
            platform="telegram",
            id=BOT,
            persona="companion",
            mode="webhook",
            api_server=api.base_url,
            webhook_url=f"http://127.0.0.1:{port}/tg/hook",
            listen_port=port,
            webhook_path="/tg/hook",
            secret_token_env="TG_WEBHOOK_SECRET",
        )
        adapter = create_adapter(entry, PERSONA, secrets)
        async with running(tmp_path, api, adapter=adapter, debounce=0.05, max_wait=0.1) as rig:
            for index, update in enumerate(_replayed(api)):
                update["update_id"] = 500 + index
                assert await api.deliver_webhook(TOKEN, update) == 200, update
            await api.wait_for(lambda: _said(rig.replies()) == set(SAID), what="every text")
            # A body that is no JSON at all: acknowledged (redelivery would not help), logged.
            with caplog.at_level(logging.WARNING, logger="personabot"):
                assert await api.deliver_raw_webhook(TOKEN, b"\xff{not json") == 200
            assert any("not JSON" in r.getMessage() for r in caplog.records)
            last = api.message_update(TgChat.private(ANN), ANN, "still there?")
            assert await api.deliver_webhook(TOKEN, last) == 200
            await api.wait_for(
                lambda: any("still there?" in r for r in rig.replies()), what="the next reply"
            )
