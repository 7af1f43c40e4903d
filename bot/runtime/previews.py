"""A turn's preview and what is on record of it (docs/architecture.md#streaming rules 4, 6, 7).

:class:`Previews` opens a generation's relay (bot/runtime/streaming.py) where the bot streams in
the chat and keeps what the person may still see on record as session state
(``PREVIEW_KEY``), so that a crash, a cut or a discarded generation never leaves a half reply
in the chat:

- a posted preview (``edit``) is on record from its post until the reply replaces it or it is
  deleted (outbox recovery edits a reply recorded before a crash into it);
- **a cut hands its preview to the next generation** (queue rule 9) instead of taking it back,
  so the person never sees the answer vanish and come back:
  a draft (Telegram private chats) is continued by the next generation under the same draft
  id (Telegram animates the change; no second bubble); a posted message cannot move below the
  newer message that cut it, so it stays until the next generation's preview is posted below
  that message (or its reply is sent) and is deleted at that moment: "handed over" means the
  next generation deletes it, never that the answer appears above the person's last message;
- the next turn settles whatever it took over: deleted when its own preview or reply appears,
  or when it ends without a reply (discarded, failed, a chat that streams no more); and a
  hand-over that nobody takes (the newer input was deleted, the next turn answers without a
  preview) is deleted by this process ``HANDOVER_SECONDS`` after the cut, about when a draft
  expires by itself. A draft cannot be deleted: it expires.

The record's value (:class:`OnRecord`): posted message ids, the newest first ("<id> <older>
..."; the first is the preview a reply replaces, the others are deleted), or ``draft:<id>``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from bot.core.clock import Clock
from bot.core.errors import StoreError
from bot.core.events import ConversationKey, SessionKey, Turn
from bot.core.ports import Outlet, Streams, StreamSettings
from bot.runtime.streaming import Relay, StopSignals
from bot.store.contracts import SessionStore

log = logging.getLogger("personabot.streaming")

#: Session state naming what a generation showed that no reply has replaced yet.
PREVIEW_KEY: Final = "personabot:preview"
#: How long a cut generation's posted preview waits for the next generation to take it over
#: before this process deletes it (about a Telegram draft's own lifetime).
HANDOVER_SECONDS: Final = 30.0
_DRAFT: Final = "draft:"
#: Deletes one posted preview (None: the relay's outlet posts none).
Retract = Callable[[str], Awaitable[None]] | None


@dataclass(frozen=True, slots=True)
class OnRecord:
    """What ``PREVIEW_KEY`` names: posted previews (newest first) or a cut generation's draft."""

    posted: tuple[str, ...] = ()
    draft: int | None = None

    @classmethod
    def parse(cls, value: object) -> OnRecord:
        """The record of a session state value (anything but a string: nothing on record)."""
        if not isinstance(value, str):
            return cls()
        if value.startswith(_DRAFT):
            number = value.removeprefix(_DRAFT)
            return cls(draft=int(number)) if number.isdigit() else cls()
        return cls(posted=tuple(value.split()))

    @property
    def replaces(self) -> str | None:
        """The posted preview a reply recorded before a crash is edited into."""
        return self.posted[0] if self.posted else None

    def __str__(self) -> str:
        return f"{_DRAFT}{self.draft}" if self.draft is not None else " ".join(self.posted)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Previews:
    """A turn's preview: its relay started where the bot streams in the chat, what it shows
    on record until a reply replaces it, and the hand-over from a cut generation."""

    sessions: SessionStore
    clock: Clock
    stops: StopSignals
    #: Hand-overs waiting for their deadline (deleted then unless taken over).
    _waiting: set[asyncio.Task[None]] = field(default_factory=set)

    async def open(
        self, turn: Turn, outlet: Outlet, stream: StreamSettings, lost: asyncio.Event
    ) -> Relay | None:
        """The started relay of this generation, when the bot streams in this chat (else
        None); ``lost`` is the lease renewal's event (a fenced worker stops at once). What an
        earlier generation left on record is taken over: its draft continued, its posted
        previews deleted as soon as this one posts (or when this turn ends)."""
        if stream.mode == "off" or not isinstance(outlet, Streams):
            return None
        session, conversation = turn.session, turn.session.conversation
        record = await self._read(session)
        reply_to = turn.messages[-1].platform_message_id if turn.messages else None
        preview = outlet.preview(conversation, stream, reply_to=reply_to, draft_id=record.draft)
        if record.draft is not None:
            await self._delete(session)  # continued (or, with no preview, left to expire)
        if preview is None:
            await self._retract(session, _retractor(outlet, conversation), record.posted)
            return None

        async def posted(message_id: str) -> None:
            await self._posted(session, relay, message_id)

        relay = Relay(
            preview,
            clock=self.clock,
            interval=stream.interval,
            conversation=conversation,
            stops=self.stops if stream.stop != "off" else None,
            lost=lost,
            on_posted=posted,
        )
        relay.predecessors = record.posted
        relay.retract = _retractor(outlet, conversation)
        relay.start()
        return relay

    async def forget(self, session: SessionKey, relay: Relay) -> None:
        """The posted preview is being replaced by the reply: no longer on record (what it
        took over and never replaced stays on record until :meth:`settle`)."""
        if relay.preview.message_id is not None:
            await self.sessions.delete_state(session, PREVIEW_KEY)

    async def settle(self, session: SessionKey, relay: Relay) -> None:
        """The reply was sent: delete the previews this generation took over and never
        replaced (it posted none of its own), so nothing stale stays beside the reply."""
        await self._retract(session, relay.retract, relay.predecessors)
        relay.predecessors = ()

    async def discard(self, session: SessionKey, relay: Relay) -> None:
        """Not this generation's reply (discarded, fenced, failed): take back what it showed
        and what it took over; the next generation shows its own."""
        await relay.discard()
        await self.forget(session, relay)
        await self.settle(session, relay)

    async def hand_over(self, session: SessionKey, relay: Relay) -> None:
        """Newer input cut this generation: what it shows stays for the next generation to
        take over (the module's docstring); deleted by the deadline if none does."""
        await relay.close()
        preview = relay.preview
        if preview.kind == "draft" and preview.draft_id is not None:
            if relay.shown:
                await self._write(session, OnRecord(draft=preview.draft_id))
            await self._retract(session, relay.retract, relay.predecessors)
            return
        if preview.kind != "edit":
            await self.discard(session, relay)  # printed: nothing to hand over
            return
        await relay.take_back_unknown()  # a post whose answer never came cannot be handed on
        own = preview.message_id
        waiting = (own, *relay.predecessors) if own is not None else relay.predecessors
        if waiting:
            deadline = self._deadline(session, relay.retract, frozenset(waiting))
            task = asyncio.ensure_future(deadline)
            self._waiting.add(task)
            task.add_done_callback(self._waiting.discard)

    async def aclose(self) -> None:
        """The process stops: hand-overs still waiting stay on record (the next generation
        of their session takes them over, whichever process runs it)."""
        tasks = list(self._waiting)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _posted(self, session: SessionKey, relay: Relay, message_id: str) -> None:
        """This generation's preview was posted: on record, and what it took over deleted
        now that it shows below (both on record until then, so a crash leaves neither)."""
        older = relay.predecessors
        await self._write(session, OnRecord(posted=(message_id, *older)))
        if older and relay.retract is not None:
            for old in older:
                await relay.retract(old)
            relay.predecessors = ()
            await self._write(session, OnRecord(posted=(message_id,)))

    async def _deadline(
        self, session: SessionKey, retract: Retract, waiting: frozenset[str]
    ) -> None:
        await self.clock.sleep(HANDOVER_SECONDS)
        record = await self._read(session)
        # Taken over: a newer preview is on record (deleting those it replaces itself).
        if record.posted and set(record.posted) <= waiting:
            log.info("%s: preview of a cut generation not taken over; deleting it", session)
            await self._retract(session, retract, record.posted)

    async def _retract(self, session: SessionKey, retract: Retract, ids: Sequence[str]) -> None:
        """Delete these posted previews and their record."""
        if not ids or retract is None:
            return
        for message_id in ids:
            await retract(message_id)
        await self._delete(session)

    async def _read(self, session: SessionKey) -> OnRecord:
        try:
            return OnRecord.parse(await self.sessions.get_state(session, PREVIEW_KEY))
        except StoreError as exc:
            log.warning("%s: could not read the preview on record: %s", session, exc)
            return OnRecord()

    async def _write(self, session: SessionKey, record: OnRecord) -> None:
        try:
            await self.sessions.set_state(session, PREVIEW_KEY, str(record), self.clock.now())
        except StoreError as exc:
            log.warning("%s: preview %s not on record: %s", session, record, exc)

    async def _delete(self, session: SessionKey) -> None:
        try:
            await self.sessions.delete_state(session, PREVIEW_KEY)
        except StoreError as exc:
            log.warning("%s: could not take the preview off record: %s", session, exc)


def _retractor(outlet: Streams, conversation: ConversationKey) -> Retract:
    """Deletes one posted preview of ``conversation`` (the adapter's ``retract`` never raises)."""

    async def retract(message_id: str) -> None:
        await outlet.retract(conversation, message_id)

    return retract
