"""The tool loop of a turn: the real pipeline on both stores, the real anthropic SDK against the
fake Messages API, tools registered as a plugin would (``Tool.from_function``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import pytest

from bot.core.clock import ManualClock
from bot.core.events import ConversationKey, Reply, SessionKey
from bot.core.llm import BaseLLM, ChatMessage, ModelRequest, ModelResult, TextBlock, ToolUse, Usage
from bot.llm.anthropic import AnthropicLLM
from bot.llm.offline import OfflineLLM
from bot.runtime.extensions import AfterReply, BeforeModel, Extensions, TurnContext
from bot.runtime.tools import DEFERRED, Tool, ToolError, ToolLoop, ToolPolicy, ToolRegistry
from bot.store.base import BaseStore
from tests.backends import StoreFactory
from tests.fakes.llm import GatedLLM
from tests.fakes.messages_api import FakeMessagesAPI, RecordedRequest
from tests.fakes.outlet import RecordingOutlet
from tests.harness import Harness, eventually, harness, settle

C1 = ConversationKey("telegram", "100")


def plugins(
    *tools: Tool, before: tuple[BeforeModel, ...] = (), after: tuple[AfterReply, ...] = ()
) -> Extensions:
    """What a plugin's ``setup(app)`` would have registered."""
    return Extensions(tools=ToolRegistry(tools), before_model=before, after_reply=after)


def turns(h: Harness, outcome: str) -> float:
    """How many turns of C1 ended with ``outcome``."""
    platform, persona = h.pipeline.metrics.labels(C1)
    value = h.pipeline.metrics.registry.get_sample_value(
        "personabot_turns_total", {"platform": platform, "persona": persona, "outcome": outcome}
    )
    return value or 0.0


async def answered(h: Harness, replies: int = 1) -> None:
    """Let the debounce run out and wait for ``replies`` replies in total."""
    await h.advance(1.6)
    await eventually(lambda: len(h.outlet.texts()) >= replies, f"{replies} reply(ies)")
    await eventually(lambda: turns(h, "sent") >= replies, "the turn to end")
    await settle(h.store)


def tool_counts(h: Harness) -> dict[tuple[str, str], float]:
    """The tool-call metric: count by (tool, outcome)."""
    return {
        (sample.labels["tool"], sample.labels["outcome"]): sample.value
        for metric in h.pipeline.metrics.tool_calls.collect()
        for sample in metric.samples
        if sample.name.endswith("_total")
    }


def results(request: RecordedRequest) -> list[tuple[str, bool]]:
    """(content, is_error) of the request's tool results."""
    return [(r["content"], bool(r.get("is_error"))) for r in request.tool_results]


async def test_a_tool_is_called_its_result_goes_back_and_one_reply_is_sent(
    store: BaseStore, clock: ManualClock, api: FakeMessagesAPI, llm: AnthropicLLM
) -> None:
    seen: list[str] = []

    async def weather(city: str) -> dict[str, Any]:
        """The weather in a city now."""
        seen.append(city)
        return {"city": city, "sky": "sunny", "celsius": 21}

    [call] = api.tool_use_next("weather", {"city": "Oslo"}, text="Let me look.")
    api.reply_next("It's sunny in Oslo, 21 degrees.")
    ext = plugins(Tool.from_function(weather))
    async with harness(store, clock, llm, memory_llm=OfflineLLM(), extensions=ext) as h:
        await h.say(C1, "what's the weather in Oslo?")
        await answered(h)
        assert h.outlet.texts() == ["It's sunny in Oslo, 21 degrees."]
        assert seen == ["Oslo"]
        assert api.call_count == 2
        first, second = api.requests
        assert [t["name"] for t in first.tools] == ["weather"]
        assert first.tools[0]["input_schema"]["required"] == ["city"]
        assert second.tools == first.tools
        # The assistant's call and our result follow the unchanged prompt.
        assert second.messages[:-2] == first.messages
        assert second.messages[-2]["content"][-1] == {
            "type": "tool_use",
            "id": call,
            "name": "weather",
            "input": {"city": "Oslo"},
        }
        assert second.tool_results[0]["tool_use_id"] == call
        assert results(second) == [('{"city":"Oslo","sky":"sunny","celsius":21}', False)]
        # Both calls are charged as replies; the reply is recorded once, the tool talk not.
        usage = await store.usage_since(0)
        reply = next(p for p in usage.by_purpose if p[0] == "reply")
        assert reply[1:3] == (20, 10)  # two calls of 10 in / 5 out
        stored = await store.messages(SessionKey(C1, 1))
        assert [(m.role, m.text) for m in stored] == [
            ("user", "what's the weather in Oslo?"),
            ("assistant", "It's sunny in Oslo, 21 degrees."),
        ]
        await h.advance(30)
        assert api.call_count == 2 and len(h.outlet.texts()) == 1


