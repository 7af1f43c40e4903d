"""/export and /memory through the router: one file off the inbound path, rate-limited per
person in the store, and nothing private posted to a group (both stores)."""

from __future__ import annotations

import asyncio
import base64
import json
import stat
from pathlib import Path

from bot.core.clock import ManualClock
from bot.core.events import ConversationKey, Inbound, UserKey
from bot.core.media import MediaRef, Quote
from bot.llm.offline import OfflineLLM
from bot.runtime.exports import SENT_PRIVATELY
from bot.store.base import BaseStore
from tests.backends import StoreFactory
from tests.bot.test_cli import _run
from tests.fakes.llm import GatedLLM
from tests.harness import Harness, harness, settle
from tests.store.helpers import close_session

DM = ConversationKey("telegram", "11")
OTHER = ConversationKey("telegram", "33")
GROUP = ConversationKey("telegram", "-100")
ADA_PRIVATE = ConversationKey("telegram", "11")


async def _store_messages(h: Harness, count: int) -> None:
    """``count`` messages of Ada in her private chat, answered in one turn."""
    for n in range(count):
        await h.ingestor.ingest(
            Inbound(DM, "11", "Ada", f"message number {n} " + "x" * 200, f"bulk-{n}")
        )
    await settle(h.store)
    await h.advance(10, step=1.0)


def _export(h: Harness) -> dict[str, object]:
    (reply,) = h.outlet.files()
    assert reply.attachment is not None
    assert reply.attachment.filename.endswith(".json")
    data: dict[str, object] = json.loads(reply.attachment.data)
    return data


async def test_export_is_one_file_that_never_holds_up_another_chat(
    store: BaseStore, clock: ManualClock
) -> None:
    """400 stored messages: one document with all of them; while its send is stuck on the
    wire, another chat's "hi" is answered; a second /export in the window is refused."""
    async with harness(store, clock, GatedLLM()) as h:
        await _store_messages(h, 400)
        texts_before = len(h.outlet.texts(DM))
        h.outlet.file_gate = asyncio.Event()
        await asyncio.wait_for(h.say(DM, "/export", author="11", name="Ada"), timeout=5)
        await h.say(OTHER, "hi", author="33", name="Cy")
        await h.advance(3, step=0.5)
        assert h.outlet.texts(OTHER) == ["reply to: hi"]
        assert h.outlet.files() == []  # the export is still on the wire
        h.outlet.file_gate.set()
        await h.exports.wait_idle()
        data = _export(h)
        (sent,) = h.outlet.files()
        assert sent.conversation == DM
        messages = data["messages"]
        assert isinstance(messages, list) and len(messages) == 400
        assert messages[399]["text"].startswith("message number 399 ")
        assert h.outlet.texts(DM)[texts_before:] == [sent.text]  # the caption, nothing inline

        await h.say(DM, "/export", author="11", name="Ada")
        await h.exports.wait_idle()
        refusal = h.outlet.texts(DM)[-1]
        assert refusal == (
            "You can export your data once every 10 minutes. Please try again in 10 minutes."
        )
        assert len(h.outlet.files()) == 1
        await clock.advance(9 * 60)
        await h.say(DM, "/export", author="11", name="Ada")
        assert h.outlet.texts(DM)[-1].endswith("Please try again in 1 minute.")
        await clock.advance(61)
        await h.say(DM, "/export", author="11", name="Ada")
        await h.exports.wait_idle()
        assert len(h.outlet.files()) == 2


async def test_the_export_limit_holds_across_processes(
    stores: StoreFactory, clock: ManualClock
) -> None:
    async with (
        stores.new() as first,
        stores.new() as second,
        harness(first, clock, GatedLLM()) as a,
        harness(second, clock, GatedLLM()) as b,
    ):
        await a.say(DM, "/export", author="11", name="Ada")
        await a.exports.wait_idle()
        assert len(a.outlet.files()) == 1
        await b.say(DM, "/export", author="11", name="Ada")
        await b.exports.wait_idle()
        assert b.outlet.files() == []
        assert "try again in 10 minutes" in b.outlet.texts(DM)[-1]
        await b.say(OTHER, "/export", author="33", name="Cy")  # per person, not per bot
        await b.exports.wait_idle()
        assert [r.conversation for r in b.outlet.files()] == [OTHER]


