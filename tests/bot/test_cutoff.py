"""The cut-off (docs/architecture.md#queue rule 9) on every store backend, timed by a manual
clock: newer input stored during a held generation cancels it at once, and one reply covers
everything; the hard cap, commands and ``cut_stale = false`` leave the generation alone."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Literal

from bot.app.web import console_data
from bot.config import Settings
from bot.core.clock import ManualClock
from bot.core.errors import ModelUnavailable
from bot.core.events import ConversationKey, Inbound, Reply, SessionKey
from bot.core.llm import ModelRequest, ModelResult
from bot.core.ports import StreamSettings
from bot.core.queue_rules import turn_lease
from bot.queue.cutoff import Cutoffs
from bot.queue.ingest import Ingestor
from bot.runtime.limits import LimitPolicy
from bot.runtime.previews import HANDOVER_SECONDS, PREVIEW_KEY
from bot.store.base import BaseStore
from bot.store.postgres import PostgresStore
from tests.bot.test_initiatives import CHECK_IN, HOUR, NO_QUIET, T0, Scripted
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
    """An edited-in-place preview (Discord's kind, a Telegram group's): posted on its first
    update; or, with ``draft``, a Telegram draft (its id continued or fresh)."""

    def __init__(self, outlet: PreviewOutlet, draft: int | None = None) -> None:
        self._outlet = outlet
        self._posted: str | None = None
        self._draft = draft

    @property
    def kind(self) -> Literal["draft", "edit", "console"]:
        return "edit" if self._draft is None else "draft"

    @property
    def draft_id(self) -> int | None:
        return self._draft

    @property
    def message_id(self) -> str | None:
        return self._posted

    async def show(self, text: str) -> None:
        if self._draft is not None:
            self._outlet.events.append(("draft", f"d{self._draft}"))
            self._outlet.shown.append((f"d{self._draft}", text))
            return
        if self._posted is None:
            self._posted = f"p{len(self._outlet.posted) + 1}"
            self._outlet.posted.append(self._posted)
            self._outlet.events.append(("post", self._posted))
        self._outlet.shown.append((self._posted, text))

    async def discard(self) -> None:
        if self._posted is not None:
            self._outlet.deleted.append(self._posted)
            self._outlet.events.append(("delete", self._posted))


class PreviewOutlet(RecordingOutlet):
    """A recording outlet that streams: every preview it posted, showed and deleted, in
    order (``events``); ``drafts``: previews are drafts (a Telegram private chat)."""

    def __init__(self, clock: ManualClock, *, drafts: bool = False) -> None:
        super().__init__(clock)
        self.drafts = drafts
        self.posted: list[str] = []
        self.shown: list[tuple[str, str]] = []
        self.deleted: list[str] = []
        self.events: list[tuple[str, str]] = []
        self.draft_ids = iter(range(1, 1000))
        self.failing_deletes = 0  # how many deletes fail next

    def preview(
        self,
        conversation: ConversationKey,
        settings: StreamSettings,
        *,
        reply_to: str | None,
        draft_id: int | None = None,
    ) -> PostedPreview:
        if self.drafts:
            return PostedPreview(self, draft_id or next(self.draft_ids))
        return PostedPreview(self)

    async def retract(self, conversation: ConversationKey, message_id: str) -> bool:
        if self.failing_deletes:  # a network blip: the message is still there
            self.failing_deletes -= 1
            self.events.append(("delete failed", message_id))
            return False
        self.deleted.append(message_id)
        self.events.append(("delete", message_id))
        return True

    async def send(self, reply: Reply) -> None:
        await super().send(reply)
        self.events.append(("reply", reply.replaces or "new"))


PARTIAL = "Let me think about that one for a moment..."


async def _preview_shown(h: Harness, llm: GatedLLM) -> SessionKey:
    """The first generation shows its preview; its session."""
    await h.say(C1, "one", message_id="m-one")
    await h.advance(1.6)
    await asyncio.sleep(0)
    assert llm.calls == 1
    turn = await h.store.pending_turn(C1, 10)
    assert turn is not None
    return turn.session


async def test_a_cut_preview_stays_until_the_next_generation_posts_below_the_newer_message(
    store: BaseStore, clock: ManualClock
) -> None:
    """Issue 37 item 2: no flicker. The cut generation's message stays (the person never sees
    the answer vanish) until the next generation's preview is posted below "two"; it is
    deleted then, and the reply replaces the new preview: nothing of the first stays."""
    llm = GatedLLM(clock=clock, gated=True, partial=PARTIAL)
    outlet = PreviewOutlet(clock)
    async with harness(store, clock, llm, outlet=outlet) as h:
        session = await _preview_shown(h, llm)
        assert outlet.shown == [("p1", PARTIAL)]
        assert await h.store.get_state(session, PREVIEW_KEY) == "p1"
        await h.say(C1, "two")  # cut while the preview shows half a reply
        assert llm.cancelled == [0]
        await h.advance(0.5)
        assert outlet.deleted == []  # handed over: still shown, still on record
        assert await h.store.get_state(session, PREVIEW_KEY) == "p1"
        await h.advance(1.1)
        await asyncio.sleep(0)
        assert llm.calls == 2
        assert outlet.events == [("post", "p1"), ("post", "p2"), ("delete", "p1")]
        assert await h.store.get_state(session, PREVIEW_KEY) == "p2"
        llm.release(1)
        await h.advance(0.5)
        replies = [r for _, r in outlet.replies]
        assert [r.text for r in replies] == [PARTIAL + "reply to: one\ntwo"]
        assert replies[0].replaces == "p2" and outlet.deleted == ["p1"]
        assert not isinstance(await h.store.get_state(session, PREVIEW_KEY), str)
        # The cut call's output is charged from what it streamed (no usage arrived).
        assert _count(h, "personabot_tokens_total", kind="output") > 5


async def test_a_reply_sent_without_a_preview_takes_the_cut_preview_away_after_it(
    store: BaseStore, clock: ManualClock
) -> None:
    llm = GatedLLM(clock=clock, gated=True, partial=PARTIAL)
    outlet = PreviewOutlet(clock)
    async with harness(store, clock, llm, outlet=outlet) as h:
        session = await _preview_shown(h, llm)
        await h.say(C1, "two")  # cut
        llm.partial = ""  # the next generation shows nothing before its answer
        await h.advance(1.6)
        llm.release(1)
        await h.advance(0.5)
        assert h.outlet.texts() == ["reply to: one\ntwo"]
        assert outlet.events == [("post", "p1"), ("reply", "new"), ("delete", "p1")]
        assert not isinstance(await h.store.get_state(session, PREVIEW_KEY), str)


async def test_a_cut_preview_nobody_takes_over_is_deleted_after_the_hand_over_wait(
    store: BaseStore, clock: ManualClock
) -> None:
    """Nothing follows the cut (the person deleted both messages before the next turn): the
    preview leaves no trace, HANDOVER_SECONDS later."""
    llm = GatedLLM(clock=clock, gated=True, partial=PARTIAL)
    outlet = PreviewOutlet(clock)
    async with harness(store, clock, llm, outlet=outlet) as h:
        session = await _preview_shown(h, llm)
        await h.say(C1, "two", message_id="m-two")  # cut
        for message_id in ("m-one", "m-two"):
            await h.router(Inbound(C1, "u1", "Sasha", "", message_id, kind="delete"))
        await h.advance(HANDOVER_SECONDS - 1)
        assert llm.calls == 1
        assert outlet.deleted == []
        await h.advance(2)
        assert outlet.deleted == ["p1"]
        assert not isinstance(await h.store.get_state(session, PREVIEW_KEY), str)


async def test_a_cut_draft_is_continued_by_the_next_generation(
    store: BaseStore, clock: ManualClock
) -> None:
    """A Telegram private chat: the next generation writes into the same draft (the same id:
    Telegram animates the change), never a second bubble."""
    llm = GatedLLM(clock=clock, gated=True, partial=PARTIAL)
    outlet = PreviewOutlet(clock, drafts=True)
    async with harness(store, clock, llm, outlet=outlet) as h:
        session = await _preview_shown(h, llm)
        assert outlet.shown == [("d1", PARTIAL)]
        await h.say(C1, "two")  # cut
        assert llm.cancelled == [0]
        assert await h.store.get_state(session, PREVIEW_KEY) == "draft:1"
        await h.advance(1.6)
        await asyncio.sleep(0)
        assert llm.calls == 2
        assert outlet.shown == [("d1", PARTIAL), ("d1", PARTIAL)]  # the same draft
        assert not isinstance(await h.store.get_state(session, PREVIEW_KEY), str)
        llm.release(1)
        await h.advance(0.5)
        assert h.outlet.texts() == [PARTIAL + "reply to: one\ntwo"]
        await h.say(C1, "three")  # a new burst after a reply: a fresh draft
        await h.advance(1.6)
        await asyncio.sleep(0)
        assert outlet.shown[-1] == ("d2", PARTIAL)


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


async def test_an_edit_that_keeps_the_text_neither_cuts_nor_discards(
    store: BaseStore, clock: ManualClock
) -> None:
    """Review 37, finding 1: Telegram sends an edit for a change of formatting only. Nothing
    was re-armed, so nothing is cut and the reply is kept (before: not cut, but thrown away
    by the final check, the model writing it for nothing)."""
    llm = GatedLLM(clock=clock, gated=True)
    async with harness(store, clock, llm) as h:
        await h.say(C1, "tea or coffee?", message_id="e1")
        await h.advance(1.6)
        assert llm.calls == 1
        await h.router(Inbound(C1, "u1", "Sasha", "tea or coffee?", "e1", kind="edit"))
        await h.advance(0)
        assert llm.cancelled == []
        llm.release(0)
        await h.advance(0.2)
        assert h.outlet.texts() == ["reply to: tea or coffee?"]
        await h.advance(3)
        assert llm.calls == 1 and _count(h, "personabot_replies_discarded_total") == 0


async def test_a_next_turn_whose_model_fails_takes_the_cut_preview_away_at_once(
    store: BaseStore, clock: ManualClock
) -> None:
    """Review 37, finding 2: the trouble notice never stands beside a half reply."""
    llm = GatedLLM(clock=clock, gated=True, partial=PARTIAL)
    outlet = PreviewOutlet(clock)
    async with harness(store, clock, llm, outlet=outlet) as h:
        session = await _preview_shown(h, llm)
        await h.say(C1, "two")  # cut: p1 handed over
        llm.partial = ""
        llm.fail_next = ModelUnavailable("overloaded")
        await h.advance(1.6)
        assert llm.calls == 2
        assert outlet.deleted == ["p1"]  # gone with the failed attempt, not 30 s later
        assert not isinstance(await h.store.get_state(session, PREVIEW_KEY), str)


async def test_a_next_turn_held_back_by_a_limit_takes_the_cut_preview_away(
    store: BaseStore, clock: ManualClock
) -> None:
    """Review 37, finding 2 (no relay at all): the limit's notice never stands beside a
    half reply."""
    llm = GatedLLM(clock=clock, gated=True, partial=PARTIAL)
    outlet = PreviewOutlet(clock)
    limits = LimitPolicy(bot_tokens_per_day=1, message="Spent until {until}.")
    async with harness(store, clock, llm, outlet=outlet, limits=limits) as h:
        session = await _preview_shown(h, llm)
        await h.say(C1, "two")  # cut; the cut call is charged: the bot's budget is spent
        await h.advance(1.6)
        assert llm.calls == 1
        assert h.outlet.texts()[-1].startswith("Spent until")
        assert outlet.deleted == ["p1"]
        assert not isinstance(await h.store.get_state(session, PREVIEW_KEY), str)


async def test_a_failed_delete_of_the_cut_preview_is_tried_again(
    store: BaseStore, clock: ManualClock
) -> None:
    """Review 37, finding 3: one failed request (a 502) never leaves a half reply for good:
    the preview stays on record and is deleted at the next try."""
    llm = GatedLLM(clock=clock, gated=True, partial=PARTIAL)
    outlet = PreviewOutlet(clock)
    async with harness(store, clock, llm, outlet=outlet) as h:
        session = await _preview_shown(h, llm)
        await h.say(C1, "two")  # cut
        outlet.failing_deletes = 1
        await h.advance(1.6)
        await asyncio.sleep(0)
        assert outlet.events[-2:] == [("post", "p2"), ("delete failed", "p1")]
        assert await h.store.get_state(session, PREVIEW_KEY) == "p2 -p1"
        llm.release(1)
        await h.advance(0.5)
        assert h.outlet.texts() == [PARTIAL + "reply to: one\ntwo"]
        assert ("delete", "p1") in outlet.events  # tried again once the reply was out
        assert not isinstance(await h.store.get_state(session, PREVIEW_KEY), str)


async def test_the_hand_over_wait_never_deletes_a_preview_while_a_turn_takes_it_over(
    store: BaseStore, clock: ManualClock
) -> None:
    """Review 37, finding 4: a next generation slow to show anything (a long first token)
    has taken the preview over; the deadline waits for it instead of deleting it."""
    llm = GatedLLM(clock=clock, gated=True, partial=PARTIAL)
    outlet = PreviewOutlet(clock)
    async with harness(store, clock, llm, outlet=outlet, lease=120.0) as h:
        await _preview_shown(h, llm)
        await h.say(C1, "two")  # cut: p1 handed over
        llm.partial = ""  # the next generation shows nothing for a long while
        await h.advance(1.6)
        assert llm.calls == 2
        await h.advance(HANDOVER_SECONDS + 5, step=1.0)
        assert outlet.deleted == []  # still shown: the running turn owns it
        llm.release(1)
        await h.advance(0.5)
        assert outlet.events[-2:] == [("reply", "new"), ("delete", "p1")]
