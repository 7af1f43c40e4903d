"""What every model call costs and whom it is charged to: replies and memory tasks alike.

Each call's usage is recorded in the store (so limits and /stats see it across processes) and
counted in the metrics, split between the people whose messages it read in proportion to how
much of them it read (in a group, the one who pasted a novel pays for it, not the others).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bot.core.clock import Clock
from bot.core.events import ConversationKey
from bot.core.llm import ModelResult
from bot.core.shares import split
from bot.metrics import Metrics
from bot.runtime.limits import Limits
from bot.store.contracts import UsageStore

log = logging.getLogger("personabot.usage")


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Accounting:
    """Charges model calls and asks the limits whether a memory task may run."""

    store: UsageStore
    clock: Clock
    metrics: Metrics
    limits: Limits | None = None

    async def allow(self, conversation: ConversationKey, authors: Sequence[str]) -> bool:
        """Whether a memory task over these people's messages may call the model now."""
        if self.limits is None:
            return True
        allowed = await self.limits.allow_task(conversation.bot, conversation.platform, authors)
        if not allowed:
            log.info("memory task of %s deferred: a token limit is reached", conversation)
        return allowed

    async def charge(
        self,
        conversation: ConversationKey,
        purpose: str,
        result: ModelResult,
        by: Mapping[str, int],
        requested: str | None = None,
    ) -> None:
        """Record one answered call: store rows (one per share), call count, tokens, cost.

        Priced by the model that answered, else by the one ``requested``: an endpoint names
        the model it served (``gpt-4.1-mini-2025-04-14`` for ``gpt-4.1-mini``, an alias's
        target), and a call priced by neither would spend past a money limit unseen."""
        labels = self.metrics.labels(conversation)
        self.metrics.model_calls.labels(*labels, purpose).inc()
        priced = result.model
        if self.metrics.price(priced) is None and requested is not None:
            priced = requested
        self.metrics.usage(conversation, priced, result.usage)
        await self.store.record_usage(
            conversation,
            purpose,
            result.model,
            split(result.usage, by),
            self.clock.now(),
            price=self.metrics.price(priced),
        )
