"""/export and /memory on Telegram: real aiogram, the fake Bot API, the wired runtime.

In a group nothing private is posted: /export sends the file (``sendDocument``) to the
person's private chat, or says in the group that it could not; /memory shows only what the
group may see.
"""

from __future__ import annotations

import json
from pathlib import Path

from bot.core.events import UserKey
from bot.runtime.exports import SENT_PRIVATELY
from memory.records import MemoryItem, UserMemory
from tests.adapters.test_telegram import ANN, BOB, GROUP, TOKEN, api, running
from tests.fakes.telegram_api import FakeTelegramAPI, TgChat, UploadedFile

__all__ = ["api"]  # the fixture, imported for the tests below


def _document(api: FakeTelegramAPI, chat_id: int) -> tuple[UploadedFile, str]:
    (call,) = api.sent_documents(TOKEN, chat_id)
    upload = call.params["document"]
    assert isinstance(upload, UploadedFile)
    return upload, str(call.params.get("caption", ""))


async def test_export_in_a_group_is_a_document_in_the_private_chat(
    tmp_path: Path, api: FakeTelegramAPI
) -> None:
    async with running(tmp_path, api) as rig:
        rig.say(TgChat.private(ANN), ANN, "hello")  # Ann has started the bot
        await api.wait_for(lambda: rig.replies(TgChat.private(ANN)), what="the DM reply")
        rig.say(GROUP, ANN, "@mira_bot my plan is a secret")
        await api.wait_for(lambda: rig.replies(GROUP), what="the group reply")
        group_before = len(rig.replies(GROUP))
        asked = rig.say(GROUP, ANN, "/export")
        await api.wait_for(lambda: len(rig.replies(GROUP)) > group_before, what="the answer")
        upload, caption = _document(api, ANN.id)
        data = json.loads(upload.data)
        assert data["user"] == {"platform": "telegram", "id": str(ANN.id)}
        assert upload.filename.endswith(".json") and caption.startswith("Your data export")
        assert api.sent_documents(TOKEN, GROUP.id) == []
        answer = api.sent_messages(TOKEN, GROUP.id)[-1]
        assert answer.visible_text == SENT_PRIVATELY
        assert answer.reply_to == asked
        assert all("secret" not in t for t in rig.replies(GROUP)[group_before:])


async def test_export_in_a_group_before_start_is_refused_in_the_group_without_data(
    tmp_path: Path, api: FakeTelegramAPI
) -> None:
    """Bob never opened a private chat: Telegram refuses it (403); the group is told what to
    do; once Bob pressed Start, /export works at once (the failure did not count)."""
    async with running(tmp_path, api) as rig:
        rig.say(GROUP, BOB, "@mira_bot remember my pin is 4321")
        await api.wait_for(lambda: rig.replies(GROUP), what="the group reply")
        rig.say(GROUP, BOB, "/export")
        await api.wait_for(lambda: len(rig.replies(GROUP)) == 2, what="the answer")
        answer = rig.replies(GROUP)[-1]
        assert answer.startswith("I couldn't send your data export to you privately.")
        assert "press Start" in answer and "4321" not in answer
        assert [c.status for c in api.calls_of("sendDocument")] == [403]
        rig.say(TgChat.private(BOB), BOB, "/start")
        await api.wait_for(lambda: rig.replies(TgChat.private(BOB)), what="the greeting")
        rig.say(GROUP, BOB, "/export")
        await api.wait_for(lambda: len(rig.replies(GROUP)) == 3, what="the second answer")
        assert rig.replies(GROUP)[-1] == SENT_PRIVATELY
        upload, _ = _document(api, BOB.id)
        assert "4321" in upload.data.decode()


async def test_memory_in_a_group_hides_what_was_said_privately(
    tmp_path: Path, api: FakeTelegramAPI
) -> None:
    async with running(tmp_path, api) as rig:
        record = UserMemory(
            items=(
                MemoryItem("semantic", "occupation", "nurse", private=False, scope=str(GROUP.id)),
                MemoryItem("emotional", "fear", "spiders", private=True),
            )
        )
        user = UserKey("telegram", str(ANN.id))
        await rig.rt.store.set_user_memory(user, record.to_json(), rig.rt.clock.now())
        rig.say(GROUP, ANN, "/memory")
        await api.wait_for(lambda: rig.replies(GROUP), what="the group answer")
        in_group = rig.replies(GROUP)[-1]
        assert "nurse" in in_group and "spiders" not in in_group
        assert "send /memory in a private chat with me" in in_group
        rig.say(TgChat.private(ANN), ANN, "/memory")
        await api.wait_for(lambda: rig.replies(TgChat.private(ANN)), what="the DM answer")
        assert "spiders" in rig.replies(TgChat.private(ANN))[-1]
