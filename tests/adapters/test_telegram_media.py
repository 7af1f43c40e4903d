"""Media, albums, quotes and edits through the real aiogram client against the fake Bot API:
what reaches the runtime, and the adapter's MediaSource (getFile + download) with its faults."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import traceback
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from adapters.telegram.adapter import TelegramAdapter
from bot.app.build import runtime
from bot.core.errors import MediaError, MediaRejected, MediaUnavailable
from bot.core.events import ConversationKey, Inbound
from bot.core.media import MediaRef, Quote
from bot.runtime.router import Router
from tests.adapters.test_telegram import (
    ANN,
    BOB,
    BOT,
    GROUP,
    PERSONA,
    TOKEN,
    USERNAME,
    Rig,
    _free_port,
    _settings,
    _turns,
    eventually,
)
from tests.fakes.llm import GatedLLM
from tests.fakes.telegram_api import FakeTelegramAPI, TgChat, user_origin

PRIVATE = TgChat.private(ANN)
SECRET_HALF = TOKEN.split(":", 1)[1]


class Tap:
    """The runtime's router, recording every Inbound the adapter hands it."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self.received: list[Inbound] = []

    @property
    def commands(self) -> tuple[tuple[str, str], ...]:
        """The router's commands (for the bot's menu)."""
        return self.router.commands

    @property
    def admin_commands(self) -> tuple[str, ...]:
        """The router's admin-only commands."""
        return self.router.admin_commands

    def rejected(self, platform: str, bot: str, kind: str) -> None:
        """Counted by the router."""
        self.router.rejected(platform, bot, kind)

    def batch(self) -> contextlib.AbstractAsyncContextManager[None]:
        """The router's batch (one transaction for a getUpdates batch)."""
        return self.router.batch()

    async def __call__(self, inbound: Inbound) -> None:
        self.received.append(inbound)
        await self.router(inbound)


@contextlib.asynccontextmanager
async def tapped(
    tmp_path: Path, api: FakeTelegramAPI, llm: GatedLLM, *, debounce: float = 0.3
) -> AsyncIterator[tuple[Rig, Tap]]:
    """The adapter polling the fake on the wired runtime, through a :class:`Tap`."""
    adapter = TelegramAdapter(bot_key=BOT, token=TOKEN, api_server=api.base_url)
    settings = _settings(tmp_path, debounce=debounce, max_wait=3.0)
    async with runtime(settings, llm=llm, adapters={BOT: (PERSONA, adapter)}) as rt:
        tap = Tap(rt.router)
        task = asyncio.create_task(adapter.run(tap))
        try:
            await api.wait_for(lambda: task.done() or api.polls_started(TOKEN), what="polling")
            assert not task.done(), task.exception()
            yield Rig(api, adapter, rt, llm), tap
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await adapter.aclose()


@pytest.fixture
async def api() -> AsyncIterator[FakeTelegramAPI]:
    """The fake Bot API with the test bot registered."""
    async with FakeTelegramAPI() as server:
        server.add_bot(TOKEN, USERNAME, "Mira")
        yield server


# ---------------------------------------------------------------------- to the runtime


async def test_what_people_send_reaches_the_runtime_as_media_and_quotes(
    tmp_path: Path, api: FakeTelegramAPI
) -> None:
    llm = GatedLLM(answer=lambda r: "nice")
    async with tapped(tmp_path, api, llm) as (rig, tap):
        key = rig.key(PRIVATE)
        sizes = api.photo((90, 60), (1280, 853), (1600, 1066), (2560, 1706))
        sticker = api.sticker("video")
        voice = api.voice(duration=4)
        document = api.document(b"png bytes", file_name="cat.png", mime_type="image/png")
        sent: list[dict[str, Any]] = [
            {"caption": "my mug", "extra": {"photo": sizes}},
            {"extra": {"sticker": sticker}},
            {"extra": {"voice": voice}},
            {"extra": {"document": document}},
            {"text": "look", "forward_origin": user_origin(BOB)},
            {"extra": {"location": {"latitude": 52.52, "longitude": 13.405}}},
        ]
        for fields in sent:
            text = fields.pop("text", None)
            api.push_message(TOKEN, PRIVATE, ANN, text, **fields)
        await api.wait_for(rig.replies, what="the reply")
        await rig.quiet(key)
        assert [(i.text, [m.label for m in i.media]) for i in tap.received] == [
            ("my mug", ["photo"]),
            ("", ["video sticker 😀"]),
            ("", ["voice message"]),
            ("", ["image cat.png"]),
            ("", []),
            ("[location: 52.52000, 13.40500]", []),
        ]
        photo, stick, spoken, image = (i.media[0] for i in tap.received[:4])
        assert (photo.ref, photo.width) == (sizes[2]["file_id"], 1600)
        assert (stick.kind, stick.ref) == ("image", sticker["thumbnail"]["file_id"])
        assert (spoken.kind, spoken.ref, spoken.duration) == ("voice", voice["file_id"], 4.0)
        assert (image.kind, image.media_type) == ("image", "image/png")
        assert tap.received[4].quote == Quote("forward", "Bob", "look", str(BOB.id))
        assert all(i.triggers_reply for i in tap.received)
        assert len(_turns(llm)) == 1 and len(rig.replies()) == 1  # one burst, one answer
        stored = await rig.stored_texts(key)
        assert "my mug" in stored and "[location: 52.52000, 13.40500]" in stored
        assert not any("[photo]" in text for text in stored)  # no placeholder in the text
        session = await rig.rt.store.current_session(key)
        assert session is not None
        users = [m for m in await rig.rt.store.messages(session.key) if m.role == "user"]
        assert [[m.ref for m in s.media] for s in users] == [list(i.media) for i in tap.received]
        assert [s.quote for s in users] == [i.quote for i in tap.received]
        assert users[2].was_voice and not users[0].was_voice


