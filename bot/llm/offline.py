"""A model that needs no network: deterministic, clearly labelled, built from its input.

It lets a person see the pipeline work (which turn was coalesced, which memory layers
arrived) without an API key, and gives tests and benchmarks a model with a fixed latency.
"""

from __future__ import annotations

import asyncio

from bot.llm.base import BaseLLM, ModelRequest, ModelResult, Usage

LABEL = "[offline model]"


def _estimate(text: str) -> int:
    return max(1, len(text.encode("utf-8")) // 3)


class OfflineLLM(BaseLLM):
    """Echoes the coalesced input and lists the prompt layers it received."""

    name = "offline"

    def __init__(self, *, latency: float = 0.0) -> None:
        self._latency = latency
        self.calls = 0

    async def complete(self, request: ModelRequest) -> ModelResult:
        """Answer from the request alone."""
        self.calls += 1
        if self._latency:
            await asyncio.sleep(self._latency)
        last = request.messages[-1].text if request.messages else ""
        lines = [line for line in last.splitlines() if line.strip()]
        quoted = " / ".join(lines) if lines else "(nothing)"
        layers = ", ".join(request.layers) if request.layers else "none"
        history = max(0, len(request.messages) - 1)
        text = (
            f"{LABEL} You said: {quoted}\n"
            f"(prompt layers: {layers}; {history} earlier messages in the window)"
        )
        prompt = "".join(b.text for b in request.system) + "".join(m.text for m in request.messages)
        return ModelResult(
            text=text,
            usage=Usage(input_tokens=_estimate(prompt), output_tokens=_estimate(text)),
            model="offline",
            stop_reason="end_turn",
        )
