"""The cut-off (docs/architecture.md#queue rule 9) on every store backend, timed by a manual
clock: newer input stored during a held generation cancels it at once, and one reply covers
everything; the hard cap, commands and ``cut_stale = false`` leave the generation alone."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Literal

import pytest

from bot.app.web import console_data
from bot.config import Settings
from bot.core.clock import ManualClock
from bot.core.events import ConversationKey, Inbound
from bot.core.llm import ModelRequest, ModelResult
from bot.core.ports import StreamSettings
from bot.core.queue_rules import turn_lease
from bot.queue.cutoff import Cutoffs
from bot.queue.ingest import Ingestor
from bot.runtime.streaming import PREVIEW_KEY
from bot.store.base import BaseStore
from bot.store.postgres import PostgresStore
from tests.bot.test_initiatives import CHECK_IN, HOUR, NO_QUIET, T0, Scripted
from tests.bot.test_store_blips import Blip
from tests.fakes.llm import GatedLLM
from tests.fakes.outlet import RecordingOutlet
from tests.harness import Harness, harness

C1 = ConversationKey("telegram", "100")
LABELS = {"platform": "telegram", "persona": "default"}


def _count(h: Harness, name: str, **extra: str) -> float:
    value = h.pipeline.metrics.registry.get_sample_value(name, {**LABELS, **extra})
    return value or 0.0


async def _lease_free(h: Harness) -> bool:
    expires = await h.store.lease_expires_at(turn_lease(C1))
    return expires is None or expires <= h.clock.now()


async def test_a_message_during_a_held_generation_cuts_it_and_one_reply_covers_all(
    store: BaseStore, clock: ManualClock
) -> None:
    llm = GatedLLM(clock=clock, gated=True)
    async with harness(store, clock, llm) as h:
        await h.say(C1, "one")
        await h.say(C1, "two")
        await h.advance(1.6)
        assert llm.calls == 1 and llm.cancelled == []
        assert not await _lease_free(h)
        await h.say(C1, "three")  # arrives while the model works: the call is closed at once
        assert llm.cancelled == [0]
        assert await _lease_free(h)  # released, like a discarded turn's
        assert h.outlet.replies == []
        await h.advance(1.4)
        assert llm.calls == 1  # the timer "three" armed stands: its debounce first
        await h.advance(0.2)
        assert llm.calls == 2
        assert llm.last_input() == "one\ntwo\nthree"
        llm.release()
        await h.advance(0.2)
        assert h.outlet.texts() == ["reply to: one\ntwo\nthree"]
        assert _count(h, "personabot_generations_cut_total") == 1
        assert _count(h, "personabot_replies_discarded_total") == 1
        assert _count(h, "personabot_turns_total", outcome="discarded") == 1
        # The cut call is charged (the prompt as assembled) as well as the answered one.
        assert _count(h, "personabot_model_calls_total", purpose="reply") == 2


async def test_with_cut_stale_off_the_stale_generation_runs_to_its_end(
    store: BaseStore, clock: ManualClock
) -> None:
    llm = GatedLLM(clock=clock, gated=True)
    async with harness(store, clock, llm, cut_stale=False) as h:
        await h.say(C1, "one")
        await h.advance(1.6)
        assert llm.calls == 1
        await h.say(C1, "two")
        await h.advance(0.5)
        assert llm.cancelled == [] and llm.calls == 1  # still writing the stale reply
        llm.release(0)
        await h.advance(0.2)
        assert h.outlet.replies == []  # discarded by the final check
        await h.advance(1.5)
        assert llm.calls == 2 and llm.last_input() == "one\ntwo"
        llm.release(1)
        await h.advance(0.2)
        assert h.outlet.texts() == ["reply to: one\ntwo"]
        assert _count(h, "personabot_generations_cut_total") == 0
        assert _count(h, "personabot_replies_discarded_total") == 1


async def test_a_message_after_max_wait_does_not_cut(store: BaseStore, clock: ManualClock) -> None:
    llm = GatedLLM(clock=clock, gated=True)
    async with harness(store, clock, llm, max_wait=4.0) as h:
        await h.say(C1, "one")
        await h.advance(1.6)
        assert llm.calls == 1
        await h.advance(1.4)
        await h.say(C1, "two")  # 3 s after "one": within the cap, so it cuts
        assert llm.cancelled == [0]
        await h.advance(1.0)  # the timer is due at the cap: "one" + 4 s
        assert llm.calls == 2 and llm.last_input() == "one\ntwo"
        await h.advance(0.5)
        await h.say(C1, "three")  # past the cap: the generation goes on (rule 6)
        await h.advance(0.1)
        assert llm.cancelled == [0]
        llm.release(1)
        await h.advance(0.2)
        assert h.outlet.texts() == ["reply to: one\ntwo"]  # recorded past the cap
        await h.advance(1.6)
        assert llm.calls == 3 and llm.last_input() == "three"
        llm.release(2)
        await h.advance(0.2)
        assert h.outlet.texts() == ["reply to: one\ntwo", "reply to: three"]
        assert _count(h, "personabot_generations_cut_total") == 1


async def test_an_edit_of_a_pending_message_cuts(store: BaseStore, clock: ManualClock) -> None:
    llm = GatedLLM(clock=clock, gated=True)
    async with harness(store, clock, llm) as h:
        await h.say(C1, "tea or cofee?", message_id="e1")
        await h.advance(1.6)
        assert llm.calls == 1
        edit = Inbound(C1, "u1", "Sasha", "tea or coffee?", "e1", kind="edit")
        await h.router(edit)
        await h.advance(0)
        assert llm.cancelled == [0]
        await h.advance(1.6)
        assert llm.calls == 2 and llm.last_input() == "tea or coffee?"
        llm.release()
        await h.advance(0.2)
        assert h.outlet.texts() == ["reply to: tea or coffee?"]


async def test_a_command_does_not_cut(store: BaseStore, clock: ManualClock) -> None:
    llm = GatedLLM(clock=clock, gated=True)
    async with harness(store, clock, llm) as h:
        await h.say(C1, "hello")
        await h.advance(1.6)
        assert llm.calls == 1
        await h.say(C1, "/help")
        assert len(h.outlet.replies) == 1  # answered at once, beside the queue
        await h.advance(0.5)
        assert llm.cancelled == []  # commands are never pending input
        await h.say(C1, "and another thing")  # a message does cut it
        assert llm.cancelled == [0]
        await h.advance(1.6)
        assert llm.calls == 2 and llm.last_input() == "hello\nand another thing"
        llm.release()
        await h.advance(0.2)
        assert h.outlet.texts()[-1] == "reply to: hello\nand another thing"
        assert len(h.outlet.replies) == 2


class CountingScripted(Scripted):
    """The check-in model of tests/bot/test_initiatives.py, counting cancelled calls."""

    def __init__(self) -> None:
        super().__init__()
        self.cancelled = 0

    async def complete(self, request: ModelRequest) -> ModelResult:
        try:
            return await super().complete(request)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise


async def test_a_check_in_is_not_cut(store: BaseStore) -> None:
    chat = ConversationKey("telegram", "42", None, "default")
    clock = ManualClock(T0)
    llm = CountingScripted()
    llm.gate = asyncio.Event()
    async with harness(store, clock, llm, initiative=NO_QUIET) as h:
        await h.say(chat, "see you")
        await h.advance(3.0, step=0.5)
        await h.advance(2.1 * HOUR, step=300)
        assert llm.waiting.is_set()  # the check-in is being decided
        await h.say(chat, "hi again!")
        assert llm.cancelled == 0  # only replies are cut; the check-in's own check decides
        llm.gate.set()
        await h.advance(10.0, step=0.5)
        assert h.outlet.texts(chat) == ["reply to: see you", "reply to: hi again!"]
        assert CHECK_IN not in h.outlet.texts(chat)
        assert llm.cancelled == 0
        assert _count(h, "personabot_generations_cut_total") == 0


class PostedPreview:
    """An edited-in-place preview (Discord's kind): posted on its first update."""

    def __init__(self, outlet: PreviewOutlet) -> None:
        self._outlet = outlet
        self._posted: str | None = None

    @property
    def kind(self) -> Literal["draft", "edit", "console"]:
        return "edit"

    @property
    def draft_id(self) -> int | None:
        return None

    @property
    def message_id(self) -> str | None:
        return self._posted

    async def show(self, text: str) -> None:
        if self._posted is None:
            self._posted = f"p{len(self._outlet.posted) + 1}"
            self._outlet.posted.append(self._posted)
        self._outlet.shown.append((self._posted, text))

    async def discard(self) -> None:
        if self._posted is not None:
            self._outlet.deleted.append(self._posted)


class PreviewOutlet(RecordingOutlet):
    """A recording outlet that streams: every preview it posted, showed and deleted."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.posted: list[str] = []
        self.shown: list[tuple[str, str]] = []
        self.deleted: list[str] = []

    def preview(
        self, conversation: ConversationKey, settings: StreamSettings, *, reply_to: str | None
    ) -> PostedPreview:
        return PostedPreview(self)

    async def retract(self, conversation: ConversationKey, message_id: str) -> None:
        self.deleted.append(message_id)


async def test_a_cut_while_a_streamed_preview_is_shown_leaves_no_orphan(
    store: BaseStore, clock: ManualClock
) -> None:
    partial = "Let me think about that one for a moment..."
    llm = GatedLLM(clock=clock, gated=True, partial=partial)
    outlet = PreviewOutlet(clock)
    async with harness(store, clock, llm, outlet=outlet) as h:
        await h.say(C1, "one")
        await h.advance(1.6)
        await asyncio.sleep(0)
        assert llm.calls == 1 and outlet.shown == [("p1", partial)]
        session = (await h.store.pending_turn(C1, 10)).session  # type: ignore[union-attr]
        assert await h.store.get_state(session, PREVIEW_KEY) == "p1"
        await h.say(C1, "two")  # cut while the preview shows half a reply
        assert llm.cancelled == [0]
        assert outlet.deleted == ["p1"]  # taken back at once
        assert not isinstance(await h.store.get_state(session, PREVIEW_KEY), str)  # forgotten
        await h.advance(1.6)
        assert llm.calls == 2
        llm.release(1)
        await h.advance(0.5)
        replies = [r for _, r in outlet.replies]
        assert [r.text for r in replies] == [partial + "reply to: one\ntwo"]
        # The second preview became the reply; nothing of the first stays in the chat.
        assert outlet.posted == ["p1", "p2"] and replies[0].replaces == "p2"
        assert outlet.deleted == ["p1"]
        # The cut call's output is charged from what it streamed (no usage arrived).
        assert _count(h, "personabot_tokens_total", kind="output") > 5


async def test_a_cut_during_the_answered_calls_charge_does_not_charge_it_twice(
    store: BaseStore, clock: ManualClock
) -> None:
    llm = GatedLLM(clock=clock, gated=True)
    record_usage = store.record_usage
    writing = asyncio.Event()
    written = asyncio.Event()

    async def slow_record_usage(*args: object, **kwargs: object) -> None:
        # The call answered and its usage row is written; the write's await has not
        # returned yet when the newer input arrives (a commit acknowledged late).
        await record_usage(*args, **kwargs)  # type: ignore[arg-type]
        if not written.is_set():
            writing.set()
            await written.wait()

    async with harness(store, clock, llm) as h:
        store.record_usage = slow_record_usage  # type: ignore[method-assign]
        await h.say(C1, "one")
        await h.advance(1.6)
        assert llm.calls == 1
        llm.release(0)
        await asyncio.wait_for(writing.wait(), 5)  # call 0 answered, its charge under way
        await h.say(C1, "two")
        written.set()
        await h.advance(1.6)
        assert llm.calls == 2
        llm.release(1)
        await h.advance(0.2)
        assert h.outlet.texts() == ["reply to: one\ntwo"]
        # Two calls were made: each is charged once (call 0 with the usage it reported).
        assert _count(h, "personabot_model_calls_total", purpose="reply") == 2
        stats = await h.store.usage_since(0.0)
        assert stats.output_tokens == 5 + 5


async def test_a_store_blip_forgetting_the_cut_preview_still_charges_the_cut_call(
    store: BaseStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    partial = "Let me think about that one for a moment..."
    llm = GatedLLM(clock=clock, gated=True, partial=partial)
    outlet = PreviewOutlet(clock)
    async with harness(store, clock, llm, outlet=outlet) as h:
        await h.say(C1, "one")
        await h.advance(1.6)
        await asyncio.sleep(0)
        assert llm.calls == 1 and outlet.shown == [("p1", partial)]
        blip = Blip(store, "delete_state", monkeypatch)
        blip.times = 1  # the preview's record is not forgotten this once
        await h.say(C1, "two")  # cut
        await h.advance(0.1)
        assert llm.cancelled == [0] and outlet.deleted == ["p1"] and blip.failed == 1
        assert await _lease_free(h)
        await h.advance(1.6)
        assert llm.calls == 2
        llm.release(1)
        await h.advance(0.5)
        assert [r.text for _, r in outlet.replies] == [partial + "reply to: one\ntwo"]
        # Both calls are charged: the cut one from its prompt and what it streamed.
        assert _count(h, "personabot_model_calls_total", purpose="reply") == 2
        assert _count(h, "personabot_generations_cut_total") == 1


async def test_the_console_says_how_many_generations_were_cut_and_what_they_cost(
    store: BaseStore, clock: ManualClock
) -> None:
    """Issue 37 item 4: the operator sees the cuts, and what was charged for them, next to
    the turns (the overview's "this process" section, /api/overview)."""
    llm = GatedLLM(clock=clock, gated=True)
    async with harness(store, clock, llm) as h:
        await h.say(C1, "one")
        await h.advance(1.6)
        await h.say(C1, "two")  # cuts the generation of "one"
        assert llm.cancelled == [0]
        await h.advance(1.6)
        llm.release()
        await h.advance(0.2)
        assert h.outlet.texts() == ["reply to: one\ntwo"]
        data = console_data(
            settings=Settings.model_validate({}),
            store=h.store,
            memory=h.memory,
            clock=clock,
            page_size=20,
            metrics=h.pipeline.metrics,
        )
        counts = (await data.overview())["this_process"]
    assert counts["cut"]["generations"] == 1
    # The cut call was charged its prompt (it streamed nothing): input tokens, no output.
    assert counts["cut"]["tokens"]["input"] > 0 and counts["cut"]["tokens"]["output"] == 0
    assert counts["turns"]["discarded"] == 1 and counts["turns"]["sent"] == 1


# -- input another process stored (PostgreSQL's announcement, bot/store/postgres/_wakeups.py) --


def _elsewhere(h: Harness) -> Ingestor:
    """Another process's ingestor on the same store: it tells none of this process's
    generations (only the announcement of its timer reaches them)."""
    return replace(h.ingestor, cutoffs=None, wake=None)


def _announced(h: Harness, conversation: ConversationKey | None) -> Cutoffs:
    cutoffs = h.pipeline.cutoffs
    assert cutoffs is not None
    cutoffs.announced(conversation)
    return cutoffs


async def test_input_stored_elsewhere_cuts_once_its_conversation_is_announced(
    store: BaseStore, clock: ManualClock
) -> None:
    """SQLite: only the announcement (given by hand) cuts. PostgreSQL: the trigger's real
    announcement reaches this process's listener and cuts by itself."""
    llm = GatedLLM(clock=clock, gated=True)
    async with harness(store, clock, llm) as h:
        await h.say(C1, "one")
        await h.advance(1.6)
        assert llm.calls == 1
        await _elsewhere(h).ingest(Inbound(C1, "u1", "Sasha", "two", "x2"))
        await h.advance(0)
        if isinstance(store, PostgresStore):
            async with asyncio.timeout(10):
                while not llm.cancelled:
                    await h.advance(0)
        else:
            assert llm.cancelled == []  # not stored here: no in-process signal
            cutoffs = _announced(h, ConversationKey("telegram", "999"))
            await h.advance(0)
            assert llm.cancelled == [] and cutoffs.checks == 0  # another chat: no check
            _announced(h, C1)
            await h.advance(0)
            assert cutoffs.checks == 1
        assert llm.cancelled == [0]
        await h.advance(1.6)
        assert llm.calls == 2 and llm.last_input() == "one\ntwo"
        llm.release()
        await h.advance(0.2)
        assert h.outlet.texts() == ["reply to: one\ntwo"]
        assert _count(h, "personabot_generations_cut_total") == 1


async def test_an_announcement_with_nothing_newer_or_past_the_cap_cuts_nothing(
    store: BaseStore, clock: ManualClock
) -> None:
    """A timer moved without new input (a re-arm) finds the generation current; input stored
    elsewhere past the hard cap is the next turn's (rule 6), as the final check decides."""
    llm = GatedLLM(clock=clock, gated=True)
    async with harness(store, clock, llm, max_wait=4.0) as h:
        await h.say(C1, "one")
        await h.advance(1.6)
        cutoffs = _announced(h, None)  # the listener reconnected: every generation looks
        await h.advance(0)
        assert cutoffs.checks >= 1 and llm.cancelled == []
        checks = cutoffs.checks
        await h.advance(2.5)  # past "one" + 4 s
        await _elsewhere(h).ingest(Inbound(C1, "u1", "Sasha", "two", "x2"))
        _announced(h, C1)
        await h.advance(0)
        assert cutoffs.checks > checks and llm.cancelled == []
        llm.release(0)
        await h.advance(0.2)
        assert h.outlet.texts() == ["reply to: one"]  # recorded past the cap
        await h.advance(1.6)
        llm.release(1)
        await h.advance(0.2)
        assert h.outlet.texts() == ["reply to: one", "reply to: two"]
        assert _count(h, "personabot_generations_cut_total") == 0


async def test_an_edit_stored_elsewhere_cuts_once_announced(
    store: BaseStore, clock: ManualClock
) -> None:
    llm = GatedLLM(clock=clock, gated=True)
    async with harness(store, clock, llm) as h:
        await h.say(C1, "tea or cofee?", message_id="e1")
        await h.advance(1.6)
        await _elsewhere(h).edit(Inbound(C1, "u1", "Sasha", "tea or coffee?", "e1", kind="edit"))
        _announced(h, C1)
        await h.advance(0)
        assert llm.cancelled == [0]
        await h.advance(1.6)
        assert llm.calls == 2 and llm.last_input() == "tea or coffee?"
