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
  or when it ends without a reply (discarded, failed, held back by a limit, refused); and a
  hand-over that nobody takes (the person deleted their messages) is deleted by this process
  ``HANDOVER_SECONDS`` after the cut (about when a draft expires by itself), later while a
  turn of the conversation runs (it takes the hand-over itself). A draft cannot be deleted:
  it expires;
- a delete that fails for a while (a network or server error: ``Streams.retract`` says so)
  keeps the message on record: the next turn and this process's deadline try again (up to
  ``MAX_TRIES`` times), so one failed request never leaves a half reply for good.

The record's value (:class:`OnRecord`): ``<current> -<stale> ...`` (the newest generation's
posted preview, which a reply recorded before a crash replaces; then posted previews to
delete), ``-<stale> ...`` with no current one, or ``draft:<id>``.
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
from bot.core.queue_rules import turn_lease
from bot.runtime.streaming import Relay, StopSignals
from bot.store.contracts import LeaseStore, SessionStore

log = logging.getLogger("personabot.streaming")

#: Session state naming what a generation showed that no reply has replaced yet.
PREVIEW_KEY: Final = "personabot:preview"
#: How long a cut generation's posted preview waits for the next generation to take it over
#: before this process deletes it (about a Telegram draft's own lifetime); also the pause
#: between two tries of a delete that failed.
HANDOVER_SECONDS: Final = 30.0
#: Rounds of the deadline (tries of a failing delete, waits while a turn runs) before this
#: process leaves what is on record to the session's next turn.
MAX_TRIES: Final = 8
_DRAFT: Final = "draft:"
_STALE: Final = "-"
#: Deletes one posted preview; False: try again later (None: the outlet posts none).
Retract = Callable[[str], Awaitable[bool]] | None


