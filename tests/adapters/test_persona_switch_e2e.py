"""Several personas on one bot, through ``personabot run``, the fake Bot API (real aiogram) and
the fake Messages API (real anthropic SDK): /persona switches one chat, not the others. On
SQLite and on PostgreSQL (a fresh database of the throwaway server, tests/conftest.py)."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tests.adapters.test_telegram_e2e import _env, personabot_run
from tests.fakes.messages_api import CannedReply, FakeMessagesAPI, RecordedRequest
from tests.fakes.telegram_api import FakeTelegramAPI, TgChat, TgUser, UploadedFile

TOKEN = "5550007:AAPersona-e2e-token-abcdefghijklmnop"
SASHA = TgUser(4242, "Sasha")
ALEX = TgUser(5151, "Alex")


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The bot's store: a SQLite file, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'bots.sqlite3'}"
    dsn: str = request.getfixturevalue("pg_dsn")
    return dsn


async def _rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    """What ``sql`` selects from the bot's store, read after the bot stopped."""
    if url.startswith("sqlite:///"):
        with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as db:
            return db.execute(sql).fetchall()
    conn = await asyncpg.connect(url)
    try:
        return [tuple(row) for row in await conn.fetch(sql)]
    finally:
        await conn.close()


def _config(tmp_path: Path, telegram: str, claude: str, url: str) -> Path:
    path = tmp_path / "personabot.toml"
    path.write_text(
        f"""
[storage]
url = {json.dumps(url)}

[llm]
base_url = {json.dumps(claude)}
max_retries = 0

[queue]
debounce_seconds = 0.2
max_wait_seconds = 2
scan_interval_seconds = 0.2
shutdown_grace_seconds = 2

[memory]
extract_after_idle_minutes = 10000

[[personas]]
id = "mira"
name = "Mira"
system = "You are Mira, a lighthouse keeper."
first_message = ["Hi, I'm Mira."]
model = "claude-test"

[[personas]]
id = "orin"
name = "Orin"
description = "{{{{char}}}} is a ferryman who speaks in short sentences."
first_message = ["Orin. Where to?"]
model = "claude-orin"

[[bots]]
id = "telegram-mira"
platform = "telegram"
personas = ["mira", "orin"]
token_env = "TG_TOKEN"
api_server = "{telegram}"
""",
        encoding="utf-8",
    )
    return path


def _system(request: RecordedRequest) -> str:
    return str(request.system_blocks[0]["text"])


def _said(request: RecordedRequest) -> str:
    return request.last_user_text


