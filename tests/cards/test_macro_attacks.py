r"""Review of issue 18: card macros a hostile card can write.

Break (fixed): ``{{roll:N}}`` with a number of thousands of digits raised ValueError (Python's
int() refuses over 4300 digits) wherever it was expanded: a greeting made /start fail, a
lorebook entry or post-history instruction made every turn of the chat fail and retry, so the
person never got an answer.

Break (fixed): expansion was quadratic. The lazy ``\{\{(.*?)\}\}`` searched from every "{{" to
the end of a text with no "}}" after it, and ``\s*MARK\s*`` for ``{{trim}}`` retried from
every blank of a long run: a card text of 40,000 characters took seconds per prompt, one of
1 MB hours, all of it on the event loop (every chat of the process waits).
"""

from __future__ import annotations

import time

from bot.config import LorebookSettings, LoreEntrySettings
from bot.core.clock import ManualClock
from bot.core.events import ConversationKey, SessionKey, StoredMessage, Turn
from bot.store.base import BaseStore
from memory.assemble import Budget, assemble
from memory.lorebook import MAX_CONTENT_CHARS
from tests.cards.cast import persona
from tests.fakes.llm import GatedLLM
from tests.harness import BOT, harness

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


def test_expansion_stays_linear_on_texts_made_to_be_slow() -> None:
    """A lorebook entry of "{{" (no "}}" after it) as long as an entry may be (30,000
    characters before issue 34 set the limit to 20,000), post-history instructions with 40,000
    blanks before a {{trim}}: the prompt is built at once (on main, about 12 seconds at 30,000
    characters; the time grows with the square of the length)."""
    pairs = MAX_CONTENT_CHARS // 2
    book = LorebookSettings(
        entries=[LoreEntrySettings(content="{{" * pairs, constant=True)], token_budget=100_000
    )
    pin = persona(
        "mira", "Mira", lorebook=book, post_history="Be brief." + " " * 40_000 + "x{{trim}}"
    ).pin()
    session = SessionKey(DM, 1)
    said = StoredMessage(1, session, 1, "user", "u1", "Sasha", "hello", 1000.0)
    started = time.perf_counter()
    built = assemble(pin, Turn(session, 1, (said,), 1000.0), Budget(prompt_tokens=60_000))
    elapsed = time.perf_counter() - started
    assert elapsed < 2.0, f"{elapsed:.1f}s"
    text = built.request.messages[-1].text
    assert "{{" * pairs in text and "Be brief." + " " * 40_000 + "x\n" in text
