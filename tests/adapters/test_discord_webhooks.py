"""A scene's lines on Discord as their personas (docs/discord.md#webhooks): the real discord.py
client against the fake Discord server, posting through one webhook per channel that the bot
made, falling back to bold name headers where it may not manage webhooks."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.app.build import runtime
from bot.config import DiscordBotSettings, PersonaSettings, Secrets, Settings
from bot.config.scenes import SceneSettings
from bot.core.events import ConversationKey, Inbound, Reply, Voice, voiced
from bot.core.ports import InboundHandler
from tests.adapters.test_discord import TOKEN, RecordingHandler, _endpoints_released, connected_to
from tests.fakes.discord_api import FakeDiscord, RecordedRequest
from tests.fakes.llm import GatedLLM
from tests.scenes.test_scene_turns import speaker

with warnings.catch_warnings():  # discord.py imports the deprecated audioop (test_discord.py)
    warnings.filterwarnings(
        "ignore", message="'audioop' is deprecated", category=DeprecationWarning
    )
    from adapters.discord.adapter import NO_WEBHOOKS_NOTICE, DiscordAdapter, create_adapter

__all__ = ["_endpoints_released"]  # every test closes its adapters

ALICE = Voice("alice", "Alice", "https://example.org/alice.png")
BOB = Voice("bob", "Bob", None)
PERSONAS = [
    PersonaSettings(
        id="alice",
        name="Alice",
        avatar_url=ALICE.avatar_url,
        description="A cheerful baker.",
        first_message=["Morning!"],
        model="test-model",
    ),
    PersonaSettings(
        id="bob",
        name="Bob",
        description="A grumpy blacksmith.",
        first_message=["Hmph."],
        model="test-model",
    ),
]


def _entry(fake: FakeDiscord, voices: str = "auto", **extra: Any) -> DiscordBotSettings:
    return DiscordBotSettings(
        platform="discord",
        id="mira",
        personas=["alice", "bob"],
        scene=SceneSettings(voices=voices, **extra),  # type: ignore[arg-type]
        api_base=fake.api_base,
        gateway_url=fake.gateway_url,
    )


def _adapter(fake: FakeDiscord, voices: str = "auto") -> DiscordAdapter:
    secrets = Secrets({"DISCORD_BOT_TOKEN": TOKEN})
    return create_adapter(_entry(fake, voices), PERSONAS[0], secrets)


@contextlib.asynccontextmanager
async def scene_adapter(
    fake: FakeDiscord, voices: str = "auto"
) -> AsyncIterator[tuple[DiscordAdapter, RecordingHandler]]:
    adapter = _adapter(fake, voices)
    async with connected_to(fake, adapter) as handler:
        yield adapter, handler


def _key(chat: int, thread: int | None = None) -> ConversationKey:
    return ConversationKey("discord", str(chat), None if thread is None else str(thread), "mira")


def _line(
    key: ConversationKey,
    voice: Voice,
    line: str,
    *,
    outbox_id: int | None = None,
    reply_to: str | None = None,
) -> Reply:
    """A scene's line as bot.runtime.delivery hands it over."""
    return Reply(
        key,
        voiced(line, voice),
        outbox_id=outbox_id,
        reply_to_platform_message_id=reply_to,
        voice=voice,
        line=line,
    )


def _webhook_requests(fake: FakeDiscord, method: str) -> list[RecordedRequest]:
    """Listing (GET) or creating (POST) channel webhooks, in order."""
    return [r for r in fake.requests if r.method == method and r.path.endswith("/webhooks")]