async def test_bad_arguments_a_raising_tool_and_a_slow_one_reach_the_model_as_errors(
    store: BaseStore, clock: ManualClock, api: FakeMessagesAPI, llm: AnthropicLLM
) -> None:
    async def weather(city: str, days: int = 1) -> str:
        """The weather in a city."""
        return f"sunny in {city} for {days} day(s)"

    async def broken() -> str:
        """Always fails."""
        raise RuntimeError("user secret: sasha@example.com")

    async def picky(city: str) -> str:
        """Fails with a message for the model."""
        raise ToolError(f"no station near {city}")

    async def slow() -> str:
        """Never finishes in time."""
        await asyncio.Event().wait()
        return "never"

    api.tool_use_next(
        "weather",
        {"town": "Oslo", "days": "many"},
        calls=[("broken", {}), ("picky", {"city": "Atlantis"}), ("slow", {}), ("nope", {})],
    )
    api.reply_next("Sorry, I could not find out.")
    ext = plugins(*(Tool.from_function(f) for f in (weather, broken, picky, slow)))
    policy = ToolPolicy(call_timeout_seconds=5)
    async with harness(
        store, clock, llm, memory_llm=OfflineLLM(), extensions=ext, tool_policy=policy
    ) as h:
        await h.say(C1, "weather?")
        await h.advance(1.6)
        await eventually(lambda: api.call_count == 1, "the first model call")
        await asyncio.sleep(0.05)
        assert api.call_count == 1  # the slow tool holds the step
        await h.advance(5.5)  # its time runs out on the turn's clock
        await eventually(lambda: h.outlet.texts() != [], "the reply")
        assert h.outlet.texts() == ["Sorry, I could not find out."]
        assert results(api.requests[1]) == [
            (
                "Invalid arguments: city: Field required; days: Input should be a valid "
                "integer, unable to parse string as an integer; town: Extra inputs are not "
                "permitted",
                True,
            ),
            ("The tool failed (RuntimeError).", True),  # its message is not shown
            ("no station near Atlantis", True),
            ("The tool did not finish within 5 s.", True),
            ("No tool named 'nope'; tools: broken, picky, slow, weather.", True),
        ]
        assert tool_counts(h) == {
            ("weather", "bad_arguments"): 1,
            ("broken", "error"): 1,
            ("picky", "error"): 1,
            ("slow", "timeout"): 1,
            ("(unknown)", "unknown_tool"): 1,
        }


async def test_the_loop_stops_at_max_steps_and_the_model_answers_without_tools(
    store: BaseStore, clock: ManualClock, api: FakeMessagesAPI, llm: AnthropicLLM
) -> None:
    calls: list[int] = []

    async def dice() -> int:
        """Roll a die."""
        calls.append(1)
        return 4

    for _ in range(5):
        api.tool_use_next("dice", {})  # a model that never stops calling tools
    ext = plugins(Tool.from_function(dice))
    policy = ToolPolicy(max_steps=2)
    async with harness(
        store, clock, llm, memory_llm=OfflineLLM(), extensions=ext, tool_policy=policy
    ) as h:
        api.reply_text = "I rolled a 4 twice."
        await h.say(C1, "roll until you get a six")
        # The third call is told to answer without tools; a model ignoring that still ends
        # the loop: its tool calls are dropped and its text is the reply.
        await answered(h)
        assert len(calls) == 2
        assert api.call_count == 3
        assert [r.body.get("tool_choice") for r in api.requests] == [
            None,
            None,
            {"type": "none"},
        ]
        # Scripted tool_use answers carry no text: the forced answer gets the refusal line
        # rather than an empty message, and the messages are answered, not lost.
        assert h.outlet.texts() == [h.pipeline.profile("default").refusal_message]
        assert await store.pending_turn(C1) is None