async def test_export_in_a_group_goes_to_the_private_chat(
    store: BaseStore, clock: ManualClock
) -> None:
    async with harness(store, clock, GatedLLM(), memory_llm=OfflineLLM()) as h:
        await h.say(DM, "my name is Ada", author="11", name="Ada")
        await h.say(GROUP, "@Mira I'm afraid of spiders", author="11", name="Ada", private=False)
        await h.advance(3, step=0.5)
        group_before = h.outlet.texts(GROUP)
        await h.say(GROUP, "/export", author="11", name="Ada", private=False)
        await h.exports.wait_idle()
        (sent,) = h.outlet.files()
        assert sent.conversation == ADA_PRIVATE
        assert "spiders" in json.dumps(_export(h))
        group_after = [r for _, r in h.outlet.replies if r.conversation == GROUP]
        new = group_after[len(group_before) :]
        assert [(r.text, r.attachment) for r in new] == [(SENT_PRIVATELY, None)]
        assert new[0].reply_to_platform_message_id is not None  # quotes the asker


async def test_export_in_a_group_without_a_private_chat_says_so_without_data(
    store: BaseStore, clock: ManualClock
) -> None:
    """Telegram: the person never started the bot. The group hears what to do, nothing else;
    the failed attempt does not count against the limit."""
    async with harness(store, clock, GatedLLM()) as h:
        await h.say(GROUP, "@Mira my secret plan", author="11", name="Ada", private=False)
        await h.advance(3, step=0.5)
        h.outlet.no_private_chat.add("11")
        await h.say(GROUP, "/export", author="11", name="Ada", private=False)
        await h.exports.wait_idle()
        assert h.outlet.files() == []
        answer = h.outlet.texts(GROUP)[-1]
        assert answer.startswith("I couldn't send your data export to you privately.")
        assert "press Start" in answer and "secret plan" not in answer
        h.outlet.no_private_chat.clear()
        await h.say(GROUP, "/export", author="11", name="Ada", private=False)
        await h.exports.wait_idle()
        assert [r.conversation for r in h.outlet.files()] == [ADA_PRIVATE]
        assert h.outlet.texts(GROUP)[-1] == SENT_PRIVATELY


async def test_memory_in_a_group_shows_only_what_the_group_may_see(
    store: BaseStore, clock: ManualClock
) -> None:
    async with harness(store, clock, GatedLLM(), memory_llm=OfflineLLM()) as h:
        await h.say(DM, "I'm afraid of spiders", author="11", name="Ada")
        await h.say(GROUP, "@Mira I work as a nurse", author="11", name="Ada", private=False)
        await h.advance(3, step=0.5)
        for conversation in (DM, GROUP):
            await close_session(store, conversation, clock.now(), "test")
        await h.memory.extract_due()
        record = await h.memory.user_memory(UserKey("telegram", "11"))
        assert {i.value for i in record.items} >= {"spiders", "nurse"}
        await h.say(GROUP, "/memory", author="11", name="Ada", private=False)
        in_group = h.outlet.texts(GROUP)[-1]
        assert "nurse" in in_group and "spiders" not in in_group
        assert "send /memory in a private chat with me" in in_group
        await h.say(DM, "/memory", author="11", name="Ada")
        in_private = h.outlet.texts(DM)[-1]
        assert "nurse" in in_private and "spiders" in in_private
        assert "private chat" not in in_private


async def test_memory_in_a_group_with_only_private_facts_reveals_nothing(
    store: BaseStore, clock: ManualClock
) -> None:
    async with harness(store, clock, GatedLLM(), memory_llm=OfflineLLM()) as h:
        await h.say(DM, "I'm afraid of spiders", author="11", name="Ada")
        await h.advance(3, step=0.5)
        await close_session(store, DM, clock.now(), "test")
        await h.memory.extract_due()
        await h.say(GROUP, "/memory", author="11", name="Ada", private=False)
        answer = h.outlet.texts(GROUP)[-1]
        assert "spiders" not in answer and "fear" not in answer
        assert answer.startswith("I have nothing about you to show in this group.")


