"""Review of issue 18: lorebooks against the prompt budget, the prompt cache and hostile input.

Break (fixed): the lorebook layer was bounded only by its own ``token_budget`` (a card's, up to
100,000), never by ``[memory] prompt_budget_tokens``: a card whose entries fire together made a
prompt several times the budget the operator set (docs/architecture.md#prompt: "the whole
prompt stays under memory.prompt_budget_tokens"). Now the entries get what the pin, the
post-history instructions and the smallest turn leave; the rest are dropped by priority, and
each drop is reported (logged, and shown by ``personabot prompt``).
"""

from __future__ import annotations

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
