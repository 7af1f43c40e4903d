"""Telegram updates that aiogram cannot read, and store faults, never silence a bot (issue 19,
issue 13 item 4): real aiogram against the fake Bot API, the real runtime on real SQLite."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiogram import Bot

from adapters.telegram.adapter import TelegramAdapter, create_adapter
from adapters.telegram.updates import UNREADABLE_FIELDS, parse_update
from bot.config import QueueSettings, Secrets, Settings, StorageSettings, TelegramBotSettings
from tests.adapters.test_telegram import (
    ANN,
    BOB,
    BOT,
    PERSONA,
    TOKEN,
    _free_port,
    eventually,
    running,
)
from tests.fakes.telegram_api import FakeTelegramAPI, TgChat

pytestmark = pytest.mark.timeout(90)
SKIPPED = "skipped an update aiogram cannot read"


def _bot() -> Bot:
    return Bot(TOKEN)


def _unreadable(api: FakeTelegramAPI, text: str = "secret words") -> dict[str, Any]:
    """A message update whose ``chat`` lacks its type: aiogram rejects it; nothing saves it."""
    update = api.message_update(TgChat.private(ANN), ANN, text)
    del update["message"]["chat"]["type"]
    return update


def _old_photo(api: FakeTelegramAPI, caption: str) -> dict[str, Any]:
    """A photo message as an older Bot API server sends it: sizes without file_unique_id."""
    sizes = [{"file_id": "AgAD-old", "width": 90, "height": 90}]
    return api.message_update(
        TgChat.private(BOB), BOB, None, extra={"photo": sizes, "caption": caption}
    )


def _broken_photo(api: FakeTelegramAPI, caption: str) -> dict[str, Any]:
    """A photo message whose sizes lack their width: no repair can save the photo."""
    sizes = [{"file_id": "AgAD-broken", "file_unique_id": "broken", "height": 90}]
    return api.message_update(
        TgChat.private(BOB), BOB, None, extra={"photo": sizes, "caption": caption}
    )


def _rejected_count(rig: Any, kind: str = "message") -> float:
    value = rig.rt.metrics.registry.get_sample_value(
        "personabot_inbound_rejected_total", {"platform": "telegram", "bot": BOT, "kind": kind}
    )
    return 0.0 if value is None else float(value)


# ------------------------------------------------------------------------- parsing rules


async def test_an_update_missing_an_essential_field_is_rejected_without_its_content() -> None:
    async with FakeTelegramAPI() as api:
        parsed = parse_update(_unreadable(api), _bot())
    assert parsed.update is None
    assert parsed.kind == "message"
    assert "message.chat" in parsed.describe()
    assert "secret words" not in parsed.describe()


async def test_a_photo_without_file_unique_id_is_repaired_not_dropped() -> None:
    """An older server's photo keeps its sizes (the file_id still fetches the file)."""
    async with FakeTelegramAPI() as api:
        raw = _old_photo(api, "look at my cat")
        parsed = parse_update(raw, _bot())
    assert parsed.update is not None and parsed.update.message is not None
    message = parsed.update.message
    assert message.caption == "look at my cat" and parsed.dropped == ()
    assert [(s.file_id, s.file_unique_id) for s in message.photo or []] == [("AgAD-old",) * 2]
    assert raw["message"]["photo"] == [{"file_id": "AgAD-old", "width": 90, "height": 90}]


async def test_a_photo_no_repair_saves_is_dropped_and_named_on_the_message() -> None:
    async with FakeTelegramAPI() as api:
        raw = _broken_photo(api, "look at my cat")
        parsed = parse_update(raw, _bot())
    assert parsed.update is not None and parsed.update.message is not None
    message = parsed.update.message
    assert message.caption == "look at my cat" and message.photo is None
    assert parsed.dropped == ("photo",)
    assert (message.model_extra or {})[UNREADABLE_FIELDS] == ["photo"]  # for its stand-in
    assert "photo" in raw["message"] and UNREADABLE_FIELDS not in raw["message"]  # untouched


