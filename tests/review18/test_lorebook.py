"""Review of issue 18: lorebooks against the prompt budget, the prompt cache and hostile input.

Break (fixed): the lorebook layer was bounded only by its own ``token_budget`` (a card's, up to
100,000), never by ``[memory] prompt_budget_tokens``: a card whose entries fire together made a
prompt several times the budget the operator set (docs/architecture.md#prompt: "the whole
prompt stays under memory.prompt_budget_tokens"). Now the entries get what the pin, the
post-history instructions and the smallest turn leave; the rest are dropped by priority, and
each drop is reported (logged, and shown by ``personabot prompt``).

Break (fixed): regex keys had 50 ms each but no bound together, on the event loop: a card with
many runaway patterns, fed by any message, stalled every chat of the process for seconds per
prompt. All the searches of one prompt now share 0.25 s.
"""

from __future__ import annotations

import time

from bot.config import LorebookSettings, LoreEntrySettings
from bot.core.events import ConversationKey, SessionKey, StoredMessage, Turn
from memory.assemble import Budget, assemble
from tests.harness import BOT
from tests.review18.cast import persona

DM = ConversationKey("telegram", "700", None, BOT)
SESSION = SessionKey(DM, 1)


def _said(mid: int, text: str, *, role: str = "user", name: str = "Sasha") -> StoredMessage:
    author = "u1" if role == "user" else "bot"
    return StoredMessage(mid, SESSION, mid, role, author, name, text, 1000.0 + mid)  # type: ignore[arg-type]


def _turn(*messages: StoredMessage) -> Turn:
    return Turn(SESSION, 1, messages, 1000.0)


def test_the_lorebook_never_takes_the_prompt_over_its_budget() -> None:
    entries = [
        LoreEntrySettings(
            content=f"Fact {i}: " + "the river runs deep. " * 140,
            constant=True,
            priority=i,
            name=f"fact {i}",
        )
        for i in range(10)
    ]
    book = LorebookSettings(entries=entries, token_budget=100_000)
    pin = persona("mira", "Mira", lorebook=book, post_history="Be brief.").pin()
    history = [_said(n, f"message {n}", role="user" if n % 2 else "assistant") for n in range(1, 9)]
    built = assemble(pin, _turn(_said(9, "hello")), Budget(prompt_tokens=6000), history=history)
    assert built.total_tokens <= 6000, built.breakdown
    lore = built.lore
    assert lore is not None and lore.fired and lore.dropped
    # Dropped by priority (the lowest first) and every one of them reported.
    kept = {f.label for f in lore.fired}
    dropped = {d.label for d in lore.dropped}
    assert kept | dropped == {f"fact {i}" for i in range(10)}
    assert min(int(k.split()[1]) for k in kept) > max(int(d.split()[1]) for d in dropped)
    # The turn and the pin always stay.
    assert "hello" in built.request.messages[-1].text


def test_runaway_patterns_of_a_whole_lorebook_are_bounded_together() -> None:
    """50 ms per pattern is not a bound when a card has many: 40 runaway patterns held the
    event loop (every chat of the process) 2 s per prompt, 1,000 of them 50 s. All the
    patterns of a prompt now share 0.25 s; the entries left unsearched are reported, and a
    plain key after them still fires."""
    runaway = [
        LoreEntrySettings(content=f"never {i}", keys=["/(a|aa)+$/"], regex=True, name=f"bomb {i}")
        for i in range(40)
    ]
    plain = LoreEntrySettings(content="The ferry leaves at dawn.", keys=["ferry"], name="ferry")
    book = LorebookSettings(entries=[*runaway, plain], token_budget=1000)
    pin = persona("mira", "Mira", lorebook=book).pin()
    started = time.perf_counter()
    built = assemble(pin, _turn(_said(1, "the ferry " + "a" * 5000 + "!")), Budget())
    elapsed = time.perf_counter() - started
    assert elapsed < 1.0, f"{elapsed:.1f}s"
    lore = built.lore
    assert lore is not None and [f.label for f in lore.fired] == ["ferry"]
    assert {s.label for s in lore.skipped} == {f"bomb {i}" for i in range(40)}
    assert {s.reason for s in lore.skipped} == {"regex timeout"}
