"""The Telegram adapter on the real runtime: real aiogram, the fake Bot API, real SQLite.

Each test runs the composition root's runtime (store, queue, scheduler, pipeline, router) with
the adapter polling the fake server (or serving a webhook), on the real clock with a short
debounce; conditions are polled with a bounded wait, never assumed after a fixed sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import socket
import sqlite3
import time
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from adapters.telegram.adapter import TelegramAdapter, create_adapter
from adapters.telegram.format import render_html
from bot.app.build import Runtime, runtime
from bot.config import (
    AccessSettings,
    PersonaSettings,
    QueueSettings,
    Secrets,
    Settings,
    StorageSettings,
    TelegramBotSettings,
)
from bot.core.errors import AdapterError, ConfigError, DeliveryRefused
from bot.core.events import ConversationKey, Inbound, Reply
from bot.core.llm import BaseLLM, ModelRequest
from bot.llm.offline import OfflineLLM
from tests.fakes.llm import GatedLLM, mug_oracle
from tests.fakes.telegram_api import FakeTelegramAPI, TgChat, TgUser, parse_telegram_html

TOKEN = "123456789:AAHtest-Mira-token-0123456789abcdef"
USERNAME = "mira_bot"
BOT = "mira-telegram"
PERSONA = PersonaSettings(
    id="companion",
    name="Mira",
    system="You are Mira.",
    first_message=["Hi, I'm Mira."],
    model="test-model",
)
ANN = TgUser(1001, "Ann")
BOB = TgUser(1002, "Bob")
GROUP = TgChat.supergroup(-1001000000001, "Friends")
FORUM = TgChat.supergroup(-1001000000002, "Forum", forum=True)


@dataclass
class Rig:
    """A running bot: the fake API, the adapter, the wired runtime and the model."""

    api: FakeTelegramAPI
    adapter: TelegramAdapter
    rt: Runtime
    llm: BaseLLM

    def key(self, chat: TgChat, thread: int | None = None) -> ConversationKey:
        """The conversation key of a chat (and topic) for this bot."""
        return ConversationKey(
            "telegram", str(chat.id), None if thread is None else str(thread), BOT
        )

    def say(self, chat: TgChat, user: TgUser, text: str, **kwargs: object) -> int:
        """A user message arriving through getUpdates; returns its message id."""
        update = self.api.push_message(TOKEN, chat, user, text, **kwargs)
        return int(update["message"]["message_id"])

    def replies(self, chat: TgChat | None = None) -> list[str]:
        """Texts (as users see them) of the bot's delivered messages."""
        chat_id = None if chat is None else chat.id
        return [c.visible_text for c in self.api.sent_messages(TOKEN, chat_id)]

    async def stored_texts(self, key: ConversationKey) -> list[str]:
        """Every message stored for a conversation's open session."""
        session = await self.rt.store.current_session(key)
        if session is None:
            return []
        return [m.text for m in await self.rt.store.messages(session.key)]

    async def quiet(self, key: ConversationKey, grace: float = 0.4) -> None:
        """Wait until no turn is armed or running, then a little longer for stragglers."""
        await eventually(lambda: self._idle(key), what=f"{key} idle")
        await asyncio.sleep(grace)
        await eventually(lambda: self._idle(key), what=f"{key} idle")

    async def _idle(self, key: ConversationKey) -> bool:
        return await self.rt.store.timer(key) is None and self.rt.scheduler.active == 0


async def eventually(
    check: Callable[[], Awaitable[bool]], within: float = 10.0, what: str = "condition"
) -> None:
    """Poll an async condition until it holds (AssertionError after ``within`` seconds)."""
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def _settings(tmp_path: Path, *, debounce: float, max_wait: float) -> Settings:
    return Settings(
        storage=StorageSettings(url=f"sqlite:///{tmp_path / 'telegram.sqlite3'}"),
        queue=QueueSettings(
            debounce_seconds=debounce,
            max_wait_seconds=max_wait,
            scan_interval_seconds=0.2,
            shutdown_grace_seconds=2.0,
        ),
        personas=[PERSONA],
    )


@pytest.fixture
async def api() -> AsyncIterator[FakeTelegramAPI]:
    """The fake Bot API with the test bot registered."""
    async with FakeTelegramAPI() as server:
        server.add_bot(TOKEN, USERNAME, "Mira")
        yield server


