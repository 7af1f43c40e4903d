"""How one model call's usage is shared between the people whose messages it read."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from bot.core.events import StoredMessage
from bot.core.llm import Usage


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
