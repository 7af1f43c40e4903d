"""The baselines, asked with the same model, persona text and judge as personabot.

- ``full_history``: the pin and every dataset message, oldest dropped first until the
  request fits ``context_tokens`` (the model's context);
- ``window_only``: the pin and the last ``budget.window_messages`` messages (no summary, no
  user memory);
- ``no_memory``: the pin and the question.

Messages are the dataset's, user side and bot side alternating as personabot stores them
(same-side runs joined by a newline, a leading bot-side message dropped); the breakpoints are
personabot's: the pin and the last history message (docs/architecture.md#prompt).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from bench.longmem.datasets import Conversation, Question
from bench.longmem.replay import CLOSER, Setup
from bot.core.llm import ChatMessage, ModelRequest, TextBlock
from memory.tokens import estimate_tokens

BASELINES: Final = ("full_history", "window_only", "no_memory")
DEFAULT_CONTEXT_TOKENS: Final = 120_000


def history(conv: Conversation) -> list[tuple[str, str]]:
    """Every dataset message in order as (role, text)."""
    return [(u.role, u.text) for s in conv.sessions for u in s.utterances]


def _messages(items: Sequence[tuple[str, str]]) -> list[ChatMessage]:
    """Alternating chat messages (runs joined), starting with the user side."""
    runs: list[tuple[str, list[str]]] = []
    for role, text in items:
        if runs and runs[-1][0] == role:
            runs[-1][1].append(text)
        else:
            runs.append((role, [text]))
    while runs and runs[0][0] != "user":
        runs.pop(0)
    return [
        ChatMessage.of("user" if role == "user" else "assistant", "\n".join(texts))
        for role, texts in runs
    ]


def _fit(items: list[tuple[str, str]], room: int) -> list[tuple[str, str]]:
    """The newest messages whose texts fit ``room`` tokens."""
    kept: list[tuple[str, str]] = []
    used = 0
    for item in reversed(items):
        cost = estimate_tokens(item[1])
        if used + cost > room:
            break
        kept.append(item)
        used += cost
    return kept[::-1]


def baseline_request(
    way: str,
    conv: Conversation,
    question: Question,
    setup: Setup,
    *,
    context_tokens: int = DEFAULT_CONTEXT_TOKENS,
) -> ModelRequest:
    """The request of one baseline for one question."""
    pin = setup.pin(conv)
    pin_text = pin.text(user=conv.user_name)
    items = history(conv)
    if way == "full_history":
        room = context_tokens - estimate_tokens(pin_text) - estimate_tokens(question.text)
        items = _fit(items, room - setup.max_tokens)
    elif way == "window_only":
        window = setup.budget.window_messages
        items = items[-window:] if window else []
    elif way == "no_memory":
        items = []
    else:
        raise ValueError(f"unknown baseline {way!r}")
    messages = _messages(items)
    if messages:  # the breakpoint on the last history message, as personabot places it
        last = messages[-1]
        blocks = tuple(
            TextBlock(b.text, cache=True) if isinstance(b, TextBlock) else b for b in last.blocks
        )
        messages[-1] = ChatMessage(last.role, blocks)
    if messages and messages[-1].role == "user":  # as personabot's replay answers it
        messages.append(ChatMessage.of("assistant", CLOSER))
    messages.append(ChatMessage.of("user", question.text))
    return ModelRequest(
        model=pin.model,
        system=(TextBlock(pin_text, cache=True),),
        messages=tuple(messages),
        max_tokens=pin.max_tokens,
        temperature=pin.temperature,
        layers=("pin", "window", "turn") if len(messages) > 1 else ("pin", "turn"),
    )