async def test_a_voiced_line_posts_through_the_webhook_as_its_persona() -> None:
    async with FakeDiscord(token=TOKEN) as fake:
        guild = fake.add_guild("Tavern")
        ada = fake.add_user("Ada")
        async with scene_adapter(fake) as (adapter, _):
            asked = await fake.post(guild.general, ada, "Alice, a loaf please")
            line = "Fresh from the oven! @everyone come and get it <@1234567890123456>"
            reply = _line(_key(guild.general), ALICE, line, outbox_id=7, reply_to=asked["id"])
            await adapter.send(reply)
            await fake.wait_for(lambda: len(fake.webhook_messages(guild.general)) == 1)
    (posted,) = fake.executions
    assert (posted.username, posted.avatar_url, posted.content) == ("Alice", ALICE.avatar_url, line)
    assert posted.wait and posted.thread_id is None
    assert posted.body["allowed_mentions"] == {"parse": []}
    assert FakeDiscord.pings(posted.body) == set()
    assert fake.bot_messages(guild.general) == []  # nothing under the bot's own name
    (hook,) = fake.channel_webhooks(guild.general)
    assert (hook.name, hook.owner) == ("personabot", fake.bot)
    (message,) = fake.webhook_messages(guild.general)
    assert message["author"]["username"] == "Alice" and "**" not in message["content"]


async def test_a_long_line_is_split_and_every_chunk_goes_as_the_persona() -> None:
    async with FakeDiscord(token=TOKEN) as fake:
        guild = fake.add_guild("Tavern")
        async with scene_adapter(fake) as (adapter, _):
            line = " ".join(f"word{i}" for i in range(700))  # about 5,000 characters
            await adapter.send(_line(_key(guild.general), BOB, line, outbox_id=3))
    assert len(fake.executions) >= 3
    assert all(e.username == "Bob" and len(e.content) <= 2000 for e in fake.executions)
    assert " ".join(e.content for e in fake.executions).split() == line.split()


async def test_personas_share_the_channels_one_webhook_also_after_a_restart() -> None:
    async with FakeDiscord(token=TOKEN) as fake:
        guild = fake.add_guild("Tavern")
        ada = fake.add_user("Ada")
        theirs = fake.add_webhook(guild.general, "Captain Hook", ada)  # never ours to use
        key = _key(guild.general)
        async with scene_adapter(fake) as (adapter, _):
            # Two lines racing into a fresh channel still make one webhook.
            await asyncio.gather(
                adapter.send(_line(key, ALICE, "Morning!")),
                adapter.send(_line(key, BOB, "Hmph.")),
            )
            await adapter.send(_line(key, ALICE, "Bread?"))
        async with scene_adapter(fake) as (restarted, _):
            await restarted.send(_line(key, BOB, "Still here."))
    assert len(_webhook_requests(fake, "POST")) == 1
    assert len(_webhook_requests(fake, "GET")) == 2  # once per process
    ours = [h for h in fake.channel_webhooks(guild.general) if h is not theirs]
    assert len(ours) == 1
    assert {e.webhook_id for e in fake.executions} == {ours[0].id}
    assert sorted(e.username or "" for e in fake.executions) == ["Alice", "Alice", "Bob", "Bob"]


async def test_a_line_in_a_thread_goes_through_the_parents_webhook() -> None:
    async with FakeDiscord(token=TOKEN) as fake:
        guild = fake.add_guild("Tavern")
        thread = fake.add_thread(guild, guild.general, "backroom")
        async with scene_adapter(fake) as (adapter, _):
            await adapter.send(_line(_key(guild.general, thread), BOB, "In here."))
    (posted,) = fake.executions
    assert (posted.thread_id, posted.channel_id) == (thread, thread)
    assert [m["content"] for m in fake.webhook_messages(thread)] == ["In here."]
    assert len(fake.channel_webhooks(guild.general)) == 1


