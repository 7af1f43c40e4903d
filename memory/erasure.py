"""What a person may ask of what is remembered about them: erase it (/forget, one item from
the console, a message deleted on the platform) and export it (/export): docs/privacy.md.

Erasure always wins against learning: the /forget tombstone is written unconditionally and
bumps the record's version, and every other change here is a compare-and-swap
(memory/stored.py), so an extraction that read before it loses its write and never brings
back what was erased (docs/architecture.md#prompt, "Learning about people").
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from bot.core.clock import Clock
from bot.core.errors import StoreError
from bot.core.events import UserKey
from bot.store.contracts import AgendaStore, MemoryStore, PeopleStore
from memory import stored
from memory.privacy import ForgetReport, agenda_export, export_document
from memory.records import UserMemory, forget_sources
from memory.stored import Rewrite

log = logging.getLogger("personabot.memory")


class ErasureStore(MemoryStore, PeopleStore, AgendaStore, Protocol):
    """What erasure and export reach: the person's record, every row about them, their
    reminders and time zone."""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Eraser:
    """Erases and exports what is stored about a person."""

    store: ErasureStore
    clock: Clock

    async def drop_sources(self, user: UserKey, message_ids: Sequence[int]) -> None:
        """A message was deleted: drop memory items whose only source it was.

        Written even when nothing changes: the version bump makes an extraction that read
        the deleted message lose its compare-and-swap and re-read the messages.
        """
        rewrite = await stored.rewrite_memory(
            self.store, user, lambda record: forget_sources(record, message_ids), self.clock
        )
        if rewrite is Rewrite.BUSY:
            # Every attempt lost to another writer: that writer re-read after the deletion
            # (extractions re-read the messages), so only the oldest sources could be left.
            log.warning("memory of user %s busy; deleted message sources may be kept", user.user_id)

    async def forget_item(self, user: UserKey, section: str, field: str, value: str) -> bool:
        """Erase one remembered item (the operator console: docs/web.md); whether it was there.

        By compare-and-swap like every write of the record, so an extraction running now
        cannot write it back from what it read before."""

        def without(record: UserMemory) -> UserMemory | None:
            kept = tuple(
                item
                for item in record.items
                if (item.section, item.field, item.value) != (section, field, value)
            )
            return None if len(kept) == len(record.items) else replace(record, items=kept)

        rewrite = await stored.rewrite_memory(self.store, user, without, self.clock)
        if rewrite is Rewrite.BUSY:
            raise StoreError(f"memory of user {user.user_id} busy; the item was not erased")
        return rewrite is Rewrite.WRITTEN

    async def forget(self, user: UserKey) -> int:
        """Erase a user's memory and never learn again from what they said before now;
        return how many items were erased.

        The tombstone is written unconditionally and bumps the record's version: every
        extraction or deletion that read before it loses its compare-and-swap.
        """
        before = await stored.user_memory(self.store, user)
        tombstone = UserMemory(items=(), forgotten_at=self.clock.now())
        await self.store.set_user_memory(user, tombstone.to_json(), self.clock.now())
        return len(before.items)

    async def erase(self, user: UserKey, *, delete_messages: bool) -> ForgetReport:
        """/forget: erase the memory, and with ``delete_messages`` every message-shaped row
        about the person in every chat of the platform; report what went and what stays."""
        items = await self.forget(user)
        erasure = await self.store.erase_user_messages(user) if delete_messages else None
        # Reminders hold what the person said; the time zone is about them: both always go.
        reminders = await self.store.erase_agenda(user)
        log.info("user %s forgotten (messages deleted: %s)", user.user_id, delete_messages)
        return ForgetReport(items=items, erasure=erasure, reminders=reminders)

    async def export_all(
        self, user: UserKey, personas: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """Everything stored about the person on this platform, as a JSON-able document
        (``personas``: each bot's default persona id, shown for sessions that chose none)."""
        document = export_document(await self.store.user_data(user), self.clock.now(), personas)
        reminders = await self.store.reminders(user, pending_only=False)
        document.update(agenda_export(reminders, await self.store.timezone_of(user)))
        return document