async def test_console_export_writes_a_private_file_and_prints_its_path(tmp_path: Path) -> None:
    code, out, err = await _run(["chat"], tmp_path, "my name is Ada\n/export\n")
    assert code == 0, err
    (line,) = [x for x in out.splitlines() if x.startswith("  saved to ")]
    path = Path(line.removeprefix("  saved to "))
    assert path.parent == tmp_path.resolve() and path.suffix == ".json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # personal data: the owner's only
    data = json.loads(path.read_text())
    assert [m["text"] for m in data["messages"]] == ["my name is Ada"]
    assert "Mira: Your data export" in out


async def test_export_lists_media_and_quotes_without_files_or_platform_references(
    store: BaseStore, clock: ManualClock
) -> None:
    """Issue 15: what came with a message is the person's data (kind, label, size, status, a
    transcript); the cached copy's bytes and the reference that fetches the file are not."""
    photo = MediaRef(
        "image",
        "photo",
        ref="AgACAgIAAxkBAAIBQ2-file-id",
        unique_id="AQADk7",
        media_type="image/jpeg",
        size=123_456,
        width=1280,
        height=960,
    )
    voice = MediaRef(
        "voice",
        "voice message",
        ref="AwACAgIAAxkBAAIBRG-file-id",
        unique_id="AgADl8",
        media_type="audio/ogg",
        size=9_000,
        duration=3.5,
    )
    pdf = MediaRef(
        "file",
        "file plan.pdf",
        ref="https://cdn.discordapp.com/attachments/1/2/plan.pdf?ex=65f&is=65e&hm=9a",
        unique_id="1189",
    )
    quote = Quote("reply", "Bo", "are you coming tonight?", author_id="22")
    copy = b"\x89PNG-downscaled-holiday-" * 50
    async with harness(store, clock, GatedLLM(), debounce=60) as h:
        await h.router(
            Inbound(DM, "11", "Ada", "look", "m-photo", media=(photo, voice, pdf), quote=quote)
        )
        turn = await store.pending_turn(DM)
        assert turn is not None
        stored_photo, stored_voice, stored_pdf = turn.messages[0].media
        await store.save_media(
            stored_photo.id,
            status="ready",
            data=copy,
            media_type="image/webp",
            width=800,
            height=600,
        )
        await store.save_media(stored_voice.id, status="ready", note="see you at eight")
        await store.save_media(stored_pdf.id, status="skipped", note="not an image")
        await h.say(DM, "/export", author="11", name="Ada")
        await h.exports.wait_idle()
        data = _export(h)
    (reply,) = h.outlet.files()
    assert reply.attachment is not None
    raw = reply.attachment.data
    for secret in (photo.ref, voice.ref, pdf.ref, "cdn.discordapp.com"):
        assert secret.encode() not in raw
    assert b"PNG-downscaled" not in raw and base64.b64encode(copy)[:40] not in raw
    messages = data["messages"]
    assert isinstance(messages, list)
    [message] = messages
    assert message["quote"] == {
        "origin": "reply",
        "author": "Bo",
        "author_id": "22",
        "from_bot": False,
        "text": "are you coming tonight?",
    }
    assert message["media"] == [
        {
            "kind": "image",
            "label": "photo",
            "unique_id": "AQADk7",
            "media_type": "image/jpeg",
            "size": 123_456,
            "width": 1280,
            "height": 960,
            "duration": None,
            "status": "ready",
            "stored_copy": {"media_type": "image/webp", "width": 800, "height": 600},
            "transcript": None,
        },
        {
            "kind": "voice",
            "label": "voice message",
            "unique_id": "AgADl8",
            "media_type": "audio/ogg",
            "size": 9_000,
            "width": None,
            "height": None,
            "duration": 3.5,
            "status": "ready",
            "stored_copy": None,
            "transcript": "see you at eight",
        },
        {
            "kind": "file",
            "label": "file plan.pdf",
            "unique_id": "1189",
            "media_type": "",
            "size": None,
            "width": None,
            "height": None,
            "duration": None,
            "status": "skipped",
            "stored_copy": None,
            "transcript": None,
        },
    ]
