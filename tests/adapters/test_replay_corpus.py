"""Other projects' recorded Telegram updates and Discord gateway events, replayed through the
real adapters (issue 15): none stops a bot, none is dropped silently in a private chat, and a
process hosting both platforms keeps serving one while the other gets the corpus.

The corpus and what is done to it at replay time: tests/adapters/replay_harness.py and
tests/data/SOURCES.md. Each payload is its own test (its id names the source repository and
the payload); the bots of one module are shared by its tests and rebuilt after a failure.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

import pytest
import pytest_asyncio
from aiogram.types import Message

from adapters.telegram.content import UNREADABLE
from tests.adapters.replay_harness import (
    ANN,
    DATA,
    DC_TOKEN,
    TG_TOKEN,
    Case,
    DiscordRig,
    Pool,
    TelegramRig,
    dc_cases,
    dc_replay,
    describe,
    discord_expectation,
    discord_rig,
    is_empty,
    load,
    personabot_run,
    telegram_expectation,
    telegram_rig,
    tg_cases,
    tg_message,
    tg_replay,
    used,
)
from tests.fakes.discord_api import FakeDiscord, FakeUser
from tests.fakes.telegram_api import FakeTelegramAPI, TgChat

pytestmark = pytest.mark.timeout(120)
#: The async tests share the module's event loop, where the module's bots run.
IN_MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")

TG_CASES = tg_cases()
DC_CASES = dc_cases()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def tg_polling(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Pool[TelegramRig]]:
    """A Telegram bot receiving by long polling."""
    pool = Pool(lambda: telegram_rig(tmp_path_factory.mktemp("tg-polling"), "polling"))
    yield pool
    await pool.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def tg_webhook(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Pool[TelegramRig]]:
    """A Telegram bot receiving through its webhook."""
    pool = Pool(lambda: telegram_rig(tmp_path_factory.mktemp("tg-webhook"), "webhook"))
    yield pool
    await pool.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def discord(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Pool[DiscordRig]]:
    """A Discord bot on the fake gateway."""
    pool = Pool(lambda: discord_rig(tmp_path_factory.mktemp("discord")))
    yield pool
    await pool.close()


def test_the_corpus_is_big_enough_and_every_payload_has_its_source_listed() -> None:
    telegram, discord_events = load("telegram"), load("discord")
    assert len(telegram) >= 40
    assert len(discord_events) >= 20
    sources = (DATA / "SOURCES.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `([^`]+)` \|", sources, re.M))
    assert listed == {r.id for r in telegram + discord_events}
    for path in sorted([*DATA.glob("telegram/*.json"), *DATA.glob("discord/*.json")]):
        source = json.loads(path.read_text(encoding="utf-8"))
        assert (DATA / source["licence_file"]).is_file(), f"{path.name}: no licence text"


# --------------------------------------------------------------------------- Telegram


#: Message fields that hold a file the model may get (as a MediaRef naming one of its files).
TG_FILES: Final = (
    "photo",
    "live_photo",
    "sticker",
    "animation",
    "document",
    "voice",
    "video_note",
    "audio",
    "video",
)
#: Forward fields of Bot API 7.0 and of the servers before it.
TG_FORWARDS: Final = (
    "forward_origin",
    "forward_from",
    "forward_from_chat",
    "forward_sender_name",
    "forward_date",
)
#: Every field name aiogram's Message reads ("from", not "from_user").
TG_KNOWN: Final = frozenset(f.alias or n for n, f in Message.model_fields.items())


def file_ids(value: object) -> set[str]:
    """Every ``file_id`` in a payload's field (photo sizes, a file and its thumbnail)."""
    if isinstance(value, list):
        return set().union(*(file_ids(v) for v in value))
    if not isinstance(value, dict):
        return set()
    found = {value["file_id"]} if isinstance(value.get("file_id"), str) else set()
    return found.union(*(file_ids(v) for v in value.values()))


def _check_telegram(
    rig: TelegramRig, case: Case, update: dict[str, object], message_id: int
) -> None:
    """A private chat's message reached the runtime, non-empty (or is on the allowlist), with
    what it holds: each file as a MediaRef naming that file (an old server's file too), a
    forward (legacy fields too) as a forward quote, and no "cannot read" for a kind aiogram
    knows."""
    expect = telegram_expectation(update)
    if not expect.required:
        return
    got = rig.recorder.of(message_id)
    kind = next(k for k in update if k != "update_id")
    assert got, f"{case.id}: a private {kind} was dropped silently (nothing reached the runtime)"
    assert [i.kind for i in got] == [expect.kind], [describe(i) for i in got]
    assert not is_empty(got[0]), f"{case.id}: an empty turn reached the runtime: {describe(got[0])}"
    found = tg_message(update)
    assert found is not None
    message, inbound = found[1], got[0]
    refs = {m.ref for m in inbound.media}
    for name in TG_FILES:
        # A MediaRef names one of the field's files, or says what it was without one (ref "":
        # an animated sticker without a thumbnail, a photo too big to download).
        if name in message and file_ids(message[name]):
            kept = refs & (file_ids(message[name]) | {""})
            assert kept, f"{case.id}: {name} lost: {describe(inbound)}"
    if not message.get("is_automatic_forward") and any(message.get(f) for f in TG_FORWARDS):
        assert inbound.quote is not None and inbound.quote.origin == "forward", describe(inbound)
    if not set(message) - TG_KNOWN:
        assert UNREADABLE not in inbound.text, f"{case.id}: {describe(inbound)}"