def test_a_broken_part_of_a_field_is_dropped_alone_unless_the_field_needs_it() -> None:
    """A sticker keeps its image without its broken thumbnail; a venue cannot do without
    its location, so the venue goes (both rounds reported); essential fields never go."""
    sticker = {
        "file_id": "CAAD",
        "file_unique_id": "u",
        "type": "regular",
        "width": 512,
        "height": 512,
        "is_animated": False,
        "is_video": False,
        "thumbnail": {"file_id": "AAQ"},  # no size
    }
    venue = {"title": "Cafe", "address": "Main St 1", "location": {"latitude": 1.0}}
    message = {"message_id": 1, "date": 0, "chat": {"id": 5, "type": "private"}}
    parsed = parse_update(
        {"update_id": 3, "message": {**message, "sticker": sticker, "venue": venue}}, _bot()
    )
    assert parsed.update is not None and parsed.update.message is not None
    assert parsed.dropped == ("sticker.thumbnail", "venue.location", "venue")
    kept = parsed.update.message.sticker
    assert kept is not None and kept.file_id == "CAAD" and kept.thumbnail is None
    assert parsed.update.message.venue is None
    broken_chat = {**message, "chat": {"id": 5}, "sticker": sticker}
    assert parse_update({"update_id": 4, "message": broken_chat}, _bot()).update is None


def test_an_update_of_another_kind_that_fails_is_rejected() -> None:
    raw = {
        "update_id": 7,
        "my_chat_member": {"chat": {"id": 1}, "from": {"id": 2}},  # most fields missing
    }
    parsed = parse_update(raw, _bot())
    assert parsed.update is None
    assert parsed.update_id == 7 and parsed.kind == "my_chat_member"


def test_a_value_that_is_not_an_update_is_rejected() -> None:
    assert parse_update(["not", "an", "object"], _bot()).update is None
    assert parse_update({"message": {}}, _bot()).update_id is None


# ------------------------------------------------------------------------------- polling


async def test_one_unreadable_update_in_a_batch_does_not_stop_polling(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "personabot.telegram")
    async with FakeTelegramAPI() as api:
        api.add_bot(TOKEN, "mira_bot", "Mira")
        async with running(tmp_path, api) as rig:
            # One batch: a normal message, an update aiogram rejects, a normal message.
            api.push_message(TOKEN, TgChat.private(ANN), ANN, "before the bad one")
            bad_id = api.push(TOKEN, _unreadable(api))
            api.push(TOKEN, _broken_photo(api, "after the bad one"))
            await api.wait_for(lambda: len(rig.replies()) == 2, what="both replies")
            assert any("before the bad one" in r for r in rig.replies(TgChat.private(ANN)))
            assert any("after the bad one" in r for r in rig.replies(TgChat.private(BOB)))
            # Acknowledged: the next getUpdates confirms past it, and it is gone.
            await api.wait_for(lambda: api.pending_updates(TOKEN) == 0, what="the offset")
            # A message sent afterwards is answered as usual.
            started = time.monotonic()
            api.push_message(TOKEN, TgChat.private(ANN), ANN, "and now?")
            await api.wait_for(lambda: len(rig.replies()) == 3, within=5, what="the next reply")
            assert time.monotonic() - started < 5
            offsets = [int(c.params.get("offset") or 0) for c in api.calls_of("getUpdates")]
            assert max(offsets) > bad_id
            assert _rejected_count(rig) == 1
    skipped = [r.getMessage() for r in caplog.records if SKIPPED in r.getMessage()]
    assert len(skipped) == 1, skipped
    assert f"update {bad_id} (message)" in skipped[0]
    assert "secret words" not in caplog.text
    kept = [
        r.getMessage() for r in caplog.records if "kept without message.photo" in r.getMessage()
    ]
    assert len(kept) == 1