@contextlib.asynccontextmanager
async def running(
    tmp_path: Path,
    api: FakeTelegramAPI,
    llm: BaseLLM | None = None,
    *,
    adapter: TelegramAdapter | None = None,
    debounce: float = 0.2,
    max_wait: float = 2.0,
    typing_interval: float = 4.0,
    settings: Settings | None = None,
) -> AsyncIterator[Rig]:
    """Run the adapter on the wired runtime until the block ends; then stop and close it."""
    llm = llm or OfflineLLM()
    adapter = adapter or TelegramAdapter(
        bot_key=BOT,
        token=TOKEN,
        api_server=api.base_url,
        typing_interval=typing_interval,
    )
    settings = settings or _settings(tmp_path, debounce=debounce, max_wait=max_wait)
    async with runtime(settings, llm=llm, adapters={BOT: (PERSONA, adapter)}) as rt:
        task = asyncio.create_task(adapter.run(rt.router))
        try:

            def started() -> object:
                return task.done() or api.polls_started(TOKEN) or api.webhook(TOKEN)[0]

            await api.wait_for(started, what="the bot to start")
            assert not task.done(), task.exception()
            yield Rig(api, adapter, rt, llm)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await adapter.aclose()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ------------------------------------------------------------------------------- webhook


async def test_webhook_processes_only_requests_with_the_secret(
    tmp_path: Path, api: FakeTelegramAPI
) -> None:
    port = _free_port()
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
    secrets = Secrets({"TELEGRAM_BOT_TOKEN": TOKEN, "TG_WEBHOOK_SECRET": "s3cret-Value_1"})
    adapter = create_adapter(entry, PERSONA, secrets)
    async with running(tmp_path, api, adapter=adapter) as rig:
        assert api.webhook(TOKEN) == (entry.webhook_url, "s3cret-Value_1")
        assert adapter.webhook_port == port
        key = rig.key(TgChat.private(ANN))
        wrong = api.message_update(TgChat.private(ANN), ANN, "sent with a wrong secret")
        assert await api.deliver_webhook(TOKEN, wrong, secret="not-the-secret") == 401
        missing = api.message_update(TgChat.private(ANN), ANN, "sent without a secret")
        assert await api.deliver_webhook(TOKEN, missing, secret=False) == 401
        assert await rig.stored_texts(key) == []  # nothing of them was processed
        right = api.message_update(TgChat.private(ANN), ANN, "sent with the secret")
        assert await api.deliver_webhook(TOKEN, right) == 200
        await api.wait_for(rig.replies, what="the reply")
        assert await api.deliver_webhook(TOKEN, right) == 200  # Telegram retried it
        await rig.quiet(key)
        assert await rig.stored_texts(key) == ["sent with the secret", rig.replies()[0]]
        assert len(rig.replies()) == 1
        assert "You said: sent with the secret" in rig.replies()[0]


# ---------------------------------------------------------------------- people and chats


async def test_two_sashas_in_private_chats_never_see_each_other(
    tmp_path: Path, api: FakeTelegramAPI
) -> None:
    sasha1, sasha2 = TgUser(2001, "Sasha"), TgUser(2002, "Sasha")
    chat1, chat2 = TgChat.private(sasha1), TgChat.private(sasha2)
    llm = GatedLLM(answer=mug_oracle)
    async with running(tmp_path, api, llm) as rig:
        rig.say(chat1, sasha1, "I pick the blue mug")
        rig.say(chat2, sasha2, "I pick the green mug")
        await api.wait_for(lambda: len(rig.replies()) == 2, what="two replies")
        rig.say(chat1, sasha1, "which mug did I pick?")
        rig.say(chat2, sasha2, "which mug did I pick?")
        await api.wait_for(lambda: len(rig.replies()) == 4, what="four replies")
        assert rig.replies(chat1) == ["noted", "you picked the blue mug"]
        assert rig.replies(chat2) == ["noted", "you picked the green mug"]
        for request in llm.requests:  # replies, summaries and memory extraction alike
            prompt = " ".join(m.text for m in request.messages)
            assert not ("blue" in prompt and "green" in prompt)
        assert rig.key(chat1) != rig.key(chat2)


def _prompt(request: ModelRequest) -> str:
    return "\n".join(m.text for m in request.messages)


def _turns(llm: GatedLLM) -> list[ModelRequest]:
    """The model calls that answered a turn (not memory summaries or extraction)."""
    return [r for r in llm.requests if r.purpose == "reply"]


