"""``personabot run`` as a real process, hosting a Discord bot against the fake Discord server.

The bot process runs the real discord.py client, the real SQLite store and the offline model;
the test plays the Discord users through :class:`tests.fakes.discord_api.FakeDiscord`. No
discord.py import happens in this process, so no warning filter is needed here.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sqlite3
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.fakes.discord_api import FakeDiscord
from tests.processes import Running, clean_env, spawn

TOKEN = "MTIzNDU2Nzg5MDEyMzQ1Njc4.GfAkEt.discord-bot-token-that-must-never-be-logged"
OFFLINE = "[offline model] You said:"


@dataclass
class BotProcess:
    """A running ``personabot run`` and what it printed once stopped."""

    proc: Running
    db: Path
    output: list[str] = field(default_factory=list)

    def query(self, sql: str, args: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        """Read the bot's database (read-only; the bot keeps writing meanwhile)."""
        with contextlib.closing(sqlite3.connect(f"file:{self.db}?mode=ro", uri=True)) as db:
            return db.execute(sql, args).fetchall()

    async def until(self, check: Callable[[], bool], within: float = 15.0) -> None:
        """Poll the database (locked reads are retried) until ``check()`` holds."""
        async with asyncio.timeout(within):
            while True:
                with contextlib.suppress(sqlite3.OperationalError):
                    if self.db.exists() and check():
                        return
                await asyncio.sleep(0.05)

    async def quiet(self) -> None:
        """Wait until nothing is pending: no timer armed, every recorded reply sent.

        Once this holds, the bot will send nothing more unless new input arrives.
        """
        await self.until(
            lambda: (
                self.query("SELECT COUNT(*) FROM timers") == [(0,)]
                and self.query("SELECT COUNT(*) FROM outbox WHERE status != 'sent'") == [(0,)]
            )
        )


def _config(tmp_path: Path, fake: FakeDiscord) -> Path:
    path = tmp_path / "personabot.toml"
    path.write_text(
        f"""
[storage]
url = "sqlite:///personabot.sqlite3"

[llm]
provider = "offline"

[queue]
debounce_seconds = 0.2
max_wait_seconds = 2.0
scan_interval_seconds = 0.2
shutdown_grace_seconds = 1.0

[logging]
level = "DEBUG"

[[bots]]
id = "mira-discord"
platform = "discord"
persona = "companion"
api_base = "{fake.api_base}"
gateway_url = "{fake.gateway_url}"
"""
    )
    return path