async def test_the_calls_bound_runs_the_first_calls_and_tells_the_model_about_the_rest(
    store: BaseStore, clock: ManualClock, api: FakeMessagesAPI, llm: AnthropicLLM
) -> None:
    calls: list[str] = []

    async def lookup(word: str) -> str:
        """Look a word up."""
        calls.append(word)
        return f"{word}: found"

    api.tool_use_next("lookup", {"word": "a"}, calls=[("lookup", {"word": "b"})] * 2)
    api.reply_next("Two of three found.")
    ext = plugins(Tool.from_function(lookup))
    async with harness(
        store,
        clock,
        llm,
        memory_llm=OfflineLLM(),
        extensions=ext,
        tool_policy=ToolPolicy(max_calls=2),
    ) as h:
        await h.say(C1, "look up a, b, b")
        await answered(h)
    assert calls == ["a", "b"]
    assert results(api.requests[1]) == [
        ("a: found", False),
        ("b: found", False),
        (
            "Not run: this turn's limit of tool calls is reached. Answer now with what you have.",
            True,
        ),
    ]
    assert api.requests[1].body["tool_choice"] == {"type": "none"}
    assert h.outlet.texts() == ["Two of three found."]


async def test_the_token_bound_runs_no_tool_once_the_turn_used_its_tokens(
    store: BaseStore, clock: ManualClock, api: FakeMessagesAPI, llm: AnthropicLLM
) -> None:
    calls: list[str] = []

    async def lookup(word: str) -> str:
        """Look a word up."""
        calls.append(word)
        return "found"

    api.tool_use_next("lookup", {"word": "a"}, usage={"input_tokens": 900, "output_tokens": 200})
    api.reply_next("I ran out of budget for lookups.")
    policy = ToolPolicy(max_tokens=1000)
    ext = plugins(Tool.from_function(lookup))
    async with harness(
        store, clock, llm, memory_llm=OfflineLLM(), extensions=ext, tool_policy=policy
    ) as h:
        await h.say(C1, "look up a")
        await answered(h)
    assert calls == []
    assert results(api.requests[1]) == [
        (
            "Not run: this turn's token budget for tools is reached. Answer now with what you "
            "have.",
            True,
        )
    ]
    assert h.outlet.texts() == ["I ran out of budget for lookups."]


async def test_a_side_effect_runs_once_after_the_reply_is_recorded(
    store: BaseStore, clock: ManualClock, api: FakeMessagesAPI, llm: AnthropicLLM
) -> None:
    notes: list[tuple[str, str]] = []
    sent_before: list[int] = []

    async def save_note(text: str, context: TurnContext) -> None:
        """Save a note for the user."""
        sent_before.append(len(h.outlet.texts()))
        notes.append((context.messages[0].author_id, text))

    api.tool_use_next("save_note", {"text": "buy milk"})
    api.reply_next("I'll note that.")
    ext = plugins(Tool.from_function(save_note, side_effects=True))
    async with harness(store, clock, llm, memory_llm=OfflineLLM(), extensions=ext) as h:
        await h.say(C1, "note: buy milk", author="u7")
        await answered(h)
        await eventually(lambda: notes != [], "the effect")
    assert "context" not in api.requests[0].tools[0]["input_schema"]["properties"]
    assert results(api.requests[1]) == [(DEFERRED, False)]
    assert notes == [("u7", "buy milk")]
    assert sent_before == [1]  # after the reply was recorded (and sent)
    assert tool_counts(h) == {("save_note", "deferred"): 1, ("save_note", "effect_ok"): 1}


