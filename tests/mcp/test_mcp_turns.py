"""MCP servers' tools in real turns: the App's runtime (harness) with the real ``mcp`` SDK on
both sides, the test server (tests/fakes/mcp_server.py) a real process over stdio or HTTP,
and the model the fake Messages API behind the real Anthropic client."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from bot.app.web import console_data
from bot.config import McpServerSettings, Settings
from bot.core.clock import ManualClock
from bot.core.events import ConversationKey, Inbound
from bot.llm.anthropic import AnthropicLLM
from bot.llm.offline import OfflineLLM
from bot.mcp import Connection, State
from bot.runtime.extensions import Extensions, TurnContext
from bot.runtime.tools import Tool, ToolRegistry
from bot.store.sqlite import SQLiteStore
from tests.fakes.mcp_server import FACT
from tests.fakes.messages_api import CannedReply, FakeMessagesAPI, RecordedRequest
from tests.harness import Harness, eventually, harness, settle
from tests.mcp.conftest import http_server

C1 = ConversationKey("telegram", "100")
StdioServer = Callable[..., McpServerSettings]


def results(request: RecordedRequest) -> list[tuple[str, bool]]:
    """(content, is_error) of the request's tool results."""
    return [(str(r["content"]), bool(r.get("is_error"))) for r in request.tool_results]


def mcp_calls(h: Harness) -> dict[tuple[str, str, str], float]:
    """personabot_mcp_calls_total by (server, tool, outcome)."""
    return {
        (s.labels["server"], s.labels["tool"], s.labels["outcome"]): s.value
        for metric in h.pipeline.metrics.mcp_calls.collect()
        for s in metric.samples
        if s.name.endswith("_total")
    }


def server_up(h: Harness, server: str) -> float | None:
    return h.pipeline.metrics.registry.get_sample_value(
        "personabot_mcp_server_up", {"server": server}
    )


def connection(h: Harness, name: str = "facts") -> Connection:
    assert h.mcp is not None
    return h.mcp.connections[name]


def down_after(facts: Connection, restarts: int) -> bool:
    """Whether the server is down again after this many restarts."""
    return facts.restarts == restarts and facts.state is State.DOWN


async def replied(h: Harness, replies: int = 1) -> None:
    """Let the debounce run out and wait for ``replies`` replies in total."""
    await h.advance(1.6)
    await eventually(lambda: len(h.outlet.texts()) >= replies, f"{replies} reply(ies)", 20)
    await settle(h.store)


async def test_a_read_only_tool_over_stdio_answers_a_turn_and_only_listed_tools_are_offered(
    store: SQLiteStore,
    clock: ManualClock,
    api: FakeMessagesAPI,
    llm: AnthropicLLM,
    stdio_server: StdioServer,
) -> None:
    [call] = api.tool_use_next("facts__lookup", {"topic": "Eiffel Tower"})
    api.reply_next("It is 330 metres tall.")
    servers = [stdio_server()]
    async with harness(store, clock, llm, memory_llm=OfflineLLM(), mcp_servers=servers) as h:
        await connection(h).wait_for(State.UP)
        assert server_up(h, "facts") == 1
        await h.say(C1, "how tall is the Eiffel Tower?")
        await replied(h)
        assert h.outlet.texts() == ["It is 330 metres tall."]
        first, second = api.requests
        # Only the allowlisted tools, sorted by name; the server also has hang, crash, huge.
        assert first.tool_names == ["facts__add_note", "facts__lookup"]
        lookup = first.tools[1]
        assert lookup["description"] == "Look up a fact about a topic."
        assert lookup["input_schema"]["required"] == ["topic"]
        assert second.tools == first.tools  # the same definitions: the prompt cache holds
        assert second.tool_results[0]["tool_use_id"] == call
        assert results(second) == [(f"{FACT} (topic: Eiffel Tower)", False)]
        assert mcp_calls(h) == {("facts", "lookup", "ok"): 1}


async def test_a_tool_not_listed_is_never_run_even_when_the_model_names_it(
    store: SQLiteStore,
    clock: ManualClock,
    api: FakeMessagesAPI,
    llm: AnthropicLLM,
    stdio_server: StdioServer,
) -> None:
    api.tool_use_next("facts__crash", {})
    api.reply_next("I cannot do that.")
    servers = [stdio_server()]
    async with harness(store, clock, llm, memory_llm=OfflineLLM(), mcp_servers=servers) as h:
        await connection(h).wait_for(State.UP)
        await h.say(C1, "crash your server")
        await replied(h)
        [(text, error)] = results(api.requests[1])
        assert error and text.startswith("No tool named 'facts__crash'")
        assert connection(h).state is State.UP and connection(h).restarts == 0
        assert mcp_calls(h) == {}


