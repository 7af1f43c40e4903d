"""BaseStore: every store contract at once, what the backends implement and only the
composition root (bot/app/build.py, bot/app/app.py) hands around whole.

The runtime's contracts are in bot/store/contracts.py, the console's in bot/store/console.py;
a component takes the ones it uses, not this union (import-linter holds the components
already narrowed to it; docs/architecture.md#map).
"""

from __future__ import annotations

from bot.store.console import ConsoleStore
from bot.store.contracts import (
    AgendaStore,
    CommandRecordStore,
    LeaseStore,
    MediaStore,
    MemoryStore,
    MessageStore,
    OutboxStore,
    PeopleStore,
    QueueStore,
    RetentionStore,
    SceneStore,
    SessionStore,
    StoreLifecycle,
    ToolCallStore,
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
    ToolCallStore,
    SceneStore,
    CommandRecordStore,
):
    """Persistent state of personabot: conversations, sessions, messages, memory and queue."""


__all__ = [
    "AgendaStore",
    "BaseStore",
    "CommandRecordStore",
    "LeaseStore",
    "MediaStore",
    "MemoryStore",
    "MessageStore",
    "OutboxStore",
    "PeopleStore",
    "QueueStore",
    "RetentionStore",
    "SceneStore",
    "SessionStore",
    "StoreLifecycle",
    "UsageStore",
]
