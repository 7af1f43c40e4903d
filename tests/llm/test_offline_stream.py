"""The offline model streamed: its answer in word-sized pieces, the same answer as complete."""

from __future__ import annotations

import asyncio
import contextlib

from bot.core.llm import ChatMessage, ModelRequest, TextBlock
from bot.llm.offline import OfflineLLM

REQUEST = ModelRequest(
    model="offline",
    system=(TextBlock("You are Mira."),),
    messages=(ChatMessage.of("user", "tell me\nabout  the sea"),),
    layers=("persona", "turn"),
)


async def test_the_offline_model_streams_its_answer_word_by_word() -> None:
    llm = OfflineLLM()
    pieces: list[str] = []
    streamed = await llm.stream(REQUEST, pieces.append)

    assert streamed == await llm.complete(REQUEST) and llm.calls == 2
    assert "".join(pieces) == streamed.text
    assert len(pieces) == len(streamed.text.split()) > 5
    assert all(p.strip() and " " not in p.strip() for p in pieces)  # one word each


async def test_a_consumer_runs_between_the_pieces() -> None:
    """A console printing the stream gets the loop between pieces, not all of them at once."""
    pieces: list[str] = []
    seen_by_consumer: list[int] = []

    async def consumer() -> None:
        while True:
            seen_by_consumer.append(len(pieces))
            await asyncio.sleep(0)

    task = asyncio.create_task(consumer())
    await asyncio.sleep(0)
    result = await OfflineLLM().stream(REQUEST, pieces.append)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert "".join(pieces) == result.text
    assert set(range(1, len(pieces))) <= set(seen_by_consumer)