async def test_a_reply_to_the_bot_carries_its_words(tmp_path: Path, api: FakeTelegramAPI) -> None:
    llm = GatedLLM(answer=lambda r: "blue, like the sea")
    async with tapped(tmp_path, api, llm) as (rig, tap):
        api.push_message(TOKEN, GROUP, ANN, f"@{USERNAME} favourite colour?")
        await api.wait_for(rig.replies, what="the first answer")
        answer = api.sent_messages(TOKEN)[0]
        api.push_message(
            TOKEN, GROUP, BOB, "why?", reply_to_message_id=answer.message_id, quote="the sea"
        )
        await api.wait_for(lambda: len(rig.replies()) == 2, what="the answer to the reply")
        await rig.quiet(rig.key(GROUP))
        quote = tap.received[-1].quote
        assert quote == Quote("quote", "Mira", "the sea", TOKEN.split(":")[0], from_bot=True)
        assert tap.received[-1].reply_to_bot and tap.received[-1].triggers_reply


# ------------------------------------------------------------------------------ albums


def _album_items(api: FakeTelegramAPI, count: int) -> list[dict[str, object]]:
    return [{"photo": api.photo((640 + i, 480))} for i in range(count)]


async def test_an_album_that_mentions_the_bot_is_one_turn_in_a_group(
    tmp_path: Path, api: FakeTelegramAPI
) -> None:
    """Only the first item carries the caption (and the mention); the other two inherit the
    album's trigger, so all three are one turn: one model call, one answer."""
    llm = GatedLLM(answer=lambda r: "the second one")
    async with tapped(tmp_path, api, llm) as (rig, tap):
        key = rig.key(GROUP)
        items = _album_items(api, 3)
        for update in api.album(GROUP, ANN, items, caption=f"@{USERNAME} which mug?"):
            api.push(TOKEN, update)
        quiet = api.album(GROUP, BOB, _album_items(api, 2), caption="our trip")
        for update in quiet:  # an album nobody addressed to the bot: context only
            api.push(TOKEN, update)
        await api.wait_for(rig.replies, what="the answer")
        await rig.quiet(key)
        assert [i.triggers_reply for i in tap.received] == [True, True, True, False, False]
        assert [len(i.media) for i in tap.received] == [1] * 5
        assert len(_turns(llm)) == 1 and rig.replies() == ["the second one"]
        assert len({i.media[0].ref for i in tap.received}) == 5


async def test_album_items_before_the_mention_stay_context(
    tmp_path: Path, api: FakeTelegramAPI
) -> None:
    """Decided: items that arrived before the item that addresses the bot are stored as
    context just before it (the turn's window holds them); those after it join the turn."""
    llm = GatedLLM(answer=lambda r: "seen")
    async with tapped(tmp_path, api, llm) as (rig, tap):
        updates = api.album(GROUP, ANN, _album_items(api, 3), media_group_id="g-1")
        mention = f"@{USERNAME} this one"
        entities = [{"type": "mention", "offset": 0, "length": len(USERNAME) + 1}]
        updates[1]["message"].update(caption=mention, caption_entities=entities)
        for update in updates:
            api.push(TOKEN, update)
        await api.wait_for(rig.replies, what="the answer")
        await rig.quiet(rig.key(GROUP))
        assert [i.triggers_reply for i in tap.received] == [False, True, True]
        assert len(_turns(llm)) == 1 and len(rig.replies()) == 1
        session = await rig.rt.store.current_session(rig.key(GROUP))
        assert session is not None
        stored = [m for m in await rig.rt.store.messages(session.key) if m.role == "user"]
        assert [m.platform_message_id for m in stored] == [
            str(u["message"]["message_id"]) for u in updates
        ]