async def test_entries_that_are_no_update_at_all_do_not_stop_polling(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A ``getUpdates`` result holding ``null``, a number, a string or an update with a string
    id between two messages: every entry is judged alone, both messages are answered."""
    caplog.set_level(logging.WARNING, "personabot.telegram")
    async with FakeTelegramAPI() as api:
        api.add_bot(TOKEN, "mira_bot", "Mira")
        async with running(tmp_path, api) as rig:
            api.push_message(TOKEN, TgChat.private(ANN), ANN, "before the junk")
            for entry in (None, 7, "junk"):
                api.push_raw(TOKEN, entry)
            api.push(TOKEN, {"update_id": "0", "poll": {"id": "1"}})  # id as a string
            api.push_message(TOKEN, TgChat.private(BOB), BOB, "after the junk")
            await api.wait_for(lambda: len(rig.replies()) == 2, what="both replies")
            assert any("before the junk" in r for r in rig.replies(TgChat.private(ANN)))
            assert any("after the junk" in r for r in rig.replies(TgChat.private(BOB)))
            await api.wait_for(lambda: api.pending_updates(TOKEN) == 0, what="the offset")
            for kind in ("NoneType", "int", "str"):
                assert _rejected_count(rig, kind) == 1
    assert "getUpdates failed" not in caplog.text


async def test_an_entry_without_a_readable_id_is_not_read_in_a_busy_loop(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing confirms an entry without an update id: when the server keeps handing it out,
    the bot waits between polls (logged), and the next message is still answered."""
    caplog.set_level(logging.WARNING, "personabot.telegram")
    async with FakeTelegramAPI() as api:
        api.add_bot(TOKEN, "mira_bot", "Mira")
        async with running(tmp_path, api) as rig:
            api.push_raw(TOKEN, {"update_id": None, "message": {"text": "no id"}})
            await eventually(
                lambda: _async("without a readable update id" in caplog.text), what="the wait"
            )
            await asyncio.sleep(1.5)
            assert len(api.calls_of("getUpdates")) < 10  # backoff, not thousands of polls
            api.push_message(TOKEN, TgChat.private(ANN), ANN, "still there?")
            await api.wait_for(rig.replies, within=15, what="the reply")


# ------------------------------------------------------------------------------- webhook


def _webhook_adapter(api: FakeTelegramAPI, port: int) -> TelegramAdapter:
    """The test bot in webhook mode on ``port``, talking to the fake Bot API."""
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
    secrets = Secrets({"TELEGRAM_BOT_TOKEN": TOKEN, "TG_WEBHOOK_SECRET": "hook-secret"})
    return create_adapter(entry, PERSONA, secrets)


async def test_the_webhook_answers_200_for_an_unreadable_update_and_logs_it_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "personabot.telegram")
    port = _free_port()
    async with FakeTelegramAPI() as api:
        api.add_bot(TOKEN, "mira_bot", "Mira")
        adapter = _webhook_adapter(api, port)
        async with running(tmp_path, api, adapter=adapter) as rig:
            bad = _unreadable(api)
            assert await api.deliver_webhook(TOKEN, bad) == 200
            photo = _old_photo(api, "a photo from an old server")
            assert await api.deliver_webhook(TOKEN, photo) == 200
            await api.wait_for(rig.replies, what="the photo's reply")
            assert "a photo from an old server" in rig.replies()[0]
            assert _rejected_count(rig) == 1
    skipped = [r.getMessage() for r in caplog.records if SKIPPED in r.getMessage()]
    assert len(skipped) == 1 and f"update {bad['update_id']}" in skipped[0]


# --------------------------------------------------------------------------- store faults


@contextlib.contextmanager
def _write_lock(path: Path) -> Iterator[sqlite3.Connection]:
    """Another program holding the database's write lock."""
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        yield other
        other.execute("ROLLBACK")
    finally:
        other.close()


async def test_an_update_is_not_acknowledged_before_it_is_stored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """With the SQLite file locked longer than busy_timeout_ms, polling keeps the update
    unconfirmed and retries it; once the lock is gone it is stored and answered once."""
    caplog.set_level(logging.ERROR, "personabot.telegram")
    db = tmp_path / "locked.sqlite3"
    settings = Settings(
        storage=StorageSettings(url=f"sqlite:///{db}", busy_timeout_ms=100),
        queue=QueueSettings(debounce_seconds=0.2, max_wait_seconds=2.0, scan_interval_seconds=0.2),
        personas=[PERSONA],
    )
    async with FakeTelegramAPI() as api:
        api.add_bot(TOKEN, "mira_bot", "Mira")
        async with running(tmp_path, api, settings=settings) as rig:
            with _write_lock(db):
                api.push_message(TOKEN, TgChat.private(ANN), ANN, "do not lose me")
                await eventually(
                    lambda: _async("not stored" in caplog.text), what="the store fault"
                )
                await asyncio.sleep(0.5)  # more retries while the lock is held
                assert api.pending_updates(TOKEN) == 1  # never confirmed
                assert rig.replies() == []
            await api.wait_for(rig.replies, what="the reply after the fault cleared")
            await api.wait_for(lambda: api.pending_updates(TOKEN) == 0, what="the offset")
            key = rig.key(TgChat.private(ANN))
            await rig.quiet(key)
            assert len(rig.replies()) == 1
            assert "do not lose me" in rig.replies()[0]
            assert (await rig.stored_texts(key))[0] == "do not lose me"