@IN_MODULE_LOOP
@pytest.mark.parametrize("case", TG_CASES, ids=lambda c: c.id)
async def test_telegram_update_through_the_webhook(
    case: Case, tg_webhook: Pool[TelegramRig]
) -> None:
    async with used(tg_webhook) as rig:
        message_id = next(rig.message_ids)
        update = tg_replay(case, message_id)
        status = await rig.deliver(update)
        assert status == 200, f"{case.id}: the webhook answered {status}: Telegram would redeliver"
        await rig.answers(f"still there? {message_id}")
        _check_telegram(rig, case, update, message_id)


@IN_MODULE_LOOP
@pytest.mark.parametrize("case", TG_CASES, ids=lambda c: c.id)
async def test_telegram_update_through_polling(case: Case, tg_polling: Pool[TelegramRig]) -> None:
    async with used(tg_polling) as rig:
        message_id = next(rig.message_ids)
        update = tg_replay(case, message_id)
        await rig.deliver(update)
        await rig.answers(f"still there? {message_id}")
        _check_telegram(rig, case, update, message_id)
        # The offset moved past it: Telegram would otherwise hand it out again and again.
        await rig.api.wait_for(lambda: rig.api.pending_updates(TG_TOKEN) == 0, what="the offset")


# ---------------------------------------------------------------------------- Discord


@IN_MODULE_LOOP
@pytest.mark.parametrize("case", DC_CASES, ids=lambda c: c.id)
async def test_discord_event_through_the_gateway(case: Case, discord: Pool[DiscordRig]) -> None:
    async with used(discord) as rig:
        name, data = dc_replay(case, guild=rig.guild, dm_channel=rig.dm_channel)
        await rig.deliver(name, data)
        await rig.answers()
        expect = discord_expectation(name, data)
        if not expect.required:
            return
        got = rig.recorder.of(data["id"])
        assert got, f"{case.id}: a DM {name} was dropped silently (nothing reached the runtime)"
        assert [i.kind for i in got] == [expect.kind], [describe(i) for i in got]
        if expect.kind != "delete":
            assert not is_empty(got[0]), f"{case.id}: an empty turn: {describe(got[0])}"
            # Each attachment and sticker (an older payload's ``stickers`` too) is a MediaRef.
            ids = {m.unique_id for m in got[0].media}
            for key in ("attachments", "sticker_items", "stickers"):
                for item in data.get(key) or ():
                    assert str(item["id"]) in ids, f"{case.id}: {key} lost: {describe(got[0])}"


# -------------------------------------------------------------- both in one process


async def _telegram_answers(api: FakeTelegramAPI, text: str) -> None:
    update = api.message_update(TgChat.private(ANN), ANN, text)
    assert await api.deliver_webhook(TG_TOKEN, update) == 200
    await api.wait_for(
        lambda: any(text in c.visible_text for c in api.sent_messages(TG_TOKEN)),
        within=20,
        what=f"the Telegram answer to {text!r}",
    )


async def _discord_answers(fake: FakeDiscord, user: FakeUser, text: str) -> None:
    channel = fake.dm(user)
    await fake.post(channel, user, text)
    await fake.wait_for(
        lambda: any(text in str(m.get("content", "")) for m in fake.bot_messages(channel)),
        within=20,
    )


@IN_MODULE_LOOP
async def test_the_discord_corpus_does_not_stop_the_telegram_bot(tmp_path: Path) -> None:
    async with FakeTelegramAPI() as api, FakeDiscord(token=DC_TOKEN) as fake:
        user = fake.add_user("Ada")
        guild = fake.add_guild("Cafe")
        dm = fake.dm(user)
        api.add_bot(TG_TOKEN, "mira_bot", "Mira")
        api.message_update(TgChat.private(ANN), ANN, "registers the chat")
        async with personabot_run(tmp_path, api, fake) as run:
            for case in DC_CASES:
                await fake.dispatch(*dc_replay(case, guild=guild, dm_channel=dm))
            await _discord_answers(fake, user, "discord, still there?")
            await _telegram_answers(api, "telegram, still there?")
            assert run.proc.returncode is None, run.output()[-3000:]
        assert run.proc.returncode == 0, run.output()[-3000:]


@IN_MODULE_LOOP
async def test_the_telegram_corpus_does_not_stop_the_discord_bot(tmp_path: Path) -> None:
    async with FakeTelegramAPI() as api, FakeDiscord(token=DC_TOKEN) as fake:
        user = fake.add_user("Ada")
        fake.add_guild("Cafe")
        api.add_bot(TG_TOKEN, "mira_bot", "Mira")
        api.message_update(TgChat.private(ANN), ANN, "registers the chat")
        async with personabot_run(tmp_path, api, fake) as run:
            statuses = {}
            for number, case in enumerate(TG_CASES):
                update = {**tg_replay(case, 700_000 + number), "update_id": 900_000 + number}
                statuses[case.id] = await api.deliver_webhook(TG_TOKEN, update)
            assert {k: v for k, v in statuses.items() if v != 200} == {}
            await _telegram_answers(api, "telegram, still there?")
            await _discord_answers(fake, user, "discord, still there?")
            assert run.proc.returncode is None, run.output()[-3000:]
        assert run.proc.returncode == 0, run.output()[-3000:]