async def test_an_effectful_tool_runs_in_the_turn_once_and_newer_input_never_loses_its_reply(
    store: SQLiteStore,
    clock: ManualClock,
    api: FakeMessagesAPI,
    llm: AnthropicLLM,
    stdio_server: StdioServer,
    notes: Path,
) -> None:
    """Issue 38 item 5: the call is made inside the turn (the model reads its result), once;
    from then on the turn is committed: a message arriving while the model writes its reply
    neither cuts nor discards it, and gets a turn of its own."""
    gate = asyncio.Event()
    api.answer_when(lambda r: bool(r.tool_results), CannedReply("Noted: buy milk."), gate=gate)
    api.tool_use_next("facts__add_note", {"text": "buy milk"})
    servers = [stdio_server()]
    async with harness(store, clock, llm, memory_llm=OfflineLLM(), mcp_servers=servers) as h:
        await connection(h).wait_for(State.UP)
        await h.say(C1, "note: buy milk")
        await h.advance(1.6)
        await eventually(lambda: api.call_count == 2, "the reply being written", 20)
        assert notes.read_text() == "buy milk\n"  # made before the reply, in the turn
        [(text, error)] = results(api.requests[1])
        assert not error and "carried out" not in text
        await h.say(C1, "and eggs")  # newer input while the committed reply is written
        gate.set()
        await eventually(lambda: len(h.outlet.texts()) >= 1, "the reply", 20)
        assert h.outlet.texts()[0] == "Noted: buy milk."
        await replied(h, 2)  # "and eggs" is answered by a turn of its own
        assert "and eggs" in api.requests[-1].last_user_text
        assert notes.read_text() == "buy milk\n"
        assert mcp_calls(h) == {("facts", "add_note", "ok"): 1}
        discarded = h.pipeline.metrics.registry.get_sample_value(
            "personabot_replies_discarded_total", {"platform": "telegram", "persona": "companion"}
        )
        assert not discarded


async def _retried_after_the_call(
    h: Harness, api: FakeMessagesAPI, retried: dict[str, str]
) -> None:
    """ "note: buy milk": the model calls add_note, then fails (overloaded) writing the reply;
    the turn is tried again after the backoff, its model asking add_note with ``retried``,
    then answering "Noted: buy milk."."""
    api.tool_use_next("facts__add_note", {"text": "buy milk"})
    api.fail_next(status=529)  # the answer after the call
    api.tool_use_next("facts__add_note", retried)
    api.reply_next("Noted: buy milk.")
    await connection(h).wait_for(State.UP)
    await h.say(C1, "note: buy milk")
    await h.advance(1.6)
    await eventually(lambda: api.call_count >= 2, "the failed answer", 20)
    await settle(h.store)
    await h.advance(30, step=1.0)  # the turn's retry after the backoff
    await eventually(lambda: "Noted: buy milk." in h.outlet.texts(), "the reply", 20)


async def test_an_effectful_call_is_never_made_twice_when_its_turn_is_tried_again(
    store: SQLiteStore,
    clock: ManualClock,
    api: FakeMessagesAPI,
    llm: AnthropicLLM,
    stdio_server: StdioServer,
    notes: Path,
) -> None:
    """The model fails after the call was made; the turn is tried again, the model asks for
    the same call: the record answers it (no second note), and one reply is sent."""
    servers = [stdio_server()]
    async with harness(store, clock, llm, memory_llm=OfflineLLM(), mcp_servers=servers) as h:
        await _retried_after_the_call(h, api, {"text": "buy milk"})
        assert api.call_count == 4
        # The recorded result, shown again (the first attempt's model read the same).
        assert results(api.requests[3]) == results(api.requests[1]) == [("noted", False)]
        assert notes.read_text() == "buy milk\n"
        assert mcp_calls(h) == {("facts", "add_note", "ok"): 1}
        assert [t for t in h.outlet.texts() if t == "Noted: buy milk."] == ["Noted: buy milk."]


async def test_personas_and_bots_not_named_by_a_server_are_not_offered_its_tools(
    store: SQLiteStore,
    clock: ManualClock,
    api: FakeMessagesAPI,
    llm: AnthropicLLM,
    stdio_server: StdioServer,
) -> None:
    api.reply_next("Hello.")
    servers = [
        stdio_server(name="open"),
        stdio_server(name="theirs", personas=["someone-else"]),
        stdio_server(name="elsewhere", bots=["another-bot"]),
    ]
    async with harness(store, clock, llm, memory_llm=OfflineLLM(), mcp_servers=servers) as h:
        for name in ("open", "theirs", "elsewhere"):
            await connection(h, name).wait_for(State.UP)
        await h.say(C1, "hi")
        await replied(h)
        assert api.requests[0].tool_names == ["open__add_note", "open__lookup"]