async def test_a_private_album_is_one_turn(tmp_path: Path, api: FakeTelegramAPI) -> None:
    llm = GatedLLM(answer=lambda r: "lovely")
    async with tapped(tmp_path, api, llm) as (rig, tap):
        for update in api.album(PRIVATE, ANN, _album_items(api, 3), caption="holiday"):
            api.push(TOKEN, update)
        await api.wait_for(rig.replies, what="the answer")
        await rig.quiet(rig.key(PRIVATE))
        assert [i.text for i in tap.received] == ["holiday", "", ""]
        assert len(_turns(llm)) == 1 and rig.replies() == ["lovely"]


# --------------------------------------------------------------------------------- edits


async def test_an_edit_that_now_mentions_the_bot_is_answered_once(
    tmp_path: Path, api: FakeTelegramAPI
) -> None:
    """A context-only group message edited into a mention is an edit Inbound that triggers;
    the store makes it pending: one turn, one answer, with the edited words."""
    llm = GatedLLM(answer=lambda r: "here")
    async with tapped(tmp_path, api, llm) as (rig, tap):
        key = rig.key(GROUP)
        api.push_message(TOKEN, GROUP, ANN, "anyone around?", message_id=77)
        await eventually(lambda: _stored(rig, key, 1), what="the context message")
        await rig.quiet(key)
        assert rig.replies() == [] and _turns(llm) == []
        edited = f"anyone around, @{USERNAME}?"
        api.push(TOKEN, api.message_update(GROUP, ANN, edited, message_id=77, edited=True))
        await api.wait_for(rig.replies, what="the answer to the edit")
        await rig.quiet(key)
        message, edit = tap.received
        assert not message.triggers_reply and message.platform_message_id == "77"
        assert (edit.kind, edit.platform_message_id) == ("edit", "77")
        assert edit.triggers_reply and edit.mentions_bot
        assert rig.replies() == ["here"] and len(_turns(llm)) == 1
        assert edited in _turns(llm)[0].messages[-1].text
        assert api.sent_messages(TOKEN)[0].reply_to == 77


async def _stored(rig: Rig, key: ConversationKey, count: int) -> bool:
    return len(await rig.stored_texts(key)) >= count


# ------------------------------------------------------------------------- MediaSource


@contextlib.asynccontextmanager
async def source(
    api: FakeTelegramAPI, download_timeout: float = 30.0
) -> AsyncIterator[TelegramAdapter]:
    """An adapter (not running: fetching needs no polling) on the fake's API server."""
    adapter = TelegramAdapter(
        bot_key=BOT, token=TOKEN, api_server=api.base_url, download_timeout=download_timeout
    )
    try:
        yield adapter
    finally:
        await adapter.aclose()


async def _fetch(adapter: TelegramAdapter, media: MediaRef, max_bytes: int = 10**6) -> bytes:
    return await adapter.media.fetch(
        media, chat_id=str(ANN.id), platform_message_id="1", max_bytes=max_bytes
    )


def _ref(api: FakeTelegramAPI, data: bytes, **kwargs: object) -> MediaRef:
    file = api.add_file(data, **kwargs)  # type: ignore[arg-type]
    return MediaRef("image", "photo", file.file_id, file.file_unique_id, size=file.file_size)


async def test_fetch_returns_the_bytes_of_what_the_person_sent(
    tmp_path: Path, api: FakeTelegramAPI
) -> None:
    """The MediaRef on the Inbound fetches exactly the registered file of the chosen size."""
    llm = GatedLLM(answer=lambda r: "ok")
    async with tapped(tmp_path, api, llm) as (rig, tap):
        sizes = api.photo((320, 213, b"small"), (1600, 1066, b"\xff\xd8 the big one"))
        api.push_message(TOKEN, PRIVATE, ANN, None, extra={"photo": sizes})
        voice = api.voice(b"OggS hello there")
        api.push_message(TOKEN, PRIVATE, ANN, None, extra={"voice": voice})
        await api.wait_for(lambda: len(tap.received) == 2, what="both messages")
        photo, spoken = (i.media[0] for i in tap.received)
        assert await _fetch(rig.adapter, photo) == b"\xff\xd8 the big one"
        assert await _fetch(rig.adapter, spoken) == b"OggS hello there"
    # The turn may fetch the same files too (media preparation, when its debounce ran out
    # on a slow machine): only ever the big size and the voice, never the small size.
    got = {call.params["file_id"] for call in api.calls_of("getFile")}
    assert got == {sizes[1]["file_id"], voice["file_id"]}
    assert [d.status for d in api.downloads] == [200, 200]


