"""Pipeline paths around the happy one: restarts, model failures, typing, recovery."""

from __future__ import annotations

from bot.clock import ManualClock
from bot.errors import ModelRejected, ModelUnavailable, RateLimited
from bot.events import ConversationKey
from bot.llm.base import BaseLLM, ModelRequest, ModelResult, Usage
from bot.store.base import BaseStore
from tests.fakes.llm import GatedLLM
from tests.harness import harness

C1 = ConversationKey("telegram", "100")


class FlakyLLM(BaseLLM):
    """Fails with the given errors first, then answers."""

    def __init__(self, errors: list[Exception]) -> None:
        self._errors = list(errors)
        self.calls = 0

    async def complete(self, request: ModelRequest) -> ModelResult:
        self.calls += 1
        if self._errors:
            raise self._errors.pop(0)
        return ModelResult(f"ok: {request.messages[-1].text}", Usage(1, 1), "flaky")


async def test_pending_timer_is_picked_up_after_a_restart(
    store: BaseStore, clock: ManualClock
) -> None:
    first = GatedLLM()
    async with harness(store, clock, first) as h:
        await h.say(C1, "hello before the restart")
        await h.advance(0.5)  # stopped before the debounce ran out
    assert first.calls == 0
    second = GatedLLM()
    async with harness(store, clock, second) as h2:
        await h2.advance(1.5)
        assert second.calls == 1
        assert h2.outlet.texts() == ["reply to: hello before the restart"]


async def test_model_outage_keeps_messages_and_answers_once_when_back(
    store: BaseStore, clock: ManualClock
) -> None:
    llm = FlakyLLM(
        [ModelUnavailable("overloaded", status=529), RateLimited("slow down", retry_after=5)]
    )
    async with harness(store, clock, llm) as h:
        await h.say(C1, "are you up?")
        await h.advance(1.6)
        assert llm.calls == 1 and h.outlet.replies == []
        await h.advance(2.1)  # first backoff: 2 s
        assert llm.calls == 2 and h.outlet.replies == []
        await h.advance(4.0)
        assert llm.calls == 2  # rate limited: waits the provider's 5 s
        await h.advance(1.1)
        assert llm.calls == 3
        assert h.outlet.texts() == ["ok: are you up?"]
        await h.advance(30)
        assert llm.calls == 3  # nothing answered twice
        # Typing started and stopped for each of the three attempts.
        assert [e for e, _ in h.outlet.typing_events] == ["start", "stop"] * 3


async def test_rejected_request_does_not_loop(store: BaseStore, clock: ManualClock) -> None:
    llm = FlakyLLM([ModelRejected("bad request", status=400)])
    async with harness(store, clock, llm) as h:
        await h.say(C1, "hi")
        await h.advance(30)
        assert llm.calls == 1
        assert h.outlet.replies == []
        assert [e for e, _ in h.outlet.typing_events] == ["start", "stop"]
        # The message is kept: the next message's turn covers it.
        await h.say(C1, "hello?")
        await h.advance(2)
        assert h.outlet.texts() == ["ok: hi\nhello?"]


async def test_reply_recorded_but_not_sent_is_delivered_at_start(
    store: BaseStore, clock: ManualClock
) -> None:
    """A crash between the final check and the send: the next start sends it, once."""
    llm = GatedLLM()
    async with harness(store, clock, llm) as h:
        await h.say(C1, "hello")
        turn = await store.pending_turn(C1)
        lease = await store.acquire_lease("manual", "dead-worker", 30, clock.now())
        assert turn is not None and lease is not None
        finished = await store.finish_turn(
            turn, lease, "recorded, never sent", clock.now(), h.pipeline.profile("default").queue
        )
        assert finished.outcome == "recorded"
        sent = await h.pipeline.recover_outbox(older_than=clock.now())
        assert sent == 1
        assert h.outlet.texts() == ["recorded, never sent"]
        assert await h.pipeline.recover_outbox(older_than=clock.now()) == 0


async def test_uncertain_send_is_not_repeated_on_a_non_idempotent_platform(
    store: BaseStore, clock: ManualClock
) -> None:
    """Died after claiming the send: not re-sent (no duplicate), marked failed and logged."""
    llm = GatedLLM()
    async with harness(store, clock, llm) as h:
        await h.say(C1, "hello")
        turn = await store.pending_turn(C1)
        lease = await store.acquire_lease("manual", "dead-worker", 30, clock.now())
        assert turn is not None and lease is not None
        finished = await store.finish_turn(
            turn, lease, "maybe sent", clock.now(), h.pipeline.profile("default").queue
        )
        assert finished.outbox is not None
        assert await store.begin_send(finished.outbox, clock.now())  # ...then the crash
        assert await h.pipeline.recover_outbox(older_than=clock.now()) == 0
        assert h.outlet.replies == []
        assert await store.uncertain_outbox(clock.now()) == []
