"""Review of issue 18: openings, several personas per bot, check-ins and reminders.

Break (fixed): in a group, /start and /new answered with the opening's ``{{user}}`` as the
asker's name ("Hello Bob, welcome.") while the pin told the model it had opened with
"Hello everyone, welcome.": the opening shown and the opening pinned disagreed.

Break (fixed): check-ins and reminders of a chat that switched to another persona were built
with the bot's default persona's memory policy (its prompt budget and window), not the chat
persona's: a persona with a larger pin and its own larger budget checked in on a person with
none of the conversation in its prompt.

What held is tested below them.
"""

from __future__ import annotations

import asyncio

from bot.config import MemorySettings
from bot.core.clock import ManualClock
from bot.core.events import ConversationKey, UserKey
from bot.store.base import BaseStore
from memory.records import MemoryItem, UserMemory
from tests.bot.test_initiatives import HOUR, NO_QUIET, T0, Scripted
from tests.cards.cast import cast, persona
from tests.fakes.llm import GatedLLM
from tests.harness import BOT, harness

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


# -- what held ------------------------------------------------------------------------------


async def test_a_check_in_mira_is_writing_when_the_chat_switches_is_never_sent(
    store: BaseStore,
) -> None:
    """The check-in's final check wants the session it was written in still open: a /persona
    switch during the decision discards it, so Orin's chat never gets Mira's words."""
    clock = ManualClock(T0)
    llm = Scripted()
    mira = persona("mira", "Mira", initiative=NO_QUIET)
    async with cast(store, clock, llm, [mira, persona("orin", "Orin")]) as h:
        await h.say(DM, "my exam is tomorrow")
        await h.advance(3, step=0.5)
        llm.gate = asyncio.Event()
        deciding = asyncio.ensure_future(h.advance(2.2 * HOUR, step=300))
        await asyncio.wait_for(llm.waiting.wait(), 10)
        await h.say(DM, "/persona orin")
        llm.gate.set()
        await deciding
        await h.advance(30 * HOUR, step=1800)
        texts = h.outlet.texts(DM)
        replies = [
            m.text for s in await store.list_sessions(DM) for m in await store.messages(s.key)
        ]
    assert texts == ["reply to: my exam is tomorrow", "Hi, I'm Orin."]
    assert "Hey Sasha, how did the exam go?" not in replies


async def test_a_persona_removed_from_the_bot_leaves_its_chats_to_the_default(
    store: BaseStore, clock: ManualClock
) -> None:
    mira, orin, kai = persona("mira", "Mira"), persona("orin", "Orin"), persona("kai", "Kai")
    llm = GatedLLM()
    async with cast(store, clock, llm, [mira, orin, kai]) as h:
        await h.say(DM, "/persona orin")
        await h.say(DM, "hello ferryman")
        await h.advance(3, step=0.5)
    async with cast(store, clock, llm, [mira, orin, kai], on_bot=["mira", "kai"]) as h:
        await h.say(DM, "still there?")
        await h.advance(3, step=0.5)
        await h.say(DM, "/persona")
        await h.say(DM, "/persona kai")
        texts = h.outlet.texts(DM)
    turns = [r for r in llm.requests if r.model.startswith("model-")]  # not memory's
    assert [r.model for r in turns] == ["model-orin", "model-mira"]
    assert turns[1].system[0].text.startswith("You are Mira.")
    listing, typed = texts[-2].split("\n\n")  # the list, then the choices as commands
    assert listing.splitlines()[1:] == ["  Mira (mira)", "  Kai (kai)"]  # Orin is no choice
    assert "orin" not in typed and "/persona kai" in typed
    assert texts[-1] == "Hi, I'm Kai."


async def test_memory_follows_the_person_across_personas_and_never_into_a_group(
    store: BaseStore, clock: ManualClock
) -> None:
    """What Mira learned about Sasha in private, Orin knows in private; in a group that
    switched to Orin, the private fact stays out of the prompt."""
    record = UserMemory((MemoryItem("semantic", "secret", "is afraid of water", private=True),))
    await store.set_user_memory(UserKey("telegram", "u1"), record.to_json(), clock.now())
    llm = GatedLLM()
    async with cast(store, clock, llm, [persona("mira", "Mira"), persona("orin", "Orin")]) as h:
        for chat, private in ((DM, True), (GROUP, False)):
            await h.say(chat, "/persona orin", private=private)
            await h.say(chat, "hello", private=private)
            await h.advance(3, step=0.5)
    private_request, group_request = [r for r in llm.requests if r.model.startswith("model-")]
    assert {r.model for r in (private_request, group_request)} == {"model-orin"}
    assert "afraid of water" in "\n".join(b.text for b in private_request.system)
    assert "afraid of water" not in str(group_request)
