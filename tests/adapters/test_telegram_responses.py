"""Answers of the Bot API are read without rebuilding their model class each time
(adapters/telegram/responses.py): the class aiogram parametrizes for an answer outlives a
garbage collection, so the next answer of that type finds it in pydantic's cache."""

from __future__ import annotations

import gc
import json
import weakref

from aiogram import Bot
from aiogram.methods import SendChatAction
from aiogram.methods.base import Response

from adapters.telegram.adapter import _RedactingSession

TOKEN = "5550123:AAResponses-token-abcdefghijklmnopq"


async def test_the_model_class_of_an_answer_survives_a_garbage_collection() -> None:
    session = _RedactingSession()
    bot = Bot(TOKEN, session=session)
    try:
        method = SendChatAction(chat_id=1, action="typing")
        answer = session.check_response(bot, method, 200, json.dumps({"ok": True, "result": True}))
        assert answer.result is True
        built = weakref.ref(Response[method.__returning__])  # what aiogram looked up
        del answer
        gc.collect()
        # Without a strong reference pydantic's weak cache lets the class go, and every
        # answer after a collection built it again (a model class: schema and validator).
        assert built() is not None
        assert Response[method.__returning__] is built()
    finally:
        await session.close()