async def test_plugin_and_server_tools_go_sorted_by_name_the_last_one_cached(
    store: SQLiteStore,
    clock: ManualClock,
    api: FakeMessagesAPI,
    llm: AnthropicLLM,
    stdio_server: StdioServer,
) -> None:
    async def weather(city: str) -> str:
        """The weather in a city."""
        return "sunny"

    async def ask(question: str) -> str:
        """Ask the librarian."""
        return "42"

    # Registered out of order; the server's come after them in the registry.
    ext = Extensions(tools=ToolRegistry(tuple(map(Tool.from_function, (weather, ask)))))
    api.tool_use_next("facts__lookup", {"topic": "Eiffel Tower"})
    api.reply_next("It is 330 metres tall.")
    api.reply_next("You are welcome.")
    servers = [stdio_server(), stdio_server(name="theirs", personas=["someone-else"])]
    async with harness(
        store, clock, llm, memory_llm=OfflineLLM(), mcp_servers=servers, extensions=ext
    ) as h:
        for name in ("facts", "theirs"):
            await connection(h, name).wait_for(State.UP)
        await h.say(C1, "how tall is the Eiffel Tower?")
        await replied(h)
        await h.say(C1, "thanks")
        await replied(h, 2)
    first, second, third = api.requests
    names = ["ask", "facts__add_note", "facts__lookup", "weather"]
    assert first.tool_names == names
    # Cached on their own, first in the cache's order (tools -> system -> messages).
    assert first.cache_breakpoints[0] == ("tools", len(names) - 1)
    assert all("cache_control" not in t for t in first.tools[:-1])
    # The same bytes in the loop's next call and in the next turn: the cached prefix holds.
    assert second.tools == first.tools == third.tools
    assert all(len(r.cache_breakpoints) <= 4 for r in api.requests)


async def test_a_hanging_tool_gives_the_model_a_timeout_and_the_turn_answers(
    store: SQLiteStore,
    clock: ManualClock,
    api: FakeMessagesAPI,
    llm: AnthropicLLM,
    stdio_server: StdioServer,
) -> None:
    api.tool_use_next("facts__hang", {})
    api.reply_next("The lookup did not answer, sorry.")
    servers = [stdio_server(tools=["hang"], call_timeout_seconds=0.3)]
    async with harness(store, clock, llm, memory_llm=OfflineLLM(), mcp_servers=servers) as h:
        await connection(h).wait_for(State.UP)
        await h.say(C1, "wait for it")
        await replied(h)
        assert h.outlet.texts() == ["The lookup did not answer, sorry."]
        assert results(api.requests[1]) == [("The tool failed: no answer within 0.3 s", True)]
        assert mcp_calls(h) == {("facts", "hang", "timeout"): 1}
        # Only the tool hung: the server answered the ping the timeout asked for.
        assert connection(h).state is State.UP and connection(h).restarts == 0


async def test_a_crashed_server_fails_the_call_then_is_restarted_after_the_backoff(
    store: SQLiteStore,
    clock: ManualClock,
    api: FakeMessagesAPI,
    llm: AnthropicLLM,
    stdio_server: StdioServer,
) -> None:
    api.tool_use_next("facts__crash", {})
    api.reply_next("Something broke.")
    servers = [stdio_server(tools=["crash", "lookup"])]
    async with harness(store, clock, llm, memory_llm=OfflineLLM(), mcp_servers=servers) as h:
        facts = connection(h)
        await facts.wait_for(State.UP)
        await h.say(C1, "crash")
        await h.advance(1.6)
        await eventually(lambda: h.outlet.texts() != [], "the reply", 20)
        [(text, error)] = results(api.requests[1])
        assert error and text.startswith("The tool failed: the server's connection closed")
        await facts.wait_for(State.DOWN)
        assert server_up(h, "facts") == 0
        assert h.mcp is not None
        [line] = h.mcp.status()
        assert line.startswith("mcp server facts: down (its connection closed during a call")
        # The restart waits for the backoff on the runtime's (manual) clock.
        assert facts.retry_at == pytest.approx(clock.now() + 1.0)
        await clock.advance(1.0)
        await facts.wait_for(State.UP)
        assert facts.restarts == 1 and server_up(h, "facts") == 1
        # The tool works again.
        api.tool_use_next("facts__lookup", {"topic": "again"})
        api.reply_next("Back: 330 metres.")
        await h.say(C1, "and now?")
        await replied(h, 2)
        assert results(api.requests[3]) == [(f"{FACT} (topic: again)", False)]
        assert mcp_calls(h) == {("facts", "crash", "failed"): 1, ("facts", "lookup", "ok"): 1}


