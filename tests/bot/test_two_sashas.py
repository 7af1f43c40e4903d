"""docs/architecture.md#keys end to end: the 16-step log replayed as chat through the real pipeline.

Two conversations whose users are both called "Sasha". The model (a fake that reads only its
prompt) answers "which mug?" from what the prompt holds, so a reply shows exactly which
scope's history reached the model.
"""

from __future__ import annotations

from bot.core.clock import ManualClock
from bot.core.events import ConversationKey
from bot.store.base import BaseStore
from tests.fakes.llm import GatedLLM, mug_oracle
from tests.harness import Harness, harness

C1 = ConversationKey("telegram", "1001")
C2 = ConversationKey("telegram", "2002")


async def _ask(h: Harness, conv: ConversationKey, author: str) -> str:
    before = len(h.outlet.texts(conv))
    await h.say(conv, "which mug did I pick?", author=author)
    await h.advance(2)
    texts = h.outlet.texts(conv)
    assert len(texts) == before + 1
    return texts[-1]


async def _pick(h: Harness, conv: ConversationKey, author: str, colour: str) -> None:
    await h.say(conv, f"I pick the {colour} mug", author=author)
    await h.advance(2)


async def test_two_sashas_through_the_pipeline(store: BaseStore, clock: ManualClock) -> None:
    llm = GatedLLM(answer=mug_oracle)
    async with harness(store, clock, llm) as h:
        await _pick(h, C1, "11", "blue")  # steps 1-2: C1/S1, "Sasha"
        await _pick(h, C2, "22", "green")  # steps 3-4: C2/S1, also "Sasha"
        assert await _ask(h, C1, "11") == "you picked the blue mug"  # 5
        assert await _ask(h, C2, "22") == "you picked the green mug"  # 6
        await _pick(h, C1, "11", "white")  # 7
        assert await _ask(h, C2, "22") == "you picked the green mug"  # 8
        assert await _ask(h, C1, "11") == "you picked the white mug"  # 9
        await h.say(C1, "/new", author="11")  # 10-11: end S1, open S2
        assert "New session started (#2)" in h.outlet.texts(C1)[-1]
        assert await _ask(h, C1, "11") == "you have not picked a mug"  # 12
        assert await _ask(h, C2, "22") == "you picked the green mug"  # 13
        await _pick(h, C1, "11", "red")  # 14
        assert await _ask(h, C1, "11") == "you picked the red mug"  # 15
        assert await _ask(h, C2, "22") == "you picked the green mug"  # 16
        # No prompt of one conversation ever carried the other's words.
        for request in llm.requests:
            text = " ".join(m.text for m in request.messages)
            assert not ("green" in text and ("blue" in text or "white" in text or "red" in text))


async def test_same_display_name_same_chat_different_people(
    store: BaseStore, clock: ManualClock
) -> None:
    """In one group, two people called Sasha keep their own attribution (user id, not name)."""
    group = ConversationKey("telegram", "-100500")
    llm = GatedLLM()
    async with harness(store, clock, llm) as h:
        await h.say(group, "I like tea", author="11", name="Sasha")
        await h.say(group, "I like coffee", author="22", name="Sasha")
        await h.advance(2)
        assert llm.calls == 1
        assert llm.last_input() == (
            '"Sasha" (user "11"):\n  I like tea\n"Sasha" (user "22"):\n  I like coffee'
        )
