"""One outbound path (issue 14.2): everything the bot says is an outbox row sent by Delivery.

Command answers, notices and greetings are recorded in the outbox (not in the transcript, so
the model never sees them) and recovered after a crash like model replies; the access check
comes before all of them, on every platform (Telegram and Discord: tests/adapters).
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import getpass
import sqlite3
import sys
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from bot.core.clock import ManualClock
from bot.core.errors import ModelUnavailable
from bot.core.events import ConversationKey, Reply, UserKey
from bot.core.llm import ModelRequest, ModelResult
from bot.store.base import BaseStore
from memory.records import MemoryItem, UserMemory
from tests.backends import StoreFactory
from tests.bot.test_pipeline import FlakyLLM
from tests.fakes.llm import GatedLLM
from tests.fakes.outlet import RecordingOutlet
from tests.harness import harness
from tests.processes import clean_env, spawn

DM = ConversationKey("telegram", "42")


async def outbox(stores: StoreFactory) -> list[tuple[Any, ...]]:
    """(reply_message_id, status, text) of every outbox row, as an operator would see it."""
    sql = "SELECT reply_message_id, status, text FROM outbox ORDER BY id"
    if stores.backend.name == "sqlite":
        with contextlib.closing(sqlite3.connect(stores.path)) as db:
            return db.execute(sql).fetchall()
    conn = await asyncpg.connect(stores.dsn)
    try:
        return [tuple(row) for row in await conn.fetch(sql)]
    finally:
        await conn.close()


def _window(request: ModelRequest) -> str:
    """Everything the model was shown: system prompt and every message."""
    return repr(request.system) + repr(request.messages)


async def test_command_answers_are_outbox_rows_never_in_the_models_window(
    stores: StoreFactory, store: BaseStore, clock: ManualClock
) -> None:
    """/start and /help are answered through the outbox (sent, text cleared once sent); the
    transcript and the model's window hold neither the commands nor their answers."""
    llm = GatedLLM()
    async with harness(store, clock, llm) as h:
        await h.say(DM, "/start")
        await h.say(DM, "/help")
        assert h.outlet.texts()[0] == "Hi, I'm Mira."
        assert h.outlet.texts()[1].startswith("Commands:\n/start - say hello")
        assert all(reply.outbox_id is not None for _, reply in h.outlet.replies)
        assert await outbox(stores) == [(0, "sent", ""), (0, "sent", "")]
        await h.say(DM, "what can you do?")
        await h.advance(2)
        assert h.outlet.texts()[-1] == "reply to: what can you do?"
    (request,) = llm.requests
    assert "Commands:" not in _window(request) and "/help" not in _window(request)
    session = await store.current_session(DM)
    assert session is not None
    assert [(m.role, m.text) for m in await store.messages(session.key)] == [
        ("user", "what can you do?"),
        ("assistant", "reply to: what can you do?"),
    ]


class RecordingFlakyLLM(FlakyLLM):
    """FlakyLLM that keeps every request."""

    def __init__(self, errors: list[Exception]) -> None:
        super().__init__(errors)
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelResult:
        """Record, then fail or answer."""
        self.requests.append(request)
        return await super().complete(request)


class DyingOutlet(RecordingOutlet):
    """The platform call never returns: the process dies in the middle of a send."""

    def __init__(self, clock: ManualClock, *, idempotent_send: bool) -> None:
        super().__init__(clock, idempotent_send=idempotent_send)
        self.entered = asyncio.Event()

    async def send(self, reply: Reply) -> None:
        """Hang until cancelled (the crash)."""
        self.entered.set()
        await asyncio.Event().wait()


@pytest.mark.parametrize("idempotent", [True, False], ids=["discord-like", "telegram-like"])
async def test_a_command_answer_cut_off_by_a_crash_is_recovered_like_a_reply(
    stores: StoreFactory, store: BaseStore, clock: ManualClock, idempotent: bool
) -> None:
    """Died while sending /help's answer: an idempotent platform gets it again at the next
    start (same outbox id, so posted once); elsewhere it is given up, never duplicated."""
    dying = DyingOutlet(clock, idempotent_send=idempotent)
    async with harness(store, clock, GatedLLM(), outlet=dying) as h:
        answering = asyncio.create_task(h.say(DM, "/help"))
        await asyncio.wait_for(dying.entered.wait(), 5)
        answering.cancel()  # the process is gone
        await asyncio.gather(answering, return_exceptions=True)
    assert await outbox(stores) != []  # recorded before the send started
    restarted = RecordingOutlet(clock, idempotent_send=idempotent)
    async with harness(store, clock, GatedLLM(), outlet=restarted) as h:
        sent = await h.pipeline.recover_outbox(older_than=clock.now())
    if idempotent:
        assert sent == 1
        (reply,) = [r for _, r in restarted.replies]
        assert reply.text.startswith("Commands:\n") and reply.outbox_id is not None
        assert await outbox(stores) == [(0, "sent", "")]
    else:
        assert sent == 0 and restarted.replies == []
        assert await outbox(stores) == [(0, "failed", "")]