async def test_a_10_mb_result_is_cut_and_the_model_told(
    store: SQLiteStore,
    clock: ManualClock,
    api: FakeMessagesAPI,
    llm: AnthropicLLM,
    stdio_server: StdioServer,
) -> None:
    api.tool_use_next("facts__huge", {})
    api.reply_next("That was a lot.")
    servers = [stdio_server(tools=["huge"], max_result_chars=1000)]
    async with harness(store, clock, llm, memory_llm=OfflineLLM(), mcp_servers=servers) as h:
        await connection(h).wait_for(State.UP)
        await h.say(C1, "give me everything")
        await replied(h)
        [(text, error)] = results(api.requests[1])
        assert not error
        assert text == "x" * 1000 + (
            f"\n[... the result was cut: {10 * 1024 * 1024 - 1000} more characters were not shown]"
        )


async def test_a_server_that_cannot_start_never_stops_the_bot_answering(
    store: SQLiteStore,
    clock: ManualClock,
    api: FakeMessagesAPI,
    llm: AnthropicLLM,
    stdio_server: StdioServer,
    tmp_path: Path,
) -> None:
    api.reply_next("Hello there.")
    missing = str(tmp_path / "no-such-server")
    servers = [stdio_server(command=missing, args=[])]
    async with harness(store, clock, llm, memory_llm=OfflineLLM(), mcp_servers=servers) as h:
        facts = connection(h)
        await facts.wait_for(State.DOWN)
        assert facts.problem == f"cannot start {missing!r}: not found"
        # The restarts back off, doubling, on the runtime's clock.
        waits = []
        for restarts in (1, 2, 3):
            assert facts.retry_at is not None
            waits.append(facts.retry_at - clock.now())
            await clock.advance(waits[-1])
            await eventually(lambda n=restarts: down_after(facts, n), f"restart {restarts}")
        assert waits == [1.0, 2.0, 4.0]
        await h.say(C1, "hi")
        await replied(h)
        assert h.outlet.texts() == ["Hello there."]
        assert api.requests[0].tool_names == []  # never listed: nothing to offer
        assert h.mcp is not None
        [line] = h.mcp.status()
        assert line.startswith(f"mcp server facts: down (cannot start {missing!r}: not found;")
        assert line.endswith("restarted 3 time(s)")


async def test_over_http_headers_come_from_the_environment_and_never_reach_the_logs(
    store: SQLiteStore,
    clock: ManualClock,
    api: FakeMessagesAPI,
    llm: AnthropicLLM,
    caplog: pytest.LogCaptureFixture,
) -> None:
    token = "mcp-test-token-9f3b2c71"
    api.tool_use_next("remote__lookup", {"topic": "Paris"})
    api.reply_next("330 metres.")
    api.reply_next("Hi.")
    caplog.set_level(logging.DEBUG, logger="personabot")
    async with http_server({"FAKE_MCP_TOKEN": token}) as served:
        servers = [
            McpServerSettings(
                name=name,
                url=served.url,
                headers={"Authorization": variable},
                tools=["lookup"],
                effects="read_only",
            )
            for name, variable in (("remote", "REMOTE_AUTH"), ("refused", "WRONG_AUTH"))
        ]
        environ = {"REMOTE_AUTH": f"Bearer {token}", "WRONG_AUTH": "Bearer not-the-token-123"}
        async with harness(
            store, clock, llm, memory_llm=OfflineLLM(), mcp_servers=servers, environ=environ
        ) as h:
            await connection(h, "remote").wait_for(State.UP)
            refused = connection(h, "refused")
            await refused.wait_for(State.DOWN)
            await h.say(C1, "how tall?")
            await replied(h)
            assert api.requests[0].tool_names == ["remote__lookup"]
            assert results(api.requests[1]) == [(f"{FACT} (topic: Paris)", False)]
            assert refused.problem is not None and "401" in refused.problem
    logged = caplog.text
    assert "MCP server refused:" in logged and "401" in logged
    for secret in (token, "not-the-token-123"):
        assert secret not in logged
        assert secret not in (refused.problem or "")


