"""A model that needs no network: deterministic, clearly labelled, built from its input.

It lets a person see the pipeline work without an API key: replies quote the coalesced input,
say how many images came with it and list the prompt layers that arrived; summaries are
extractive (what the user said, cut short); memory extraction recognises a few plain
statements ("my name is ...", "I work as ...", "I'm afraid of ..."). It calls no tools
(plugins' tools are ignored), except that a check-in's send/skip choice gets ``send``.
Tests and benchmarks use it as a model with a fixed latency.
Streamed, it gives its answer in word-sized pieces (docs/architecture.md#streaming). Like a
real model, its answer ends where one of the request's stop sequences would begin.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Final

from bot.core.llm import (
    BaseLLM,
    ContentBlock,
    ImageBlock,
    ModelRequest,
    ModelResult,
    TextBlock,
    TextSink,
    ToolUse,
    Usage,
)

LABEL: Final = "[offline model]"

# A word with the whitespace before it (or trailing whitespace): the pieces join to the text.
_PIECE: Final = re.compile(r"\s*\S+|\s+")

_PATTERNS: Final = (
    ("semantic", "name", re.compile(r"\bmy name is ([\w' -]{1,40})", re.I)),
    ("semantic", "occupation", re.compile(r"\bI(?: now)? work as (?:an? )?([\w' -]{1,60})", re.I)),
    ("semantic", "location", re.compile(r"\bI live in ([\w' -]{1,60})", re.I)),
    ("semantic", "interest", re.compile(r"\bI (?:love|like|enjoy) ([\w' -]{1,60})", re.I)),
    ("emotional", "fear", re.compile(r"\bI(?:'m| am) (?:afraid|scared) of ([\w' -]{1,60})", re.I)),
    (
        "episodic",
        "event",
        re.compile(r"\b((?:next|this) \w+ I(?:'m| am| will| have)[^.!?]{1,80})", re.I),
    ),
)


def _estimate(text: str) -> int:
    return max(1, len(text.encode("utf-8")) // 3)


class OfflineLLM(BaseLLM):
    """Echoes the coalesced input; summarises and extracts by simple, visible rules."""

    name = "offline"

    def __init__(self, *, latency: float = 0.0) -> None:
        self._latency = latency
        self.calls = 0

    async def complete(self, request: ModelRequest) -> ModelResult:
        """Answer from the request alone."""
        self.calls += 1
        if self._latency:
            await asyncio.sleep(self._latency)
        # The new turn is the last message's last text (a context layer and images may come
        # before it); a memory task's transcript is its first text (images may follow it).
        blocks = request.messages[-1].blocks if request.messages else ()
        texts = [b.text for b in blocks if isinstance(b, TextBlock)]
        last = texts[-1] if texts else ""
        if request.purpose == "summary":
            text = _summary(texts[0] if texts else "")
        elif request.purpose == "extract":
            text = _extract(texts[0] if texts else "")
        else:
            text = _reply(request, last)
        text, stopped = _stopped(text, request.stop)
        prompt = "".join(b.text for b in request.system) + "".join(m.text for m in request.messages)
        usage = Usage(input_tokens=_estimate(prompt), output_tokens=_estimate(text))
        if request.tool_choice == "any" and any(t.name == "send" for t in request.tools):
            # A check-in's structured choice (docs/initiatives.md): it always writes.
            text = f"{LABEL} Just checking in: how are you? (prompt layers: {layers(request)})"
            use = ToolUse(f"offline-{self.calls}", "send", {"text": text})
            return ModelResult("", usage, "offline", "tool_use", content=(use,))
        reason = "stop_sequence" if stopped else "end_turn"
        return ModelResult(text=text, usage=usage, model="offline", stop_reason=reason)

    async def stream(self, request: ModelRequest, on_text: TextSink) -> ModelResult:
        """The answer of :meth:`complete`, given to ``on_text`` one word at a time."""
        result = await self.complete(request)
        for piece in _pieces(result.text):
            on_text(piece)
            await asyncio.sleep(0)  # let the stream's consumer run between pieces
        return result


def _stopped(text: str, stop: tuple[str, ...]) -> tuple[str, bool]:
    """``text`` up to the earliest stop sequence in it (excluded), as a real model stops there,
    and whether one was found."""
    cuts = [i for i in (text.find(s) for s in stop if s) if i >= 0]
    return (text[: min(cuts)], True) if cuts else (text, False)


def _pieces(text: str) -> list[str]:
    """``text`` in word-sized pieces, each with the whitespace before it; joined: ``text``."""
    return _PIECE.findall(text)


def _reply(request: ModelRequest, last: str) -> str:
    lines = [line.strip() for line in last.splitlines() if line.strip()]
    quoted = " / ".join(lines) if lines else "(nothing)"
    history = max(0, len(request.messages) - 1)
    turn = request.messages[-1] if request.messages else None
    images = 0 if turn is None or turn.role != "user" else _images(turn.blocks)
    seen = f"\n(I got {images} image{'s' if images != 1 else ''})" if images else ""
    return (
        f"{LABEL} You said: {quoted}{seen}\n"
        f"(prompt layers: {layers(request)}; {history} earlier messages in the window)"
    )


def layers(request: ModelRequest) -> str:
    """The request's prompt layers, for the reader of an offline answer."""
    return ", ".join(request.layers) if request.layers else "none"


def _images(blocks: tuple[ContentBlock, ...]) -> int:
    return sum(isinstance(b, ImageBlock) for b in blocks)


def _summary(task: str) -> str:
    said = [
        str(line["text"])[:120]
        for line in _json_lines(task)
        if line.get("role") == "user" and "text" in line
    ]
    return json.dumps({"topics": [], "user_said": said, "open_threads": [], "preferences": []})


def _extract(task: str) -> str:
    found: dict[str, list[dict[str, object]]] = {"semantic": [], "emotional": [], "episodic": []}
    for line in _json_lines(task):
        if not isinstance(line.get("message_id"), int) or "text" not in line:
            continue
        source, text = line["message_id"], str(line["text"])
        for section, field, pattern in _PATTERNS:
            for value in pattern.findall(text):
                found[section].append({"field": field, "value": value.strip(), "source": source})
    return json.dumps(found)


def _json_lines(task: str) -> list[dict[str, object]]:
    """The transcript lines of a memory task (one JSON object per message)."""
    out = []
    for line in task.splitlines():
        if not line.startswith("{"):
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            out.append(value)
    return out
