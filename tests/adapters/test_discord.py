"""The Discord adapter: the real discord.py client against the fake Discord server.

Two set-ups: ``inbound_only`` runs the adapter with a recording handler (what the adapter makes
of Discord events); ``with_runtime`` runs it inside the real runtime (SQLite store, queue,
pipeline, router) with a model from ``tests.fakes.llm``, as ``personabot run`` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import sqlite3
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from bot.app.build import Runtime, runtime
from bot.config import DiscordBotSettings, Secrets, Settings
from bot.core.errors import AdapterError, ConfigError
from bot.core.events import ConversationKey, Inbound, Reply
from bot.core.llm import BaseLLM
from bot.llm.offline import OfflineLLM
from tests.fakes.discord_api import FakeDiscord, FakeUser
from tests.fakes.llm import GatedLLM

# discord.py 2.7 imports the standard library's ``audioop`` (for voice), which Python 3.11
# deprecates on import. That happens while this module is collected, before any ``pytestmark``
# filter applies, so the one warning is ignored here, precisely, around the first import.
with warnings.catch_warnings():
    warnings.filterwarnings(
        "ignore", message="'audioop' is deprecated", category=DeprecationWarning
    )
    from adapters.discord.adapter import DiscordAdapter, create_adapter, nonce_for
    from adapters.discord.client import error_text, event_name
    from adapters.discord.endpoints import SharedEndpoints

TOKEN = "MTIzNDU2Nzg5MDEyMzQ1Njc4.GfAkEt.in-process-token-never-logged"
COMMANDS = (("new", "start over"), ("help", "list the commands"))


@pytest.fixture(autouse=True)
def _endpoints_released() -> Iterator[None]:
    """Every test closes its adapters: discord.py's endpoints are process-wide state."""
    yield
    leaked = SharedEndpoints.holders()
    for _ in range(leaked):
        SharedEndpoints.release()  # keep one failure from failing every later test
    assert leaked == 0, "a test left a Discord adapter open"


class RecordingHandler:
    """An InboundHandler that keeps every event (a real implementation, not a mock)."""

    commands = COMMANDS
    admin_commands: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.events: list[Inbound] = []
        self.rejections: list[str] = []
        self._changed = asyncio.Condition()

    async def __call__(self, inbound: Inbound) -> None:
        async with self._changed:
            self.events.append(inbound)
            self._changed.notify_all()

    def rejected(self, platform: str, bot: str, kind: str) -> None:
        self.rejections.append(kind)

    def batch(self) -> contextlib.AbstractAsyncContextManager[None]:
        return contextlib.nullcontext()

    async def wait(self, count: int, within: float = 10.0) -> list[Inbound]:
        """Wait until ``count`` events arrived."""
        async with asyncio.timeout(within), self._changed:
            await self._changed.wait_for(lambda: len(self.events) >= count)
        return self.events

    async def wait_for_message(self, message_id: str, within: float = 10.0) -> list[Inbound]:
        """Wait until the event of message ``message_id`` arrived; every event so far."""

        def arrived() -> bool:
            return any(e.platform_message_id == message_id for e in self.events)

        async with asyncio.timeout(within), self._changed:
            await self._changed.wait_for(arrived)
        return self.events

    async def next_event(self, fake: FakeDiscord, channel: int, author: FakeUser) -> Inbound:
        """Wait for the event of a sentinel message posted now.

        Events are handled in gateway order, so once the sentinel is in, everything posted
        before it was handled (or ignored) too.
        """
        seen = len(self.events)
        sentinel = await fake.post(channel, author, "sentinel")
        events = await self.wait(seen + 1)
        assert events[-1].platform_message_id == sentinel["id"]
        return events[-1]


def _entry(fake: FakeDiscord, **extra: Any) -> DiscordBotSettings:
    data = {
        "platform": "discord",
        "persona": "companion",
        "id": "mira",
        "api_base": fake.api_base,
        "gateway_url": fake.gateway_url,
        **extra,
    }
    return DiscordBotSettings(**data)


def _adapter(fake: FakeDiscord, **extra: Any) -> DiscordAdapter:
    settings = Settings()
    return create_adapter(
        _entry(fake, **extra), settings.persona(), Secrets({"DISCORD_BOT_TOKEN": TOKEN})
    )


@contextlib.asynccontextmanager
async def inbound_only(
    fake: FakeDiscord, **extra: Any
) -> AsyncIterator[tuple[DiscordAdapter, RecordingHandler]]:
    """The adapter connected to the fake, handing events to a recording handler."""
    adapter = _adapter(fake, **extra)
    async with connected_to(fake, adapter) as handler:
        yield adapter, handler


@contextlib.asynccontextmanager
async def connected_to(
    fake: FakeDiscord, adapter: DiscordAdapter
) -> AsyncIterator[RecordingHandler]:
    """Run ``adapter`` on the fake's gateway for the block, its events recorded; then close it."""
    handler = RecordingHandler()
    before = fake.sessions  # the session this adapter starts, not one that just ended
    task = asyncio.create_task(adapter.run(handler))
    try:
        await fake.wait_identified(after=before)
        yield handler
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await adapter.aclose()