async def test_a_command_delivered_again_after_a_crash_runs_and_is_answered_once(
    stores: StoreFactory, store: BaseStore, clock: ManualClock
) -> None:
    """/new's answer was recorded, then the process died mid-send; the platform delivers the
    unacknowledged update again after the restart (Telegram does): the answer goes out once,
    through recovery, and /new does not open a second session."""
    dying = DyingOutlet(clock, idempotent_send=True)
    async with harness(store, clock, GatedLLM(), outlet=dying) as h:
        answering = asyncio.create_task(h.say(DM, "/new", message_id="tg-7"))
        await asyncio.wait_for(dying.entered.wait(), 5)
        answering.cancel()
        await asyncio.gather(answering, return_exceptions=True)
    restarted = RecordingOutlet(clock, idempotent_send=True)
    async with harness(store, clock, GatedLLM(), outlet=restarted) as h:
        assert await h.pipeline.recover_outbox(older_than=clock.now()) == 1
        await h.say(DM, "/new", message_id="tg-7")  # the same update, delivered again
        await h.say(DM, "/new", message_id="tg-8")  # a new /new is a new command
    first, second = restarted.texts()
    assert first.startswith("New session started (#1)")
    assert second.startswith("New session started (#2)")
    assert [s.key.session_id for s in await store.list_sessions(DM)] == [1, 2]


async def test_the_trouble_notice_is_an_outbox_row_the_model_never_sees(
    stores: StoreFactory, store: BaseStore, clock: ManualClock
) -> None:
    """A model outage: the notice goes out through the outbox, once; the reply that follows
    is the transcript's only assistant message and the retried request never shows the
    notice."""
    notice = "I'm having trouble thinking right now; I'll answer as soon as I can."
    llm = RecordingFlakyLLM([ModelUnavailable("overloaded", status=529)] * 2)
    async with harness(store, clock, llm, trouble_notice=notice) as h:
        await h.say(DM, "hello")
        await h.advance(20, step=0.5)
        assert h.outlet.texts() == [notice, "ok: hello"]
    notice_row, reply_row = await outbox(stores)
    assert notice_row == (0, "sent", "")
    assert reply_row[0] > 0 and reply_row[1:] == ("sent", "ok: hello")  # a transcript message
    assert all(notice not in _window(request) for request in llm.requests)
    session = await store.current_session(DM)
    assert session is not None
    assert [m.role for m in await store.messages(session.key)] == ["user", "assistant"]


async def test_memory_shown_by_a_command_does_not_outlive_forget_in_the_outbox(
    stores: StoreFactory, store: BaseStore, clock: ManualClock
) -> None:
    """/memory's answer quotes the person's memory: once sent, its outbox row keeps no text,
    so /forget leaves nothing of it behind."""
    async with harness(store, clock, GatedLLM()) as h:
        fact = MemoryItem("semantic", "hobby", "loves the night train to Oslo")
        record = UserMemory(items=(fact,)).to_json()
        await store.set_user_memory(UserKey("telegram", "u1"), record, clock.now())
        await h.say(DM, "/memory")
        await h.say(DM, "/forget confirm")
        assert "night train to Oslo" in h.outlet.texts()[0]
    assert all("Oslo" not in str(row) for row in await outbox(stores))


def test_nothing_but_delivery_calls_an_outlets_send() -> None:
    """Outside bot/runtime/delivery.py no code of the runtime sends by itself: every ``.send``
    goes to a Delivery (a new notice sent straight to an outlet would skip the outbox)."""
    root = Path(__file__).resolve().parents[2]
    direct = []
    sources = [*root.joinpath("bot").rglob("*.py"), *root.joinpath("memory").rglob("*.py")]
    for path in sorted(sources):
        if path.relative_to(root).as_posix() == "bot/runtime/delivery.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("send", "send_file")
                and not ast.unparse(node.func.value).endswith("delivery")
            ):
                direct.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    assert direct == []


# -- the console: `personabot chat`, the real entry point -------------------------------------


async def _chat(cwd: Path, stdin: str) -> tuple[int, str, str]:
    proc = await spawn(
        sys.executable,
        "-m",
        "bot",
        "chat",
        cwd=cwd,
        env=clean_env(),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin.encode()), timeout=50)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


_CONFIG = """
[storage]
url = "sqlite:///personabot.sqlite3"

[llm]
provider = "offline"

[access]
allow_users = [{allowed}]
denied_reply = "This bot is private."

[[personas]]
id = "companion"
name = "Mira"
system = "You are Mira."
first_message = ["Hi, I'm Mira.", "What shall we talk about?"]
"""


async def test_console_greeting_comes_after_the_access_check(tmp_path: Path) -> None:
    """`personabot chat` for someone outside allow_users: the denied reply once, no greeting,
    no command answer, no model reply, and nothing of theirs stored."""
    (tmp_path / "personabot.toml").write_text(_CONFIG.format(allowed='"someone-else"'))
    code, out, err = await _chat(tmp_path, "/start\n/help\nhello\n")
    assert code == 0, err
    said = [line for line in out.splitlines() if line.startswith("Mira:")]
    assert said == ["Mira: This bot is private."]
    assert "Hi, I'm Mira." not in out and "Commands:" not in out
    with contextlib.closing(sqlite3.connect(tmp_path / "personabot.sqlite3")) as db:
        assert db.execute("SELECT COUNT(*) FROM messages").fetchone() == (0,)
        assert db.execute("SELECT COUNT(*) FROM outbox").fetchone() == (0,)


async def test_console_greets_an_allowed_person_through_the_outbox(tmp_path: Path) -> None:
    """The local user in allow_users: the greeting (every line of first_message), recorded
    in the outbox like any answer, then the conversation."""
    allowed = f'"{getpass.getuser()}"'
    (tmp_path / "personabot.toml").write_text(_CONFIG.format(allowed=allowed))
    code, out, err = await _chat(tmp_path, "hello\n")
    assert code == 0, err
    assert "Mira: Hi, I'm Mira.\nWhat shall we talk about?\n" in out
    assert "Mira: [offline model] You said: hello" in out
    with contextlib.closing(sqlite3.connect(tmp_path / "personabot.sqlite3")) as db:
        rows = db.execute("SELECT reply_message_id, status FROM outbox ORDER BY id").fetchall()
    assert rows[0] == (0, "sent") and len(rows) == 2