@contextlib.asynccontextmanager
async def personabot_run(tmp_path: Path, fake: FakeDiscord) -> AsyncIterator[BotProcess]:
    """Start ``personabot run``; on exit SIGTERM it, require exit 0 and no leaked token."""
    env = clean_env(DISCORD_BOT_TOKEN=TOKEN)
    proc = await spawn(
        sys.executable, "-m", "bot", "run", "--config", str(_config(tmp_path, fake)),
        cwd=tmp_path, env=env, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    bot = BotProcess(proc, tmp_path / "personabot.sqlite3")
    try:
        await fake.wait_identified(within=20)
    except TimeoutError:
        proc.kill()
        _, err = await proc.communicate()
        raise AssertionError(f"personabot run never connected:\n{err.decode()}") from None
    try:
        yield bot
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        out, err = await asyncio.wait_for(proc.communicate(), timeout=20)
        bot.output[:] = [out.decode(), err.decode()]
    stdout, stderr = bot.output
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr, stderr
    for text in (stdout, stderr):
        assert TOKEN not in text
        assert TOKEN.split(".")[0] not in text  # not even the first part of the token
    for path in tmp_path.iterdir():
        assert TOKEN.encode() not in path.read_bytes()


def _offline_replies(fake: FakeDiscord, channel: int) -> list[str]:
    return [m["content"] for m in fake.bot_messages(channel) if OFFLINE in m["content"]]


async def test_dm_gets_one_reply(tmp_path: Path) -> None:
    """A DM is answered once, as plain text, pinging nobody, with the token never shown."""
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        async with personabot_run(tmp_path, fake) as bot:
            dm = fake.dm(ada)
            await fake.post(dm, ada, "hello there")
            await fake.wait_for_bot_messages(dm, 1)
            await bot.quiet()
            replies = _offline_replies(fake, dm)
            assert len(replies) == 1
            assert replies[0].startswith(f"{OFFLINE} hello there\n")
            post = fake.posts[-1]
            assert post.body["allowed_mentions"] == {"parse": []}  # no users, roles, everyone
            assert "message_reference" not in post.body  # no quote in a private chat
            assert post.body["nonce"] == "1-0" and post.body["enforce_nonce"] is True
            keys = bot.query("SELECT bot, platform, chat_id, thread_id FROM conversations")
            assert keys == [("mira-discord", "discord", str(dm), "")]
            assert bot.query("SELECT author_id, display_name FROM messages WHERE role='user'") == [
                (str(ada.id), "Ada")
            ]
        assert fake.identifies[0]["intents"] & (1 << 15)  # message content was requested


async def test_three_rapid_messages_get_one_reply(tmp_path: Path) -> None:
    """A burst inside the debounce window becomes one turn and one reply, in order."""
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        async with personabot_run(tmp_path, fake) as bot:
            dm = fake.dm(ada)
            for text in ("one", "two", "three"):
                await fake.post(dm, ada, text)
            await fake.wait_for_bot_messages(dm, 1)
            await bot.quiet()
            replies = _offline_replies(fake, dm)
            assert len(replies) == 1
            assert replies[0].startswith(f"{OFFLINE} one / two / three\n")


async def test_new_command_opens_a_new_session(tmp_path: Path) -> None:
    """``/new`` is answered at once and the next message starts session 2 with no history."""
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        async with personabot_run(tmp_path, fake) as bot:
            dm = fake.dm(ada)
            await fake.post(dm, ada, "my name is Ada")
            await fake.wait_for_bot_messages(dm, 1)
            await fake.post(dm, ada, "/new")
            await fake.wait_for_bot_messages(dm, 2)
            assert fake.bot_messages(dm)[1]["content"].startswith("New session started (#2)")
            await fake.post(dm, ada, "who am I?")
            await fake.wait_for_bot_messages(dm, 3)
            await bot.quiet()
            last = fake.bot_messages(dm)[2]["content"]
            assert last.startswith(f"{OFFLINE} who am I?")
            assert "0 earlier messages in the window" in last  # session 1 is not carried over
            assert bot.query("SELECT session_no, status FROM sessions ORDER BY session_no") == [
                (1, "closed"),
                (2, "open"),
            ]


async def test_guild_mention_gating_context_and_threads(tmp_path: Path) -> None:
    """Unmentioned guild messages are stored as context only; a thread is its own conversation."""
    async with FakeDiscord(token=TOKEN) as fake:
        ada, bob = fake.add_user("Ada"), fake.add_user("Bob")
        guild = fake.add_guild("Cafe")
        thread = fake.add_thread(guild, guild.general, "plans")
        async with personabot_run(tmp_path, fake) as bot:
            await fake.post(guild.general, bob, "the cake is in the fridge")
            await bot.until(lambda: bot.query("SELECT COUNT(*) FROM messages") == [(1,)])
            await bot.quiet()  # stored, but nothing armed: no reply will come
            assert fake.bot_messages(guild.general) == []

            asked = await fake.post(guild.general, ada, "where is the cake?", mention_bot=True)
            await fake.wait_for_bot_messages(guild.general, 1)
            await fake.post(thread, ada, "and in here?", mention_bot=True)
            await fake.wait_for_bot_messages(thread, 1)
            await bot.quiet()

            channel_reply = fake.bot_messages(guild.general)
            assert len(channel_reply) == 1
            # Bob's unmentioned line reached the model with Ada's mentioned turn.
            assert "the cake is in the fridge" in channel_reply[0]["content"]
            assert "@Mira where is the cake?" in channel_reply[0]["content"]
            reference = channel_reply[0]["message_reference"]
            assert reference["message_id"] == int(asked["id"])
            assert reference["fail_if_not_exists"] is False
            thread_reply = fake.bot_messages(thread)
            assert len(thread_reply) == 1
            # A group turn names its author: '"Ada" (user "..."):' then her indented line.
            assert thread_reply[0]["content"].startswith(f'{OFFLINE} "Ada" (user ')
            assert "): / @Mira and in here?\n" in thread_reply[0]["content"]
            assert "fridge" not in thread_reply[0]["content"]  # the channel's context stays there
            conversations = bot.query("SELECT chat_id, thread_id FROM conversations ORDER BY id")
            assert conversations == [(str(guild.general), ""), (str(guild.general), str(thread))]
            assert all(FakeDiscord.pings(p.body) == set() for p in fake.posts)


async def test_a_forward_in_a_dm_is_answered_once(tmp_path: Path) -> None:
    """A forwarded message (an empty message with a snapshot) was dropped without a word;
    now it is stored and answered, once."""
    async with FakeDiscord(token=TOKEN) as fake:
        ada, bob = fake.add_user("Ada"), fake.add_user("Bob")
        async with personabot_run(tmp_path, fake) as bot:
            dm = fake.dm(ada)
            source = await fake.post(fake.hidden_channel(), bob, "moved to 5pm", dispatch=False)
            forward = await fake.forward(dm, ada, source)
            await fake.wait_for_bot_messages(dm, 1)
            await bot.quiet()
            assert len(_offline_replies(fake, dm)) == 1
            stored = bot.query("SELECT platform_message_id FROM messages WHERE role = 'user'")
            assert stored == [(forward["id"],)]


async def test_an_edit_that_now_mentions_the_bot_gets_one_reply(tmp_path: Path) -> None:
    """A guild message kept as context, edited to mention the bot, is answered, once; an
    unmentioned edit before it asked for nothing, and an edit after the answer changes nothing."""
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        guild = fake.add_guild("Cafe")
        async with personabot_run(tmp_path, fake) as bot:
            message = await fake.post(guild.general, ada, "what time is it")
            await fake.edit(message, "what time is it?")
            await bot.until(
                lambda: bot.query("SELECT text FROM messages") == [("what time is it?",)]
            )
            await bot.quiet()
            assert fake.bot_messages(guild.general) == []
            await fake.edit(message, "what time is it?", mention_bot=True)
            await fake.wait_for_bot_messages(guild.general, 1)
            await bot.quiet()
            await fake.edit(message, "what time is it now?", mention_bot=True)
            # A later message proves the last edit was handled (gateway order).
            await fake.post(guild.general, ada, "thanks")
            await bot.until(lambda: bot.query("SELECT COUNT(*) FROM messages") == [(3,)])
            await bot.quiet()
            replies = _offline_replies(fake, guild.general)
    assert len(replies) == 1
    assert replies[0].startswith(f"{OFFLINE} ") and "@Mira what time is it?" in replies[0]
