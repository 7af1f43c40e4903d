"""Review of issue 18: card macros a hostile card can write.

Break (fixed): ``{{roll:N}}`` with a number of thousands of digits raised ValueError (Python's
int() refuses over 4300 digits) wherever it was expanded: a greeting made /start fail, a
lorebook entry or post-history instruction made every turn of the chat fail and retry, so the
person never got an answer.
"""

from __future__ import annotations

from bot.config import LorebookSettings, LoreEntrySettings
from bot.core.clock import ManualClock
from bot.core.events import ConversationKey
from bot.store.base import BaseStore
from tests.fakes.llm import GatedLLM
from tests.harness import BOT, harness
from tests.review18.cast import persona

DM = ConversationKey("telegram", "700", None, BOT)
HUGE_ROLL = "{{roll:" + "9" * 5000 + "}}"


async def test_a_roll_of_thousands_of_digits_is_left_as_written(
    store: BaseStore, clock: ManualClock
) -> None:
    book = LorebookSettings(
        entries=[LoreEntrySettings(content=f"The dice say {HUGE_ROLL}.", constant=True)],
        token_budget=5000,
    )
    card = persona(
        "mira",
        "Mira",
        first_message=[f"Hi! {HUGE_ROLL}"],
        lorebook=book,
        post_history=f"Roll {HUGE_ROLL} first.",
    )
    llm = GatedLLM()
    async with harness(store, clock, llm, persona=card) as h:
        await h.say(DM, "/start")
        await h.say(DM, "hello")
        await h.advance(3, step=0.5)
        texts = h.outlet.texts(DM)
    assert len(texts) == 2 and texts[0] == f"Hi! {HUGE_ROLL}" and texts[1].startswith("reply")
    (request,) = llm.requests
    said = request.messages[-1].text
    assert f"The dice say {HUGE_ROLL}." in said and f"Roll {HUGE_ROLL} first." in said