async def test_group_context_is_kept_and_only_mentions_are_answered(
    tmp_path: Path, api: FakeTelegramAPI
) -> None:
    llm = GatedLLM(answer=lambda r: "noon, with snacks")
    async with running(tmp_path, api, llm) as rig:
        key = rig.key(GROUP)
        rig.say(GROUP, ANN, "the meeting is at noon")
        rig.say(GROUP, BOB, "bring snacks")
        rig.say(GROUP, BOB, "/help@other_bot")  # another bot's command: not even context
        await eventually(lambda: _has(rig, key, 2), what="context stored")
        await rig.quiet(key)
        assert rig.replies() == [] and _turns(llm) == []  # context is not a turn
        asked = rig.say(GROUP, ANN, "@mira_bot when and what?")
        await api.wait_for(rig.replies, what="the answer")
        prompt = _prompt(_turns(llm)[0])
        for needle in ("the meeting is at noon", "bring snacks", "Ann", "Bob"):
            assert needle in prompt
        assert "other_bot" not in prompt
        answer = api.sent_messages(TOKEN)[0]
        assert answer.reply_to == asked and answer.thread_id is None
        # Replying to the bot's message is addressing it too.
        rig.say(GROUP, BOB, "thanks!", reply_to_message_id=answer.message_id)
        await api.wait_for(lambda: len(rig.replies()) == 2, what="the second answer")
        rig.say(GROUP, BOB, "/help@mira_bot")
        await api.wait_for(lambda: len(rig.replies()) == 3, what="the help text")
        assert rig.replies()[-1].startswith("Commands:")
        await rig.quiet(key)
        assert len(_turns(llm)) == 2


async def test_an_unknown_command_addressed_to_the_bot_in_a_group_is_answered(
    tmp_path: Path, api: FakeTelegramAPI
) -> None:
    llm = GatedLLM(answer=lambda r: "should not be asked")
    async with running(tmp_path, api, llm) as rig:
        key = rig.key(GROUP)
        rig.say(GROUP, BOB, "/weather@other_bot Paris")  # another bot's: ignored
        asked = rig.say(GROUP, BOB, "/weather@mira_bot, Paris?")  # the entity ends at ","
        await api.wait_for(rig.replies, what="the unknown-command answer")
        rig.say(GROUP, ANN, "/weather@mira_bot")
        await api.wait_for(lambda: len(rig.replies()) == 2, what="the second answer")
        await rig.quiet(key)
        unknown = "Unknown command /weather. Send /help for the list."
        assert rig.replies() == [unknown, unknown]
        assert api.sent_messages(TOKEN)[0].reply_to == asked
        assert _turns(llm) == []


async def test_channel_forwards_are_context_and_anonymous_admins_their_own_author(
    tmp_path: Path, api: FakeTelegramAPI
) -> None:
    llm = GatedLLM(answer=lambda r: "seen")
    adapter = TelegramAdapter(
        bot_key=BOT, token=TOKEN, api_server=api.base_url, group_trigger="all"
    )
    anonymous = TgUser(1087968824, "Group", username="GroupAnonymousBot", is_bot=True)
    channel_bot = TgUser(136817688, "Channel", username="Channel_Bot", is_bot=True)
    channel = TgChat(-1005550000001, "channel", title="Friends News")
    forward = {"sender_chat": channel.to_dict(), "is_automatic_forward": True}
    async with running(tmp_path, api, llm, adapter=adapter) as rig:
        key = rig.key(GROUP)
        rig.say(GROUP, channel_bot, "new mugs in the shop", extra=forward)
        await eventually(lambda: _has(rig, key, 1), what="the forward stored")
        await rig.quiet(key)
        assert rig.replies() == [] and _turns(llm) == []  # every message counts, not this
        rig.say(GROUP, anonymous, "what do you think?", extra={"sender_chat": GROUP.to_dict()})
        await api.wait_for(rig.replies, what="the answer to the admin")
        await rig.quiet(key)
        prompt = _prompt(_turns(llm)[0])
        assert "new mugs in the shop" in prompt and "Friends News" in prompt
        assert "Anonymous admin" in prompt
        session = await rig.rt.store.current_session(key)
        assert session is not None
        authors = {
            m.author_id for m in await rig.rt.store.messages(session.key) if m.role == "user"
        }
        assert authors == {f"channel:{channel.id}", f"anon:{GROUP.id}"}


