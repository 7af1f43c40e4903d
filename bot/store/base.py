"""BaseStore: every store contract at once, what the backends implement (bot/store/contracts.py)."""

from __future__ import annotations

from bot.store.contracts import (
    AgendaStore,
    ConsoleStore,
    LeaseStore,
    MediaStore,
    MemoryStore,
    MessageStore,
    OutboxStore,
    PeopleStore,
    QueueStore,
    RetentionStore,
    SessionStore,
    StoreLifecycle,
    UsageStore,
)


class BaseStore(
    StoreLifecycle,
    SessionStore,
    MessageStore,
    MediaStore,
    QueueStore,
    LeaseStore,
    OutboxStore,
    UsageStore,
    MemoryStore,
    RetentionStore,
    PeopleStore,
    AgendaStore,
    ConsoleStore,
):
    """Persistent state of personabot: conversations, sessions, messages, memory and queue."""


__all__ = [
    "AgendaStore",
    "BaseStore",
    "ConsoleStore",
    "LeaseStore",
    "MediaStore",
    "MemoryStore",
    "MessageStore",
    "OutboxStore",
    "PeopleStore",
    "QueueStore",
    "RetentionStore",
    "SessionStore",
    "StoreLifecycle",
    "UsageStore",
]