async def test_a_checked_side_effect_shows_its_check_and_a_refused_one_never_runs(
    store: BaseStore, clock: ManualClock, api: FakeMessagesAPI, llm: AnthropicLLM
) -> None:
    """Tool.check: the model reads what the check says (or its ToolError) in the loop; only a
    call that passed becomes the effect run after the reply."""
    booked: list[int] = []

    async def book(seats: int) -> None:
        """Book seats."""
        booked.append(seats)

    async def check(seats: int) -> str:
        if seats > 4:
            raise ToolError("At most 4 seats.")
        return f"{seats} seats are free."

    tool = replace(Tool.from_function(book, side_effects=True), check=check)
    api.tool_use_next("book", {"seats": 9}, calls=[("book", {"seats": 2})])
    api.reply_next("Booked two.")
    async with harness(store, clock, llm, memory_llm=OfflineLLM(), extensions=plugins(tool)) as h:
        await h.say(C1, "book seats")
        await answered(h)
        await eventually(lambda: booked != [], "the effect")
    assert results(api.requests[1]) == [
        ("At most 4 seats.", True),
        (f"2 seats are free.\n{DEFERRED}", False),
    ]
    assert booked == [2]


async def test_a_tool_raising_cancelled_error_fails_that_call_not_the_turn(
    store: BaseStore, clock: ManualClock, api: FakeMessagesAPI, llm: AnthropicLLM
) -> None:
    """review14: a tool (or effect, or hook) that raised CancelledError (e.g. it awaited a
    task that was cancelled) looked like a shutdown: the turn ended silently, unlogged, and
    ran again at the next scan (paid model calls, forever for a model that keeps asking)."""
    ran: list[str] = []

    async def lookup(city: str) -> str:
        """Look a city up."""
        ran.append("lookup")
        raise asyncio.CancelledError

    async def save(text: str) -> None:
        """Save a note."""
        ran.append("save")
        raise asyncio.CancelledError

    async def save_too(text: str) -> None:
        """Save another note."""
        ran.append("save_too")

    async def hook(turn: TurnContext) -> str:
        raise asyncio.CancelledError

    api.tool_use_next("lookup", {"city": "Oslo"}, calls=[("save", {"text": "a"})])
    api.tool_use_next("save_too", {"text": "b"})
    api.reply_next("Done.")
    ext = plugins(
        *(Tool.from_function(f, side_effects=f is not lookup) for f in (lookup, save, save_too)),
        before=(hook,),
    )
    async with harness(store, clock, llm, memory_llm=OfflineLLM(), extensions=ext) as h:
        await h.say(C1, "note it")
        await answered(h)
        await eventually(lambda: "save_too" in ran, "the effects")
        await h.advance(30)
        assert h.outlet.texts() == ["Done."] and api.call_count == 3
    assert results(api.requests[1]) == [
        ("The tool failed (SelfCancelled).", True),
        (DEFERRED, False),
    ]
    assert ran == ["lookup", "save", "save_too"]  # the loop ran once, every effect ran
    assert tool_counts(h)[("save", "effect_error")] == 1


async def test_newer_input_discards_the_turn_and_its_side_effect(
    store: BaseStore, clock: ManualClock, api: FakeMessagesAPI, llm: AnthropicLLM
) -> None:
    notes: list[str] = []
    gate = asyncio.Event()
    after: list[str] = []

    async def save_note(text: str) -> None:
        """Save a note."""
        notes.append(text)

    async def contacts(name: str) -> str:
        """Find a contact (slow)."""
        await gate.wait()
        return f"{name}: +47 000"

    async def record(context: TurnContext, reply: str) -> None:
        after.append(reply)

    api.tool_use_next("save_note", {"text": "call Ola"}, calls=[("contacts", {"name": "Ola"})])
    api.reply_next("Noted: call Ola.")  # generated while newer input arrived: discarded
    api.reply_next("Noted, and his number is +47 000.")  # the next turn: text only
    ext = plugins(
        Tool.from_function(save_note, side_effects=True),
        Tool.from_function(contacts),
        after=(record,),
    )
    # The final check's fence (the cut-off, which would cancel the loop at once, is off).
    harnessed = harness(store, clock, llm, memory_llm=OfflineLLM(), extensions=ext, cut_stale=False)
    async with harnessed as h:
        await h.say(C1, "remind me to call Ola")
        await h.advance(1.6)
        await eventually(lambda: api.call_count == 1, "the first model call")
        await h.say(C1, "and find his number")  # newer input during generation
        gate.set()
        await eventually(lambda: turns(h, "discarded") == 1, "the final check to discard")
        assert notes == [] and after == [] and h.outlet.texts() == []
        await answered(h)
    assert h.outlet.texts() == ["Noted, and his number is +47 000."]
    assert api.call_count == 3
    assert notes == []  # the discarded turn's effect never happened, and this turn has none
    assert after == ["Noted, and his number is +47 000."]


