"""Memory end to end through the pipeline: sessions, /memory, /forget, long conversations."""

from __future__ import annotations

import itertools
import json
import logging

import pytest

from bot.core.clock import ManualClock
from bot.core.events import ConversationKey, Inbound, SessionKey, UserKey
from bot.core.llm import BaseLLM, ModelRequest, ModelResult, Usage
from bot.llm.offline import OfflineLLM
from bot.store.base import BaseStore
from memory.assemble import Budget
from memory.service import MemoryPolicy
from memory.tokens import estimate_tokens
from tests.fakes.llm import GatedLLM
from tests.harness import PIN, Harness, harness
from tests.store.helpers import close_session

DM = ConversationKey("telegram", "500")
GROUP = ConversationKey("telegram", "-100")


def system_text(request: ModelRequest) -> str:
    return "\n".join(b.text for b in request.system)


async def turn(
    h: Harness, conv: ConversationKey, text: str, author: str = "11", name: str = "Ada"
) -> None:
    await h.say(conv, text, author=author, name=name)
    await h.advance(2, step=1.0)


async def test_facts_cross_sessions_forget_erases_them_and_choices_stay_behind(
    store: BaseStore, clock: ManualClock
) -> None:
    llm = GatedLLM()
    async with harness(store, clock, llm, memory_llm=OfflineLLM()) as h:
        for text in (
            "my name is Ada",
            "I work as a nurse",
            "I'm afraid of spiders",
            "next week I have my driving exam",
        ):
            await turn(h, DM, text)
        s1 = await store.current_session(DM)
        assert s1 is not None
        await store.set_state(s1.key, "choice", "blue mug", clock.now())  # session scope
        await h.say(DM, "/new", author="11", name="Ada")
        await h.memory.wait_idle()  # /new learns from the session that just ended
        learned = await h.memory.user_memory(UserKey("telegram", "11"))
        assert len(learned.items) == 4
        await turn(h, DM, "hello again")
        first_of_s2 = system_text(llm.requests[-1])
        for fact in (
            '"name": ["Ada"]',
            '"occupation": ["nurse"]',
            '"fear": ["spiders"]',
            "driving exam",
        ):
            assert fact in first_of_s2
        assert "blue mug" not in first_of_s2
        await h.say(DM, "/memory", author="11", name="Ada")
        assert "occupation: nurse" in h.outlet.texts(DM)[-1]
        await h.say(DM, "/forget confirm", author="11", name="Ada")
        await turn(h, DM, "do you know me?")
        after = system_text(llm.requests[-1])
        assert "nurse" not in after and "<user_memory>" not in after
        # What was said before /forget is never learned again.
        s2 = await store.current_session(DM)
        assert s2 is not None
        await close_session(store, DM, clock.now(), "test")
        await h.memory.extract_due()
        assert (await h.memory.user_memory(UserKey("telegram", "11"))).items == ()


async def test_memory_command_in_a_group_shows_only_the_asker(
    store: BaseStore, clock: ManualClock
) -> None:
    async with harness(store, clock, GatedLLM(), memory_llm=OfflineLLM()) as h:
        await turn(h, GROUP, "my name is Ada", author="11")
        await turn(h, GROUP, "I work as a pilot", author="22", name="Bo")
        await close_session(store, GROUP, clock.now(), "test")
        await h.memory.extract_due()
        await h.say(GROUP, "/memory", author="22", name="Bo")
        answer = h.outlet.texts(GROUP)[-1]
        assert "pilot" in answer and "Ada" not in answer


class BrokenExtractor(BaseLLM):
    """Answers memory tasks with malformed JSON."""

    async def complete(self, request: ModelRequest) -> ModelResult:
        return ModelResult('{"semantic": [{"field": "name"', Usage(), "broken")


