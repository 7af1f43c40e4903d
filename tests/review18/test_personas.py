"""Review of issue 18: openings, several personas per bot, check-ins and reminders.

Break (fixed): in a group, /start and /new answered with the opening's ``{{user}}`` as the
asker's name ("Hello Bob, welcome.") while the pin told the model it had opened with
"Hello everyone, welcome.": the opening shown and the opening pinned disagreed.

Break (fixed): check-ins and reminders of a chat that switched to another persona were built
with the bot's default persona's memory policy (its prompt budget and window), not the chat
persona's: a persona with a larger pin and its own larger budget checked in on a person with
none of the conversation in its prompt.
"""

from __future__ import annotations

from bot.config import MemorySettings
from bot.core.clock import ManualClock
from bot.core.events import ConversationKey
from bot.store.base import BaseStore
from tests.bot.test_initiatives import HOUR, NO_QUIET, T0, Scripted
from tests.fakes.llm import GatedLLM
from tests.harness import BOT, harness
from tests.review18.cast import cast, persona

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


async def test_a_check_in_is_built_with_the_chat_personas_budget(store: BaseStore) -> None:
    clock = ManualClock(T0)
    llm = Scripted()
    mira = persona("mira", "Mira")  # the bot's default: [memory] prompt_budget_tokens = 6000
    orin = persona(
        "orin",
        "Orin",
        description="Orin knows every bend of the river. " * 800,  # ~9,000 tokens
        memory=MemorySettings(prompt_budget_tokens=20_000),
        initiative=NO_QUIET,
    )
    async with cast(store, clock, llm, [mira, orin]) as h:
        await h.say(DM, "/persona orin")
        await h.say(DM, "my exam is tomorrow")
        await h.advance(3, step=0.5)
        await h.advance(2.2 * HOUR, step=300)
        texts = h.outlet.texts(DM)
    (decision,) = llm.decisions()
    assert "Orin knows every bend" in decision.system[0].text
    assert "my exam is tomorrow" in "\n".join(m.text for m in decision.messages)
    assert texts[-1] == "Hey Sasha, how did the exam go?"