@dataclass
class Running:
    """The adapter inside a wired runtime on a real SQLite file."""

    fake: FakeDiscord
    adapter: DiscordAdapter
    rt: Runtime
    db: Path

    def rows(self, sql: str, args: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        """Read the database directly (what an operator would see)."""
        with contextlib.closing(sqlite3.connect(self.db)) as db:
            return db.execute(sql, args).fetchall()

    async def until(self, check: Callable[[], bool], within: float = 10.0) -> None:
        """Poll until ``check()`` holds."""
        async with asyncio.timeout(within):
            while True:
                if check():
                    return
                await asyncio.sleep(0.02)

    async def quiet(self) -> None:
        """Wait until no timer is armed, no turn runs and every recorded reply was handled."""
        await self.until(
            lambda: (
                self.rt.scheduler.active == 0
                and self.rows("SELECT COUNT(*) FROM timers") == [(0,)]
                and self.rows("SELECT COUNT(*) FROM outbox WHERE status = 'pending'") == [(0,)]
            )
        )


@contextlib.asynccontextmanager
async def with_runtime(
    fake: FakeDiscord,
    tmp_path: Path,
    llm: BaseLLM | None = None,
    *,
    busy_timeout_ms: int = 5000,
    access: dict[str, Any] | None = None,
    **extra: Any,
) -> AsyncIterator[Running]:
    """Adapter + runtime, stopped in order: input first, then turns, then the connection."""
    db = tmp_path / "personabot.sqlite3"
    settings = Settings.model_validate(
        {
            "access": access or {},
            "storage": {"url": f"sqlite:///{db}", "busy_timeout_ms": busy_timeout_ms},
            "llm": {"provider": "offline"},
            "queue": {
                "debounce_seconds": 0.2,
                "max_wait_seconds": 2.0,
                "scan_interval_seconds": 0.2,
                "shutdown_grace_seconds": 1.0,
            },
        }
    )
    adapter = _adapter(fake, **extra)
    persona = settings.persona()
    try:
        async with runtime(
            settings, llm=llm or OfflineLLM(), adapters={"mira": (persona, adapter)}
        ) as rt:
            before = fake.sessions
            task = asyncio.create_task(adapter.run(rt.router))
            try:
                await fake.wait_identified(after=before)
                yield Running(fake, adapter, rt, db)
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
    finally:
        await adapter.aclose()


def _key(chat: int, thread: int | None = None) -> ConversationKey:
    return ConversationKey("discord", str(chat), None if thread is None else str(thread), "mira")


# ---------------------------------------------------------------------- normalization


async def test_dm_channel_and_thread_keys() -> None:
    """DM, guild channel and thread map to the three key shapes of docs/architecture.md#keys."""
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        guild = fake.add_guild("Cafe")
        thread = fake.add_thread(guild, guild.general, "plans")
        async with inbound_only(fake) as (_, handler):
            dm = fake.dm(ada)
            await fake.post(dm, ada, "in private")
            await fake.post(guild.general, ada, "in the channel")
            await fake.post(thread, ada, "in the thread")
            events = await handler.wait(3)
    assert [(e.conversation, e.is_private, e.triggers_reply) for e in events] == [
        (_key(dm), True, True),
        (_key(guild.general), False, False),
        (_key(guild.general, thread), False, False),
    ]
    assert {(e.author_id, e.display_name) for e in events} == {(str(ada.id), "Ada")}
    assert [e.text for e in events] == ["in private", "in the channel", "in the thread"]


async def test_thread_unknown_to_the_cache_is_looked_up() -> None:
    """A thread created after connecting is resolved over REST, so its key has its parent."""
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        guild = fake.add_guild("Cafe")
        async with inbound_only(fake) as (_, handler):
            late = fake.add_thread(guild, guild.general, "created later")
            await fake.post(late, ada, "hello", mention_bot=True)
            await fake.post(late, ada, "again", mention_bot=True)
            events = await handler.wait(2)
    assert {e.conversation for e in events} == {_key(guild.general, late)}


async def test_mentions_replies_and_commands_trigger_in_guilds() -> None:
    """Only a mention (user or own role), a reply to the bot or a command asks for a reply."""
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        guild = fake.add_guild("Cafe")
        other_role = fake.add_role(guild, "Moderators")
        async with inbound_only(fake) as (adapter, handler):
            ch = guild.general
            await adapter.send(Reply(_key(ch), "a message from the bot"))
            bot_message = (await fake.wait_for_bot_messages(ch, 1))[0]
            await fake.post(ch, ada, "just chatting")
            await fake.post(ch, ada, "hi", mention_bot=True)
            await fake.post(ch, ada, "role ping", mention_roles=(guild.bot_role,))
            await fake.post(ch, ada, "mods ping", mention_roles=(other_role,))
            await fake.post(ch, ada, "answering you", reply_to=bot_message)
            await fake.post(ch, ada, "/help")
            await fake.post(ch, ada, "/new", mention_bot=True)
            await fake.post(ch, ada, "/shrug not ours")
            await fake.post(ch, ada, "@everyone look")
            events = await handler.wait(9)
    flags = [(e.text, e.triggers_reply, e.mentions_bot, e.reply_to_bot) for e in events]
    assert flags == [
        ("just chatting", False, False, False),
        ("@Mira hi", True, True, False),
        ("@Mira role ping", True, True, False),
        ("@Moderators mods ping", False, False, False),
        ("answering you", True, False, True),
        ("/help", True, False, False),
        ("/new", True, True, False),  # the leading mention is dropped so the command parses
        ("/shrug not ours", False, False, False),
        ("@everyone look", False, False, False),  # @everyone is not a mention of the bot
    ]
    assert not any("\u200b" in e.text for e in events)  # stored as written, nothing inserted


async def test_group_trigger_all_answers_every_guild_message() -> None:
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        guild = fake.add_guild("Cafe")
        async with inbound_only(fake, group_trigger="all") as (_, handler):
            await fake.post(guild.general, ada, "no mention needed")
            (event,) = await handler.wait(1)
    assert event.triggers_reply and not event.mentions_bot


async def test_bots_itself_and_other_guilds_are_ignored() -> None:
    """Other bots, the bot's own echoed messages and guilds off the allow-list produce nothing."""
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        robot = fake.add_user("Robot", bot=True)
        allowed, other = fake.add_guild("Cafe"), fake.add_guild("Elsewhere")
        async with inbound_only(fake, guilds=[allowed.id]) as (adapter, handler):
            await fake.post(allowed.general, robot, "beep", mention_bot=True)
            await adapter.send(Reply(_key(allowed.general), "my own words"))
            await fake.wait_for_bot_messages(allowed.general, 1)  # echoed on the gateway
            await fake.post(other.general, ada, "hello?", mention_bot=True)
            sentinel = await handler.next_event(fake, allowed.general, ada)
    assert handler.events == [sentinel]


async def test_edit_and_delete_events() -> None:
    """Edits carry the new text (only when it changed); deletions carry the message id."""
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        guild = fake.add_guild("Cafe")
        async with inbound_only(fake) as (_, handler):
            message = await fake.post(guild.general, ada, "helo")
            await fake.edit(message, "hello")
            await fake.edit(message, "hello")  # e.g. an embed unfurled: same text, no event
            await fake.delete(message)
            events = await handler.wait(3)
            sentinel = await handler.next_event(fake, guild.general, ada)
    assert [(e.kind, e.text, e.platform_message_id) for e in events[:3]] == [
        ("message", "helo", message["id"]),
        ("edit", "hello", message["id"]),
        ("delete", "", message["id"]),
    ]
    assert events[2].conversation == _key(guild.general)
    assert events[3] == sentinel


async def test_uncached_update_is_an_edit_only_when_the_author_edited() -> None:
    """After a restart nothing is cached: a link preview is no edit, a real edit still is."""
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        guild = fake.add_guild("Cafe")
        async with inbound_only(fake) as (_, handler):
            message = await fake.post(guild.general, ada, "see https://example.org")
            await handler.wait(1)
        async with inbound_only(fake) as (_, handler):
            await fake.unfurl(message)
            await fake.edit(message, "see https://example.org please")
            (event,) = await handler.wait(1)
            sentinel = await handler.next_event(fake, guild.general, ada)
    assert (event.kind, event.text) == ("edit", "see https://example.org please")
    assert handler.events == [event, sentinel]


# ---------------------------------------------------------------------- sending


def _long_reply() -> str:
    code = "\n".join(f"    total_{i} = compute(values[{i}]) + offset_{i}" for i in range(90))
    prose = " ".join(f"Sentence number {i} explains one more step." for i in range(40))
    return f"Here is the whole script.\n\n```python\ndef main():\n{code}\n```\n\n{prose}"


def _words(text: str) -> list[str]:
    return text.replace("```python", " ").replace("```", " ").split()


async def test_long_reply_is_split_into_fenced_chunks(tmp_path: Path) -> None:
    """A 5,000-character reply with a long code block: 3+ messages, each <= 2000, none lost."""
    reply = _long_reply()
    assert len(reply) > 5000
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        llm = GatedLLM(answer=lambda _: reply)
        async with with_runtime(fake, tmp_path, llm) as bot:
            dm = fake.dm(ada)
            await fake.post(dm, ada, "show me the script")
            await bot.until(lambda: bot.rows("SELECT status FROM outbox") == [("sent",)])
            chunks = [m["content"] for m in fake.bot_messages(dm)]
            nonces = [p.body["nonce"] for p in fake.posts]
    assert len(chunks) >= 3
    assert all(len(c) <= 2000 for c in chunks)
    assert all(c.count("```") % 2 == 0 for c in chunks)  # every chunk closes what it opens
    assert _words(" ".join(chunks)) == _words(reply)
    assert nonces == [nonce_for(1, i) for i in range(len(chunks))]  # one nonce per chunk


async def test_model_output_pings_nobody(tmp_path: Path) -> None:
    """@everyone, @here, user and role mentions in model output are sent but notify no one."""
    text = "Hey @everyone and @here, ask <@123> or <@&456> or <@!789>."
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        guild = fake.add_guild("Cafe")
        llm = GatedLLM(answer=lambda _: text)
        async with with_runtime(fake, tmp_path, llm) as bot:
            await fake.post(guild.general, ada, "say it", mention_bot=True)
            (sent,) = await fake.wait_for_bot_messages(guild.general, 1)
            await bot.quiet()
    post = fake.posts[-1]
    assert sent["content"] == text  # nothing rewritten: the protection is allowed_mentions
    assert post.body["allowed_mentions"] == {"parse": [], "replied_user": False}
    assert FakeDiscord.pings(post.body) == set()
    assert FakeDiscord.pings({"content": text}) != set()  # the check itself can fail


async def test_a_stranger_gets_only_the_denied_reply_and_answers_are_outbox_rows(
    tmp_path: Path,
) -> None:
    """Issue 14.2: someone outside allow_users gets the denied reply once for every command,
    pinging nobody, and nothing of theirs is stored; a permitted person's command answers are
    outbox rows, posted with the row's nonce (a re-send after a crash is not posted twice)."""
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        eve = fake.add_user("Eve")
        access = {"allow_users": [ada.id], "denied_reply": "Private bot, @everyone."}
        async with with_runtime(fake, tmp_path, access=access) as bot:
            for text in ("/start", "/help", "/new", "/memory", "/export", "/nope"):
                await fake.post(fake.dm(eve), eve, text)
            await fake.post(fake.dm(ada), ada, "/start")
            await fake.post(fake.dm(ada), ada, "/help")
            # Events are handled one at a time in arrival order: Eve's all came first.
            await fake.wait_for_bot_messages(fake.dm(ada), 2)
            await bot.quiet()
            rows = bot.rows("SELECT id, reply_message_id, status, text FROM outbox ORDER BY id")
            chats = bot.rows("SELECT chat_id FROM conversations")
            assert bot.rows("SELECT COUNT(*) FROM messages") == [(0,)]
    assert [m["content"] for m in fake.bot_messages(fake.dm(eve))] == ["Private bot, @everyone."]
    assert all(FakeDiscord.pings(post.body) == set() for post in fake.posts)
    assert chats == [(str(fake.dm(ada)),)]  # the stranger's chat is stored nowhere
    assert [row[1:] for row in rows] == [(0, "sent", ""), (0, "sent", "")]
    answers = [p for p in fake.posts if p.body.get("content", "") != "Private bot, @everyone."]
    assert [p.body["nonce"] for p in answers] == [f"{row[0]}-0" for row in rows]


async def test_rate_limited_send_arrives_once_after_the_wait(tmp_path: Path) -> None:
    """A 429 on send: discord.py waits ``retry_after`` and retries; one message arrives."""
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        async with with_runtime(fake, tmp_path) as bot:
            dm = fake.dm(ada)
            fake.fail_next_send(dm, 429, retry_after=0.4)
            await fake.post(dm, ada, "hello")
            await fake.wait_for_bot_messages(dm, 1)
            await bot.quiet()
            assert bot.rows("SELECT status, attempts FROM outbox") == [("sent", 1)]
    assert len(fake.bot_messages(dm)) == 1
    first, second = fake.posts
    assert (first.status, second.status) == (429, 200)
    assert second.at - first.at >= 0.4
    assert first.body["nonce"] == second.body["nonce"]


async def test_resent_outbox_row_is_not_posted_twice() -> None:
    """The same outbox id sent again (crash recovery) returns the posted message, no new one."""
    async with FakeDiscord(token=TOKEN) as fake:
        guild = fake.add_guild("Cafe")
        async with inbound_only(fake) as (adapter, _):
            assert adapter.idempotent_send
            text = "alpha " * 300 + "\n\n" + "beta " * 300  # two paragraphs: two chunks
            reply = Reply(_key(guild.general), text, outbox_id=42)
            await adapter.send(reply)
            await adapter.send(reply)
    assert len(fake.posts) == 4
    assert len(fake.bot_messages(guild.general)) == 2
    assert [p.body["nonce"] for p in fake.posts] == ["42-0", "42-1", "42-0", "42-1"]


async def test_send_works_before_the_gateway_connects() -> None:
    """Outbox recovery sends before ``run()``: the adapter logs in over REST by itself."""
    async with FakeDiscord(token=TOKEN) as fake:
        guild = fake.add_guild("Cafe")
        adapter = _adapter(fake)
        try:
            await adapter.send(Reply(_key(guild.general), "recovered reply", outbox_id=7))
        finally:
            await adapter.aclose()
    assert [m["content"] for m in fake.bot_messages(guild.general)] == ["recovered reply"]
    assert fake.sessions == 0  # no gateway session was needed


async def test_a_failing_event_does_not_stop_the_next_ones() -> None:
    class Flaky(RecordingHandler):
        async def __call__(self, inbound: Inbound) -> None:
            if inbound.text == "boom":
                raise RuntimeError("store is down")
            await super().__call__(inbound)

    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        adapter = _adapter(fake)
        handler = Flaky()
        task = asyncio.create_task(adapter.run(handler))
        try:
            await fake.wait_identified()
            dm = fake.dm(ada)
            await fake.post(dm, ada, "boom")
            await fake.post(dm, ada, "still listening")
            (event,) = await handler.wait(1)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await adapter.aclose()
    assert event.text == "still listening"


async def test_forbidden_marks_the_conversation_inactive(tmp_path: Path) -> None:
    """403 (DMs closed): DeliveryRefused, the reply is marked failed, the chat inactive."""
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        async with with_runtime(fake, tmp_path) as bot:
            dm = fake.dm(ada)
            fake.fail_next_send(dm, 403, code=50007, message="Cannot send messages to this user")
            await fake.post(dm, ada, "hello")
            await bot.until(lambda: bot.rows("SELECT status FROM outbox") == [("failed",)])
            assert not await bot.rt.store.conversation_active(_key(dm))
            (failure,) = bot.rows("SELECT failure FROM outbox")
    assert str(dm) in failure[0] and "Cannot send messages" in failure[0]


async def test_other_http_errors_name_the_channel() -> None:
    async with FakeDiscord(token=TOKEN) as fake:
        guild = fake.add_guild("Cafe")
        async with inbound_only(fake) as (adapter, _):
            fake.fail_next_send(guild.general, 400, code=50035, message="Invalid Form Body")
            with pytest.raises(AdapterError, match=str(guild.general)) as caught:
                await adapter.send(Reply(_key(guild.general), "hi"))
    assert type(caught.value) is AdapterError  # not DeliveryRefused: the chat stays active


async def test_typing_is_kept_alive_and_always_stopped(tmp_path: Path) -> None:
    """Typing starts while the model works and its task ends after, even when the body fails."""
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        llm = GatedLLM(gated=True)
        async with with_runtime(fake, tmp_path, llm) as bot:
            dm = fake.dm(ada)
            await fake.post(dm, ada, "think hard")
            await fake.wait_for(lambda: any(ch == dm for ch, _ in fake.typing))
            assert _typing_tasks() == 1
            # Typing starts before the prompt is built (photos may be fetched first): release
            # the model once it was called.
            await asyncio.wait_for(llm.started.wait(), 10)
            llm.release()
            await fake.wait_for_bot_messages(dm, 1)
            await bot.quiet()
            assert _typing_tasks() == 0

            async def crash_while_typing() -> None:
                async with bot.adapter.typing(_key(dm)):
                    await fake.wait_for(lambda: len(fake.typing) >= 2)
                    raise RuntimeError("model crashed")

            with pytest.raises(RuntimeError, match="model crashed"):
                await crash_while_typing()
            assert _typing_tasks() == 0


def _typing_tasks() -> int:
    return sum(
        1 for t in asyncio.all_tasks() if t.get_name().startswith("discord typing") and not t.done()
    )


# ---------------------------------------------------------------------- the queue's guarantees


async def test_duplicate_message_create_on_resume_is_answered_once(tmp_path: Path) -> None:
    """The gateway resumes and delivers an answered MESSAGE_CREATE again: no second reply."""
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        async with with_runtime(fake, tmp_path) as bot:
            dm = fake.dm(ada)
            message = await fake.post(dm, ada, "hello once")
            await fake.wait_for_bot_messages(dm, 1)
            await bot.quiet()
            before = fake.sessions
            await fake.reconnect(replay=[("MESSAGE_CREATE", message)])
            await fake.wait_identified(after=before)
            # A later message proves the replay was handled before we look (gateway order).
            await fake.post(dm, ada, "and now?")
            await fake.wait_for_bot_messages(dm, 2)
            await bot.quiet()
            user_rows = bot.rows("SELECT platform_message_id FROM messages WHERE role = 'user'")
    assert len(fake.resumes) == 1 and len(fake.identifies) == 1  # a real RESUME, not a new login
    replies = [m["content"] for m in fake.bot_messages(dm)]
    assert len(replies) == 2
    assert "hello once" in replies[0] and "hello once" not in replies[1]
    assert [r[0] for r in user_rows].count(message["id"]) == 1


async def test_a_command_delivered_again_on_resume_is_run_and_answered_once(
    tmp_path: Path,
) -> None:
    """The gateway replays an answered /new: no second session, no second answer (the
    answer's outbox row names the command it answers). In a guild the answer quotes it."""
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        guild = fake.add_guild("Cafe")
        async with with_runtime(fake, tmp_path) as bot:
            command = await fake.post(guild.general, ada, "/new")
            await fake.wait_for_bot_messages(guild.general, 1)
            await bot.quiet()
            before = fake.sessions
            await fake.reconnect(replay=[("MESSAGE_CREATE", command)])
            await fake.wait_identified(after=before)
            # A later command proves the replay was handled before we look (gateway order).
            await fake.post(guild.general, ada, "/help")
            await fake.wait_for_bot_messages(guild.general, 2)
            await bot.quiet()
            sessions = bot.rows("SELECT session_no FROM sessions")
    answers = fake.bot_messages(guild.general)
    assert [a["content"].split(" ", 2)[:2] for a in answers] == [
        ["New", "session"],
        ["Commands:\n/start", "-"],
    ]
    assert sessions == [(1,)]
    assert str(fake.posts[0].body["message_reference"]["message_id"]) == command["id"]


async def test_message_delete_removes_the_stored_message(tmp_path: Path) -> None:
    """MESSAGE_DELETE removes the message, also after a restart (nothing cached by discord.py)."""
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        guild = fake.add_guild("Cafe")
        thread = fake.add_thread(guild, guild.general, "plans")
        async with with_runtime(fake, tmp_path) as bot:
            gone = await fake.post(guild.general, ada, "delete me soon")
            kept = await fake.post(guild.general, ada, "keep me")
            later = await fake.post(thread, ada, "delete me after a restart")

            def ids() -> set[str]:
                return {r[0] for r in bot.rows("SELECT platform_message_id FROM messages")}

            await bot.until(lambda: len(ids()) == 3)
            await fake.delete(gone)
            await bot.until(lambda: gone["id"] not in ids())
            assert kept["id"] in ids()
        async with with_runtime(fake, tmp_path) as bot:
            await fake.delete(later)
            await bot.until(lambda: later["id"] not in ids())
            assert ids() == {kept["id"]}


async def test_with_allow_users_a_permitted_persons_deletion_removes_the_message(
    tmp_path: Path,
) -> None:
    """Issue 12.7: a delete event carries no author; the stored author authorises it."""
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        guild = fake.add_guild("Cafe")
        access = {"allow_users": [ada.id]}
        async with with_runtime(fake, tmp_path, access=access) as bot:
            gone = await fake.post(guild.general, ada, "delete me soon")
            kept = await fake.post(guild.general, ada, "keep me")

            def ids() -> set[str]:
                return {r[0] for r in bot.rows("SELECT platform_message_id FROM messages")}

            await bot.until(lambda: {gone["id"], kept["id"]} <= ids())
            await fake.delete(gone)
            await bot.until(lambda: gone["id"] not in ids())
            assert kept["id"] in ids()


async def test_edit_updates_an_unanswered_message(tmp_path: Path) -> None:
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        guild = fake.add_guild("Cafe")
        async with with_runtime(fake, tmp_path) as bot:
            message = await fake.post(guild.general, ada, "the meeting is at 3")

            def text() -> list[tuple[str]]:
                return bot.rows("SELECT text FROM messages WHERE role = 'user'")

            await bot.until(lambda: text() == [("the meeting is at 3",)])
            await fake.edit(message, "the meeting is at 4")
            await bot.until(lambda: text() == [("the meeting is at 4",)])


# ---------------------------------------------------------------------- intents and setup


async def test_without_message_content_intent_it_degrades_and_warns_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Discord refuses the privileged intent (4014): reconnect without it, warn clearly, once."""
    caplog.set_level(logging.WARNING, logger="personabot.discord")
    async with FakeDiscord(token=TOKEN, allow_message_content=False) as fake:
        ada = fake.add_user("Ada")
        guild = fake.add_guild("Cafe")
        async with inbound_only(fake) as (_, handler):
            await fake.post(guild.general, ada, "")  # what Discord sends without the intent
            await fake.post(guild.general, ada, "")
            await fake.post(guild.general, ada, "still heard", mention_bot=True)
            (event,) = await handler.wait(1)
    assert event.text == "@Mira still heard"
    intents = [i["intents"] & (1 << 15) for i in fake.identifies]
    assert intents == [1 << 15, 0]  # asked, refused, connected without it
    messages = [r.getMessage() for r in caplog.records if r.name == "personabot.discord"]
    assert sum("Message Content Intent is not enabled" in m for m in messages) == 1
    assert sum("arrived with empty content" in m for m in messages) == 1
    assert all("Developer Portal" in m for m in messages)


async def test_connected_reports_the_gateway_session() -> None:
    async with FakeDiscord(token=TOKEN) as fake:
        adapter = _adapter(fake)
        states = [adapter.connected]
        task = asyncio.create_task(adapter.run(RecordingHandler()))
        try:
            async with asyncio.timeout(10):  # discord.py fires READY ~2 s after the guilds
                while True:
                    if adapter.connected:
                        break
                    await asyncio.sleep(0.05)
            states.append(adapter.connected)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await adapter.aclose()
        states.append(adapter.connected)
    assert states == [False, True, False]


async def test_shard_settings_reach_identify() -> None:
    async with FakeDiscord(token=TOKEN) as fake, inbound_only(fake, shard_id=1, shard_count=2):
        pass
    assert fake.identifies[0]["shard"] == [1, 2]


async def test_bad_token_stops_run_with_a_clear_error() -> None:
    async with FakeDiscord(token="another-token-entirely") as fake:
        adapter = _adapter(fake)
        try:
            with pytest.raises(AdapterError, match="DISCORD_BOT_TOKEN") as caught:
                await adapter.run(RecordingHandler())
        finally:
            await adapter.aclose()
    assert TOKEN not in str(caught.value)


def test_configuration_errors_are_clear() -> None:
    """Missing token, half-set shards, bad URLs and conflicting endpoints fail before connecting."""
    persona = Settings().persona()
    entry = DiscordBotSettings(platform="discord", persona="companion", token_env="MY_TOKEN")
    with pytest.raises(ConfigError, match="MY_TOKEN: not set in the environment"):
        create_adapter(entry, persona, Secrets({}))
    secrets = Secrets({"DISCORD_BOT_TOKEN": TOKEN})
    bad: list[tuple[dict[str, Any], str]] = [
        ({"api_base": "ftp://proxy"}, "api_base: must be an http"),
        ({"gateway_url": "http://gw"}, "gateway_url: must be a ws"),
    ]
    # Shards are checked with the settings, so that config check names them (review 35a).
    for shards, message in (
        ({"shard_id": 1}, "set both shard_id and shard_count"),
        ({"shard_id": 2, "shard_count": 2}, "shard_id: must be below shard_count"),
    ):
        with pytest.raises(ValidationError, match=re.escape(message)):
            DiscordBotSettings(platform="discord", persona="companion", **shards)
    for extra, message in bad:
        with pytest.raises(ConfigError, match=re.escape(message)):
            create_adapter(
                DiscordBotSettings(platform="discord", persona="companion", **extra),
                persona,
                secrets,
            )


async def test_two_bots_with_different_endpoints_conflict() -> None:
    """discord.py's endpoints are process-wide: a second bot may not point elsewhere."""
    async with FakeDiscord(token=TOKEN) as fake:
        first = _adapter(fake)
        try:
            with pytest.raises(ConfigError, match="separate processes"):
                _adapter(fake, id="other", api_base="http://127.0.0.1:1/api/v10")
            second = _adapter(fake, id="same-endpoints")  # same endpoints: fine
            await second.aclose()
        finally:
            await first.aclose()


async def test_a_gateway_frame_discord_py_cannot_parse_never_stops_the_bot(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A MESSAGE_CREATE that discord.py fails to parse, between two good messages: both good
    ones are answered, the bad one is logged (no content) and counted, the bot keeps running."""
    caplog.set_level(logging.WARNING, "personabot.discord")
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        dm = fake.dm(ada)
        async with with_runtime(fake, tmp_path) as bot:
            await fake.post(dm, ada, "before the bad frame")
            await fake.wait_for_bot_messages(dm, 1)
            await fake.dispatch("MESSAGE_CREATE", {"id": "1", "content": "secret words"})
            await fake.post(dm, ada, "after the bad frame")
            await fake.wait_for_bot_messages(dm, 2)
            counted = bot.rt.metrics.registry.get_sample_value(
                "personabot_inbound_rejected_total",
                {"platform": "discord", "bot": "mira", "kind": "message_create"},
            )
            assert counted == 1
    replies = [m["content"] for m in fake.bot_messages(dm)]
    assert "before the bad frame" in replies[0] and "after the bad frame" in replies[1]
    skipped = [r.getMessage() for r in caplog.records if "cannot read" in r.getMessage()]
    assert skipped == [
        "skipped a Discord MESSAGE_CREATE event (id 1) discord.py cannot read "
        "(KeyError: 'channel_id')"
    ]
    assert "secret words" not in caplog.text


async def test_a_skipped_event_is_logged_once_with_its_kind_ids_and_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An operator can find the frame discord.py could not read: the log line names its kind,
    the ids its ``d`` holds and the error's message (never the message's words, even where
    the error quotes the value it failed on); one line per frame, and the bot goes on."""
    caplog.set_level(logging.WARNING, "personabot.discord")
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        guild = fake.add_guild("Cafe")
        dm = fake.dm(ada)
        async with with_runtime(fake, tmp_path):
            sent = await fake.post(guild.general, ada, "my secret plan")
            edit = {
                **sent,
                "content": "my secret plan, edited",
                "edited_timestamp": "my secret plan",  # no time: discord.py fails on it
            }
            await fake.dispatch("MESSAGE_UPDATE", edit)
            await fake.post(dm, ada, "after the bad frame")
            await fake.wait_for_bot_messages(dm, 1)
    skipped = [r.getMessage() for r in caplog.records if "cannot read" in r.getMessage()]
    assert skipped == [
        f"skipped a Discord MESSAGE_UPDATE event (id {sent['id']}, channel {guild.general}, "
        f"guild {guild.id}) discord.py cannot read (ValueError: Invalid isoformat string: '…')"
    ]
    assert "secret" not in caplog.text


def test_a_frames_ids_and_error_are_told_without_its_words() -> None:
    """The pieces of that log line, on payloads the gateway could send."""
    interaction = {"id": "1234567890123456789", "guild_id": 42, "channel_id": "not an id"}
    assert event_name("INTERACTION_CREATE", interaction) == (
        "INTERACTION_CREATE event (id 1234567890123456789, guild 42)"
    )
    assert event_name("MESSAGE_REACTION_ADD", {"message_id": "7", "user_id": "8"}) == (
        "MESSAGE_REACTION_ADD event (message 7)"
    )
    assert event_name("RESUMED", None) == "RESUMED event"
    words = {"content": "call me at\nnine tonight", "embeds": [{"title": "Plans for later"}]}
    quoting = ValueError(f"invalid literal for int() with base 10: {words['content']!r}")
    assert error_text(quoting, words) == "ValueError: invalid literal for int() with base 10: '…'"
    unquoted = TypeError("cannot read Plans for later as a date")
    assert error_text(unquoted, words) == "TypeError: cannot read … as a date"
    assert error_text(KeyError("author"), words) == "KeyError: 'author'"  # a missing key
    assert error_text(KeyError("author"), {"content": "author"}) == "KeyError: '…'"
    long = error_text(TypeError("x" * 500), {})
    assert len(long) == len("TypeError: ") + 200 and long.endswith("…")
    assert error_text(RuntimeError(), {}) == "RuntimeError"


async def test_a_message_that_cannot_be_stored_is_retried_until_it_is(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The gateway cannot redeliver: with the SQLite file locked longer than busy_timeout_ms the
    adapter keeps the message and retries; once the lock is gone it is answered once."""
    caplog.set_level(logging.ERROR, "personabot.discord")
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        dm = fake.dm(ada)
        async with with_runtime(fake, tmp_path, busy_timeout_ms=100) as bot:
            # Waits as long as it takes to get the write lock (the runtime writes too).
            other = sqlite3.connect(bot.db, isolation_level=None, timeout=60)
            try:
                other.execute("BEGIN IMMEDIATE")
                await fake.post(dm, ada, "do not lose me")
                await bot.until(lambda: "not stored" in caplog.text)
                await asyncio.sleep(0.5)
                assert fake.bot_messages(dm) == []
                other.execute("ROLLBACK")
            finally:
                other.close()
            await fake.wait_for_bot_messages(dm, 1)
            await bot.quiet()
    (reply,) = [m["content"] for m in fake.bot_messages(dm)]
    assert "do not lose me" in reply


@pytest.mark.parametrize(
    ("frame", "said"),
    [
        pytest.param([1, 2], "AttributeError: 'list' object", id="not-an-object"),
        pytest.param("hello", "AttributeError: 'str' object", id="a-string"),
        pytest.param({"op": 10, "d": None}, "TypeError", id="hello-without-interval"),
        pytest.param(
            {"op": 0, "t": "READY", "s": 90, "d": {}},
            "KeyError: 'session_id'",
            id="ready-without-session",
        ),
        pytest.param(
            {"op": 0, "t": "READY", "s": 90, "d": {"session_id": "s", "resume_gateway_url": ""}},
            "(READY event: KeyError: 'user')",  # its parser failed: the event is named
            id="ready-without-user",
        ),
    ],
)
async def test_a_gateway_frame_that_breaks_outside_a_parser_never_stops_the_bot(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, frame: Any, said: str
) -> None:
    """Frames discord.py fails on before (or in) READY's parser ended ``connect()`` and the
    bot (or left it without a user, dropping every message): now the bot logs, counts and
    reconnects, and the next message is answered."""
    caplog.set_level(logging.WARNING, "personabot.discord")
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        dm = fake.dm(ada)
        async with with_runtime(fake, tmp_path) as bot:
            await fake.post(dm, ada, "before the bad frame")
            await fake.wait_for_bot_messages(dm, 1)
            before = fake.sessions
            await fake.send_raw(frame)
            await fake.wait_identified(after=before)
            await bot.until(lambda: bot.adapter.connected)
            await fake.post(dm, ada, "after the bad frame")
            await fake.wait_for_bot_messages(dm, 2)
            counted = bot.rt.metrics.registry.get_sample_value(
                "personabot_inbound_rejected_total",
                {"platform": "discord", "bot": "mira", "kind": "gateway"},
            )
            assert counted == 1
    replies = [m["content"] for m in fake.bot_messages(dm)]
    assert "after the bad frame" in replies[1]
    (warned,) = [r.getMessage() for r in caplog.records if "cannot read" in r.getMessage()]
    assert warned.startswith("a Discord gateway frame discord.py cannot read (") and said in warned