async def test_too_large_is_rejected_without_downloading(api: FakeTelegramAPI) -> None:
    async with source(api) as adapter:
        claimed = _ref(api, b"x" * 2000)
        with pytest.raises(MediaRejected, match="2000 bytes, more than 1000"):
            await _fetch(adapter, claimed, max_bytes=1000)
        assert api.calls_of("getFile") == []  # the MediaRef's size was enough to know
        unsized = MediaRef("image", "photo", claimed.ref)
        with pytest.raises(MediaRejected, match="2000 bytes, more than 1000"):
            await _fetch(adapter, unsized, max_bytes=1000)
        assert len(api.calls_of("getFile")) == 1 and api.downloads == []  # getFile said so
        liar = _ref(api, b"y" * 5000, file_size=10)  # a server that reports the wrong size
        with pytest.raises(MediaRejected, match="more than 1000 bytes"):
            await _fetch(adapter, liar, max_bytes=1000)
        huge = _ref(api, b"z", file_size=21 * 1024 * 1024, report_size=True)
        with pytest.raises(MediaRejected, match="file is too big"):
            await _fetch(adapter, MediaRef("image", "photo", huge.ref), max_bytes=50 * 2**20)
        api.fail_next("getFile", status=400, description="Bad Request: file is too big")
        with pytest.raises(MediaRejected, match="file is too big"):
            await _fetch(adapter, _ref(api, b"fine"))
        assert await _fetch(adapter, _ref(api, b"fine")) == b"fine"  # the next one is fetched


async def test_gone_files_are_rejected_and_faults_are_unavailable(api: FakeTelegramAPI) -> None:
    async with source(api, download_timeout=0.5) as adapter:
        good = _ref(api, b"the bytes")
        with pytest.raises(MediaRejected, match="invalid file_id"):
            await _fetch(adapter, MediaRef("image", "photo", "no-such-file"))
        with pytest.raises(MediaRejected, match="nothing to download"):
            await _fetch(adapter, MediaRef("file", "animated sticker"))
        api.fail_download(status=404)
        with pytest.raises(MediaRejected, match="HTTP 404"):
            await _fetch(adapter, good)
        api.fail_download(status=400, description="Bad Request: file is too big")
        with pytest.raises(MediaRejected, match="HTTP 400"):
            await _fetch(adapter, good)
        api.fail_download(status=500)
        with pytest.raises(MediaUnavailable, match="HTTP 500"):
            await _fetch(adapter, good)
        api.fail_next("getFile", status=502)
        with pytest.raises(MediaUnavailable, match="getFile failed"):
            await _fetch(adapter, good)
        api.fail_next("getFile", status=429, retry_after=5)
        with pytest.raises(MediaUnavailable):
            await _fetch(adapter, good)
        api.fail_download(status=None)  # the download hangs
        started = time.monotonic()
        with pytest.raises(MediaUnavailable, match=r"no answer within 0\.5s"):
            await _fetch(adapter, good)
        assert time.monotonic() - started < 3
        assert await _fetch(adapter, good) == b"the bytes"  # faults pass, the file is there


async def test_fetch_never_tells_the_token(
    api: FakeTelegramAPI, caplog: pytest.LogCaptureFixture
) -> None:
    """The download URL holds the token: no error, traceback or log line may carry it."""
    caplog.set_level(logging.DEBUG)
    failures: list[MediaError] = []
    async with source(api, download_timeout=0.5) as adapter:
        good = _ref(api, b"bytes")
        for status in (500, 404, None):
            api.fail_download(status=status)
            with pytest.raises(MediaError) as caught:
                await _fetch(adapter, good)
            failures.append(caught.value)
        api.fail_next("getFile", status=502, description=f"proxy: no route to /bot{TOKEN}/x")
        with pytest.raises(MediaError) as caught:
            await _fetch(adapter, good)
        failures.append(caught.value)
    async with source(api) as adapter:  # closed port: nothing answers
        away = TelegramAdapter(
            bot_key=BOT, token=TOKEN, api_server=f"http://127.0.0.1:{_free_port()}"
        )
        try:
            with pytest.raises(MediaUnavailable) as unreachable:
                await _fetch(away, good)
            failures.append(unreachable.value)
        finally:
            await away.aclose()
    assert len(failures) == 5
    for error in failures:
        rendered = "".join(traceback.format_exception(error))
        assert SECRET_HALF not in rendered and TOKEN not in rendered, rendered
    for record in caplog.records:
        assert SECRET_HALF not in record.getMessage()