@dataclass(frozen=True, slots=True)
class OnRecord:
    """What ``PREVIEW_KEY`` names: the newest posted preview and posted previews to delete,
    or a cut generation's draft."""

    current: str | None = None
    stale: tuple[str, ...] = ()
    draft: int | None = None

    @classmethod
    def parse(cls, value: object) -> OnRecord:
        """The record of a session state value (anything but a string: nothing on record)."""
        if not isinstance(value, str):
            return cls()
        if value.startswith(_DRAFT):
            number = value.removeprefix(_DRAFT)
            return cls(draft=int(number)) if number.isdigit() else cls()
        ids = value.split()
        current = next((i for i in ids[:1] if not i.startswith(_STALE)), None)
        stale = tuple(i.removeprefix(_STALE) for i in ids if i.startswith(_STALE))
        return cls(current, stale)

    @property
    def posted(self) -> tuple[str, ...]:
        """Every posted preview on record, the current one first."""
        return (self.current, *self.stale) if self.current is not None else self.stale

    @property
    def replaces(self) -> str | None:
        """The posted preview a reply recorded before a crash is edited into."""
        return self.current

    def __str__(self) -> str:
        if self.draft is not None:
            return f"{_DRAFT}{self.draft}"
        current = [] if self.current is None else [self.current]
        return " ".join([*current, *(f"{_STALE}{i}" for i in self.stale)])


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Previews:
    """A turn's preview: its relay started where the bot streams in the chat, what it shows
    on record until a reply replaces it, and the hand-over from a cut generation."""

    sessions: SessionStore
    leases: LeaseStore
    clock: Clock
    stops: StopSignals
    #: Deadlines of hand-overs and of failed deletes (cancelled when the process stops).
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
        retract = _retractor(outlet, conversation)
        if preview is None:
            await self._clear(session, retract, record.posted)
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
        relay.retract = retract
        relay.start()
        return relay

    async def clear(self, session: SessionKey, outlet: Outlet) -> None:
        """A turn that ends without a preview of its own (held back by a limit, refused):
        delete what a cut generation handed over, so no half reply stays beside its notice."""
        if isinstance(outlet, Streams):
            record = await self._read(session)
            await self._clear(session, _retractor(outlet, session.conversation), record.posted)

    async def forget(self, session: SessionKey, relay: Relay) -> None:
        """The posted preview is being replaced by the reply: no longer on record (what it
        took over and could not delete yet stays, to be deleted)."""
        if relay.preview.message_id is not None:
            await self._keep(session, OnRecord(stale=relay.predecessors))

    async def settle(self, session: SessionKey, relay: Relay) -> None:
        """The reply was sent: delete the previews this generation took over and never
        replaced (it posted none of its own), so nothing stale stays beside the reply."""
        relay.predecessors = await self._clear(session, relay.retract, relay.predecessors)

    async def discard(self, session: SessionKey, relay: Relay) -> None:
        """Not this generation's reply (discarded, fenced, failed): take back what it showed
        and what it took over; the next generation shows its own."""
        own = relay.preview.message_id
        if own is None or relay.retract is None:
            await relay.discard()  # nothing posted, or a post whose answer never came
            own = None
        else:
            await relay.close()
        ids = (own, *relay.predecessors) if own is not None else relay.predecessors
        relay.predecessors = await self._clear(session, relay.retract, ids)

    async def hand_over(self, session: SessionKey, relay: Relay) -> None:
        """Newer input cut this generation: what it shows stays for the next generation to
        take over (the module's docstring); deleted by the deadline if none does."""
        await relay.close()
        preview = relay.preview
        if preview.kind == "draft" and preview.draft_id is not None:
            await self.settle(session, relay)  # posted previews of an earlier mode, if any
            if relay.shown and not relay.predecessors:
                await self._write(session, OnRecord(draft=preview.draft_id))
            return
        if preview.kind != "edit":
            await self.discard(session, relay)  # printed: nothing to hand over
            return
        await relay.take_back_unknown()  # a post whose answer never came cannot be handed on
        own = preview.message_id
        waiting = (own, *relay.predecessors) if own is not None else relay.predecessors
        self._deadline_for(session, relay.retract, waiting)

    async def aclose(self) -> None:
        """The process stops: what waits for a deadline stays on record (the next turn of its
        session takes it over, whichever process runs it)."""
        tasks = list(self._waiting)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _posted(self, session: SessionKey, relay: Relay, message_id: str) -> None:
        """This generation's preview was posted: on record, and what it took over deleted
        now that it shows below (both on record until then, so a crash leaves neither)."""
        older = relay.predecessors
        await self._write(session, OnRecord(message_id, older))
        if older:
            relay.predecessors = await self._deleted(relay.retract, older)
            await self._write(session, OnRecord(message_id, relay.predecessors))
            self._deadline_for(session, relay.retract, relay.predecessors)

    async def _clear(
        self, session: SessionKey, retract: Retract, ids: Sequence[str]
    ) -> tuple[str, ...]:
        """Delete these posted previews; what could not be deleted yet stays on record (a
        deadline tries again). Returns those."""
        if not ids:
            return ()
        left = await self._deleted(retract, ids)
        await self._keep(session, OnRecord(stale=left))
        self._deadline_for(session, retract, left)
        return left

    async def _deleted(self, retract: Retract, ids: Sequence[str]) -> tuple[str, ...]:
        """Delete each of ``ids``; the ones to try again."""
        if retract is None:
            return ()
        return tuple([i for i in ids if not await retract(i)])

    def _deadline_for(self, session: SessionKey, retract: Retract, ids: Sequence[str]) -> None:
        if ids and retract is not None:
            task = asyncio.ensure_future(self._deadline(session, retract, frozenset(ids)))
            self._waiting.add(task)
            task.add_done_callback(self._waiting.discard)

    async def _deadline(
        self, session: SessionKey, retract: Retract, waiting: frozenset[str]
    ) -> None:
        """Delete what waits on record unless a newer generation took it over (a newer
        preview became current), waiting while a turn of the conversation runs (it takes the
        hand-over itself) and trying again while the deletes fail."""
        lease = turn_lease(session.conversation)
        for _ in range(MAX_TRIES):
            await self.clock.sleep(HANDOVER_SECONDS)
            try:
                expires = await self.leases.lease_expires_at(lease)
            except StoreError as exc:
                log.warning("%s: could not look at the turn lease: %s", session, exc)
                continue
            if expires is not None and expires > self.clock.now():
                continue  # a turn runs: it takes over what is on record
            record = await self._read(session)
            if not (record.posted and set(record.posted) <= waiting):
                return  # taken over (a newer preview is current), or gone already
            log.info("%s: deleting the preview(s) of a cut generation nobody took over", session)
            left = await self._deleted(retract, record.posted)
            await self._keep(session, OnRecord(stale=left))
            if not left:
                return
            waiting = frozenset(left)

    async def _keep(self, session: SessionKey, record: OnRecord) -> None:
        """``record`` on record, or nothing when it names nothing."""
        if record.posted or record.draft is not None:
            await self._write(session, record)
        else:
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
    """Deletes one posted preview of ``conversation`` (the adapter's ``retract`` never
    raises; False: try again later)."""

    async def retract(message_id: str) -> bool:
        return await outlet.retract(conversation, message_id)

    return retract