class _FrozenClock:
    """A process frozen mid-turn: its clock's sleeps never return (no lease renewals)."""

    def __init__(self, clock: ManualClock) -> None:
        self._clock = clock

    def now(self) -> float:
        return self._clock.now()

    async def sleep(self, seconds: float) -> None:
        await ManualClock().sleep(3600)  # a clock nobody advances


async def test_newer_input_cuts_the_tool_loop_and_drops_its_side_effect(
    store: BaseStore, clock: ManualClock, api: FakeMessagesAPI, llm: AnthropicLLM
) -> None:
    """The cut-off (docs/architecture.md#queue rule 9) during a tool loop: the side effect
    was only deferred, so the cut turn leaves none; the next turn answers everything."""
    notes: list[str] = []
    gate = asyncio.Event()

    async def save_note(text: str) -> None:
        """Save a note."""
        notes.append(text)

    async def contacts(name: str) -> str:
        """Find a contact (slow)."""
        await gate.wait()
        return f"{name}: +47 000"

    api.tool_use_next("save_note", {"text": "call Ola"}, calls=[("contacts", {"name": "Ola"})])
    api.reply_next("Noted, and his number is +47 000.")  # the next turn: text only
    ext = plugins(Tool.from_function(save_note, side_effects=True), Tool.from_function(contacts))
    async with harness(store, clock, llm, memory_llm=OfflineLLM(), extensions=ext) as h:
        await h.say(C1, "remind me to call Ola")
        await h.advance(1.6)
        await eventually(lambda: api.call_count == 1, "the first model call")
        await h.say(C1, "and find his number")  # cuts the loop while the lookup runs
        assert turns(h, "discarded") == 1 and notes == []
        gate.set()
        await answered(h)
    assert h.outlet.texts() == ["Noted, and his number is +47 000."]
    assert api.call_count == 2  # the cut loop never asked the model again
    assert notes == []
    # Each call charged once: the cut came while a tool ran, with no model call in flight.
    calls = h.pipeline.metrics.registry.get_sample_value(
        "personabot_model_calls_total",
        {"platform": "telegram", "persona": "default", "purpose": "reply"},
    )
    assert calls == 2


async def test_a_cut_during_a_later_step_charges_the_tool_results_it_asked_with(
    store: BaseStore, clock: ManualClock, api: FakeMessagesAPI, llm: AnthropicLLM
) -> None:
    """Review of issue 37: a tool loop cut while its second model call runs was charged only
    the first prompt, not the tool results that call carried (here ~2,000 tokens of them)."""

    async def lookup(name: str) -> str:
        """Look a name up (a long answer)."""
        api.hold = asyncio.Event()  # the model call that follows is held: the cut lands there
        return f"{name}: " + "a long record line. " * 400

    api.tool_use_next("lookup", {"name": "Ola"})
    api.reply_next("Ola is a friend.")  # the second call, held and cut: never shown
    api.reply_next("Here is what I found about Ola.")  # the next turn: text only
    async with harness(store, clock, llm, extensions=plugins(Tool.from_function(lookup))) as h:
        await h.say(C1, "who is Ola?")
        await h.advance(1.6)
        await eventually(lambda: api.call_count == 2, "the second model call, held")
        await h.say(C1, "and where does he live?")  # cuts the held second call
        assert turns(h, "discarded") == 1
        input_cut = h.pipeline.metrics.registry.get_sample_value(
            "personabot_generations_cut_tokens_total",
            {"platform": "telegram", "persona": "default", "kind": "input"},
        )
        assert input_cut is not None and input_cut > 1500, input_cut
        assert api.hold is not None
        api.hold.set()
        await answered(h)
    assert h.outlet.texts() == ["Here is what I found about Ola."]