async def _async(value: bool) -> bool:
    return value


async def test_the_webhook_answers_5xx_while_the_store_is_locked_and_telegram_redelivers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A webhook update the store cannot take is not acknowledged (5xx, logged loudly); the
    redelivery after the fault clears is stored and answered once."""
    caplog.set_level(logging.ERROR, "personabot.telegram")
    port = _free_port()
    db = tmp_path / "locked.sqlite3"
    settings = Settings(
        storage=StorageSettings(url=f"sqlite:///{db}", busy_timeout_ms=100),
        queue=QueueSettings(debounce_seconds=0.2, max_wait_seconds=2.0, scan_interval_seconds=0.2),
        personas=[PERSONA],
    )
    async with FakeTelegramAPI() as api:
        api.add_bot(TOKEN, "mira_bot", "Mira")
        adapter = _webhook_adapter(api, port)
        async with running(tmp_path, api, adapter=adapter, settings=settings) as rig:
            update = api.message_update(TgChat.private(ANN), ANN, "do not lose me either")
            with _write_lock(db):
                status = await api.deliver_webhook(TOKEN, update)
                assert status >= 500  # Telegram redelivers what was not answered 2xx
                assert rig.replies() == []
            assert await api.deliver_webhook(TOKEN, update) == 200  # the redelivery
            await api.wait_for(rig.replies, what="the reply after the fault cleared")
            key = rig.key(TgChat.private(ANN))
            await rig.quiet(key)
            assert len(rig.replies()) == 1
            assert "do not lose me either" in rig.replies()[0]
    loud = [r.getMessage() for r in caplog.records if "not stored" in r.getMessage()]
    assert len(loud) == 1 and "do not lose me" not in loud[0]


async def test_a_character_no_store_can_hold_never_blocks_the_bot_on_sqlite(
    tmp_path: Path,
) -> None:
    """A lone surrogate (nothing encodes it): see the PostgreSQL test."""
    await _unstorable_characters(tmp_path, f"sqlite:///{tmp_path / 'nul.sqlite3'}")


async def test_a_character_no_store_can_hold_never_blocks_the_bot_on_postgresql(
    tmp_path: Path, pg_dsn: str
) -> None:
    """A NUL in a message (PostgreSQL text refuses it) or a lone surrogate (nothing encodes it):
    the store refused the update on every retry and polling, which retries store faults until
    they clear, never got past it; every later message of every chat went unanswered. The
    characters are stored as U+FFFD and everyone is answered."""
    await _unstorable_characters(tmp_path, pg_dsn)


async def _unstorable_characters(tmp_path: Path, url: str) -> None:
    settings = Settings(
        storage=StorageSettings(url=url),
        queue=QueueSettings(debounce_seconds=0.2, max_wait_seconds=2.0, scan_interval_seconds=0.2),
        personas=[PERSONA],
    )
    async with FakeTelegramAPI() as api:
        api.add_bot(TOKEN, "mira_bot", "Mira")
        async with running(tmp_path, api, settings=settings) as rig:
            ann = TgChat.private(ANN)
            api.push_message(TOKEN, ann, ANN, "nul \x00 and \ud800 here")
            api.push_message(TOKEN, TgChat.private(BOB), BOB, "innocent bystander")
            await api.wait_for(lambda: len(rig.replies()) == 2, what="both replies")
            key = rig.key(ann)
            await rig.quiet(key)
            assert (await rig.stored_texts(key))[0] == "nul \ufffd and \ufffd here"
