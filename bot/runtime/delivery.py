"""The one outbound path: every message the bot sends is an outbox row, claimed, sent, confirmed.

Model replies get their outbox row from the final check (in the transaction that records the
reply); everything else the bot says (command answers, notices, greetings) through
:meth:`Delivery.send`, which records a row of its own (``reply_message_id`` 0: it is not part
of the transcript, so the model never sees it) and delivers it the same way. Two messages go
out through Delivery without a row, because what they would store must not be stored: the
denied reply (nothing of a chat outside the allow lists is kept; its once-a-day lease is its
record, so a crash before the send loses that day's reply, never repeats it) and a file (a
data export: a second copy of everything about a person).

Each send attempt is claimed with a compare-and-swap on the attempt count, so one process sends
it. If a process dies after recording but before claiming, the row is sent at the next start
(a late command answer still answers the command the person sent: its effect happened). If it
dies after claiming but before confirming, the row is re-sent only through an outlet whose send
is idempotent (Discord's nonce); elsewhere it is marked failed and logged: a rare lost message,
visible in the log, is preferred to a duplicate one (the failure the queue exists to prevent).
So a confirmation the store refuses for a moment (SQLite's write lock held by another program,
a dropped connection) is retried for a while: an unconfirmed row would be taken for such a
crash at the next start, and given up (or sent again) though it was delivered.
Mention safety is the adapters' (docs/architecture.md#delivery): every send of every kind passes
through ``Outlet.send``, which never lets a text ping anyone.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Literal, Protocol

from bot.core.choices import Choices, typed
from bot.core.clock import Clock
from bot.core.errors import AdapterError, DeliveryRefused
from bot.core.events import (
    Attachment,
    ConversationKey,
    OutboxItem,
    Reply,
    Voice,
    VoiceMessage,
    voiced,
)
from bot.core.ports import Outlet, ShowsChoices
from bot.core.tasks import persist
from bot.core.visible import has_visible_text
from bot.runtime.previews import PREVIEW_KEY, OnRecord
from bot.store.contracts import MessageStore, OutboxStore, SessionStore

log = logging.getLogger("personabot.delivery")

#: What a message is, for the log: only "reply" rows are part of the transcript.
Kind = Literal["reply", "answer", "notice", "greeting", "denied"]
#: How long an outbox mark after a send is retried while the store fails (the turn waits).
MARK_RETRY_SECONDS = 5.0


class DeliveryStore(OutboxStore, MessageStore, SessionStore, Protocol):
    """What Delivery asks the store: the outbox rows, a chat marked inactive when the
    platform refuses it, the streamed preview still on record at recovery."""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Delivery:
    """Sends outbox rows through the outlet of their bot."""

    store: DeliveryStore
    clock: Clock
    outlet_for: Callable[[str], Outlet | None]
    #: A scene persona's voice, by (bot, persona id) (docs/scenes.md#platforms; None: no
    #: scene here, every line in the bot's own voice).
    voice_of: Callable[[str, str], Voice | None] | None = None

    async def send(
        self,
        conversation: ConversationKey,
        text: str,
        *,
        kind: Kind,
        reply_to: str | None = None,
        private: bool = False,
        choices: Choices | None = None,
    ) -> bool:
        """Record a message that is not a model reply in the outbox, then deliver it; False
        if not sent (nothing visible to say, not hosted here, or the platform failed).
        ``private``: for the asker's eyes only where the platform can (``Reply.private``).
        ``choices`` go with the row (buttons, or typed commands: ``_with_choices``)."""
        if not has_visible_text(text):
            # An operator's blank notice or greeting: the platforms refuse empty messages.
            log.debug("nothing visible to send as %s to %s", kind, conversation)
            return False
        if self.outlet_for(conversation.bot) is None:
            log.warning("%s to %s not sent: bot not hosted here", kind, conversation)
            return False
        item = await self.store.record_outbox(
            conversation, text, self.clock.now(), reply_to=reply_to, choices=choices
        )
        return await self.deliver(item, kind=kind, private=private)

    async def send_unrecorded(
        self,
        conversation: ConversationKey,
        text: str,
        *,
        kind: Kind,
        reply_to: str | None = None,
        private: bool = False,
    ) -> bool:
        """Send now without an outbox row, for a chat of which nothing may be stored (the
        denied reply: its once-a-day lease is its record); False if not sent (logged)."""
        outlet = self.outlet_for(conversation.bot)
        if outlet is None or not has_visible_text(text):
            return False
        reply = Reply(conversation, text, reply_to_platform_message_id=reply_to, private=private)
        try:
            await outlet.send(reply)
        except AdapterError as exc:
            log.warning("could not deliver %s to %s: %s", kind, conversation, exc)
            return False
        return True

    async def send_file(
        self, conversation: ConversationKey, caption: str, attachment: Attachment
    ) -> None:
        """Send a file now, without an outbox row (it is never stored); raise AdapterError
        (DeliveryRefused when the platform never will) for the caller to answer."""
        outlet = self.outlet_for(conversation.bot)
        if outlet is None:
            raise AdapterError(f"bot {conversation.bot} is not hosted here")
        await outlet.send(Reply(conversation, caption, attachment=attachment))

    async def deliver(
        self,
        item: OutboxItem,
        *,
        kind: Kind | None = None,
        replaces: str | None = None,
        voice_message: VoiceMessage | None = None,
        private: bool = False,
    ) -> bool:
        """Claim the attempt, send, confirm; False if not sent. ``replaces``: a streamed
        preview message the reply's first chunk is edited into (docs/architecture.md#streaming);
        ``voice_message``: the reply spoken (docs/voices.md; recovery sends text)."""
        kind = kind or ("reply" if item.reply_message_id else "answer")
        bot = item.conversation.bot
        outlet = self.outlet_for(bot)
        if outlet is None or not await self.store.begin_send(item, self.clock.now()):
            return False  # not hosted here, or another worker claimed this attempt
        voice = self._voice(bot, item.persona)
        reply = Reply(
            conversation=item.conversation,
            text=voiced(item.text, voice),
            outbox_id=item.id,
            reply_to_platform_message_id=item.reply_to_platform_message_id,
            replaces=replaces,
            voice=voice,
            line=None if voice is None else item.text,
            voice_message=voice_message if voice is None else None,
            private=private,
        )
        if item.choices is not None:
            reply = _with_choices(reply, item.choices, outlet)
        try:
            await outlet.send(reply)
        except DeliveryRefused as exc:
            log.warning(
                "%s refuses delivery (%s); conversation marked inactive", item.conversation, exc
            )
            # Inactive first: a row seen as failed always has its conversation marked (a
            # crash in between re-sends the row, and the refusal marks it again).
            refused = str(exc)
            if await self._mark(
                item,
                lambda: self.store.set_conversation_status(item.conversation, False, refused),
            ):
                await self._mark(
                    item, lambda: self.store.mark_failed(item.id, self.clock.now(), refused)
                )
            return False
        except AdapterError as exc:
            log.error("could not deliver %s %d to %s: %s", kind, item.id, item.conversation, exc)
            failure = str(exc)
            await self._mark(
                item, lambda: self.store.mark_failed(item.id, self.clock.now(), failure)
            )
            return False
        await self._mark(item, lambda: self.store.mark_sent(item.id, self.clock.now()))
        return True

    def _voice(self, bot: str, persona: str | None) -> Voice | None:
        """The voice of a scene's line (a persona no longer in the cast: the bot's own)."""
        if persona is None or self.voice_of is None:
            return None
        return self.voice_of(bot, persona)

    async def _mark(self, item: OutboxItem, write: Callable[[], Awaitable[None]]) -> bool:
        """Record what became of a send attempt, retried for ``MARK_RETRY_SECONDS`` while the
        store fails (each mark may be repeated: it sets the row's final state). Given up, the
        row stays unconfirmed (logged, False): the next start treats it as a crash mid-send."""
        until = self.clock.now() + MARK_RETRY_SECONDS
        what = f"outbox mark of row {item.id} to {item.conversation}"
        if await persist(self.clock, write, until=until, what=what) is None:
            log.error("%s not recorded; the next start takes it for a crash mid-send", what)
            return False
        return True

    async def recover(self, older_than: float) -> int:
        """Deliver rows recorded but not sent before a crash; return how many were sent."""
        sent = 0
        for item in await self.store.unsent_outbox(older_than):
            sent += await self._recover(item)
        for item in await self.store.uncertain_outbox(older_than):
            outlet = self.outlet_for(item.conversation.bot)
            if outlet is None:
                continue
            # A scene's line may have gone out through a webhook or another account, which
            # take no idempotency key (docs/scenes.md#platforms): never re-sent blind.
            if outlet.idempotent_send and item.persona is None:
                sent += await self._recover(item)
                continue
            log.warning(
                "outbox row %d to %s may not have been delivered (crash mid-send); "
                "not re-sent to avoid a duplicate",
                item.id,
                item.conversation,
            )
            await self.store.mark_failed(item.id, self.clock.now(), "uncertain delivery")
        return sent

    async def _recover(self, item: OutboxItem) -> bool:
        """Deliver a row left by a crash; a reply whose streamed preview is still posted
        replaces it (the preview's id is session state until then: bot/runtime/streaming.py)."""
        if not item.reply_message_id:
            return await self.deliver(item)
        record = OnRecord.parse(await self.store.get_state(item.session, PREVIEW_KEY))
        replaces = record.replaces
        sent = await self.deliver(item, replaces=replaces)
        if sent and replaces is not None:
            if record.stale:  # still to be deleted by the session's next turn
                left = str(OnRecord(stale=record.stale))
                await self.store.set_state(item.session, PREVIEW_KEY, left, self.clock.now())
            else:
                await self.store.delete_state(item.session, PREVIEW_KEY)
        return sent


def _with_choices(reply: Reply, choices: Choices, outlet: Outlet) -> Reply:
    """``reply`` with its choices as buttons where the outlet shows them there, else with
    the commands they stand for at the end of its text (docs/telegram.md#buttons)."""
    if isinstance(outlet, ShowsChoices) and outlet.shows_choices(reply.conversation):
        return replace(reply, choices=choices)
    return replace(reply, text=typed(reply.text, choices.items))
