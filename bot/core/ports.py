"""What the runtime needs from a platform adapter, as Protocols (adapters implement them)."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from bot.core.choices import PressOutcome
from bot.core.events import ConversationKey, Inbound, Reply
from bot.core.i18n import Texts

#: How a bot shows a reply while it is written (docs/architecture.md#streaming): ``auto`` =
#: Telegram drafts in private chats, nothing elsewhere; ``draft`` = the same, Telegram only;
#: ``edit`` = drafts in Telegram private chats, a posted message edited in place elsewhere;
#: ``off`` = the typing indicator only.
StreamMode = Literal["auto", "off", "draft", "edit"]
#: What the stop button of a Telegram draft does: ``keep`` records and sends what the person
#: saw, ``discard`` records nothing, ``off`` shows no button.
StopButton = Literal["keep", "discard", "off"]


@dataclass(frozen=True, slots=True)
class StreamSettings:
    """One bot's streaming settings."""

    mode: StreamMode = "auto"
    interval: float = 1.0  # seconds between two updates of a preview
    stop: StopButton = "keep"


class Preview(Protocol):
    """A reply shown while it is being written: a Telegram draft, or a posted message that is
    edited in place. Only bot.runtime.streaming calls it, one call at a time; like ``send``,
    nothing it shows ever notifies anyone."""

    @property
    def kind(self) -> Literal["draft", "edit", "console"]:
        """What the person sees: an ephemeral draft, a real message, or terminal output."""
        ...

    @property
    def draft_id(self) -> int | None:
        """The id a stop update names (a Telegram draft with a stop button), else None."""
        ...

    @property
    def message_id(self) -> str | None:
        """The platform message posted so far (``edit``), which the final reply replaces
        (``Reply.replaces``); None while nothing is posted, and always for drafts."""
        ...

    async def show(self, text: str) -> None:
        """Show ``text`` (the whole answer so far; the preview shows its tail when too long).

        Raise PreviewThrottled (skip updates for a while), PreviewUnavailable (stop
        previewing this turn) or AdapterError (this update failed; later ones may work).
        """
        ...

    async def discard(self) -> None:
        """Take back what was shown (delete the posted message; a draft is left to expire).
        Never raises: a failure is logged."""
        ...


@runtime_checkable
class Streams(Protocol):
    """An outlet that can show replies while they are written."""

    def preview(
        self,
        conversation: ConversationKey,
        settings: StreamSettings,
        *,
        reply_to: str | None = None,
        draft_id: int | None = None,
    ) -> Preview | None:
        """A preview for one generation in ``conversation``, or None when this chat streams
        nothing under ``settings`` (then the typing indicator is all the person sees).
        ``reply_to`` is the platform message a posted preview quotes (groups); ``draft_id``
        the draft of a cut generation this one continues (the same id: Telegram animates the
        change instead of showing a new bubble; ignored where previews are not drafts)."""
        ...

    async def retract(self, conversation: ConversationKey, message_id: str) -> bool:
        """Delete a posted preview a cut or crashed generation left behind; never raises.
        False: it may still be there and a later try may work (a network or server error);
        True: it is gone, or can never be deleted (retrying would not help)."""
        ...


class Outlet(Protocol):
    """Delivers replies to one platform account and shows typing."""

    @property
    def idempotent_send(self) -> bool:
        """True when re-sending the same outbox id cannot post twice (e.g. Discord nonce)."""
        ...

    async def send(self, reply: Reply) -> None:
        """Deliver a reply (a file too, when it has an attachment); raise AdapterError when it
        cannot be delivered (DeliveryRefused when the platform never will).

        Only bot.runtime.delivery calls it (the one outbound path); whatever the text says, it
        never notifies anyone (no @everyone, no mention of a user or role).
        """
        ...

    async def private_conversation(
        self, conversation: ConversationKey, user_id: str
    ) -> ConversationKey:
        """The private chat of ``user_id`` with the bot of ``conversation`` (for answers that
        must not appear in a group).

        Raise DeliveryRefused when the platform will not open one (the send may still be
        refused later, e.g. on Telegram before the user started the bot).
        """
        ...

    def typing(self, conversation: ConversationKey) -> AbstractAsyncContextManager[None]:
        """Keep a typing indicator alive for the body of the ``async with``."""
        ...


class InboundHandler(Protocol):
    """Receives every normalized inbound message of an adapter."""

    @property
    def commands(self) -> tuple[tuple[str, str], ...]:
        """(name, description) of every chat command, for platform command menus."""
        ...

    @property
    def admin_commands(self) -> tuple[str, ...]:
        """Names of the commands only admins may run (``/stats``, a scene's ``/stop``): in no
        menu, but taken unaddressed in a group like the others (not another bot's)."""
        ...

    async def __call__(self, inbound: Inbound) -> None:
        """Handle one message (a command at once; anything else is ingested)."""
        ...

    async def stopped(self, conversation: ConversationKey, draft_id: int) -> None:
        """The person pressed the stop button of draft ``draft_id`` (Telegram drafts)."""
        ...

    def batch(self) -> AbstractAsyncContextManager[None]:
        """Messages handled inside are stored in one transaction when it ends: a StoreError
        there (or from a handler call inside) means none of them is, so the adapter
        acknowledges none and hands the whole batch over again."""
        ...

    def rejected(self, platform: str, bot: str, kind: str) -> None:
        """Count an update of ``kind`` the adapter could not read (already logged, skipped)."""
        ...


@runtime_checkable
class ShowsChoices(Protocol):
    """An outlet that shows a reply's ``choices`` as buttons (Telegram's inline keyboards);
    to any other outlet Delivery sends the choices as typed commands in the text."""

    def shows_choices(self, conversation: ConversationKey) -> bool:
        """Whether a message to ``conversation`` can carry buttons."""
        ...


@runtime_checkable
class PressHandler(Protocol):
    """An InboundHandler that takes button presses (the router's; docs/telegram.md#buttons)."""

    async def press(self, inbound: Inbound) -> PressOutcome:
        """Run the command a verified press (``kind`` "press", by the person who asked)
        stands for, through the access checks and middleware of a typed command, at most
        once per message and command across processes; never stored, never for the model."""
        ...

    def texts(self, locale: str | None) -> Texts:
        """The built-in texts a press's answer is in, for a person whose platform language
        is ``locale`` (the persona's language, or theirs with ``auto``: docs/i18n.md)."""
        ...