async def test_persona_switches_one_chat_and_starts_a_new_session(
    tmp_path: Path, db_url: str
) -> None:
    """Issue 18 acceptance: ``/persona orin`` in one chat starts a new session with Orin's pin
    (the model request has Orin's pin and model, none of Mira's window); another chat of the
    same bot keeps Mira; /export shows the switch; /persona alone lists them."""
    async with FakeTelegramAPI() as telegram, FakeMessagesAPI(reply_text="Mm.") as claude:
        telegram.add_bot(TOKEN, "duo_bot")
        config = _config(tmp_path, telegram.base_url, claude.base_url, db_url)
        env = _env(TG_TOKEN=TOKEN, ANTHROPIC_API_KEY="sk-test-e2e")
        one, two = TgChat.private(SASHA), TgChat.private(ALEX)

        def sent(user: TgUser) -> list[str]:
            return [c.visible_text for c in telegram.sent_messages(TOKEN, user.id)]

        def said() -> set[str]:
            return {_said(r) for r in claude.requests}

        async with personabot_run(tmp_path, config, env):
            await telegram.wait_for(lambda: telegram.polls_started(TOKEN), within=40, what="poll")
            telegram.push_message(TOKEN, one, SASHA, "my boat is leaking")
            telegram.push_message(TOKEN, two, ALEX, "hello there")
            await telegram.wait_for(lambda: len(claude.requests) == 2, what="two replies")
            await telegram.wait_for(lambda: sent(SASHA) and sent(ALEX), what="both sent")
            telegram.push_message(TOKEN, one, SASHA, "/persona")
            await telegram.wait_for(lambda: len(sent(SASHA)) == 2, what="the list")
            telegram.push_message(TOKEN, one, SASHA, "/persona nobody")
            await telegram.wait_for(lambda: len(sent(SASHA)) == 3, what="the refusal")
            telegram.push_message(TOKEN, one, SASHA, "/persona Orin")
            await telegram.wait_for(lambda: len(sent(SASHA)) == 4, what="Orin's greeting")
            telegram.push_message(TOKEN, one, SASHA, "can you take me across?")
            telegram.push_message(TOKEN, two, ALEX, "still there?")
            # By what was said, not by count: the switch ends Mira's session, whose memory
            # extraction is a model call of its own that may land between or after these two.
            await telegram.wait_for(
                lambda: {"can you take me across?", "still there?"} <= said(), what="two more"
            )
            await telegram.wait_for(lambda: len(sent(SASHA)) == 5, what="Orin's reply")
            await telegram.wait_for(lambda: len(sent(ALEX)) == 2, what="Mira's reply")
            telegram.push_message(TOKEN, one, SASHA, "/export")
            await telegram.wait_for(
                lambda: telegram.sent_documents(TOKEN, SASHA.id), within=30, what="the export"
            )
            (call,) = telegram.sent_documents(TOKEN, SASHA.id)
            export = call.params["document"]
            assert isinstance(export, UploadedFile)

    listing, refusal, greeting = sent(SASHA)[1:4]
    assert listing.splitlines() == [
        "Personas here (send /persona NAME to switch):",
        "> Mira (mira)",
        "  Orin (orin)",
    ]
    assert refusal == "No persona 'nobody' here. Choose one of: Mira (mira), Orin (orin)."
    assert greeting == "Orin. Where to?"
    by_text = {_said(r): r for r in claude.requests}
    first, orin, alex_before, alex_after = (
        by_text["my boat is leaking"],
        by_text["can you take me across?"],
        by_text["hello there"],
        by_text["still there?"],
    )
    assert _system(first).startswith("You are Mira") and first.body["model"] == "claude-test"
    # Orin's pin and model; a new session: nothing of what Mira was told.
    assert "Orin is a ferryman who speaks in short sentences." in _system(orin)
    assert _system(orin).endswith("with:\nOrin. Where to?")
    assert orin.body["model"] == "claude-orin"
    assert "leaking" not in json.dumps(orin.body)
    # The other chat of the same bot keeps Mira, and its own window.
    for request in (alex_before, alex_after):
        assert _system(request).startswith("You are Mira") and "Orin" not in _system(request)
    assert "hello there" in json.dumps(alex_after.messages)
    document = json.loads(export.data)
    assert [(m["text"], m["session"], m["persona"]) for m in document["messages"]] == [
        ("my boat is leaking", 1, "mira"),
        ("can you take me across?", 2, "orin"),
    ]
    assert [(r["session"], r["persona"]) for r in document["replies_to_you"]] == [
        (1, "mira"),
        (2, "orin"),
    ]
    sessions = await _rows(
        db_url,
        "SELECT c.chat_id, s.session_no, s.status, s.close_reason, s.persona FROM sessions s "
        "JOIN conversations c ON c.id = s.conversation_id ORDER BY c.chat_id, s.session_no",
    )
    assert sessions == [
        ("4242", 1, "closed", "persona", None),
        ("4242", 2, "open", None, "orin"),
        ("5151", 1, "open", None, None),
    ]


async def test_a_turn_generating_during_a_switch_answers_in_its_own_session(
    tmp_path: Path, db_url: str
) -> None:
    """A reply Mira is writing when the chat switches to Orin is recorded in Mira's session
    (the one its messages are in), never in Orin's; Orin's first turn reads none of it."""
    async with FakeTelegramAPI() as telegram, FakeMessagesAPI(reply_text="Mm.") as claude:
        telegram.add_bot(TOKEN, "duo_bot")
        claude.answer_when(
            lambda r: r.last_user_text == "tell me a long story",
            CannedReply("Once, by the lighthouse..."),
            delay=2.0,
        )
        config = _config(tmp_path, telegram.base_url, claude.base_url, db_url)
        env = _env(TG_TOKEN=TOKEN, ANTHROPIC_API_KEY="sk-test-e2e")
        chat = TgChat.private(SASHA)

        def sent() -> list[str]:
            return [c.visible_text for c in telegram.sent_messages(TOKEN, SASHA.id)]

        async with personabot_run(tmp_path, config, env):
            await telegram.wait_for(lambda: telegram.polls_started(TOKEN), within=40, what="poll")
            telegram.push_message(TOKEN, chat, SASHA, "tell me a long story")
            await telegram.wait_for(lambda: claude.requests, what="Mira's call")
            telegram.push_message(TOKEN, chat, SASHA, "/persona orin")
            await telegram.wait_for(lambda: len(sent()) == 2, what="greeting and story")
            telegram.push_message(TOKEN, chat, SASHA, "hello ferryman")
            await telegram.wait_for(lambda: len(sent()) == 3, what="Orin's reply")
    assert sorted(sent()[:2]) == sorted(["Orin. Where to?", "Once, by the lighthouse..."])
    orin = claude.requests[-1]
    assert "Orin is a ferryman" in _system(orin) and "lighthouse" not in json.dumps(orin.messages)
    rows = await _rows(
        db_url,
        "SELECT s.session_no, s.persona, m.role, m.text FROM messages m "
        "JOIN sessions s ON s.id = m.session_id ORDER BY m.id",
    )
    assert rows == [
        (1, None, "user", "tell me a long story"),
        (1, None, "assistant", "Once, by the lighthouse..."),
        (2, "orin", "user", "hello ferryman"),
        (2, "orin", "assistant", "Mm."),
    ]
