"""What every model call costs and whom it is charged to: replies and memory tasks alike.

Each call's usage is recorded in the store (so limits and /stats see it across processes) and
counted in the metrics, split between the people whose messages it read in proportion to how
much of them it read (in a group, the one who pasted a novel pays for it, not the others).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from bot.clock import Clock
from bot.events import ConversationKey, StoredMessage
from bot.limits import Limits
from bot.llm.base import ModelResult, Usage
from bot.metrics import Metrics
from bot.store.base import BaseStore

log = logging.getLogger("personabot.usage")


def weights(messages: Sequence[StoredMessage]) -> dict[str, int]:
    """Characters of user text per author: how a call over these messages is split."""
    out: dict[str, int] = {}
    for m in messages:
        if m.role == "user":
            out[m.author_id] = out.get(m.author_id, 0) + max(1, len(m.text))
    return out


def split(usage: Usage, by: Mapping[str, int]) -> list[tuple[str | None, Usage]]:
    """Shares of ``usage`` in proportion to ``by`` that add up exactly (the bot alone when
    ``by`` is empty)."""
    total = sum(by.values())
    if not by or total <= 0:
        return [(None, usage)]
    fields = (
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_creation_input_tokens,
        usage.cache_read_input_tokens,
    )
    people = sorted(by, key=lambda p: -by[p])
    shares = {p: [value * by[p] // total for value in fields] for p in people}
    for i, value in enumerate(fields):
        shares[people[0]][i] += value - sum(s[i] for s in shares.values())  # the remainder
    return [(p, Usage(*shares[p])) for p in people]


class Accounting:
    """Charges model calls and asks the limits whether a memory task may run."""

    def __init__(
        self,
        *,
        store: BaseStore,
        clock: Clock,
        metrics: Metrics,
        limits: Limits | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._metrics = metrics
        self._limits = limits

    async def allow(self, conversation: ConversationKey, authors: Sequence[str]) -> bool:
        """Whether a memory task over these people's messages may call the model now."""
        if self._limits is None:
            return True
        allowed = await self._limits.allow_task(conversation.bot, conversation.platform, authors)
        if not allowed:
            log.info("memory task of %s deferred: a token limit is reached", conversation)
        return allowed

    async def charge(
        self,
        conversation: ConversationKey,
        purpose: str,
        result: ModelResult,
        by: Mapping[str, int],
    ) -> None:
        """Record one answered call: store rows (one per share), call count, tokens, cost."""
        labels = self._metrics.labels(conversation)
        self._metrics.model_calls.labels(*labels, purpose).inc()
        self._metrics.usage(conversation, result.model, result.usage)
        await self._store.record_usage(
            conversation, purpose, result.model, split(result.usage, by), self._clock.now()
        )
