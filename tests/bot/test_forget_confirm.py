"""/forget asks before it erases (issue 40 item 2): on a platform without buttons (this
harness's outlet, like Discord or the console) the question ends with the commands to send,
and only the asker's ``/forget confirm`` erases. On both stores."""

from __future__ import annotations

from bot.core.clock import ManualClock
from bot.core.events import ConversationKey, UserKey
from bot.core.i18n import LRI, PDI, RLM
from bot.store.base import BaseStore
from memory.records import MemoryItem, UserMemory
from tests.fakes.llm import GatedLLM
from tests.harness import PERSONA, harness

DM = ConversationKey("telegram", "42")
SASHA = UserKey("telegram", "u1")


async def test_forget_asks_with_typed_commands_and_erases_only_on_confirm(
    store: BaseStore, clock: ManualClock
) -> None:
    fact = MemoryItem("semantic", "hobby", "loves the night train to Oslo")
    await store.set_user_memory(SASHA, UserMemory(items=(fact,)).to_json(), clock.now())
    async with harness(store, clock, GatedLLM()) as h:
        await h.say(DM, "/forget")
        question = h.outlet.texts()[-1]
        assert question == (
            "Erase everything I remember about you, in every chat with me? This cannot be "
            "undone.\n\n/forget confirm - Yes, erase\n/forget cancel - No, keep it"
        )
        assert h.outlet.replies[-1][1].choices is None  # no buttons here: the typed commands
        await h.say(DM, "/forget cancel")
        assert h.outlet.texts()[-1] == "Nothing was erased."
        assert "Oslo" in str(await store.get_user_memory(SASHA))
        await h.say(DM, "/forget confirm")
        assert h.outlet.texts()[-1].startswith("Done: I erased what I remembered about you")
        assert "Oslo" not in str(await store.get_user_memory(SASHA))


async def test_a_hebrew_persona_s_question_and_typed_commands_read_right_to_left(
    store: BaseStore, clock: ManualClock
) -> None:
    """The question, each typed command's line (docs/i18n.md) in the persona's language; each
    line opens right to left and the command is one left-to-right run."""
    persona = PERSONA.model_copy(update={"language": "he"})
    async with harness(store, clock, GatedLLM(), persona=persona) as h:
        await h.say(DM, "/forget")
        assert h.outlet.texts()[-1] == (
            f"{RLM}למחוק את כל מה שאני זוכר עליך, בכל הצ׳אטים איתי? אי אפשר לבטל את זה.\n\n"
            f"{RLM}כן, למחוק: {LRI}/forget confirm{PDI}\n"
            f"{RLM}לא, להשאיר: {LRI}/forget cancel{PDI}"
        )
        await h.say(DM, "/forget cancel")
        assert h.outlet.texts()[-1] == f"{RLM}שום דבר לא נמחק."
