"""The /stats report for admins: today's turns, tokens and estimated cost, from the store
(so it covers every process), plus this process's model calls."""

from __future__ import annotations

from collections.abc import Mapping

from bot.core.clock import Clock
from bot.core.llm import Price
from bot.store.contracts import UsageReads

DAY = 86400.0


async def usage_report(
    store: UsageReads, clock: Clock, prices: Mapping[str, Price], bot: str
) -> str:
    """A short text report of today's (UTC) usage of one bot."""
    now = clock.now()
    stats = await store.usage_since(now - now % DAY, bot)
    # The cost is what the calls were charged (priced when they were made, as the money
    # limits count it); models without a price are named.
    unpriced = [
        model or "unknown"
        for model, inp, out, _, _ in stats.by_model
        if model not in prices and (inp or out)
    ]
    cost = stats.cost
    lines = [
        f"Today (UTC), bot {bot}:",
        f"- turns answered: {stats.turns} in {stats.conversations} conversation(s)",
        f"- tokens: {stats.input_tokens} in, {stats.output_tokens} out, "
        f"{stats.cache_write_tokens} cache write, {stats.cache_read_tokens} cache read",
        f"- estimated cost: ${cost:.4f}",
    ]
    if unpriced:
        lines.append(f"- no price configured for: {', '.join(sorted(set(unpriced)))}")
    return "\n".join(lines)