async def test_an_anonymous_admin_cannot_read_or_erase_the_shared_author(
    tmp_path: Path, api: FakeTelegramAPI
) -> None:
    anonymous = TgUser(1087968824, "Group", username="GroupAnonymousBot", is_bot=True)
    as_group = {"sender_chat": GROUP.to_dict()}
    async with running(tmp_path, api) as rig:
        key = rig.key(GROUP)
        rig.say(GROUP, anonymous, "our secret plan", extra=as_group)
        await eventually(lambda: _has(rig, key, 1), what="the admin's message stored")
        for name in ("memory", "forget", "export"):
            rig.say(GROUP, anonymous, f"/{name}@mira_bot", extra=as_group)
        await api.wait_for(lambda: len(rig.replies()) == 3, what="three answers")
        await rig.quiet(key)
        for name, reply in zip(("memory", "forget", "export"), rig.replies(), strict=True):
            assert reply.startswith(f"/{name} is about one person's own data")
        assert "our secret plan" in await rig.stored_texts(key)  # another admin's words kept


async def _has(rig: Rig, key: ConversationKey, count: int) -> bool:
    return len(await rig.stored_texts(key)) >= count


async def test_a_forum_topic_is_its_own_conversation(tmp_path: Path, api: FakeTelegramAPI) -> None:
    llm = GatedLLM(answer=lambda r: f"echo: {r.messages[-1].text}")
    async with running(tmp_path, api, llm) as rig:
        rig.say(FORUM, ANN, "@mira_bot I like blue", thread_id=7)
        rig.say(FORUM, BOB, "@mira_bot I like green", thread_id=9)
        rig.say(FORUM, BOB, "@mira_bot general topic here")
        await api.wait_for(lambda: len(rig.replies()) == 3, what="three answers")
        by_thread = {c.thread_id: c.visible_text for c in api.sent_messages(TOKEN)}
        assert "blue" in by_thread[7] and "green" not in by_thread[7]
        assert "green" in by_thread[9] and "blue" not in by_thread[9]
        assert "general" in by_thread[None]
        # The echoed "@mira_bot" goes out with an invisible word joiner (no mention).
        stored = await rig.stored_texts(rig.key(FORUM, 7))
        assert stored == ["@mira_bot I like blue", by_thread[7].replace("\u2060", "")]


# ---------------------------------------------------------------------------- sending


def _long_reply() -> tuple[str, str]:
    paragraph = (
        "This paragraph talks about *mugs* & <cups>, and it goes on for a while so that the "
        "reply is long enough to need splitting. It has sentences. Many of them! "
    ) * 3
    code = "```python\n" + "\n".join(f"value_{i} = {i} * 2  # <{i}>" for i in range(60)) + "\n```"
    text = "\n\n".join([paragraph.strip()] * 8 + [code] + [paragraph.strip()] * 8)
    return text, code


