"""A ``getUpdates`` batch is stored in one transaction (issue 23): a store fault in the
middle of it acknowledges none of it, and once the fault clears every message is answered
once. Real aiogram polling against the fake Bot API, the real runtime, on both stores.

The fault is the database's own: a trigger that refuses one message's text (RAISE on
SQLite, RAISE EXCEPTION on PostgreSQL), installed after the runtime migrated the schema and
dropped to end the fault. The batch is several updates pushed in one go (the fake answers the
waiting long poll with all of them).
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import asyncpg
import pytest

from bot.config import QueueSettings, Settings, StorageSettings
from tests.adapters.test_telegram import (
    ANN,
    BOB,
    PERSONA,
    TOKEN,
    Rig,
    eventually,
    running,
)
from tests.backends import StoreFactory
from tests.fakes.llm import GatedLLM
from tests.fakes.telegram_api import FakeTelegramAPI, TgChat, TgUser

CAROL = TgUser(1003, "Carol")
DAN = TgUser(1004, "Dan")
FAULT_TEXT = "the store refuses this one"

_SQLITE_FAULT = (
    "CREATE TRIGGER inject_fault BEFORE INSERT ON messages WHEN NEW.text = '{text}' "
    "BEGIN SELECT RAISE(ABORT, 'injected fault'); END"
)
_PG_FAULT = (
    "CREATE FUNCTION inject_fault() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "IF NEW.text = '{text}' THEN RAISE EXCEPTION 'injected fault'; END IF; RETURN NEW; END $$; "
    "CREATE TRIGGER inject_fault BEFORE INSERT ON messages FOR EACH ROW "
    "EXECUTE FUNCTION inject_fault()"
)

Fault = Callable[[bool], Awaitable[None]]


@pytest.fixture
def store_url(stores: StoreFactory) -> str:
    """A fresh database of each store backend, as the runtime's storage URL."""
    return stores.dsn or f"sqlite:///{stores.path}"


def _fault(url: str) -> Fault:
    """Install (True) or remove (False) the trigger that refuses FAULT_TEXT."""

    async def switch(on: bool) -> None:
        if url.startswith("sqlite"):
            db = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
            try:
                db.execute(
                    _SQLITE_FAULT.format(text=FAULT_TEXT) if on else "DROP TRIGGER inject_fault"
                )
            finally:
                db.close()
            return
        conn = await asyncpg.connect(url)
        try:
            await conn.execute(
                _PG_FAULT.format(text=FAULT_TEXT)
                if on
                else "DROP TRIGGER inject_fault ON messages; DROP FUNCTION inject_fault()"
            )
        finally:
            await conn.close()

    return switch


@asynccontextmanager
async def batch_bot(
    tmp_path: Path, url: str, llm: GatedLLM, *, debounce: float = 0.2, **sections: object
) -> AsyncIterator[Rig]:
    """The bot on the fake Bot API with a short debounce, a short busy timeout (a fault shows
    at once) and any other settings ``sections`` (e.g. ``retention=``)."""
    settings = Settings(
        storage=StorageSettings(url=url, busy_timeout_ms=200),
        queue=QueueSettings(
            debounce_seconds=debounce, max_wait_seconds=2.0, scan_interval_seconds=0.2
        ),
        personas=[PERSONA],
        **sections,  # type: ignore[arg-type]
    )
    async with FakeTelegramAPI() as api:
        api.add_bot(TOKEN, "mira_bot", "Mira")
        async with running(tmp_path, api, llm, settings=settings) as rig:
            yield rig


def _reply_calls(llm: GatedLLM) -> list[str]:
    """The new input (the last message) of every model call that answered a turn."""
    return [r.messages[-1].text for r in llm.requests if r.purpose == "reply"]


async def test_a_store_fault_in_the_middle_of_a_batch_acknowledges_none_of_it(
    tmp_path: Path, store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, "personabot.telegram")
    llm = GatedLLM(answer=lambda r: "got it")
    fault = _fault(store_url)
    people = (ANN, BOB, CAROL, DAN)
    texts = ("first of the batch", "second of the batch", FAULT_TEXT, "after the fault")
    async with batch_bot(tmp_path, store_url, llm) as rig:
        api = rig.api
        await fault(True)
        for person, text in zip(people, texts, strict=True):  # one getUpdates answer
            api.push_message(TOKEN, TgChat.private(person), person, text)
        await eventually(_logged(caplog, "not stored"), what="the store fault")
        await eventually(_logged(caplog, "not stored", times=2), what="a second attempt")
        # Nothing acknowledged, nothing stored (not even the two before the fault), no turn.
        assert api.pending_updates(TOKEN) == len(texts)
        for person in people:
            assert await rig.stored_texts(rig.key(TgChat.private(person))) == []
        assert _reply_calls(llm) == [] and rig.replies() == []

        await fault(False)
        await api.wait_for(lambda: api.pending_updates(TOKEN) == 0, what="the acknowledgement")
        await api.wait_for(lambda: len(rig.replies()) == len(texts), what="every reply")
        for person in people:
            await rig.quiet(rig.key(TgChat.private(person)))
        calls = _reply_calls(llm)
        for text in texts:  # each message in exactly one model call, answered once
            assert sum(text in call for call in calls) == 1, text
        assert len(calls) == len(texts)
        assert all(len(rig.replies(TgChat.private(p))) == 1 for p in people)


async def test_a_command_inside_a_failed_batch_runs_once_and_the_rest_is_answered_once(
    tmp_path: Path, store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The messages before a command are stored before it runs (order of arrival), so a fault
    after it leaves those stored and the command answered; the batch handed over again finds
    them already there (second deliveries, no-ops) and does not run the command twice."""
    caplog.set_level(logging.ERROR, "personabot.telegram")
    llm = GatedLLM(answer=lambda r: "got it")
    fault = _fault(store_url)
    async with batch_bot(tmp_path, store_url, llm) as rig:
        api = rig.api
        await fault(True)
        api.push_message(TOKEN, TgChat.private(ANN), ANN, "before the command")
        api.push_message(TOKEN, TgChat.private(BOB), BOB, "/help")
        api.push_message(TOKEN, TgChat.private(CAROL), CAROL, FAULT_TEXT)
        api.push_message(TOKEN, TgChat.private(ANN), ANN, "after the command")
        await eventually(_logged(caplog, "not stored", times=2), what="two attempts")
        assert api.pending_updates(TOKEN) == 4
        await fault(False)
        await api.wait_for(lambda: api.pending_updates(TOKEN) == 0, what="the acknowledgement")
        for person in (ANN, BOB, CAROL):
            await rig.quiet(rig.key(TgChat.private(person)))
        assert len(rig.replies(TgChat.private(BOB))) == 1  # /help answered once
        calls = _reply_calls(llm)
        for text in ("before the command", FAULT_TEXT, "after the command"):
            assert sum(text in call for call in calls) == 1, text
        stored = await rig.stored_texts(rig.key(TgChat.private(ANN)))
        assert [t for t in stored if t != "got it"] == ["before the command", "after the command"]


def _logged(
    caplog: pytest.LogCaptureFixture, needle: str, *, times: int = 1
) -> Callable[[], Awaitable[bool]]:
    async def seen() -> bool:
        return sum(needle in r.getMessage() for r in caplog.records) >= times

    return seen
