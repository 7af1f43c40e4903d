"""Pipeline paths around the happy one: restarts, model failures, typing, recovery."""

from __future__ import annotations

from typing import Any

from bot.core.clock import ManualClock
from bot.core.errors import ModelRejected, ModelUnavailable, RateLimited
from bot.core.events import ConversationKey, SessionKey
from bot.core.llm import BaseLLM, ModelRequest, ModelResult, Usage
from bot.llm.anthropic import AnthropicLLM
from bot.store.base import BaseStore
from memory.tokens import estimate_tokens
from tests.fakes.llm import GatedLLM
from tests.fakes.messages_api import FakeMessagesAPI
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


# -- issue 13, item 1: no conversation gets stuck behind one bad turn ---------------------------


def _texts(body: dict[str, Any]) -> list[str]:
    """Every text block of a recorded Messages API request, system first."""
    system = body.get("system", [])
    blocks = [system] if isinstance(system, str) else list(system)
    for message in body["messages"]:
        content = message["content"]
        blocks += [content] if isinstance(content, str) else list(content)
    return [b if isinstance(b, str) else b.get("text", "") for b in blocks]


async def test_a_refusal_gets_the_refusal_line_and_never_an_empty_message(
    store: BaseStore, clock: ManualClock
) -> None:
    async with FakeMessagesAPI() as api:
        llm = AnthropicLLM(api_key="sk-test", base_url=api.base_url, max_retries=0)
        api.reply_next("", stop_reason="refusal")
        async with harness(store, clock, llm) as h:
            await h.say(C1, "say something terrible")
            await h.advance(2)
            await h.say(C1, "ok, how are you?")
            await h.advance(2)
        await llm.aclose()
    assert all(t.strip() for t in h.outlet.texts())  # nothing empty reached the user
    refusal = h.pipeline.profile("default").refusal_message
    assert h.outlet.texts() == [refusal, "ok, how are you?"]
    stored = await store.messages(SessionKey(C1, 1))
    assert [m.text for m in stored if m.role == "assistant"] == [refusal, "ok, how are you?"]
    # The second request carries the refusal line as the persona's turn, no empty text.
    assert api.call_count == 2
    assert all(t.strip() for t in _texts(api.requests[-1].body))
    assert refusal in _texts(api.requests[-1].body)


async def test_a_rejected_turn_is_closed_out_and_never_sent_again(
    store: BaseStore, clock: ManualClock
) -> None:
    """A 400 (the request can never succeed) closes the turn out, with its reason; the next
    message is answered alone, in this session and after /new."""
    async with FakeMessagesAPI() as api:
        llm = AnthropicLLM(api_key="sk-test", base_url=api.base_url, max_retries=0)
        api.fail_next(status=400, message="prompt is too long: 250000 tokens > 200000 maximum")
        async with harness(store, clock, llm) as h:
            await h.say(C1, "POISON burst")
            await h.advance(30)
            assert api.call_count == 1  # not retried
            await h.say(C1, "hello again")
            await h.advance(2)
            await h.say(C1, "/new")
            await h.say(C1, "fresh start")
            await h.advance(2)
            closed = h.pipeline.metrics.registry.get_sample_value(
                "personabot_messages_closed_out_total",
                {"platform": "telegram", "persona": "default", "reason": "rejected"},
            )
        await llm.aclose()
    replies = [r for r in api.requests if "You are Mira." in _texts(r.body)[0]]
    assert len(replies) == 3
    for request in replies[1:]:  # neither as the turn nor as context
        assert not any("POISON" in t for t in _texts(request.body))
    texts = h.outlet.texts()
    assert texts[0] == h.pipeline.profile("default").rejected_notice
    assert texts[1] == "hello again"
    assert texts[-1] == "fresh start"
    assert closed == 1
    assert await store.pending_turn(C1) is None


async def test_a_long_burst_is_answered_in_capped_turns_none_over_the_budget(
    store: BaseStore, clock: ManualClock
) -> None:
    """Item 1 and 2: 120 messages of 4,000 characters (~160k tokens): turns of at most 50
    messages, every request (replies and summaries) under prompt_budget_tokens, long messages
    cut with a visible marker, and every call counted in the day's usage (/stats)."""
    async with FakeMessagesAPI() as api:
        llm = AnthropicLLM(api_key="sk-test", base_url=api.base_url, max_retries=0)
        api.reply_text = "noted"
        async with harness(store, clock, llm) as h:
            for i in range(120):
                await h.say(C1, f"m{i:03d} " + "x" * 3995)
            await h.advance(20)
            await h.memory.wait_idle()
            usage = await store.usage_since(0.0, "default")
        await llm.aclose()
    assert h.outlet.texts() == ["noted"] * 3  # 50 + 50 + 20 messages
    assert await store.pending_turn(C1) is None
    budget = 6000
    for request in api.requests:
        tokens = sum(estimate_tokens(t) for t in _texts(request.body))
        assert tokens <= budget, (tokens, request.body.get("system"))
    replies = [r for r in api.requests if "m000" in r.last_user_text or "cut:" in r.last_user_text]
    assert any("[... cut:" in r.last_user_text for r in replies)
    first = api.requests[0].last_user_text
    assert "m000" in first and "m049" in first and "m050" not in first
    purposes = {p for p, *_ in usage.by_purpose}
    assert "summary" in purposes  # memory tasks count too
    assert usage.input_tokens == 10 * api.call_count
    assert usage.output_tokens == 5 * api.call_count