async def test_stdio_env_passes_a_secret_from_the_environment_never_logged(
    store: SQLiteStore,
    clock: ManualClock,
    api: FakeMessagesAPI,
    llm: AnthropicLLM,
    stdio_server: StdioServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    secret = "s3cret-value-for-the-server"
    api.tool_use_next("facts__whoami", {})
    api.reply_next("Done.")
    caplog.set_level(logging.DEBUG, logger="personabot")
    servers = [stdio_server(tools=["whoami"], env={"FAKE_MCP_SECRET": "MY_MCP_SECRET"})]
    environ = {"MY_MCP_SECRET": secret}
    async with harness(
        store, clock, llm, memory_llm=OfflineLLM(), mcp_servers=servers, environ=environ
    ) as h:
        await connection(h).wait_for(State.UP)
        assert secret not in repr(connection(h).spec)
        await h.say(C1, "who are you?")
        await replied(h)
        # The server got the value (its own business what it does with it) ...
        assert results(api.requests[1]) == [(secret, False)]
    # ... and personabot never wrote it down.
    assert "MCP server facts: up" in caplog.text
    assert secret not in caplog.text


async def test_the_console_shows_each_server_up_or_down_and_its_calls(
    store: SQLiteStore,
    clock: ManualClock,
    api: FakeMessagesAPI,
    llm: AnthropicLLM,
    stdio_server: StdioServer,
) -> None:
    """Issue 38 item 4: the operator sees a server's state in the console too (inside
    `personabot run`: the overview's "this process" section, /api/overview)."""
    api.tool_use_next("facts__lookup", {"topic": "Eiffel Tower"})
    api.reply_next("It is 330 metres tall.")
    async with harness(
        store, clock, llm, memory_llm=OfflineLLM(), mcp_servers=[stdio_server()]
    ) as h:
        await connection(h).wait_for(State.UP)
        await h.say(C1, "how tall is the Eiffel Tower?")
        await replied(h)
        data = console_data(
            settings=Settings.model_validate({}),
            store=h.store,
            memory=h.memory,
            clock=clock,
            page_size=20,
            metrics=h.pipeline.metrics,
        )
        servers = (await data.overview())["this_process"]["mcp_servers"]
    assert servers == {"facts": {"up": True, "calls": {"ok": 1}}}


async def test_a_retry_that_words_the_action_anew_does_not_make_it_again(
    store: SQLiteStore,
    clock: ManualClock,
    api: FakeMessagesAPI,
    llm: AnthropicLLM,
    stdio_server: StdioServer,
    notes: Path,
) -> None:
    """Review 38: the model fails after the call; the retried attempt is told what was done
    (a context note) and a call of the same tool under other arguments is not made."""
    servers = [stdio_server()]

    async def chatty(context: TurnContext) -> str:  # a plugin's long context layer
        return "Shop opening hours. " * 300

    ext = Extensions(before_model=(chatty,))
    async with harness(
        store, clock, llm, memory_llm=OfflineLLM(), mcp_servers=servers, extensions=ext
    ) as h:
        await _retried_after_the_call(h, api, {"text": "Buy milk"})  # worded anew
        retry = api.requests[2]
        assert "already took these actions" in retry.last_user_text
        assert "facts__add_note: done; result: noted" in retry.last_user_text
        [(text, error)] = results(api.requests[3])
        assert error and text.startswith("Not done: facts__add_note was already called")
        assert notes.read_text() == "buy milk\n"
        assert mcp_calls(h) == {("facts", "add_note", "ok"): 1}


async def test_a_message_deleted_before_its_effectful_call_stops_the_call_not_the_turn(
    store: SQLiteStore,
    clock: ManualClock,
    api: FakeMessagesAPI,
    llm: AnthropicLLM,
    stdio_server: StdioServer,
    notes: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Review 38: the person deletes the message that asked while the model decides; the call
    cannot be recorded against it, so it is not made, and the model reads why (no failed
    turn, no traceback)."""
    gate = asyncio.Event()
    chose = api.tool_use_reply("facts__add_note", {"text": "buy milk"})
    api.answer_when(lambda r: not r.tool_results, chose, gate=gate)
    api.reply_next("I did not note it.")
    async with harness(
        store, clock, llm, memory_llm=OfflineLLM(), mcp_servers=[stdio_server()]
    ) as h:
        await connection(h).wait_for(State.UP)
        await h.say(C1, "note: buy milk", message_id="m-milk")
        await h.advance(1.6)
        await eventually(lambda: api.call_count >= 1, "the model deciding", 20)
        await h.router(Inbound(C1, "u1", "Sasha", "", "m-milk", kind="delete"))
        await settle(h.store)
        gate.set()
        await eventually(lambda: api.call_count >= 2, "the answer after the refused call", 20)
        [(text, error)] = results(api.requests[1])
        assert error and text.startswith("Not done")
        assert not notes.exists()
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