async def test_malformed_extraction_keeps_the_previous_record(
    store: BaseStore, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    async with harness(store, clock, GatedLLM(), memory_llm=OfflineLLM()) as h:
        await turn(h, DM, "my name is Ada")
        await close_session(store, DM, clock.now(), "test")
        await h.memory.extract_due()
    user = UserKey("telegram", "11")
    before = await store.get_user_memory(user)
    async with harness(store, clock, GatedLLM(), memory_llm=BrokenExtractor()) as h2:
        await turn(h2, DM, "my name is Bob")
        await close_session(store, DM, clock.now(), "test")
        with caplog.at_level(logging.WARNING, logger="personabot.memory"):
            await h2.memory.extract_due()
        assert await store.get_user_memory(user) == before
        assert "not updated (kept as it was)" in caplog.text


# SQLite only: what it proves is the memory's (folds, budget, recall over 300 turns), not the
# store's, and its 300 turns cost ~10 s a backend; the stores' part is tested on both.
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_300_turns_stay_under_budget_and_remember_turn_3(
    store: BaseStore, clock: ManualClock
) -> None:
    budget = Budget(window_messages=24, prompt_tokens=3000)
    policy = MemoryPolicy(budget=budget, summary_model="m", extract_after_idle_seconds=300)
    llm = GatedLLM(answer=lambda r: "Interesting, tell me more about that. " * 3)
    async with harness(store, clock, llm, memory_llm=OfflineLLM(), memory_policy=policy) as h:
        for i in range(1, 301):
            text = "my name is Ada" if i == 3 else f"message {i}: " + "some chatter " * 8
            await h.say(DM, text, author="11", name="Ada")
            await h.advance(1.6, step=1.6)
            # Each message its own turn: the reply is out before the next one is written. On a
            # loaded machine the claim can come after advance's settle, and then waits for
            # the scheduler's next scan, on the manual clock: move it on a scan at a time
            # until the reply is out (never real time: the clock would not move meanwhile).
            for _ in range(20):
                if len(h.outlet.texts(DM)) >= i:
                    break
                await h.advance(0.5, step=0.5)
            assert len(h.outlet.texts(DM)) >= i, f"reply {i} never came"
            await h.memory.wait_idle()
            if i % 40 == 0:  # a long pause: the session goes quiet, memory is learned
                await clock.advance(600)
                await h.memory.extract_due()
        assert llm.calls == 300
        for n, request in enumerate(llm.requests, start=1):
            assert request.system[0].text == PIN.text()  # the pin is in every prompt
            size = sum(estimate_tokens(b.text) for b in request.system) + sum(
                estimate_tokens(m.text) for m in request.messages
            )
            if n >= 30:
                assert size <= budget.prompt_tokens, n
        last = system_text(llm.requests[-1])
        assert "Ada" in last  # stated at turn 3, still known at turn 300
        sizes = [len(system_text(r)) + sum(len(m.text) for m in r.messages) for r in llm.requests]
        assert max(sizes[100:]) < 2 * max(sizes[30:60])  # flat, not growing with the history
        summary = await store.get_summary((await store.current_session(DM)).key)  # type: ignore[union-attr]
        assert summary is not None and summary.first_turn == 1


async def test_deleting_a_message_drops_what_was_learned_only_from_it(
    store: BaseStore, clock: ManualClock
) -> None:
    async with harness(store, clock, GatedLLM(), memory_llm=OfflineLLM()) as h:
        await turn(h, DM, "my name is Ada")
        await turn(h, DM, "I work as a nurse")
        await close_session(store, DM, clock.now(), "test")
        await h.memory.extract_due()
        user = UserKey("telegram", "11")
        assert len((await h.memory.user_memory(user)).items) == 2
        ids = [m.platform_message_id for m in await store.messages(SessionKey(DM, 1))]
        job_message = ids[2]  # user, assistant, user, assistant
        assert job_message is not None
        await h.router(Inbound(DM, "11", "Ada", "", job_message, kind="delete"))
        left = await h.memory.user_memory(user)
        assert [(i.field, i.value) for i in left.items] == [("name", "Ada")]
        assert job_message not in [
            m.platform_message_id for m in await store.messages(SessionKey(DM, 1))
        ]


async def test_export_sends_the_askers_data_only(store: BaseStore, clock: ManualClock) -> None:
    async with harness(store, clock, GatedLLM(), memory_llm=OfflineLLM()) as h:
        await turn(h, GROUP, "my name is Ada", author="11")
        await turn(h, GROUP, "my name is Bo", author="22", name="Bo")
        await close_session(store, GROUP, clock.now(), "test")
        await h.memory.extract_due()
        await h.say(GROUP, "/export", author="11", name="Ada", private=False)
        await h.exports.wait_idle()
        (sent,) = h.outlet.files()
        assert sent.conversation == ConversationKey("telegram", "11")  # Ada's private chat
        assert sent.attachment is not None
        data = json.loads(sent.attachment.data)
        assert "my name is" not in h.outlet.texts(GROUP)[-1]
    assert data["user"] == {"platform": "telegram", "id": "11"}
    assert [i["value"] for i in data["memory"]["items"]] == ["Ada"]
    assert [m["text"] for m in data["messages"]] == ["my name is Ada"]


@pytest.mark.parametrize(("window_max", "longest"), [(0, 8), (12, 12)])
async def test_the_window_grows_to_window_max_messages_then_is_folded_to_window_messages(
    store: BaseStore, clock: ManualClock, window_max: int, longest: int
) -> None:
    """[memory] window_max_messages: the window grows to it (default twice window_messages),
    then the oldest messages are folded into the summary down to window_messages; the
    summary model runs once per fold."""
    budget = Budget(window_messages=4, window_max_messages=window_max, prompt_tokens=6000)
    policy = MemoryPolicy(budget=budget, summary_model="m", extract_after_idle_seconds=3600)
    llm = GatedLLM(answer=lambda r: "Noted.")
    async with harness(store, clock, llm, memory_llm=OfflineLLM(), memory_policy=policy) as h:
        for i in range(1, 21):
            await turn(h, DM, f"message {i}")
            await h.memory.wait_idle()
        # The window's messages before each new turn: it starts after the summary.
        shown = [len(r.messages) - 1 for r in llm.requests]
        assert max(shown) == longest, shown
        after_folds = [n for prev, n in itertools.pairwise(shown) if n < prev]
        assert after_folds and set(after_folds) == {4}, shown
        assert "message 1" in system_text(llm.requests[-1])  # folded, not lost
