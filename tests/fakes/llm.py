"""Test doubles for the model interface (real implementations of BaseLLM, no mocks)."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import Callable

from bot.core.clock import Clock
from bot.core.llm import BaseLLM, ModelRequest, ModelResult, TextSink, Usage


class GatedLLM(BaseLLM):
    """Counts calls and blocks each one until the test opens its gate (or for a clock delay).

    ``generation`` seconds on ``clock`` model a slow model without real sleeping; with
    ``gated=True`` every call also waits for :meth:`release`. With ``delegate`` the answer
    comes from that model (e.g. OfflineLLM's extraction), after the wait. A streamed call
    writes ``partial`` at once, before it waits, and the answer after it. A call cancelled
    while it waits (the caller closed the request) is counted in :attr:`cancelled`.
    """

    name = "gated"

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        generation: float = 0.0,
        gated: bool = False,
        answer: Callable[[ModelRequest], str] | None = None,
        delegate: BaseLLM | None = None,
        partial: str = "",
    ) -> None:
        self._clock = clock
        self._generation = generation
        self._gated = gated
        self._answer = answer or (lambda r: f"reply to: {r.messages[-1].text}")
        self._delegate = delegate  # when set, answers (after the gate) come from it
        self.partial = partial  # may change between calls
        #: Raised by the next call (once), after it is recorded: a provider's failure.
        self.fail_next: Exception | None = None
        self.requests: list[ModelRequest] = []
        #: Indexes of the calls cancelled while they waited.
        self.cancelled: list[int] = []
        self.started = asyncio.Event()
        self._gates: list[asyncio.Event] = []

    @property
    def calls(self) -> int:
        """Model calls made so far."""
        return len(self.requests)

    def last_input(self, index: int = -1) -> str:
        """The new-turn text of a call."""
        return self.requests[index].messages[-1].text

    def release(self, index: int | None = None) -> None:
        """Let call ``index`` (default: every waiting call) finish."""
        gates = self._gates if index is None else [self._gates[index]]
        for gate in gates:
            gate.set()

    async def complete(self, request: ModelRequest) -> ModelResult:
        """Record the request, wait as configured, answer."""
        index = len(self.requests)
        self.requests.append(request)
        gate = asyncio.Event()
        self._gates.append(gate)
        self.started.set()
        if self.fail_next is not None:
            failure, self.fail_next = self.fail_next, None
            raise failure
        try:
            if self._generation and self._clock is not None:
                await self._clock.sleep(self._generation)
            if self._gated:
                await gate.wait()
        except asyncio.CancelledError:
            self.cancelled.append(index)
            raise
        if self._delegate is not None:
            return await self._delegate.complete(request)
        return ModelResult(self._answer(request), Usage(10, 5), "gated")

    async def stream(self, request: ModelRequest, on_text: TextSink) -> ModelResult:
        """``partial`` at once, then the answer once the call is let through."""
        if not self.partial:
            return await super().stream(request, on_text)
        partial = self.partial
        on_text(partial)
        result = await self.complete(request)
        on_text(result.text)
        return dataclasses.replace(result, text=partial + result.text)


_CHOICE = re.compile(r"I pick the (\w+) mug")


def mug_oracle(request: ModelRequest) -> str:
    """Answers 'which mug?' from the prompt alone: the last choice stated in the messages."""
    text = "\n".join(m.text for m in request.messages)
    if "which mug" not in request.messages[-1].text:
        return "noted"
    choices = _CHOICE.findall(text)
    return f"you picked the {choices[-1]} mug" if choices else "you have not picked a mug"
