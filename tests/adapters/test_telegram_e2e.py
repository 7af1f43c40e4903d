"""``personabot run`` as a real process: Telegram bots polling the fake Bot API, offline model."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sqlite3
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from tests.fakes.telegram_api import FakeTelegramAPI, TgChat, TgUser
from tests.processes import DROPPED, Running, clean_env, spawn

MIRA = "5550001:AAMira-e2e-token-abcdefghijklmnopqrstu"
SASHA = "5550002:AASasha-e2e-token-abcdefghijklmnopqrs"
USER = TgUser(4242, "Sasha")


def _env(**extra: str) -> dict[str, str]:
    return clean_env(drop=(*DROPPED, "TELEGRAM_"), **extra)


def _config(tmp_path: Path, bots: str, *, level: str = "INFO") -> Path:
    path = tmp_path / "personabot.toml"
    path.write_text(
        f"""
[storage]
url = "sqlite:///{tmp_path / "bots.sqlite3"}"

[llm]
provider = "offline"

[queue]
debounce_seconds = 0.3
max_wait_seconds = 2
scan_interval_seconds = 0.2
shutdown_grace_seconds = 2

[logging]
level = "{level}"

[[personas]]
id = "mira"
name = "Mira"
system = "You are Mira."
first_message = ["Hi, I'm Mira."]

