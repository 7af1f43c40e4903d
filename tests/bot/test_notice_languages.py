"""Notices of a reply turn in the persona's language (docs/i18n.md): the built-in trouble
notice is translated, an operator's own is sent as written; the runtime of the composition root
on both stores, the model failing as an overloaded API does."""

from __future__ import annotations

import pytest

from bot.config.llm import LLMSettings
from bot.core.clock import ManualClock
from bot.core.errors import ModelUnavailable
from bot.core.events import ConversationKey
from bot.store.base import BaseStore
from tests.bot.test_pipeline import FlakyLLM
from tests.harness import PERSONA, harness

DM = ConversationKey("telegram", "42")
BUILT_IN = LLMSettings().trouble_notice


@pytest.mark.parametrize(
    ("configured", "sent"),
    [
        (BUILT_IN, "Мені зараз важко зібратися з думками; незабаром відповім."),
        ("Back in a moment!", "Back in a moment!"),  # the operator's own: every language
    ],
    ids=["built-in", "own"],
)
async def test_the_trouble_notice_speaks_the_persona_s_language_unless_overridden(
    store: BaseStore, clock: ManualClock, configured: str, sent: str
) -> None:
    persona = PERSONA.model_copy(update={"language": "uk"})
    llm = FlakyLLM([ModelUnavailable("overloaded", status=529)] * 2)
    async with harness(store, clock, llm, trouble_notice=configured, persona=persona) as h:
        await h.say(DM, "hello")
        await h.advance(8, step=0.5)  # two retries, 2 s then 4 s later
        assert h.outlet.texts() == [sent, "ok: hello"]
