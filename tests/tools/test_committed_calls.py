"""Issue 38 item 5 on every store backend: an effectful outside call (``Tool.commits``, what
an MCP server's effectful tool becomes) is made inside the turn after a fresh check, recorded
before it is made, never made twice, and commits the turn (bot/runtime/ledger.py). The real
Anthropic client against the fake Messages API drives the tool loop."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from bot.core.clock import ManualClock
from bot.core.events import ConversationKey, Inbound, QueuePolicy
from bot.llm.anthropic import AnthropicLLM
from bot.llm.offline import OfflineLLM
from bot.runtime.extensions import Extensions
from bot.runtime.tools import UNKNOWN_OUTCOME, Tool, ToolRegistry, call_key
from bot.store.base import BaseStore
from tests.fakes.messages_api import CannedReply, FakeMessagesAPI
from tests.harness import eventually, harness, settle

C1 = ConversationKey("telegram", "100")


class Orders:
    """An outside system: each order placed is appended (what a test counts)."""

    def __init__(self) -> None:
        self.placed: list[str] = []

    def tool(self) -> Tool:
        async def place_order(item: str) -> str:
            """Order an item for the person."""
            self.placed.append(item)
            return f"order #{len(self.placed)} placed: {item}"

        return replace(Tool.from_function(place_order), commits=True)


def _results(api: FakeMessagesAPI, index: int) -> list[tuple[str, bool]]:
    return [(str(r["content"]), bool(r.get("is_error"))) for r in api.requests[index].tool_results]


async def test_a_committed_call_is_made_once_and_newer_input_never_discards_its_reply(
    store: BaseStore, clock: ManualClock, api: FakeMessagesAPI, llm: AnthropicLLM
) -> None:
    orders = Orders()
    gate = asyncio.Event()
    api.answer_when(lambda r: bool(r.tool_results), CannedReply("Ordered the tea."), gate=gate)
    api.tool_use_next("place_order", {"item": "green tea"})
    ext = Extensions(tools=ToolRegistry((orders.tool(),)))
    async with harness(store, clock, llm, memory_llm=OfflineLLM(), extensions=ext) as h:
        await h.say(C1, "order me green tea")
        await h.advance(1.6)
        await eventually(lambda: api.call_count == 2, "the reply being written")
        assert orders.placed == ["green tea"]  # made in the turn, before the reply
        await h.say(C1, "and biscuits")  # would cut or discard an uncommitted turn
        gate.set()
        await eventually(lambda: len(h.outlet.texts()) >= 1, "the reply")
        assert h.outlet.texts()[0] == "Ordered the tea."
        await h.advance(1.6)
        await eventually(lambda: len(h.outlet.texts()) >= 2, "the next turn's reply")
        assert "and biscuits" in api.requests[-1].last_user_text
        assert orders.placed == ["green tea"]


async def test_newer_input_before_the_call_stops_it_and_the_next_turn_decides(
    store: BaseStore, clock: ManualClock, api: FakeMessagesAPI, llm: AnthropicLLM
) -> None:
    """The fresh check: the person wrote again after the model chose the call and before it
    was made (here, while the tool-use answer was on its way)."""
    orders = Orders()
    gate = asyncio.Event()
    api.answer_when(
        lambda r: "order" in r.last_user_text and not r.tool_results and len(api.requests) == 1,
        lambda r: api.tool_use_reply("place_order", {"item": "green tea"}),
        gate=gate,
    )
    ext = Extensions(tools=ToolRegistry((orders.tool(),)))
    async with harness(
        store, clock, llm, memory_llm=OfflineLLM(), extensions=ext, cut_stale=False
    ) as h:
        await h.say(C1, "order me green tea")
        await h.advance(1.6)
        await eventually(lambda: api.call_count == 1, "the model choosing")
        await h.say(C1, "no wait, black tea")
        gate.set()
        await eventually(lambda: api.call_count >= 2, "the answer after the refused call")
        [(text, error)] = _results(api, 1)
        assert error and text.startswith("Not done: newer messages arrived")
        assert orders.placed == []
        api.clear_rules()
        await h.advance(1.6)
        await settle(h.store)
        await h.advance(1.6)
        await eventually(lambda: bool(h.outlet.texts()), "one reply")
        assert "black tea" in api.requests[-1].last_user_text
        assert orders.placed == []


async def test_a_call_started_before_an_interruption_is_never_made_again(
    store: BaseStore, clock: ManualClock, api: FakeMessagesAPI, llm: AnthropicLLM
) -> None:
    """A record left "started" (the process died between the record and the result): the
    retry tells the model the outcome is unknown and makes no call."""
    orders = Orders()
    api.tool_use_next("place_order", {"item": "green tea"})
    api.reply_next("I could not confirm the order.")
    ext = Extensions(tools=ToolRegistry((orders.tool(),)))
    async with harness(store, clock, llm, memory_llm=OfflineLLM(), extensions=ext) as h:
        await h.say(C1, "order me green tea", message_id="m1")
        turn = await store.pending_turn(C1)
        assert turn is not None
        key = call_key(orders.tool(), {"item": "green tea"})
        new, _ = await store.begin_tool_call(C1, turn.messages[0].id, key, "place_order", 0.0)
        assert new  # what the interrupted attempt recorded
        await h.advance(1.6)
        await eventually(lambda: bool(h.outlet.texts()), "the reply")
        assert _results(api, 1) == [(UNKNOWN_OUTCOME, True)]
        assert orders.placed == []


async def test_two_attempts_reaching_one_call_record_it_once(store: BaseStore) -> None:
    await store.ingest(Inbound(C1, "u1", "Sasha", "order tea", "m1"), 1.0, _policy())
    turn = await store.pending_turn(C1)
    assert turn is not None
    first = turn.messages[0].id
    new, record = await store.begin_tool_call(C1, first, "k", "place_order", 2.0)
    again, seen = await store.begin_tool_call(C1, first, "k", "place_order", 3.0)
    assert new and not again and seen == record and seen.status == "started"
    await store.finish_tool_call(record.id, "done", "order #1 placed", 4.0)
    _, done = await store.begin_tool_call(C1, first, "k", "place_order", 5.0)
    assert (done.status, done.result) == ("done", "order #1 placed")
    other, _ = await store.begin_tool_call(C1, first, "k2", "place_order", 6.0)
    assert other  # another call (other arguments) of the same turn


def _policy() -> QueuePolicy:
    return QueuePolicy(debounce=1.5, max_wait=8.0)