[[personas]]
id = "sasha"
name = "Sasha"
system = "You are Sasha."
first_message = ["Hey, Sasha here."]
{bots}"""
    )
    return path


@contextlib.asynccontextmanager
async def personabot_run(
    tmp_path: Path, config: Path, env: dict[str, str]
) -> AsyncIterator[Running]:
    """``python -m bot run``; on exit SIGTERM, and it must stop cleanly (exit code 0)."""
    with (tmp_path / "out.log").open("wb") as out, (tmp_path / "err.log").open("wb") as err:
        proc = await spawn(
            sys.executable, "-m", "bot", "run", "--config", str(config),
            cwd=tmp_path, env=env, stdout=out, stderr=err,
        )  # fmt: skip
        try:
            yield proc
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
            code = await asyncio.wait_for(proc.wait(), timeout=20)
    assert code == 0, (tmp_path / "err.log").read_text()


def _db(tmp_path: Path) -> sqlite3.Connection:
    return sqlite3.connect(tmp_path / "bots.sqlite3")


def _settled(tmp_path: Path) -> bool:
    """Nothing pending or armed in the store (read while the bot runs: WAL allows it)."""
    with contextlib.closing(_db(tmp_path)) as db, contextlib.suppress(sqlite3.OperationalError):
        pending = db.execute("SELECT COUNT(*) FROM messages WHERE pending = 1").fetchone()
        timers = db.execute("SELECT COUNT(*) FROM timers").fetchone()
        return pending == (0,) and timers == (0,)
    return False


async def test_personabot_run_hosts_two_telegram_bots(tmp_path: Path) -> None:
    """One ``personabot run`` process polling for two bots (two personas, two tokens).

    - Mira: a message gets one reply; three rapid messages get one reply; /new opens session 2.
    - Sasha: the same user (same private chat id) is another conversation; a failed getUpdates
      and a send rejected for its entities are logged with the chat, then recovered from.
    - The tokens live in variables the CLI's log filter does not know (``MIRA_TG``), and a
      proxy echoes request paths in its errors: still no token in the output or the database.
    """
    async with FakeTelegramAPI() as api:
        api.add_bot(MIRA, "mira_bot")
        api.add_bot(SASHA, "sasha_bot")
        bots = "".join(
            f'\n[[bots]]\nplatform = "telegram"\npersona = "{persona}"\ntoken_env = "{var}"\n'
            f'api_server = "{api.base_url}"\n'
            for persona, var in (("mira", "MIRA_TG"), ("sasha", "SASHA_TG"))
        )
        config = _config(tmp_path, bots, level="DEBUG")
        api.fail_next("getUpdates", status=500, description=f"failed /bot{SASHA}/x", token=SASHA)
        api.fail_next(
            "sendMessage",
            status=400,
            description=f"Bad Request: can't parse entities: bad tag in /bot{SASHA}/x",
            token=SASHA,
        )
        chat = TgChat.private(USER)
        async with personabot_run(tmp_path, config, _env(MIRA_TG=MIRA, SASHA_TG=SASHA)):
            await api.wait_for(lambda: api.polls_started(MIRA), within=40, what="polling")
            api.push_message(SASHA, chat, USER, "hi Sasha")
            api.push_message(MIRA, chat, USER, "hello")
            await api.wait_for(lambda: api.sent_messages(MIRA), what="the first reply")
            for text in ("one", "two", "three"):
                api.push_message(MIRA, chat, USER, text)
            await api.wait_for(lambda: len(api.sent_messages(MIRA)) == 2, what="the burst reply")
            await api.wait_for(lambda: _settled(tmp_path), what="the store to settle")
            api.push_message(MIRA, chat, USER, "/new")
            await api.wait_for(lambda: len(api.sent_messages(MIRA)) == 3, what="the /new answer")
            await api.wait_for(lambda: api.sent_messages(SASHA), what="Sasha's reply")
        replies = [c.visible_text for c in api.sent_messages(MIRA)]
        assert replies[0].startswith("[offline model] You said: hello")
        assert replies[1].startswith("[offline model] You said: one / two / three")
        assert replies[2].startswith("New session started (#2)")
        assert len(replies) == 3
        assert {c["command"] for c in api.commands(MIRA)} >= {"new", "help"}
        (sasha_reply,) = api.sent_messages(SASHA)
        assert "You said: hi Sasha" in sasha_reply.visible_text
        assert sasha_reply.parse_mode is None  # the plain-text fallback
    with contextlib.closing(_db(tmp_path)) as db:
        sessions = db.execute(
            "SELECT c.bot, c.chat_id, s.session_no, s.status FROM sessions s "
            "JOIN conversations c ON c.id = s.conversation_id ORDER BY c.bot, s.session_no"
        ).fetchall()
        users = db.execute(
            "SELECT author_id, display_name, text FROM messages m JOIN conversations c "
            "ON c.id = m.conversation_id WHERE role = 'user' AND c.bot = 'telegram-mira' "
            "ORDER BY m.id"
        ).fetchall()
    assert sessions == [
        ("telegram-mira", "4242", 1, "closed"),
        ("telegram-mira", "4242", 2, "open"),
        ("telegram-sasha", "4242", 1, "open"),
    ]
    assert users == [("4242", "Sasha", t) for t in ("hello", "one", "two", "three")]
    err = (tmp_path / "err.log").read_text()
    assert "getUpdates failed" in err  # logged with the token scrubbed by the session
    assert "chat 4242 rejected the formatting" in err
    for token in (MIRA, SASHA):
        secret = token.split(":")[1]
        for path in tmp_path.iterdir():
            assert secret.encode() not in path.read_bytes(), path.name


async def test_personabot_run_gives_a_stranger_nothing_but_the_denied_reply(
    tmp_path: Path,
) -> None:
    """Issue 14 acceptance, through the config and ``personabot run``: a person outside
    ``allow_users`` gets nothing from /start or any command (nor from a message), only the
    denied reply, once; nothing of theirs is stored. The permitted person is greeted, through
    the outbox."""
    stranger = TgUser(6666, "Eve")
    async with FakeTelegramAPI() as api:
        api.add_bot(MIRA, "mira_bot")
        bots = (
            f'\n[[bots]]\nplatform = "telegram"\npersona = "mira"\ntoken_env = "MIRA_TG"\n'
            f'api_server = "{api.base_url}"\n'
        )
        access = f'\n[access]\nallow_users = ["{USER.id}"]\ndenied_reply = "Private bot."\n'
        config = _config(tmp_path, access + bots)
        async with personabot_run(tmp_path, config, _env(MIRA_TG=MIRA)):
            await api.wait_for(lambda: api.polls_started(MIRA), within=40, what="polling")
            for text in ("/start", "/help", "/new", "/memory", "/export", "hello", "/start"):
                api.push_message(MIRA, TgChat.private(stranger), stranger, text)
            api.push_message(MIRA, TgChat.private(USER), USER, "/start")
            # Updates are handled one at a time, in order: the stranger's all came first.
            await api.wait_for(
                lambda: api.sent_messages(MIRA, USER.id), within=30, what="the greeting"
            )
            await api.wait_for(lambda: _settled(tmp_path), what="the store to settle")
        to_stranger = [c.visible_text for c in api.sent_messages(MIRA, stranger.id)]
        assert to_stranger == ["Private bot."]
        assert [c.visible_text for c in api.sent_messages(MIRA, USER.id)] == ["Hi, I'm Mira."]
    with contextlib.closing(_db(tmp_path)) as db:
        chats = db.execute("SELECT chat_id FROM conversations").fetchall()
        outbox = db.execute("SELECT reply_message_id, status, text FROM outbox").fetchall()
        assert db.execute("SELECT COUNT(*) FROM messages").fetchone() == (0,)
    assert chats == [(str(USER.id),)]
    assert outbox == [(0, "sent", "")]
