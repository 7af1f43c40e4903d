"""Issue 16's acceptance on Telegram, end to end: the real aiogram adapter polling the fake Bot
API, the wired runtime, and the real Anthropic client against the fake Messages API streaming
each reply token by token (server-sent events)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.config import Settings, TelegramBotSettings
from bot.core.events import ConversationKey
from bot.core.ports import StopButton
from bot.llm.anthropic import AnthropicLLM
from tests.adapters.test_telegram import (
    ANN,
    BOT,
    PERSONA,
    TOKEN,
    USERNAME,
    Rig,
    _settings,
    eventually,
    running,
)
from tests.fakes.messages_api import FakeMessagesAPI
from tests.fakes.telegram_api import FakeTelegramAPI, TgChat, TgUser

pytestmark = pytest.mark.timeout(90)
PRIVATE = TgChat.private(ANN)
BEN = TgUser(1002, "Ben")
GROUP = TgChat.group(-5001, "Tea club")
REPLY = (
    "Green tea likes water at about eighty degrees. Steep it for two minutes, taste, and "
    "give it another thirty seconds if you want it stronger. Enjoy the cup slowly."
)


@pytest.fixture
async def tg() -> AsyncIterator[FakeTelegramAPI]:
    async with FakeTelegramAPI() as server:
        server.add_bot(TOKEN, USERNAME, "Mira")
        yield server


@pytest.fixture
async def claude() -> AsyncIterator[FakeMessagesAPI]:
    async with FakeMessagesAPI() as server:
        server.token_interval = 0.03
        yield server


def _streaming(tmp_path: Path, stop_button: StopButton = "keep") -> Settings:
    base = _settings(tmp_path, debounce=0.2, max_wait=2.0)
    bot = TelegramBotSettings(
        platform="telegram",
        id=BOT,
        persona=PERSONA.id,
        stream_interval_seconds=0.2,
        stop_button=stop_button,
    )
    return base.model_copy(update={"bots": [bot]})


@contextlib.asynccontextmanager
async def bot(
    tmp_path: Path,
    tg: FakeTelegramAPI,
    claude: FakeMessagesAPI,
    stop_button: StopButton = "keep",
) -> AsyncIterator[Rig]:
    """The adapter polling the fake on the wired runtime, Claude streaming from the fake."""
    llm = AnthropicLLM(api_key="sk-test", base_url=claude.base_url, max_retries=0)
    try:
        async with running(tmp_path, tg, llm, settings=_streaming(tmp_path, stop_button)) as rig:
            yield rig
    finally:
        await llm.aclose()


async def recorded(rig: Rig, chat: TgChat) -> list[str]:
    key = ConversationKey("telegram", str(chat.id), None, BOT)
    session = await rig.rt.store.current_session(key)
    if session is None:
        return []
    return [m.text for m in await rig.rt.store.messages(session.key) if m.role == "assistant"]


async def test_a_private_chat_sees_drafts_then_one_final_message_equal_to_the_record(
    tmp_path: Path, tg: FakeTelegramAPI, claude: FakeMessagesAPI
) -> None:
    claude.reply_next(REPLY)
    async with bot(tmp_path, tg, claude) as rig:
        rig.say(PRIVATE, ANN, "how do I brew green tea?")
        await tg.wait_for(lambda: rig.replies(PRIVATE), what="the reply")
        await rig.quiet(rig.key(PRIVATE))
        stored = await recorded(rig, PRIVATE)
    drafts = tg.drafts(TOKEN, PRIVATE.id)
    assert len(drafts) >= 3, [d.params.get("text") for d in drafts]  # several updates
    texts = [str(d.params.get("text")) for d in drafts]
    assert all(REPLY.startswith(t.replace("…", "")) or "…" in t for t in texts)
    assert rig.replies(PRIVATE) == [REPLY] == stored  # exactly one final message
    final = tg.sent_messages(TOKEN, PRIVATE.id)[0]
    assert all(d.at < final.at for d in drafts)  # no draft after the final message
    assert claude.call_count == 1 and claude.last_request.streamed


async def test_a_message_mid_stream_hands_the_draft_to_the_next_generation_one_reply_for_both(
    tmp_path: Path, tg: FakeTelegramAPI, claude: FakeMessagesAPI
) -> None:
    claude.reply_next(REPLY)  # the generation the final check discards
    claude.reply_next("Both noted: green tea at eighty degrees, and yes, with honey.")
    pause = claude.pause_after_tokens(8)
    async with bot(tmp_path, tg, claude) as rig:
        rig.say(PRIVATE, ANN, "how do I brew green tea?")
        await asyncio.wait_for(pause.reached.wait(), 20)
        await tg.wait_for(lambda: tg.drafts(TOKEN, PRIVATE.id), what="a draft")
        rig.say(PRIVATE, ANN, "and can I add honey?")
        key = rig.key(PRIVATE)

        async def both_stored() -> bool:
            return len(await rig.stored_texts(key)) == 2

        await eventually(both_stored, what="the second message stored")  # mid-stream
        pause.release()
        await tg.wait_for(lambda: rig.replies(PRIVATE), what="the reply", within=30)
        await rig.quiet(rig.key(PRIVATE))
        stored = await recorded(rig, PRIVATE)
    assert rig.replies(PRIVATE) == ["Both noted: green tea at eighty degrees, and yes, with honey."]
    assert stored == rig.replies(PRIVATE)
    assert claude.call_count == 2
    second = claude.requests[1].last_user_text
    assert "green tea" in second and "honey" in second  # one reply covers both messages
    drafts = tg.drafts(TOKEN, PRIVATE.id)
    # The cut generation's draft was continued by the next one (the same id: Telegram
    # animates the change, no second bubble), which wrote the answer to both into it.
    assert len({d.params.get("draft_id") for d in drafts}) == 1
    assert str(drafts[-1].params.get("text")).startswith("Both noted")


async def test_a_model_error_mid_stream_sends_and_records_nothing_and_the_turn_is_retried(
    tmp_path: Path, tg: FakeTelegramAPI, claude: FakeMessagesAPI
) -> None:
    claude.reply_next(REPLY)
    claude.fail_midstream_next(after_tokens=6, kind="disconnect")
    claude.reply_next("Eighty degrees, two minutes.")
    async with bot(tmp_path, tg, claude) as rig:
        rig.say(PRIVATE, ANN, "how do I brew green tea?")
        await tg.wait_for(lambda: claude.call_count >= 1, what="the first call")
        await tg.wait_for(
            lambda: [m for m in rig.replies(PRIVATE) if "Eighty" in m], what="retry", within=30
        )
        await rig.quiet(rig.key(PRIVATE))
        stored = await recorded(rig, PRIVATE)
    assert claude.call_count == 2
    assert stored == ["Eighty degrees, two minutes."]  # no half reply recorded
    sent = rig.replies(PRIVATE)
    assert "Eighty degrees, two minutes." in sent
    assert not any(REPLY[:20] in m for m in sent)  # nothing of the broken stream was sent


async def test_in_a_group_no_draft_is_ever_requested(
    tmp_path: Path, tg: FakeTelegramAPI, claude: FakeMessagesAPI
) -> None:
    claude.reply_next(REPLY)
    async with bot(tmp_path, tg, claude) as rig:
        rig.say(GROUP, BEN, f"@{USERNAME} how do I brew green tea?")
        await tg.wait_for(lambda: rig.replies(GROUP), what="the reply")
        await rig.quiet(rig.key(GROUP))
    assert tg.calls_of("sendMessageDraft") == []
    assert rig.replies(GROUP) == [REPLY]


async def test_the_stop_button_keeps_what_was_shown_and_the_turn_does_not_run_again(
    tmp_path: Path, tg: FakeTelegramAPI, claude: FakeMessagesAPI
) -> None:
    claude.reply_next(REPLY)
    claude.token_interval = 0.1
    async with bot(tmp_path, tg, claude) as rig:
        rig.say(PRIVATE, ANN, "how do I brew green tea?")
        await tg.wait_for(lambda: len(tg.drafts(TOKEN, PRIVATE.id)) >= 2, what="drafts")
        draft = tg.drafts(TOKEN, PRIVATE.id)[-1]
        assert draft.params.get("can_stop") in (True, "true", "True")
        tg.push_stop(TOKEN, PRIVATE, int(draft.params["draft_id"]))
        await tg.wait_for(lambda: rig.replies(PRIVATE), what="the kept reply", within=20)
        await rig.quiet(rig.key(PRIVATE))
        stored = await recorded(rig, PRIVATE)
        await asyncio.sleep(1.0)
        spent = await rig.rt.store.usage_since(0.0)
    # The cancelled call reported no usage; it is charged all the same (the prompt as
    # assembled and what was shown), so stopping early never makes replies free.
    assert spent.turns == 1 and spent.input_tokens > 0 and spent.output_tokens > 0
    (kept,) = rig.replies(PRIVATE)
    assert kept != REPLY and REPLY.startswith(kept)  # what the person saw, not the rest
    assert stored == [kept]
    assert claude.call_count == 1  # a stopped generation does not run again


async def test_the_stop_button_can_discard_the_reply(
    tmp_path: Path, tg: FakeTelegramAPI, claude: FakeMessagesAPI
) -> None:
    claude.reply_next(REPLY)
    claude.token_interval = 0.1
    async with bot(tmp_path, tg, claude, stop_button="discard") as rig:
        rig.say(PRIVATE, ANN, "how do I brew green tea?")
        await tg.wait_for(lambda: tg.drafts(TOKEN, PRIVATE.id), what="a draft")
        draft = tg.drafts(TOKEN, PRIVATE.id)[-1]
        tg.push_stop(TOKEN, PRIVATE, int(draft.params["draft_id"]))
        await rig.quiet(rig.key(PRIVATE))
        await asyncio.sleep(1.0)
        stored = await recorded(rig, PRIVATE)
    assert rig.replies(PRIVATE) == [] and stored == []
    assert claude.call_count == 1


async def test_the_stop_button_ends_a_stream_that_stalls(
    tmp_path: Path, tg: FakeTelegramAPI, claude: FakeMessagesAPI
) -> None:
    # The model goes quiet mid-answer (no delta comes): the stop still ends the generation
    # at once, keeps what was shown, and the turn does not run again when the stall ends.
    claude.reply_next(REPLY)
    pause = claude.pause_after_tokens(8)
    async with bot(tmp_path, tg, claude) as rig:
        rig.say(PRIVATE, ANN, "how do I brew green tea?")
        await asyncio.wait_for(pause.reached.wait(), 20)
        await tg.wait_for(lambda: tg.drafts(TOKEN, PRIVATE.id), what="a draft")
        await asyncio.sleep(0.5)  # the last delta is shown; nothing more comes
        draft = tg.drafts(TOKEN, PRIVATE.id)[-1]
        tg.push_stop(TOKEN, PRIVATE, int(draft.params["draft_id"]))
        try:
            await tg.wait_for(lambda: rig.replies(PRIVATE), what="the kept reply", within=3)
        finally:
            pause.release()
        await rig.quiet(rig.key(PRIVATE))
        stored = await recorded(rig, PRIVATE)
    (kept,) = rig.replies(PRIVATE)
    assert kept != REPLY and REPLY.startswith(kept)
    assert stored == [kept]
    assert claude.call_count == 1
