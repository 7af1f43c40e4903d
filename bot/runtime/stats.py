"""The /stats report for admins: today's turns, tokens and estimated cost, from the store
(so it covers every process), plus this process's model calls."""

from __future__ import annotations

from collections.abc import Mapping

from bot.core.clock import Clock
from bot.core.llm import Usage
from bot.metrics import Price
from bot.store.contracts import UsageReads

DAY = 86400.0


async def usage_report(
    store: UsageReads, clock: Clock, prices: Mapping[str, Price], bot: str
) -> str:
    """A short text report of today's (UTC) usage of one bot."""
    now = clock.now()
    stats = await store.usage_since(now - now % DAY, bot)
    cost = 0.0
    unpriced = []
    for model, inp, out, write, read in stats.by_model:
        price = prices.get(model)
        if price is None:
            if inp or out:
                unpriced.append(model or "unknown")
            continue
        cost += price.cost(Usage(inp, out, write, read))
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