async def test_a_lost_lease_fences_the_turn_and_its_side_effect(
    stores: StoreFactory, clock: ManualClock, api: FakeMessagesAPI, llm: AnthropicLLM
) -> None:
    notes: list[str] = []
    gate = asyncio.Event()

    async def save_note(text: str) -> None:
        """Save a note."""
        notes.append(text)

    async def contacts(name: str) -> str:
        """Find a contact (stalls)."""
        await gate.wait()
        return "+47 000"

    api.tool_use_next("save_note", {"text": "call Ola"}, calls=[("contacts", {"name": "Ola"})])
    api.reply_next("Noted: call Ola.")
    ext = plugins(Tool.from_function(save_note, side_effects=True), Tool.from_function(contacts))
    healthy_llm = GatedLLM()
    async with (
        stores.new() as a,
        stores.new() as b,
        harness(
            a,
            clock,
            llm,
            memory_llm=OfflineLLM(),
            lease=10,
            holder="stalled",
            pipeline_clock=_FrozenClock(clock),
            extensions=ext,
        ) as stalled,
    ):
        await stalled.say(C1, "remind me to call Ola")
        await stalled.advance(1.6)
        await eventually(lambda: api.call_count == 1, "the stalled worker's model call")
        async with harness(b, clock, healthy_llm, lease=10, holder="healthy") as healthy:
            await healthy.advance(11)  # the stalled lease expires: taken over
            assert healthy.outlet.texts() == ["reply to: remind me to call Ola"]
            gate.set()  # the stalled worker goes on with a lease it lost
            await eventually(lambda: turns(stalled, "fenced") == 1, "the fence")
    assert api.call_count == 2
    assert stalled.outlet.replies == []
    assert notes == []


async def test_a_before_model_layer_is_in_the_request_after_the_cached_prefix(
    store: BaseStore, clock: ManualClock, api: FakeMessagesAPI, llm: AnthropicLLM
) -> None:
    seen: list[TurnContext] = []

    async def time_of_day(context: TurnContext) -> str:
        seen.append(context)
        return "It is evening for the user <b>now</b>."

    async def broken(context: TurnContext) -> str:
        raise RuntimeError("plugin bug")

    async def nothing(context: TurnContext) -> None:
        return None

    ext = plugins(before=(broken, time_of_day, nothing))
    async with harness(store, clock, llm, memory_llm=OfflineLLM(), extensions=ext) as h:
        await h.say(C1, "hello")
        await answered(h)
        await h.say(C1, "still there?")
        await answered(h, 2)
    first, second = api.requests
    layer = first.messages[-1]["content"][0]
    assert layer["type"] == "text" and "cache_control" not in layer
    assert "It is evening for the user &lt;b&gt;now&lt;/b&gt;." in layer["text"]
    assert layer["text"].startswith("<bot_context>")
    assert first.messages[-1]["content"][1]["text"] == "hello"
    assert "tools" not in first.body  # no tools registered: the request has none
    # The layer sits after the last breakpoint: the next turn's cached prefix is the same.
    assert second.cache_breakpoints[-1][0] == "messages"
    assert second.system_blocks == first.system_blocks
    assert [c.messages[-1].text for c in seen] == ["hello", "still there?"]
    profile = h.pipeline.profile("default")
    assert seen[0].bot == "default"
    assert seen[0].persona_id == (profile.persona_id or profile.pin.name)
    assert h.outlet.texts()[0].startswith("<bot_context>")  # the echo shows what was sent


async def test_after_reply_sees_the_recorded_reply_and_a_raising_hook_fails_nothing(
    store: BaseStore, clock: ManualClock
) -> None:
    seen: list[tuple[str, str]] = []

    async def broken(context: TurnContext, reply: str) -> None:
        raise ValueError("plugin bug")

    async def record(context: TurnContext, reply: str) -> None:
        seen.append((context.messages[-1].text, reply))

    hooks: tuple[Callable[[TurnContext, str], Awaitable[None]], ...] = (broken, record)
    async with harness(store, clock, GatedLLM(), extensions=plugins(after=hooks)) as h:
        await h.say(C1, "hi")
        await h.advance(2)
    assert h.outlet.texts() == ["reply to: hi"]
    stored = await store.messages(SessionKey(C1, 1))
    assert seen == [("hi", stored[-1].text)] == [("hi", "reply to: hi")]


