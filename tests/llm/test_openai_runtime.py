"""The openai provider inside the real runtime: Telegram polling (the real TelegramAdapter
against FakeTelegramAPI) in, OpenAICompatLLM against FakeOpenAIAPI as the model, the shape of
bench/typist.py's ``_mode``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Final

from adapters.telegram.adapter import TelegramAdapter
from bot.app.build import runtime
from bot.config import (
    PersonaSettings,
    QueueSettings,
    Settings,
    StorageSettings,
    TelegramBotSettings,
)
from bot.llm.openai import OpenAICompatLLM
from tests.fakes.openai_api import FakeOpenAIAPI
from tests.fakes.telegram_api import FakeTelegramAPI, TgChat, TgUser

TOKEN: Final = "5550123:AAOpenAiRuntime-token-abcdefghijklm"
BOT: Final = "mira-telegram"
MODEL: Final = "llama3.2:3b"
REPLY: Final = "Three messages, one answer: your order ships on Monday, Sasha. Anything else?"
PERSONA: Final = PersonaSettings(
    id="mira", name="Mira", system="You are Mira.", first_message=["Hi"], model=MODEL
)


async def test_a_burst_of_three_is_one_streamed_reply_from_one_call_holding_all_three(
    tmp_path: Path,
) -> None:
    async with FakeTelegramAPI() as tg, FakeOpenAIAPI(reply_text=REPLY) as api:
        tg.add_bot(TOKEN, "mira_bot", "Mira")
        api.token_interval = 0.02  # a draft has something to show while the answer is written
        settings = Settings(
            storage=StorageSettings(url=f"sqlite:///{tmp_path / 'bot.sqlite3'}"),
            queue=QueueSettings(debounce_seconds=1.0, scan_interval_seconds=0.2),
            personas=[PERSONA],
            bots=[TelegramBotSettings(platform="telegram", id=BOT, persona="mira")],
        )
        adapter = TelegramAdapter(bot_key=BOT, token=TOKEN, api_server=tg.base_url)
        llm = OpenAICompatLLM(base_url=api.api_url, max_retries=0)
        async with runtime(settings, llm=llm, adapters={BOT: (PERSONA, adapter)}) as rt:
            task = asyncio.create_task(adapter.run(rt.router))
            try:
                await tg.wait_for(lambda: tg.polls_started(TOKEN), what="polling")
                sasha = TgUser(7001, "Sasha")
                chat = TgChat.private(sasha)
                burst = ["hi", "quick question", "about my order"]
                for text in burst:
                    tg.push_message(TOKEN, chat, sasha, text)
                await tg.wait_for(
                    lambda: tg.sent_messages(TOKEN, chat.id), what="the reply", within=30
                )
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                await adapter.aclose()
                await llm.aclose()

        # One model call, streamed, whose prompt holds the whole burst: nothing is left
        # pending, so no second turn (and no second reply) can follow.
        [call] = [r for r in api.requests if "quick question" in str(r.body["messages"])]
        assert call.streamed and call.body["model"] == MODEL
        user_text = "\n".join(
            str(m["content"]) for m in call.body["messages"] if m["role"] == "user"
        )
        assert all(text in user_text for text in burst)
        assert api.call_count == 1

        # Exactly one reply, the whole answer, after a draft that showed it being written.
        [reply] = tg.sent_messages(TOKEN, chat.id)
        assert reply.visible_text == REPLY
        drafts = tg.drafts(TOKEN, chat.id)
        assert drafts, "the answer was not streamed into a draft"
        assert all(REPLY.startswith(d.visible_text.rstrip("…").rstrip()) for d in drafts)
