"""Prompt assembly: a pure function from persona, history and the new turn to a request.

Layers, stable first so the provider's prompt cache keeps working (SPEC section 5):
persona pin, user memory, rolling summary, gap notice, window, new turn. This module does no
I/O; the pipeline loads the inputs and passes them in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bot.events import StoredMessage, Turn
from bot.llm.base import ChatMessage, ModelRequest, TextBlock
from memory.tokens import estimate_tokens


@dataclass(frozen=True, slots=True)
class PersonaPin:
    """The persona's system prompt and opening line(s): present in every prompt."""

    name: str
    system: str
    first_message: tuple[str, ...]
    model: str
    max_tokens: int = 1024
    temperature: float | None = None

    def text(self) -> str:
        """The pinned system text."""
        opening = "\n".join(self.first_message)
        return f"{self.system}\n\nYou opened this conversation with:\n{opening}"


@dataclass(frozen=True, slots=True)
class Budget:
    """How much history fits: window length and the whole prompt's token budget."""

    window_messages: int = 24
    prompt_tokens: int = 6000


@dataclass(frozen=True, slots=True)
class Assembled:
    """The request plus tokens per layer (for logs and the prompt command)."""

    request: ModelRequest
    breakdown: tuple[tuple[str, int], ...]

    @property
    def total_tokens(self) -> int:
        """Estimated tokens of the whole prompt."""
        return sum(n for _, n in self.breakdown)


def render_turn(messages: Sequence[StoredMessage]) -> str:
    """Merge a turn's messages in order; with several authors each part keeps its author."""
    authors = {m.author_id for m in messages}
    if len(authors) <= 1:
        return "\n".join(m.text for m in messages)
    return "\n".join(f"{m.display_name} (user {m.author_id}): {m.text}" for m in messages)


def _window_messages(history: Sequence[StoredMessage]) -> list[ChatMessage]:
    """History as alternating chat messages (consecutive same-role runs merged)."""
    out: list[ChatMessage] = []
    run: list[StoredMessage] = []
    for message in history:
        if run and run[-1].role != message.role:
            out.append(_run_message(run))
            run = []
        run.append(message)
    if run:
        out.append(_run_message(run))
    return out


def _run_message(run: list[StoredMessage]) -> ChatMessage:
    text = render_turn(run) if run[0].role == "user" else "\n".join(m.text for m in run)
    return ChatMessage.of(run[0].role, text)


def assemble(
    pin: PersonaPin, history: Sequence[StoredMessage], turn: Turn, budget: Budget
) -> Assembled:
    """Build the request: pin, window (shrunk to fit the budget first), the new turn."""
    pin_text = pin.text()
    turn_text = render_turn(turn.messages)
    fixed = estimate_tokens(pin_text) + estimate_tokens(turn_text)
    window = list(history)[-budget.window_messages :] if budget.window_messages else []
    window_tokens = sum(estimate_tokens(m.text) for m in window)
    # The window shrinks first; the pin and the new turn are never dropped.
    while window and fixed + window_tokens > budget.prompt_tokens:
        window_tokens -= estimate_tokens(window.pop(0).text)
    while window and window[0].role == "assistant":
        window_tokens -= estimate_tokens(window.pop(0).text)
    messages = _window_messages(window)
    if messages and messages[-1].role == "user":
        # The new turn must follow an assistant message: fold a trailing user run into it.
        turn_text = f"{messages.pop().text}\n{turn_text}"
    messages.append(ChatMessage.of("user", turn_text))
    layers = ["persona"] + ([f"window({len(window)})"] if window else []) + ["turn"]
    request = ModelRequest(
        model=pin.model,
        system=(TextBlock(pin_text, cache=True),),
        messages=tuple(messages),
        max_tokens=pin.max_tokens,
        temperature=pin.temperature,
        layers=tuple(layers),
    )
    breakdown = (
        ("persona", estimate_tokens(pin_text)),
        ("window", window_tokens),
        ("turn", estimate_tokens(render_turn(turn.messages))),
    )
    return Assembled(request=request, breakdown=breakdown)
