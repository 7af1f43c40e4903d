"""Fitting a memory task's input (summary, extraction) under its token budget (pure).

A task's messages are cut, each with a visible marker (all to one shorter length when they do
not fit), and when even the shortest cut is not enough, fewer messages are taken: the oldest
for a summary (it folds history in order, so the rest is folded by the next call), the newest
for an extraction (what a person said last matters most; the older messages are reported as
skipped). The request is always built by the caller's own function, so what is measured is
exactly what is sent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Final

from bot.core.events import StoredMessage
from bot.core.llm import ModelRequest
from memory.tokens import estimate_tokens
from memory.turn import cut

# A summary or a fact rarely needs more of one message than this.
TASK_MESSAGE_CHARS: Final = 1000
_MIN_MESSAGE_CHARS: Final = 200


def request_tokens(request: ModelRequest) -> int:
    """Estimated input tokens of a request (system blocks and every message)."""
    return sum(estimate_tokens(b.text) for b in request.system) + sum(
        estimate_tokens(m.text) for m in request.messages
    )


def _cut_all(messages: Sequence[StoredMessage], limit: int) -> list[StoredMessage]:
    return [
        m if len(m.text) <= limit else dataclasses.replace(m, text=cut(m.text, limit))
        for m in messages
    ]


def fit_task(
    messages: Sequence[StoredMessage],
    build: Callable[[Sequence[StoredMessage]], ModelRequest],
    budget_tokens: int,
    *,
    keep: str = "oldest",
) -> tuple[list[StoredMessage], ModelRequest]:
    """The messages to send (each cut to at most ``TASK_MESSAGE_CHARS``) and the request
    built from them, estimated within ``budget_tokens`` when at least one message can be.

    ``keep`` says which end survives when not all of them fit: "oldest" (a contiguous prefix)
    or "newest" (a suffix). At least one message is always kept, cut down as far as needed.
    """
    chosen = _cut_all(messages, TASK_MESSAGE_CHARS)
    request = build(chosen)
    if request_tokens(request) <= budget_tokens or not chosen:
        return chosen, request
    # First shorter cuts for every message (one call folds a whole chunk of long messages),
    # then fewer messages at the shortest cut.
    low, high = _MIN_MESSAGE_CHARS, TASK_MESSAGE_CHARS
    while low < high:
        mid = (low + high + 1) // 2
        if request_tokens(build(_cut_all(messages, mid))) <= budget_tokens:
            low = mid
        else:
            high = mid - 1
    chosen = _cut_all(messages, low)
    request = build(chosen)
    if request_tokens(request) <= budget_tokens:
        return chosen, request
    low, high = 1, len(chosen)
    while low < high:
        mid = (low + high + 1) // 2
        part = chosen[:mid] if keep == "oldest" else chosen[-mid:]
        if request_tokens(build(part)) <= budget_tokens:
            low = mid
        else:
            high = mid - 1
    part = chosen[:low] if keep == "oldest" else chosen[-low:]
    return part, build(part)
