"""Review of issue 18: openings, several personas per bot, check-ins and reminders.

Break (fixed): in a group, /start and /new answered with the opening's ``{{user}}`` as the
asker's name ("Hello Bob, welcome.") while the pin told the model it had opened with
"Hello everyone, welcome.": the opening shown and the opening pinned disagreed.
"""

from __future__ import annotations

from bot.core.clock import ManualClock
from bot.core.events import ConversationKey
from bot.store.base import BaseStore
from tests.fakes.llm import GatedLLM
from tests.harness import BOT, harness
from tests.review18.cast import persona

DM = ConversationKey("telegram", "700", None, BOT)
GROUP = ConversationKey("telegram", "-100", None, BOT)


async def test_a_group_is_greeted_with_the_opening_its_pin_names(
    store: BaseStore, clock: ManualClock
) -> None:
    mira = persona("mira", "Mira", first_message=["Hello {{user}}, welcome."])
    llm = GatedLLM()
    async with harness(store, clock, llm, persona=mira) as h:
        await h.say(GROUP, "/new", private=False, name="Bob")
        await h.say(GROUP, "hi all", private=False, name="Bob")
        await h.say(DM, "/start")
        await h.say(DM, "hi")
        await h.advance(3, step=0.5)
        group_answer, dm_answer = h.outlet.texts(GROUP)[0], h.outlet.texts(DM)[0]
    shown = group_answer.split("\n", 1)[1]
    assert shown == "Hello everyone, welcome."
    pins = {r.messages[-1].text.splitlines()[-1]: r.system[0].text for r in llm.requests}
    assert pins["  hi all"].endswith(f"with:\n{shown}")
    # A private chat's opening names the person, in the answer and in the pin alike.
    assert dm_answer == "Hello Sasha, welcome." and pins["hi"].endswith(f"with:\n{dm_answer}")
