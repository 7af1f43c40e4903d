"""Streamed replies on Telegram (issue 16): drafts in private chats, an edited message in
groups, the final reply replacing the preview, and the stop button. Real aiogram against the
fake Bot API; the chats' pacer runs on a manual clock (``drive`` jumps it to each paced send),
so nothing here waits for time to pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.exceptions import TelegramBadRequest
from aiogram.methods import SendMessageDraft

from adapters.telegram.adapter import ALLOWED_UPDATES, TelegramAdapter, WebhookSettings
from adapters.telegram.format import html_tail, render_html, split_message, tail
from adapters.telegram.preview import DraftPreview, PreviewContext
from adapters.telegram.updates import parse_update
from bot.config import QueueSettings, Settings, StorageSettings, TelegramBotSettings
from bot.core.clock import ManualClock
from bot.core.errors import AdapterError, PreviewThrottled, PreviewUnavailable, StoreError
from bot.core.events import ConversationKey, Inbound, Reply
from bot.core.ports import Preview, Streams, StreamSettings
from tests.adapters.test_telegram import ANN, BOB, BOT, PERSONA, TOKEN, _free_port, running
from tests.fakes.clock import SignallingClock, drive
from tests.fakes.llm import GatedLLM
from tests.fakes.telegram_api import FakeTelegramAPI, TgChat, parse_telegram_html, utf16_units

pytestmark = pytest.mark.timeout(60)

GROUP = TgChat.supergroup(-1001000000001, "Friends")
FORUM = TgChat.supergroup(-1001000000002, "Forum", forum=True)
PRIVATE = TgChat.private(ANN)
DRAFT = StreamSettings(mode="auto")
EDIT = StreamSettings(mode="edit")
MENTION = re.compile(r"(?<![\w@])@\w")  # an @mention Telegram would parse


def key(chat: TgChat, thread: int | None = None) -> ConversationKey:
    return ConversationKey("telegram", str(chat.id), None if thread is None else str(thread), BOT)


@pytest.fixture
async def api() -> AsyncIterator[FakeTelegramAPI]:
    async with FakeTelegramAPI() as server:
        server.add_bot(TOKEN, "mira_bot", "Mira")
        server.message_update(PRIVATE, ANN, "hi")  # the chats exist (Ann started the bot)
        server.message_update(GROUP, ANN, "hi all")
        yield server


@pytest.fixture
def clock() -> SignallingClock:
    return SignallingClock()


@pytest.fixture
async def adapter(api: FakeTelegramAPI, clock: ManualClock) -> AsyncIterator[TelegramAdapter]:
    bot = TelegramAdapter(bot_key=BOT, token=TOKEN, api_server=api.base_url, clock=clock)
    yield bot
    await bot.aclose()


def preview(
    adapter: TelegramAdapter,
    chat: TgChat,
    settings: StreamSettings = DRAFT,
    thread: int | None = None,
    reply_to: str | None = None,
) -> Preview:
    shown = adapter.preview(key(chat, thread), settings, reply_to=reply_to)
    assert shown is not None
    return shown


def text_of(api: FakeTelegramAPI, chat: TgChat, message_id: int) -> str:
    """What a message of the chat shows now."""
    message = api.message(chat.id, message_id)
    assert message is not None, f"message {message_id} is gone"
    return str(message["text"])


def words(count: int, start: int = 0) -> str:
    return " ".join(f"word{i}" for i in range(start, start + count))


# ------------------------------------------------------------------------------ drafts


@pytest.mark.parametrize(
    ("stop", "can_stop", "keep"),
    [("keep", True, True), ("discard", True, False), ("off", False, False)],
)
async def test_a_draft_shows_the_formatted_answer_with_the_stop_button_as_configured(
    api: FakeTelegramAPI, adapter: TelegramAdapter, stop: Any, can_stop: bool, keep: bool
) -> None:
    assert isinstance(adapter, Streams)
    draft = preview(adapter, PRIVATE, StreamSettings(mode="draft", stop=stop))
    assert draft.kind == "draft" and draft.message_id is None
    assert draft.draft_id is not None and 1 <= draft.draft_id < 2**31
    await draft.show("Hello **world**")
    await draft.show("Hello **world**")  # nothing new: no call
    await draft.show("Hello **world**, and more")
    first, second = api.drafts(TOKEN, PRIVATE.id)
    assert first.parse_mode == "HTML" and first.text == "Hello <b>world</b>"
    assert first.draft_id == second.draft_id == draft.draft_id
    assert (first.flag("can_stop"), first.flag("keep_on_stop")) == (can_stop, keep)
    assert api.draft_text(PRIVATE.id, draft.draft_id) == "Hello world, and more"
    await draft.discard()  # a draft expires on its own: nothing to call
    assert [c.method for c in api.calls] == ["sendMessageDraft"] * 2
    other = preview(adapter, PRIVATE)
    assert other.draft_id != draft.draft_id  # a fresh id per generation


async def test_a_draft_in_a_private_topic_goes_to_its_thread(
    api: FakeTelegramAPI, adapter: TelegramAdapter
) -> None:
    draft = preview(adapter, PRIVATE, StreamSettings(mode="edit"), thread=5)  # edit: still a draft
    assert draft.kind == "draft"
    await draft.show("in the topic")
    assert api.drafts(TOKEN)[0].thread_id == 5


async def test_a_long_answer_shows_its_latest_words_under_the_limit(
    api: FakeTelegramAPI, adapter: TelegramAdapter
) -> None:
    text = "**Intro** & <tags>\n\n" + words(2500)
    draft = preview(adapter, PRIVATE)
    await draft.show(text)
    shown = api.drafts(TOKEN)[0].visible_text
    assert utf16_units(shown) <= 4096 and utf16_units(shown) > 3900
    assert shown.startswith("…word") and shown.endswith("word2499")
    assert parse_telegram_html(render_html(text)).endswith(shown[1:])  # a true tail
    code = "```python\n" + "\n".join(f"x_{i} = {i}  # <{i}>" for i in range(400)) + "\n```"
    await draft.show(code)
    sent = api.drafts(TOKEN)[1]
    assert sent.text.startswith('…\n<pre><code class="language-python">')  # still code
    assert sent.visible_text.endswith("x_399 = 399  # <399>")
    assert utf16_units(sent.visible_text) <= 4096


def test_tails_are_cut_at_words_and_reopen_code_fences() -> None:
    assert tail("short", 100) == "short"
    assert tail("alpha beta gamma delta", 12) == "…gamma delta"
    assert tail("x" * 40, 20) == "…" + "x" * 19  # one word too long: cut by characters
    chunk = html_tail("```\n" + "\n".join(["line"] * 50) + "\n```\nafter", 60)
    assert chunk.markdown.startswith("…\n```\n") and chunk.markdown.endswith("after")
    assert chunk.html.startswith("…\n<pre>") and utf16_units(chunk.html) <= 60


async def test_drafts_never_mention_anyone(api: FakeTelegramAPI, adapter: TelegramAdapter) -> None:
    draft = preview(adapter, PRIVATE)
    await draft.show("Ask [Ann](tg://user?id=1001) or @bob_the_builder, mail mira@example.org")
    (sent,) = api.drafts(TOKEN)
    assert "<a " not in sent.text and not MENTION.search(sent.visible_text)
    assert "mira@example.org" in sent.visible_text


async def test_rejected_formatting_is_shown_as_plain_text(
    api: FakeTelegramAPI, adapter: TelegramAdapter
) -> None:
    api.fail_next(
        "sendMessageDraft", status=400, description="Bad Request: can't parse entities: oops"
    )
    draft = preview(adapter, PRIVATE)
    await draft.show("**bold** words")
    await draft.show("**bold** words and more")
    failed, plain, later = api.calls_of("sendMessageDraft")
    assert failed.status == 400 and failed.parse_mode == "HTML"
    assert plain.ok and plain.parse_mode is None and plain.text == "**bold** words"
    assert later.ok and later.parse_mode is None  # plain for the rest of this preview


async def test_groups_get_no_draft_and_only_edit_mode_posts_a_preview(
    adapter: TelegramAdapter,
) -> None:
    for settings in (StreamSettings(mode="auto"), StreamSettings(mode="draft")):
        assert adapter.preview(key(GROUP), settings) is None
        assert adapter.preview(key(FORUM, 7), settings) is None
    assert adapter.preview(key(PRIVATE), StreamSettings(mode="off")) is None
    assert adapter.preview(key(GROUP), StreamSettings(mode="off")) is None
    assert preview(adapter, GROUP, EDIT).kind == "edit"


async def test_a_draft_in_a_group_is_refused_by_telegram(api: FakeTelegramAPI) -> None:
    bot = Bot(TOKEN, session=AiohttpSession(api=TelegramAPIServer.from_base(api.base_url)))
    refused: list[int] = []
    try:
        context = PreviewContext(bot, BOT, lambda text: text)
        draft = DraftPreview(
            context, GROUP.id, None, DRAFT, on_refused=lambda: refused.append(GROUP.id)
        )
        with pytest.raises(PreviewUnavailable, match="TEXTDRAFT_PEER_INVALID"):
            await draft.show("hello group")
    finally:
        await bot.session.close()
    assert refused == [GROUP.id]
    assert api.calls_of("sendMessageDraft")[0].status == 400


async def test_a_chat_refusing_drafts_gets_no_more_previews(
    api: FakeTelegramAPI, adapter: TelegramAdapter
) -> None:
    api.fail_next("sendMessageDraft", status=403, description="Forbidden: bot was blocked")
    with pytest.raises(PreviewUnavailable, match="blocked"):
        await preview(adapter, PRIVATE).show("hello")
    assert adapter.preview(key(PRIVATE), DRAFT) is not None  # blocked may be undone
    api.fail_next("sendMessageDraft", status=400, description="Bad Request: TEXTDRAFT_PEER_INVALID")
    with pytest.raises(PreviewUnavailable):
        await preview(adapter, PRIVATE).show("hello")
    assert adapter.preview(key(PRIVATE), DRAFT) is None
    assert adapter.preview(key(TgChat.private(BOB)), DRAFT) is not None  # that chat only


async def test_a_flood_limit_on_a_draft_is_reported_at_once_without_waiting(
    api: FakeTelegramAPI, adapter: TelegramAdapter, clock: ManualClock
) -> None:
    api.fail_next("sendMessageDraft", status=429, retry_after=7)
    draft = preview(adapter, PRIVATE)
    started = time.monotonic()
    with pytest.raises(PreviewThrottled) as caught:
        await draft.show("hello")
    assert caught.value.retry_after == 7
    assert time.monotonic() - started < 1.0
    assert len(api.calls_of("sendMessageDraft")) == 1  # not retried
    with pytest.raises(PreviewThrottled):  # the chat is paused for 7 s, for every sender
        await draft.show("hello")
    assert len(api.calls_of("sendMessageDraft")) == 1  # refused without calling Telegram
    await clock.advance(7)
    await draft.show("hello")  # the same text again: it was never shown
    assert api.draft_text(PRIVATE.id, draft.draft_id or 0) == "hello"
    api.fail_next("sendMessageDraft", status=502, description=f"proxy: /bot{TOKEN}/x")
    with pytest.raises(AdapterError) as failed:
        await draft.show("hello again")
    assert type(failed.value) is AdapterError and TOKEN.split(":")[1] not in str(failed.value)


# ------------------------------------------------------------------------ edit previews


async def test_an_edit_preview_posts_then_edits_within_the_group_budget(
    api: FakeTelegramAPI, adapter: TelegramAdapter, clock: ManualClock
) -> None:
    asked = api.message_update(GROUP, ANN, "@mira_bot tell me")["message"]["message_id"]
    shown = preview(adapter, GROUP, EDIT, reply_to=str(asked))
    assert (shown.kind, shown.draft_id, shown.message_id) == ("edit", None, None)
    await shown.show("   ")  # nothing to post yet
    await shown.show("Hi @bob_the_builder")
    (post,) = api.sent_messages(TOKEN, GROUP.id)
    assert post.reply_to == asked and post.allow_sending_without_reply
    assert not MENTION.search(post.visible_text)
    assert shown.message_id == str(post.message_id)
    # 18 edits: 19 posts and edits in all, the 20th of the minute is left to the final reply.
    for count in range(2, 20):
        await shown.show(words(count))
        await clock.advance(1)
    await shown.show(words(19))  # shown already: no call, no slot
    edits = api.calls_of("editMessageText", TOKEN)
    assert len(edits) == 18 and all(c.ok for c in edits)
    assert text_of(api, GROUP, post.message_id) == words(19)
    with pytest.raises(PreviewThrottled) as caught:
        await shown.show(words(21))
    assert caught.value.retry_after == pytest.approx(60 - 18, abs=0.01)  # the post frees first
    other = preview(adapter, GROUP, EDIT)  # another turn in the same group shares the budget
    with pytest.raises(PreviewThrottled):
        await other.show("another answer")
    assert len(api.calls) == 19  # refused without calling Telegram
    await clock.advance(42)
    await shown.show(words(21))
    assert text_of(api, GROUP, post.message_id) == words(21)
    await shown.discard()
    assert api.message(GROUP.id, post.message_id) is None and shown.message_id is None


async def test_an_edit_preview_survives_refusals_and_failed_deletes(
    api: FakeTelegramAPI,
    adapter: TelegramAdapter,
    clock: ManualClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    shown = preview(adapter, GROUP, EDIT)
    api.fail_next("sendMessage", status=429, retry_after=3)
    with pytest.raises(PreviewThrottled) as caught:
        await shown.show("first")
    assert caught.value.retry_after == 3
    with pytest.raises(PreviewThrottled) as paused:  # the chat's pause holds for every sender
        await shown.show("first")
    assert paused.value.retry_after == pytest.approx(3)
    await clock.advance(3)
    await shown.show("first")
    await shown.show("first words")
    api.delete_message(GROUP.id, int(shown.message_id or 0))  # an admin deleted it
    with pytest.raises(PreviewUnavailable, match="message to edit not found"):
        await shown.show("first words, more")
    caplog.set_level(logging.INFO)
    await shown.discard()  # the delete fails too (already gone): logged, not raised
    assert "cannot be deleted" in caplog.text
    assert api.calls_of("deleteMessage")[0].status == 400
    assert api.calls_of("deleteMessage")[0].status == 400


# -------------------------------------------------------------------- the final reply


async def test_the_final_reply_edits_the_preview_into_its_first_chunk(
    api: FakeTelegramAPI, adapter: TelegramAdapter, clock: SignallingClock
) -> None:
    asked = api.message_update(GROUP, ANN, "@mira_bot tell me")["message"]["message_id"]
    shown = preview(adapter, GROUP, EDIT, reply_to=str(asked))
    await shown.show("Para one begins")
    paragraph = "A sentence about *mugs* & cups that goes on. " * 30
    text = "\n\n".join([paragraph.strip()] * 5)
    chunks = split_message(text)
    assert len(chunks) == 3
    reply = Reply(
        key(GROUP), text, reply_to_platform_message_id=str(asked), replaces=shown.message_id
    )
    await drive(clock, adapter.send(reply))
    (edit,) = api.calls_of("editMessageText", TOKEN)
    posted = api.sent_messages(TOKEN, GROUP.id)
    assert edit.ok and edit.params["message_id"] == shown.message_id
    assert edit.text == chunks[0].html
    assert len(posted) == 3  # the preview and two more: the answer is not shown twice
    assert all(c.reply_to is None for c in posted[1:])
    chat = [api.message(GROUP.id, c.message_id) for c in posted]
    visible = " ".join(str(m["text"]) for m in chat if m is not None)
    assert visible.split() == parse_telegram_html(render_html(text)).split()


async def test_a_final_reply_the_preview_already_shows_is_done(
    api: FakeTelegramAPI, adapter: TelegramAdapter
) -> None:
    shown = preview(adapter, GROUP, EDIT)
    await shown.show("All **done**")
    await adapter.send(Reply(key(GROUP), "All **done**", replaces=shown.message_id))
    (edit,) = api.calls_of("editMessageText", TOKEN)
    assert edit.status == 400  # "message is not modified": the person already sees it
    assert len(api.sent_messages(TOKEN, GROUP.id)) == 1  # nothing sent twice


async def test_a_final_reply_replacing_a_deleted_preview_is_posted_anew(
    api: FakeTelegramAPI, adapter: TelegramAdapter, clock: SignallingClock
) -> None:
    asked = api.message_update(GROUP, ANN, "@mira_bot hi")["message"]["message_id"]
    shown = preview(adapter, GROUP, EDIT, reply_to=str(asked))
    await shown.show("Hello the")
    gone = int(shown.message_id or 0)
    api.delete_message(GROUP.id, gone)
    reply = Reply(
        key(GROUP), "Hello there", reply_to_platform_message_id=str(asked), replaces=str(gone)
    )
    await drive(clock, adapter.send(reply))
    (edit,) = api.calls_of("editMessageText", TOKEN)
    assert edit.status == 400
    final = api.sent_messages(TOKEN, GROUP.id)[-1]
    assert final.visible_text == "Hello there" and final.reply_to == asked


# ------------------------------------------------------------------------- stop button


class StopRecorder:
    """An InboundHandler that records stop requests (the first ``failures`` raise)."""

    commands: tuple[tuple[str, str], ...] = ()
    admin_commands: tuple[str, ...] = ()

    def __init__(self, failures: int = 0) -> None:
        self.stops: list[tuple[ConversationKey, int]] = []
        self._failures = failures

    async def __call__(self, inbound: Inbound) -> None:
        pass  # the chats' set-up messages

    async def stopped(self, conversation: ConversationKey, draft_id: int) -> None:
        if self._failures:
            self._failures -= 1
            raise StoreError("database is locked")
        self.stops.append((conversation, draft_id))

    def rejected(self, platform: str, bot: str, kind: str) -> None:
        raise AssertionError((platform, bot, kind))

    def batch(self) -> contextlib.AbstractAsyncContextManager[None]:
        return contextlib.nullcontext()


@contextlib.asynccontextmanager
async def receiving(
    adapter: TelegramAdapter, handler: StopRecorder, ready: Callable[[], object]
) -> AsyncIterator[None]:
    task = asyncio.create_task(adapter.run(handler))
    try:
        deadline = time.monotonic() + 10
        while not ready():
            assert not task.done(), task.exception()
            assert time.monotonic() < deadline, "the adapter did not start"
            await asyncio.sleep(0.02)
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_the_stop_button_reaches_the_handler_through_polling(
    api: FakeTelegramAPI, adapter: TelegramAdapter
) -> None:
    handler = StopRecorder()
    plain_group = TgChat.supergroup(-1001000000003, "Plain")
    async with receiving(adapter, handler, lambda: api.polls_started(TOKEN)):
        api.push_stop(TOKEN, PRIVATE, 42)
        api.push_stop(TOKEN, PRIVATE, 43, thread_id=5)  # a private chat's topic
        api.push_stop(TOKEN, FORUM, 44, thread_id=7)
        api.push_stop(TOKEN, plain_group, 45, thread_id=9)  # a reply thread: no topic
        await api.wait_for(lambda: len(handler.stops) == 4, what="four stops")
        await api.wait_for(lambda: api.pending_updates(TOKEN) == 0, what="acknowledged")
    assert handler.stops == [
        (key(PRIVATE), 42),
        (key(PRIVATE, 5), 43),
        (key(FORUM, 7), 44),
        (key(plain_group), 45),
    ]
    allowed = api.calls_of("getUpdates")[0].params["allowed_updates"]
    assert "stopped_message_generation" in allowed


async def test_a_stop_that_was_not_stored_is_taken_again(
    api: FakeTelegramAPI, adapter: TelegramAdapter
) -> None:
    handler = StopRecorder(failures=1)
    async with receiving(adapter, handler, lambda: api.polls_started(TOKEN)):
        api.push_stop(TOKEN, PRIVATE, 42)
        await api.wait_for(lambda: handler.stops, what="the stop, retried")
        await api.wait_for(lambda: api.pending_updates(TOKEN) == 0, what="acknowledged")
    assert handler.stops == [(key(PRIVATE), 42)]


async def test_the_stop_button_reaches_the_handler_through_the_webhook(
    api: FakeTelegramAPI,
) -> None:
    port = _free_port()
    hook = WebhookSettings(
        url=f"http://127.0.0.1:{port}/hook", secret="s3cret", port=port, path="/hook"
    )
    adapter = TelegramAdapter(bot_key=BOT, token=TOKEN, api_server=api.base_url, webhook=hook)
    handler = StopRecorder()
    try:
        async with receiving(adapter, handler, lambda: api.webhook(TOKEN)[0]):
            update = api.stop_update(PRIVATE, 77)
            assert await api.deliver_webhook(TOKEN, update) == 200
            assert await api.deliver_webhook(TOKEN, update) == 200  # redelivered: once
    finally:
        await adapter.aclose()
    assert handler.stops == [(key(PRIVATE), 77)]
    assert "stopped_message_generation" in api.calls_of("setWebhook")[0].params["allowed_updates"]


def test_the_stop_update_is_read_and_asked_for() -> None:
    assert "stopped_message_generation" in ALLOWED_UPDATES
    raw = {"update_id": 5, "stopped_message_generation": {"chat": PRIVATE.to_dict(), "draft_id": 9}}
    parsed = parse_update(raw, Bot(TOKEN))
    assert parsed.update is not None and parsed.update.stopped_message_generation is not None
    assert parsed.update.stopped_message_generation.draft_id == 9


# ----------------------------------------------------------------------- the fake itself


async def test_the_fake_checks_drafts_like_telegram(api: FakeTelegramAPI) -> None:
    bot = Bot(TOKEN, session=AiohttpSession(api=TelegramAPIServer.from_base(api.base_url)))
    try:
        for draft_id, text, problem in (
            (0, "x", "DRAFT_ID_INVALID"),
            (1, "x" * 4097, "message is too long"),
            (1, "<b>open", "can't parse entities"),
        ):
            with pytest.raises(TelegramBadRequest, match=problem):
                await bot(
                    SendMessageDraft(
                        chat_id=PRIVATE.id, draft_id=draft_id, text=text, parse_mode="HTML"
                    )
                )
        assert await bot(SendMessageDraft(chat_id=PRIVATE.id, draft_id=3, text=""))  # "Thinking…"
    finally:
        await bot.session.close()
    assert [c.status for c in api.calls_of("sendMessageDraft")] == [400, 400, 400, 200]
    assert api.calls[0].at <= api.calls[-1].at


async def test_retract_deletes_a_preview_left_behind_and_never_raises(
    api: FakeTelegramAPI, adapter: TelegramAdapter
) -> None:
    shown = preview(adapter, GROUP, EDIT)
    await shown.show("an orphaned preview")
    orphan = shown.message_id or ""
    api.fail_next("deleteMessage", status=502)  # a blip: worth another try
    assert await adapter.retract(key(GROUP), orphan) is False
    assert api.message(GROUP.id, int(orphan)) is not None
    assert await adapter.retract(key(GROUP), orphan) is True
    assert api.message(GROUP.id, int(orphan)) is None
    # Already gone (Telegram's 400): logged only, and nothing to try again.
    assert await adapter.retract(key(GROUP), orphan) is True
    assert await adapter.retract(key(GROUP), "not-a-number") is True
    assert [c.status for c in api.calls_of("deleteMessage")] == [502, 200, 400]


# ------------------------------------------------------------------- the wired runtime


def _streaming(tmp_path: Path, stream: Any) -> Settings:
    return Settings(
        storage=StorageSettings(url=f"sqlite:///{tmp_path / 'stream.sqlite3'}"),
        queue=QueueSettings(debounce_seconds=0.1, max_wait_seconds=1.0, scan_interval_seconds=0.2),
        personas=[PERSONA],
        bots=[TelegramBotSettings(platform="telegram", id=BOT, persona=PERSONA.id, stream=stream)],
    )


async def test_on_the_runtime_a_private_reply_is_drafted_then_sent_once(
    tmp_path: Path, api: FakeTelegramAPI
) -> None:
    llm = GatedLLM(answer=lambda _: "Tea: boil water, steep **three** minutes.")
    async with running(tmp_path, api, llm, settings=_streaming(tmp_path, "auto")) as rig:
        rig.say(PRIVATE, ANN, "how do I make tea?")
        await api.wait_for(lambda: api.sent_messages(TOKEN, PRIVATE.id), what="the reply")
        await rig.quiet(key(PRIVATE))
    drafts = api.drafts(TOKEN, PRIVATE.id)
    (final,) = api.sent_messages(TOKEN, PRIVATE.id)
    assert drafts and all(d.at < final.at for d in drafts)  # nothing after the final message
    assert final.visible_text == "Tea: boil water, steep three minutes."


async def test_on_the_runtime_a_group_preview_becomes_the_reply(
    tmp_path: Path, api: FakeTelegramAPI
) -> None:
    text = "A long enough answer for the group, with @bob_the_builder named in it."
    llm = GatedLLM(answer=lambda _: text)
    async with running(tmp_path, api, llm, settings=_streaming(tmp_path, "edit")) as rig:
        asked = rig.say(GROUP, ANN, "@mira_bot tell us")
        await api.wait_for(lambda: api.sent_messages(TOKEN, GROUP.id), what="the preview")
        await rig.quiet(key(GROUP))
    (posted,) = api.sent_messages(TOKEN, GROUP.id)  # one message: the preview, then the reply
    assert posted.reply_to == asked and api.drafts(TOKEN) == []
    shown = text_of(api, GROUP, posted.message_id)
    assert shown.replace("\u2060", "") == text and not MENTION.search(shown)