async def test_the_time_bound_starts_no_new_step_once_the_turn_ran_long(
    store: BaseStore, clock: ManualClock, api: FakeMessagesAPI, llm: AnthropicLLM
) -> None:
    async def slow_lookup(word: str) -> str:
        """Look a word up (takes 6 s)."""
        await clock.sleep(6)
        return "found"

    api.tool_use_next("slow_lookup", {"word": "a"})
    api.reply_next("Found a; no time for more.")
    policy = ToolPolicy(max_seconds=5)
    ext = plugins(Tool.from_function(slow_lookup))
    async with harness(
        store, clock, llm, memory_llm=OfflineLLM(), extensions=ext, tool_policy=policy
    ) as h:
        await h.say(C1, "look up a, then b")
        await h.advance(1.6)
        await eventually(lambda: api.call_count == 1, "the first model call")
        await h.advance(6.5)
        await eventually(lambda: h.outlet.texts() != [], "the reply")
    assert results(api.requests[1]) == [("found", False)]
    assert api.requests[1].body["tool_choice"] == {"type": "none"}
    assert h.outlet.texts() == ["Found a; no time for more."]


async def test_the_lease_is_renewed_while_tools_run(
    stores: StoreFactory, clock: ManualClock, api: FakeMessagesAPI, llm: AnthropicLLM
) -> None:
    async def slow_lookup(word: str) -> str:
        """Look a word up (takes 25 s)."""
        await clock.sleep(25)
        return "found"

    api.tool_use_next("slow_lookup", {"word": "a"})
    api.reply_next("Found it.")
    policy = ToolPolicy(call_timeout_seconds=60)
    ext = plugins(Tool.from_function(slow_lookup))
    other_llm = GatedLLM()
    async with (
        stores.new() as a,
        stores.new() as b,
        harness(
            a, clock, llm, memory_llm=OfflineLLM(), lease=10, extensions=ext, tool_policy=policy
        ) as h,
    ):
        await h.say(C1, "look up a")
        await h.advance(1.6)
        await eventually(lambda: api.call_count == 1, "the first model call")
        # A second process starts while the tool runs, and would take an expired lease over.
        async with harness(b, clock, other_llm, lease=10, holder="other") as other:
            await other.advance(26)  # well past one lease: renewed every 10/3 s meanwhile
            await eventually(lambda: h.outlet.texts() != [], "the reply")
            await other.advance(5)
    assert other_llm.calls == 0  # nobody took the conversation over
    assert h.outlet.texts() == ["Found it."]
    assert other.outlet.texts() == []


