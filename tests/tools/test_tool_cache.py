"""Tool definitions in the prompt cache (docs/architecture.md#prompt): sorted by name, a cache
breakpoint on the last one, never more than the API's four breakpoints in any call of a tool
loop, and a request without tools as it always was. The real tool loop and anthropic SDK
against the fake Messages API; the prompt from the real assembly (tests/mcp/test_mcp_turns.py
has a whole turn with plugin and MCP tools)."""

from __future__ import annotations

import io

from PIL import Image

from bot.core.clock import ManualClock
from bot.core.events import ConversationKey
from bot.core.llm import ImageBlock, ModelRequest, ModelResult
from bot.llm.anthropic import AnthropicLLM
from bot.runtime.extensions import TurnContext
from bot.runtime.tools import Tool, ToolLoop, ToolPolicy, ToolRegistry
from memory.assemble import Budget, Participant, ShownImage, assemble
from memory.records import Summary
from tests.fakes.messages_api import FakeMessagesAPI, RecordedRequest
from tests.memory.test_assemble import PIN, S, memory, msg, turn_of
from tests.memory.test_content import PHOTO, media, with_media

C1 = ConversationKey("telegram", "100")


def tool(name: str) -> Tool:
    """A read-only tool of that name that answers with its name."""

    async def run() -> str:
        return name

    return Tool.from_function(run, name=name, description=f"The {name} tool.")


def marks(request: RecordedRequest) -> list[tuple[object, ...]]:
    return request.cache_breakpoints


def _png(color: str) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 48), color).save(out, "PNG")
    return out.getvalue()


def _prompt() -> ModelRequest:
    """A prompt that spends every breakpoint assembly has: pin and memory, summary, window
    (with an image), and a new turn with an image."""
    window = [
        with_media(msg(1, "look at my cat"), media(1, PHOTO, "ready", message=1)),
        msg(2, "What a fluffy cat!", "assistant"),
        msg(3, "she is called Tama"),
        msg(4, "Tama is a lovely name.", "assistant"),
    ]
    turn = with_media(msg(5, "and here she sleeps"), media(2, PHOTO, "ready", message=5))
    images = {
        n: ShownImage(ImageBlock("image/png", _png(color)), 100)
        for n, color in ((1, "red"), (2, "blue"))
    }
    assembled = assemble(
        PIN,
        turn_of(turn),
        Budget(),
        history=window,
        participants=[Participant("11", "Sasha", memory(("pet", "a cat called Tama")))],
        summary=Summary(1, 0, topics=("cats",), user_said=("Sasha adopted a cat",)),
        images=images,
    )
    assert assembled.request.layers[:3] == ("persona", "memory", "summary")
    return assembled.request


async def _loop(llm: AnthropicLLM, clock: ManualClock, *tools: Tool) -> ModelResult:
    async def charge(result: ModelResult) -> None:
        return None

    loop = ToolLoop(
        llm=llm,
        clock=clock,
        registry=ToolRegistry(tools),
        policy=ToolPolicy(),
        context=TurnContext(C1, S, "default", "mira", (), clock.now()),
        charge=charge,
    )
    return (await loop.run(_prompt())).result


#: Where assembly puts its breakpoints in ``_prompt``: after pin and memory, after the summary,
#: on the window's last message. Unchanged by tools, which only come before them.
PROMPT_MARKS = [("system", 1), ("system", 2), ("messages", 3, 0)]


async def test_no_request_of_a_tool_loop_has_more_than_four_breakpoints(
    clock: ManualClock, api: FakeMessagesAPI, llm: AnthropicLLM
) -> None:
    api.tool_use_next("zodiac", {})
    api.tool_use_next("album", {})
    api.reply_next("A sleepy Leo.")
    result = await _loop(llm, clock, tool("zodiac"), tool("album"), tool("breed"))
    assert result.text == "A sleepy Leo."
    first, second, third = api.requests
    for sent in api.requests:
        assert len(marks(sent)) <= 4
        assert sent.tool_names == ["album", "breed", "zodiac"]
        assert len(sent.images) == 2  # the window's photo and the turn's
    # The first call: the definitions cached on their own, then the prompt's three.
    assert marks(first) == [("tools", 2), *PROMPT_MARKS]
    # Later calls: the loop's breakpoint on its newest result; the tools' one gives way (the
    # first call wrote that entry, and these read a longer prefix).
    assert marks(second) == [*PROMPT_MARKS, ("messages", 6, 0)]
    assert marks(third) == [*PROMPT_MARKS, ("messages", 8, 0)]
    assert second.tool_results and third.tool_results


async def test_without_tools_the_request_is_what_it_was(
    clock: ManualClock, api: FakeMessagesAPI, llm: AnthropicLLM
) -> None:
    result = await _loop(llm, clock)
    assert result.text
    [sent] = api.requests
    assert not {"tools", "tool_choice"} & sent.body.keys()
    assert marks(sent) == PROMPT_MARKS