async def test_without_manage_webhooks_names_go_in_bold_and_the_channel_is_told_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="personabot.discord")
    async with FakeDiscord(token=TOKEN) as fake:
        guild = fake.add_guild("Tavern")
        other = fake.add_channel(guild, "cellar")
        thread = fake.add_thread(guild, guild.general, "backroom")
        fake.deny_manage_webhooks(guild.general)
        async with scene_adapter(fake) as (adapter, _):
            lines = ((ALICE, "One."), (BOB, "Two."), (ALICE, "Three."))
            for row, (voice, line) in enumerate(lines, start=1):
                await adapter.send(_line(_key(guild.general), voice, line, outbox_id=row))
            await adapter.send(_line(_key(guild.general, thread), BOB, "Four."))
            await adapter.send(_line(_key(other), BOB, "Elsewhere."))  # may manage webhooks
    said = [m["content"] for m in fake.bot_messages(guild.general)]
    assert said == [NO_WEBHOOKS_NOTICE, "**Alice:** One.", "**Bob:** Two.", "**Alice:** Three."]
    assert [m["content"] for m in fake.bot_messages(thread)] == ["**Bob:** Four."]
    assert [(e.username, e.content) for e in fake.executions] == [("Bob", "Elsewhere.")]
    assert len(_webhook_requests(fake, "GET")) == 2  # general once (403), cellar once
    warnings = [r for r in caplog.records if "Manage Webhooks" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING


async def test_a_deleted_webhook_is_made_again_once_then_names_go_in_bold() -> None:
    async with FakeDiscord(token=TOKEN) as fake:
        guild = fake.add_guild("Tavern")
        key = _key(guild.general)
        async with scene_adapter(fake) as (adapter, _):
            await adapter.send(_line(key, ALICE, "First."))
            (first,) = fake.channel_webhooks(guild.general)
            fake.delete_webhook(first.id)
            await adapter.send(_line(key, BOB, "Second."))
            (second,) = fake.channel_webhooks(guild.general)
            fake.delete_webhook(second.id)
            await adapter.send(_line(key, ALICE, "Third."))
            await adapter.send(_line(key, BOB, "Fourth."))
    assert second.id != first.id
    delivered = [(e.webhook_id, e.content) for e in fake.executions if e.status == 200]
    assert delivered == [(first.id, "First."), (second.id, "Second.")]
    assert len(_webhook_requests(fake, "POST")) == 2
    said = [m["content"] for m in fake.bot_messages(guild.general)]
    assert said == ["**Alice:** Third.", "**Bob:** Fourth."]  # no permission notice


async def test_a_reply_without_a_voice_is_posted_as_before() -> None:
    async with FakeDiscord(token=TOKEN) as fake:
        guild = fake.add_guild("Tavern")
        ada = fake.add_user("Ada")
        async with scene_adapter(fake) as (adapter, _):
            asked = await fake.post(guild.general, ada, "hello", mention_bot=True)
            key = _key(guild.general)
            await adapter.send(
                Reply(key, "Hi Ada.", outbox_id=9, reply_to_platform_message_id=asked["id"])
            )
    (post,) = fake.posts
    assert post.content == "Hi Ada." and post.body["nonce"] == "9-0"
    assert str(post.body["message_reference"]["message_id"]) == asked["id"]
    assert fake.executions == [] and _webhook_requests(fake, "GET") == []


async def test_header_voices_never_use_webhooks() -> None:
    async with FakeDiscord(token=TOKEN) as fake:
        guild = fake.add_guild("Tavern")
        async with scene_adapter(fake, voices="header") as (adapter, _):
            await adapter.send(_line(_key(guild.general), ALICE, "Morning!"))
    assert [m["content"] for m in fake.bot_messages(guild.general)] == ["**Alice:** Morning!"]
    assert fake.executions == [] and fake.webhooks == {}
    assert _webhook_requests(fake, "GET") == []


async def test_a_reply_to_a_webhook_line_is_a_reply_to_that_persona() -> None:
    async with FakeDiscord(token=TOKEN) as fake:
        guild = fake.add_guild("Tavern")
        ada = fake.add_user("Ada")
        stranger = fake.add_webhook(guild.general, "Alice", ada)  # a look-alike, not ours
        async with scene_adapter(fake) as (adapter, handler):
            await adapter.send(_line(_key(guild.general), ALICE, "Morning!"))
            (line,) = fake.webhook_messages(guild.general)
            # The line came back over the gateway (webhook_id set, author "Alice", a bot):
            # never input. The sentinel proves it was handled before.
            sentinel = await handler.next_event(fake, guild.general, ada)
            assert handler.events == [sentinel]
            thanks = await fake.post(guild.general, ada, "thanks!", reply_to=line)
            fake_line = await fake.post_as_webhook(stranger, "Alice", "I am Alice too")
            not_ours = await fake.post(guild.general, ada, "who?", reply_to=fake_line)
            await handler.wait_for_message(not_ours["id"])
        # After a restart the webhook is found again when a reply to an old line arrives.
        async with scene_adapter(fake) as (_, later):
            again = await fake.post(guild.general, ada, "still there?", reply_to=line)
            (event,) = await later.wait_for_message(again["id"])
    by_id = {e.platform_message_id: e for e in handler.events}
    quote = by_id[thanks["id"]].quote
    assert quote is not None and (quote.from_bot, quote.author) == (True, "Alice")
    assert by_id[thanks["id"]].reply_to_bot
    other = by_id[not_ours["id"]].quote
    assert other is not None and not other.from_bot and not by_id[not_ours["id"]].reply_to_bot
    assert event.quote is not None and (event.quote.from_bot, event.quote.author) == (True, "Alice")


class Observed:
    """The runtime's router, telling when each batch of events it was handed is stored."""

    def __init__(self, router: InboundHandler) -> None:
        self._router = router
        self.commands = router.commands
        self.admin_commands: tuple[str, ...] = ()
        self.stored: list[str] = []
        self._handed: list[str] = []
        self._changed = asyncio.Condition()

    async def __call__(self, inbound: Inbound) -> None:
        await self._router(inbound)
        self._handed.append(inbound.platform_message_id)

    def rejected(self, platform: str, bot: str, kind: str) -> None:
        self._router.rejected(platform, bot, kind)

    @contextlib.asynccontextmanager
    async def batch(self) -> AsyncIterator[None]:
        async with self._router.batch():
            yield
        async with self._changed:  # committed: the batch's messages are in the store
            self.stored += self._handed
            self._handed.clear()
            self._changed.notify_all()

    async def wait_stored(self, message_id: str, within: float = 10.0) -> None:
        async with asyncio.timeout(within), self._changed:
            await self._changed.wait_for(lambda: message_id in self.stored)


async def test_our_webhook_lines_are_never_stored_as_input(tmp_path: Path) -> None:
    """Through the wired runtime: a person addresses Bob, Bob's line goes out through the
    webhook, comes back on the gateway under his name, and is not stored as a message."""
    db = tmp_path / "personabot.sqlite3"
    async with FakeDiscord(token=TOKEN) as fake:
        guild = fake.add_guild("Tavern")
        ada = fake.add_user("Ada")
        queue = {"debounce_seconds": 0.2, "max_wait_seconds": 2.0, "scan_interval_seconds": 0.2}
        settings = Settings.model_validate(
            {
                "storage": {"url": f"sqlite:///{db}"},
                "llm": {"provider": "offline"},
                "queue": {**queue, "shutdown_grace_seconds": 1.0},
                "personas": [p.model_dump() for p in PERSONAS],
                "bots": [_entry(fake, strategy="manual").model_dump()],
            }
        )
        adapter = _adapter(fake)
        llm = GatedLLM(answer=lambda r: f"{speaker(r)} here.")
        bots = {"mira": (settings.persona("alice"), adapter)}
        try:
            async with runtime(settings, llm=llm, adapters=bots) as rt:
                router = Observed(rt.router)
                task = asyncio.create_task(adapter.run(router))
                try:
                    await fake.wait_identified()
                    asked = await fake.post(guild.general, ada, "Bob, are you there?")
                    await fake.wait_for(lambda: len(fake.webhook_messages(guild.general)) == 1)
                    (line,) = fake.webhook_messages(guild.general)
                    # Events are handled in gateway order: once a later message is stored,
                    # the echo of Bob's line was handled (or ignored) before it.
                    later = await fake.post(guild.general, ada, "ok")
                    await router.wait_stored(later["id"])
                finally:
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
        finally:
            await adapter.aclose()
    assert (line["author"]["username"], line["content"]) == ("Bob", "Bob here.")
    assert line["id"] not in router.stored
    with contextlib.closing(sqlite3.connect(db)) as conn:
        rows = conn.execute("SELECT platform_message_id, text FROM messages WHERE role = 'user'")
        stored = {str(r[0]): r[1] for r in rows}
    assert asked["id"] in stored and later["id"] in stored
    assert line["id"] not in stored and "Bob here." not in stored.values()
