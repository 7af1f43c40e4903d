"""Delivery of recorded replies through the outbox: claim, send, confirm; recovery at start.

A reply is in the outbox from the transaction that recorded it. Each send attempt is claimed
with a compare-and-swap on the attempt count, so one process sends it. If a process dies
after claiming but before confirming, the row is re-sent only through an outlet whose send is
idempotent (Discord's nonce); elsewhere it is marked failed and logged: a rare lost reply,
visible in the log, is preferred to a duplicate one (the failure the queue exists to prevent).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from bot.core.clock import Clock
from bot.core.errors import AdapterError, DeliveryRefused
from bot.core.events import OutboxItem, Reply
from bot.core.ports import Outlet
from bot.store.base import BaseStore

log = logging.getLogger("personabot.delivery")


class Delivery:
    """Sends outbox rows through the outlet of their bot."""

    def __init__(
        self, *, store: BaseStore, clock: Clock, outlet_for: Callable[[str], Outlet | None]
    ) -> None:
        self._store = store
        self._clock = clock
        self._outlet_for = outlet_for

    async def deliver(self, item: OutboxItem) -> bool:
        """Claim the attempt, send, confirm; False if not sent."""
        outlet = self._outlet_for(item.conversation.bot)
        if outlet is None or not await self._store.begin_send(item, self._clock.now()):
            return False  # not hosted here, or another worker claimed this attempt
        reply = Reply(
            conversation=item.conversation,
            text=item.text,
            outbox_id=item.id,
            reply_to_platform_message_id=item.reply_to_platform_message_id,
        )
        try:
            await outlet.send(reply)
        except DeliveryRefused as exc:
            log.warning(
                "%s refuses delivery (%s); conversation marked inactive", item.conversation, exc
            )
            await self._store.mark_failed(item.id, self._clock.now(), str(exc))
            await self._store.set_conversation_status(item.conversation, False, str(exc))
            return False
        except AdapterError as exc:
            log.error("could not deliver reply %d to %s: %s", item.id, item.conversation, exc)
            await self._store.mark_failed(item.id, self._clock.now(), str(exc))
            return False
        await self._store.mark_sent(item.id, self._clock.now())
        return True

    async def recover(self, older_than: float) -> int:
        """Deliver replies recorded but not sent before a crash; return how many were sent."""
        sent = 0
        for item in await self._store.unsent_outbox(older_than):
            sent += await self.deliver(item)
        for item in await self._store.uncertain_outbox(older_than):
            outlet = self._outlet_for(item.conversation.bot)
            if outlet is None:
                continue
            if outlet.idempotent_send:
                sent += await self.deliver(item)
                continue
            log.warning(
                "reply %d to %s may not have been delivered (crash mid-send); "
                "not re-sent to avoid a duplicate",
                item.id,
                item.conversation,
            )
            await self._store.mark_failed(item.id, self._clock.now(), "uncertain delivery")
        return sent