async def test_a_9000_character_reply_arrives_whole_in_three_messages(
    tmp_path: Path, api: FakeTelegramAPI
) -> None:
    text, _ = _long_reply()
    assert 8900 < len(text) < 9100
    async with running(tmp_path, api, GatedLLM(answer=lambda r: text)) as rig:
        rig.say(TgChat.private(ANN), ANN, "tell me everything")
        await api.wait_for(rig.replies, what="the reply")
        await rig.quiet(rig.key(TgChat.private(ANN)))
        sent = api.sent_messages(TOKEN)
        assert len(sent) == 3
        assert all(call.parse_mode == "HTML" for call in sent)
        assert all(len(c.visible_text.encode("utf-16-le")) // 2 <= 4096 for c in sent)
        holders = [c for c in sent if "value_0 = 0" in c.visible_text]
        assert len(holders) == 1  # the code block is in one message, whole
        assert '<pre><code class="language-python">' in holders[0].text
        lines = [f"value_{i} = {i} * 2  # <{i}>" for i in range(60)]
        assert "\n".join(lines) in holders[0].visible_text
        shown = " ".join(c.visible_text for c in sent).split()
        assert shown == parse_telegram_html(render_html(text)).split()  # nothing lost


async def test_special_characters_and_unbalanced_markers_are_delivered(
    tmp_path: Path, api: FakeTelegramAPI
) -> None:
    text = "if a < b && c > d then *wow, <b>not bold</b> & **half"
    async with running(tmp_path, api, GatedLLM(answer=lambda r: text)) as rig:
        rig.say(TgChat.private(ANN), ANN, "show me")
        await api.wait_for(rig.replies, what="the reply")
        assert rig.replies() == [text]  # escaped, so shown exactly as written


async def test_rejected_entities_are_resent_as_plain_text(
    tmp_path: Path, api: FakeTelegramAPI
) -> None:
    text = "**bold** claim with `code`"
    api.fail_next(
        "sendMessage",
        status=400,
        description="Bad Request: can't parse entities: Unsupported start tag at byte offset 3",
    )
    async with running(tmp_path, api, GatedLLM(answer=lambda r: text)) as rig:
        rig.say(TgChat.private(ANN), ANN, "go")
        await api.wait_for(rig.replies, what="the plain reply")
        first, second = api.calls_of("sendMessage", TOKEN)
        assert first.status == 400 and first.parse_mode == "HTML"
        assert second.ok and second.parse_mode is None and second.text == text


async def test_a_flood_limit_is_waited_out_and_the_reply_sent_once(
    tmp_path: Path, api: FakeTelegramAPI
) -> None:
    api.fail_next("sendMessage", status=429, retry_after=1)
    async with running(tmp_path, api) as rig:
        key = rig.key(TgChat.private(ANN))
        rig.say(TgChat.private(ANN), ANN, "hello")
        await api.wait_for(rig.replies, within=15, what="the reply after the flood wait")
        limited, delivered = api.calls_of("sendMessage", TOKEN)
        assert limited.status == 429 and delivered.ok
        assert delivered.at - limited.at >= 0.95
        await rig.quiet(key)
        assert len(rig.replies()) == 1


async def test_a_blocked_bot_marks_the_conversation_inactive(
    tmp_path: Path, api: FakeTelegramAPI
) -> None:
    api.fail_next("sendMessage", status=403)
    async with running(tmp_path, api) as rig:
        key = rig.key(TgChat.private(ANN))
        rig.say(TgChat.private(ANN), ANN, "hello")
        await api.wait_for(lambda: api.calls_of("sendMessage"), what="the refused send")
        await eventually(lambda: _inactive(rig, key), what="the conversation to be marked inactive")
        assert rig.replies() == []


async def _inactive(rig: Rig, key: ConversationKey) -> bool:
    return not await rig.rt.store.conversation_active(key)


async def test_a_reply_to_a_deleted_message_is_still_sent(
    tmp_path: Path, api: FakeTelegramAPI
) -> None:
    async with running(tmp_path, api) as rig:
        asked = rig.say(GROUP, ANN, "@mira_bot hi")
        api.delete_message(GROUP.id, asked)  # gone before the reply
        await api.wait_for(rig.replies, what="the reply")
        sent = api.sent_messages(TOKEN)[0]
        assert sent.reply_to == asked and sent.allow_sending_without_reply
        rig.say(TgChat.private(BOB), BOB, "hi")
        await api.wait_for(lambda: len(rig.replies()) == 2, what="the private reply")
        assert api.sent_messages(TOKEN)[1].reply_to is None  # no reply quote in private


async def test_send_translates_telegram_errors(api: FakeTelegramAPI) -> None:
    """Too long: re-split and sent; 403: DeliveryRefused; other errors: AdapterError + chat."""
    adapter = TelegramAdapter(bot_key=BOT, token=TOKEN, api_server=api.base_url)
    api.message_update(TgChat.private(ANN), ANN, "hi")  # the chat exists
    key = ConversationKey("telegram", str(ANN.id), None, BOT)
    try:
        api.fail_next("sendMessage", status=400, description="Bad Request: message is too long")
        await adapter.send(Reply(key, "short after all"))
        too_long, resent = api.calls_of("sendMessage")
        assert too_long.status == 400 and resent.ok and resent.visible_text == "short after all"
        api.fail_next("sendMessage", status=403, description="Forbidden: bot was kicked")
        with pytest.raises(DeliveryRefused, match="chat 1001"):
            await adapter.send(Reply(key, "hello?"))
        api.fail_next("sendMessage", status=400, description="Bad Request: something odd")
        with pytest.raises(AdapterError, match=r"chat 1001.*something odd") as caught:
            await adapter.send(Reply(key, "hello?"))
        assert not isinstance(caught.value, DeliveryRefused)
        api.fail_next("sendMessage", status=429, retry_after=3600)  # beyond the bounded wait
        with pytest.raises(AdapterError, match="Flood control"):
            await adapter.send(Reply(key, "hello?"))
    finally:
        await adapter.aclose()


# --------------------------------------------------------------------- updates and commands


async def test_the_same_update_twice_is_handled_once(tmp_path: Path, api: FakeTelegramAPI) -> None:
    async with running(tmp_path, api) as rig:
        chat = TgChat.private(ANN)
        key = rig.key(chat)
        update = api.push_message(TOKEN, chat, ANN, "hello once")
        api.redeliver(TOKEN, update)  # its offset was never confirmed: Telegram sends it again
        await api.wait_for(rig.replies, what="the reply")
        new = api.push_message(TOKEN, chat, ANN, "/new")
        api.redeliver(TOKEN, new)
        await api.wait_for(lambda: len(rig.replies()) == 2, what="the /new answer")
        await rig.quiet(key)
        assert len(rig.replies()) == 2
        assert "New session started (#2)" in rig.replies()[1]
        assert len(await rig.rt.store.list_sessions(key)) == 2


async def test_commands_are_registered_and_start_greets(
    tmp_path: Path, api: FakeTelegramAPI
) -> None:
    async with running(tmp_path, api) as rig:
        await api.wait_for(lambda: api.calls_of("setMyCommands"), what="setMyCommands")
        assert rig.adapter.connected
        registered = [(c["command"], c["description"]) for c in api.commands(TOKEN)]
        assert registered == list(rig.rt.router.commands)
        assert {"new", "help"} <= {name for name, _ in registered}
        rig.say(TgChat.private(ANN), ANN, "/start")
        await api.wait_for(rig.replies, what="the greeting")
        assert rig.replies() == ["Hi, I'm Mira."]
        assert await rig.stored_texts(rig.key(TgChat.private(ANN))) == []


async def test_an_edit_before_the_answer_replaces_the_text(
    tmp_path: Path, api: FakeTelegramAPI
) -> None:
    llm = GatedLLM(answer=lambda r: f"echo: {r.messages[-1].text}")
    async with running(tmp_path, api, llm, debounce=0.4) as rig:
        chat = TgChat.private(ANN)
        first = rig.say(chat, ANN, "I like bleu")
        api.push(TOKEN, api.message_update(chat, ANN, "I like blue", message_id=first, edited=True))
        await api.wait_for(rig.replies, what="the reply")
        assert rig.replies() == ["echo: I like blue"]
        # Once answered, an edit changes nothing (it is documented as ignored).
        api.push(TOKEN, api.message_update(chat, ANN, "I like red", message_id=first, edited=True))
        await rig.quiet(rig.key(chat))
        assert await rig.stored_texts(rig.key(chat)) == ["I like blue", "echo: I like blue"]
        assert len(_turns(llm)) == 1


# ---------------------------------------------------------------------------- typing


async def test_typing_is_sent_while_the_model_works_and_stops_after(
    tmp_path: Path, api: FakeTelegramAPI
) -> None:
    llm = GatedLLM(gated=True)
    async with running(tmp_path, api, llm, typing_interval=0.1) as rig:
        rig.say(FORUM, ANN, "@mira_bot think hard", thread_id=7)
        await asyncio.wait_for(llm.started.wait(), 10)
        await api.wait_for(lambda: len(api.chat_actions(TOKEN)) >= 3, what="typing repeats")
        assert rig.replies() == []
        llm.release()
        await api.wait_for(rig.replies, what="the reply")
        actions = api.chat_actions(TOKEN)
        assert {(c.params["action"], c.chat_id, c.thread_id) for c in actions} == {
            ("typing", FORUM.id, 7)
        }
        count = len(actions)
        await asyncio.sleep(0.5)  # five typing intervals: none may follow the reply
        assert len(api.chat_actions(TOKEN)) == count


# ------------------------------------------------------------------- lifecycle, secrets


async def test_cancelling_run_stops_polling_promptly_and_run_can_start_again(
    api: FakeTelegramAPI,
) -> None:
    """Cancelled mid long poll, ``run`` returns at once (not when the 30 s poll ends); a
    later ``run`` polls again from where Telegram's offset stands (a poller hand-over)."""
    adapter = TelegramAdapter(bot_key=BOT, token=TOKEN, api_server=api.base_url, polling_timeout=30)
    handler = _Recorder()
    task = asyncio.create_task(adapter.run(handler))
    try:
        await api.wait_for(lambda: api.polls_started(TOKEN), what="a long poll")
        started = time.monotonic()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert time.monotonic() - started < 2
        assert task.cancelled()
        api.push_message(TOKEN, TgChat.private(ANN), ANN, "are you back?")
        task = asyncio.create_task(adapter.run(handler))
        await api.wait_for(lambda: handler.received, what="the message after the restart")
        assert [i.text for i in handler.received] == ["are you back?"]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await adapter.aclose()


async def test_the_token_never_appears_in_errors_or_logs(
    api: FakeTelegramAPI, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    secret_half = TOKEN.split(":")[1]
    conversation = ConversationKey("telegram", "1001", None, BOT)
    failures: list[BaseException] = []
    for server in (f"http://127.0.0.1:{_free_port()}", "http://[::1", api.base_url):
        adapter = TelegramAdapter(bot_key=BOT, token=TOKEN, api_server=server)
        if server == api.base_url:  # a proxy that echoes the request path in its error
            api.fail_next("sendMessage", status=502, description=f"no route to /bot{TOKEN}/x")
        try:
            with pytest.raises(AdapterError) as caught:
                await adapter.send(Reply(conversation, "hello"))
            failures.append(caught.value)
        finally:
            await adapter.aclose()
    api.fail_next("getMe", status=401)
    adapter = TelegramAdapter(bot_key=BOT, token=TOKEN, api_server=api.base_url)
    with pytest.raises(AdapterError) as caught:
        await adapter.run(_NoHandler())
    failures.append(caught.value)
    await adapter.aclose()
    for error in failures:
        rendered = "".join(traceback.format_exception(error))
        assert "chat 1001" in str(error) or "token rejected" in str(error)
        assert TOKEN not in rendered and secret_half not in rendered
    for record in caplog.records:
        assert secret_half not in record.getMessage()


class _Recorder:
    """An InboundHandler that only records."""

    commands: tuple[tuple[str, str], ...] = (("new", "start over"),)
    admin_commands: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.received: list[Inbound] = []

    async def __call__(self, inbound: Inbound) -> None:
        self.received.append(inbound)

    def rejected(self, platform: str, bot: str, kind: str) -> None:
        raise AssertionError((platform, bot, kind))

    def batch(self) -> contextlib.AbstractAsyncContextManager[None]:
        return contextlib.nullcontext()


class _NoHandler:
    commands: tuple[tuple[str, str], ...] = ()
    admin_commands: tuple[str, ...] = ()

    async def __call__(self, inbound: object) -> None:  # pragma: no cover - never called
        raise AssertionError(inbound)

    def rejected(self, platform: str, bot: str, kind: str) -> None:  # pragma: no cover
        raise AssertionError((platform, bot, kind))

    def batch(self) -> contextlib.AbstractAsyncContextManager[None]:
        return contextlib.nullcontext()


def test_create_adapter_reports_configuration_problems() -> None:
    entry = TelegramBotSettings(platform="telegram", persona="companion")
    with pytest.raises(ConfigError, match="TELEGRAM_BOT_TOKEN: not set"):
        create_adapter(entry, PERSONA, Secrets({}))
    with pytest.raises(ConfigError, match="token is malformed") as caught:
        create_adapter(entry, PERSONA, Secrets({"TELEGRAM_BOT_TOKEN": "oops-not-a-token"}))
    assert "oops" not in str(caught.value)
    hook = TelegramBotSettings(
        platform="telegram", persona="companion", mode="webhook", webhook_url="https://x/y"
    )
    with pytest.raises(ConfigError, match="secret_token_env: required"):
        create_adapter(hook, PERSONA, Secrets({"TELEGRAM_BOT_TOKEN": TOKEN}))
    hook = hook.model_copy(update={"secret_token_env": "HOOK_SECRET"})
    with pytest.raises(ConfigError, match="HOOK_SECRET: not set"):
        create_adapter(hook, PERSONA, Secrets({"TELEGRAM_BOT_TOKEN": TOKEN}))
    with pytest.raises(ConfigError, match="1-256 characters"):
        create_adapter(hook, PERSONA, Secrets({"TELEGRAM_BOT_TOKEN": TOKEN, "HOOK_SECRET": "a b"}))


async def test_the_fake_bot_api_keeps_telegram_semantics(api: FakeTelegramAPI) -> None:
    """What the tests above rely on: 401, offsets, one poller per token, webhook conflict."""
    async with aiohttp.ClientSession() as http:

        async def call(method: str, token: str = TOKEN, **data: str) -> tuple[int, dict]:
            async with http.post(f"{api.base_url}/bot{token}/{method}", data=data) as resp:
                return resp.status, await resp.json()

        assert await call("getMe", token="1:wrong") == (
            401,
            {"ok": False, "error_code": 401, "description": "Unauthorized"},
        )
        first = api.push_message(TOKEN, TgChat.private(ANN), ANN, "one")["update_id"]
        for _ in range(2):  # unconfirmed: delivered again
            status, body = await call("getUpdates")
            assert status == 200 and [u["update_id"] for u in body["result"]] == [first]
        offset = str(first + 1)
        assert (await call("getUpdates", offset=offset)) == (200, {"ok": True, "result": []})
        waiting = asyncio.create_task(call("getUpdates", offset=offset, timeout="5"))
        await api.wait_for(lambda: api.polls_started(TOKEN) == 4, what="the long poll")
        assert (await call("getUpdates", offset=offset))[0] == 200
        status, body = await waiting
        assert status == 409 and "terminated by other getUpdates" in body["description"]
        assert (await call("setWebhook", url="https://example.org/hook"))[0] == 200
        assert (await call("getUpdates"))[0] == 409


async def test_start_from_someone_outside_the_allow_list_gets_only_the_denied_reply(
    tmp_path: Path, api: FakeTelegramAPI
) -> None:
    """/start goes through access control: no greeting for strangers, and the denied reply at
    most once per chat per day however often they send it."""
    settings = _settings(tmp_path, debounce=0.2, max_wait=2.0).model_copy(
        update={"access": AccessSettings(allow_users=[ANN.id], denied_reply="Private bot.")}
    )
    async with running(tmp_path, api, settings=settings) as rig:
        for _ in range(3):
            rig.say(TgChat.private(BOB), BOB, "/start")
        rig.say(TgChat.private(ANN), ANN, "/start")
        await api.wait_for(lambda: rig.replies(TgChat.private(ANN)), what="Ann's greeting")
        await rig.quiet(rig.key(TgChat.private(BOB)))
    assert rig.replies(TgChat.private(BOB)) == ["Private bot."]
    assert rig.replies(TgChat.private(ANN)) == ["Hi, I'm Mira."]


async def test_commands_of_a_stranger_get_nothing_and_answers_go_through_the_outbox(
    tmp_path: Path, api: FakeTelegramAPI
) -> None:
    """Issue 14.2: every command of someone outside allow_users gets only the denied reply
    (once) and nothing of theirs is stored; a permitted person's /start and /help are answered
    as outbox rows (sent, text cleared), never as messages of the transcript."""
    settings = _settings(tmp_path, debounce=0.2, max_wait=2.0).model_copy(
        update={"access": AccessSettings(allow_users=[ANN.id], denied_reply="Private bot.")}
    )
    async with running(tmp_path, api, settings=settings) as rig:
        for text in ("/start", "/help", "/new", "/memory", "/export", "/stats", "/nope"):
            rig.say(TgChat.private(BOB), BOB, text)
        rig.say(TgChat.private(ANN), ANN, "/start")
        rig.say(TgChat.private(ANN), ANN, "/help")
        await api.wait_for(lambda: len(rig.replies(TgChat.private(ANN))) == 2, what="answers")
        await rig.quiet(rig.key(TgChat.private(BOB)))
    assert rig.replies(TgChat.private(BOB)) == ["Private bot."]
    greeting, help_text = rig.replies(TgChat.private(ANN))
    assert greeting == "Hi, I'm Mira." and help_text.startswith("Commands:\n/start")
    with contextlib.closing(sqlite3.connect(tmp_path / "telegram.sqlite3")) as db:
        assert db.execute("SELECT COUNT(*) FROM messages").fetchone() == (0,)
        rows = db.execute(
            "SELECT c.chat_id, o.reply_message_id, o.status, o.text FROM outbox o "
            "JOIN conversations c ON c.id = o.conversation_id ORDER BY o.id"
        ).fetchall()
        chats = [row[0] for row in db.execute("SELECT chat_id FROM conversations")]
    assert rows == [(str(ANN.id), 0, "sent", ""), (str(ANN.id), 0, "sent", "")]
    assert chats == [str(ANN.id)]  # the stranger's chat is stored nowhere


async def test_model_output_never_mentions_anyone_on_telegram(
    tmp_path: Path, api: FakeTelegramAPI
) -> None:
    """A reply with a tg://user link and an @username reaches the group with neither a link
    nor a mention (nobody is notified), the words still readable."""
    text = "Ask [Ann](tg://user?id=1001) or @bob_the_builder, mail me at mira@example.org"
    llm = GatedLLM(answer=lambda _: text)
    async with running(tmp_path, api, llm) as rig:
        rig.say(GROUP, ANN, f"@{USERNAME} who can help?")
        await api.wait_for(rig.replies, what="the reply")
    (sent,) = api.sent_messages(TOKEN)
    assert "<a " not in sent.text  # no link at all, so no tg://user mention
    visible = sent.visible_text
    assert not re.search(r"(?<![\w@])@\w", visible)  # no @mention Telegram would parse
    assert visible.replace("\u2060", "") == (
        "Ask [Ann](tg://user?id=1001) or @bob_the_builder, mail me at mira@example.org"
    )