async def test_tool_calls_are_logged_without_arguments_or_exception_text(
    store: BaseStore,
    clock: ManualClock,
    api: FakeMessagesAPI,
    llm: AnthropicLLM,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def find(name: str) -> str:
        """Find a person."""
        raise RuntimeError(f"no such person: {name}")

    api.tool_use_next("find", {"name": "Sasha Petrova"})
    api.reply_next("I could not find her.")
    caplog.set_level(logging.INFO, logger="personabot")
    async with harness(
        store, clock, llm, memory_llm=OfflineLLM(), extensions=plugins(Tool.from_function(find))
    ) as h:
        await h.say(C1, "find Sasha Petrova")
        await answered(h)
    lines = [r.getMessage() for r in caplog.records if r.name == "personabot.tools"]
    assert any(
        line.startswith("tool find (") and "error (RuntimeError) in" in line for line in lines
    )
    assert not [line for line in lines if "Petrova" in line]


async def test_each_step_is_a_cache_breakpoint_and_the_prompt_keeps_its_own(
    store: BaseStore, clock: ManualClock, api: FakeMessagesAPI, llm: AnthropicLLM
) -> None:
    async def dice() -> int:
        """Roll a die."""
        return 4

    ext = plugins(Tool.from_function(dice))
    async with harness(store, clock, llm, memory_llm=OfflineLLM(), extensions=ext) as h:
        await h.say(C1, "hello")
        await answered(h)  # a window for the next turn, with its breakpoint
        api.tool_use_next("dice", {})
        api.tool_use_next("dice", {})
        api.reply_next("4 and 4.")
        await h.say(C1, "roll twice")
        await answered(h, 2)
    first, second, third = api.requests[1:]
    prompt = [("tools", 0), ("system", 0), ("messages", 1, 0)]
    assert first.cache_breakpoints == prompt
    # The loop's own breakpoint sits on the newest result and moves with it.
    assert second.cache_breakpoints == [*prompt, ("messages", 4, 0)]
    assert third.cache_breakpoints == [*prompt, ("messages", 6, 0)]


class _Scripted(BaseLLM):
    """Answers with the given results in order, recording the requests."""

    def __init__(self, *results: ModelResult) -> None:
        self._results = list(results)
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelResult:
        self.requests.append(request)
        return self._results.pop(0)


async def test_the_loop_never_sends_more_than_four_breakpoints(clock: ManualClock) -> None:
    async def dice() -> int:
        """Roll a die."""
        return 4

    call = ModelResult("", Usage(1, 1), "m", "tool_use", (ToolUse("t1", "dice", {}),))
    llm = _Scripted(
        call, replace(call, content=(ToolUse("t2", "dice", {}),)), ModelResult("4", Usage(), "m")
    )
    cached = tuple(TextBlock(f"s{i}", cache=True) for i in range(3))
    session = SessionKey(C1, 1)
    context = TurnContext(C1, session, "default", "p", (), clock.now())
    charged: list[ModelResult] = []

    async def charge(result: ModelResult) -> None:
        charged.append(result)

    loop = ToolLoop(
        llm=llm,
        clock=clock,
        registry=ToolRegistry((Tool.from_function(dice),)),
        policy=ToolPolicy(),
        context=context,
        charge=charge,
    )
    request = ModelRequest(
        model="m",
        system=cached,
        messages=(ChatMessage("user", (TextBlock("hi", cache=True),)),),
    )
    done = await loop.run(request)
    assert done.result.text == "4" and done.steps == 2 and len(charged) == 3
    assert done.usage == Usage(2, 2)
    for sent in llm.requests:
        marks = sum(b.cache for b in sent.system) + sum(
            b.cache for m in sent.messages for b in m.blocks
        )
        assert marks == 4  # the prompt's 4, and no room for the loop's own


class _BrokenOutlet(RecordingOutlet):
    """An adapter with a bug: every send raises something no adapter should."""

    async def send(self, reply: Reply) -> None:
        raise RuntimeError("adapter bug")


async def test_a_recorded_reply_keeps_its_effect_when_the_send_breaks(
    store: BaseStore, clock: ManualClock, api: FakeMessagesAPI, llm: AnthropicLLM
) -> None:
    notes: list[str] = []

    async def save_note(text: str) -> None:
        """Save a note."""
        notes.append(text)

    api.tool_use_next("save_note", {"text": "buy milk"})
    api.reply_next("Noted.")
    ext = plugins(Tool.from_function(save_note, side_effects=True))
    outlet = _BrokenOutlet(clock)
    async with harness(
        store, clock, llm, memory_llm=OfflineLLM(), extensions=ext, outlet=outlet
    ) as h:
        await h.say(C1, "note: buy milk")
        await h.advance(1.6)
        await eventually(lambda: notes != [], "the effect")
    assert notes == ["buy milk"]
    stored = await store.messages(SessionKey(C1, 1))
    assert [m.text for m in stored if m.role == "assistant"] == ["Noted."]  # the outbox has it


async def test_a_tool_of_another_bot_is_not_offered(
    store: BaseStore, clock: ManualClock, api: FakeMessagesAPI, llm: AnthropicLLM
) -> None:
    async def mine() -> str:
        """This bot's tool."""
        return "mine"

    async def theirs() -> str:
        """Another bot's tool."""
        return "theirs"

    ext = Extensions(
        per_bot={
            "default": plugins(Tool.from_function(mine)),
            "other": plugins(Tool.from_function(theirs)),
        }
    )
    async with harness(store, clock, llm, memory_llm=OfflineLLM(), extensions=ext) as h:
        await h.say(C1, "hello")
        await answered(h)
    assert [t["name"] for t in api.requests[0].tools] == ["mine"]
