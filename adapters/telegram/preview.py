"""Replies shown while they are written (docs/architecture.md#streaming): a draft in a private
chat (``sendMessageDraft``), a posted message edited in place in a group (``edit`` mode).

Both implement ``bot.core.ports.Preview``. They call the Bot directly, never the adapter's
flood-waiting path: a preview must not delay the turn, so a flood limit is reported at once
(``PreviewThrottled``) and the runtime skips updates; the final reply is sent the usual way.

Invariants:
- what a preview shows notifies nobody (``without_mentions``, as every send);
- a preview shows the tail of the answer that fits one message ("…" first when cut), formatted
  as the final message is; a chat that rejects the formatting gets plain text from then on;
- previews draw from their chat's lane of the account's pacer (:mod:`adapters.telegram.pacing`),
  like final replies, but are refused (``PreviewThrottled``) *before* calling Telegram rather
  than delayed: over a group's budget (the last slot of each window is left to final
  replies), while a paced send waits or goes in that chat, or while a 429 pauses the chat;
- a 429 on a preview pauses its chat for every sender (``retry_after`` is always honoured).
"""

from __future__ import annotations

import abc
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Literal

from aiogram import Bot
from aiogram.exceptions import (
    ClientDecodeError,
    TelegramAPIError,
    TelegramBadRequest,
    TelegramForbiddenError,
    TelegramMigrateToChat,
    TelegramNotFound,
    TelegramRetryAfter,
)
from aiogram.methods import DeleteMessage, EditMessageText, SendMessage, SendMessageDraft
from aiogram.types import Message, ReplyParameters

from adapters.streaming import PostedPreview
from adapters.telegram.format import MESSAGE_LIMIT, html_tail, tail, without_mentions
from adapters.telegram.pacing import TelegramPacer
from bot.core.errors import AdapterError, PreviewThrottled, PreviewUnavailable
from bot.core.pacing import Pacer
from bot.core.ports import StreamSettings

log = logging.getLogger("personabot.telegram")

#: 400 descriptions that mean "this chat will not take messages from us" (like a 403).
REFUSALS: Final = ("chat not found", "not enough rights", "have no rights", "topic_closed")
#: 400 descriptions that mean the posted message can no longer be edited (deleted, too old).
NOT_EDITABLE: Final = (
    "message to edit not found",
    "message can't be edited",
    "message_id_invalid",
)
NOT_MODIFIED: Final = "message is not modified"
_BAD_ENTITIES: Final = "can't parse entities"
_ERRORS: Final = (TelegramAPIError, ClientDecodeError)
_MAX_DRAFT_ID: Final = 2**31 - 1
#: Window slots of a group previews leave to final replies (which wait for a slot instead).
_RESERVED: Final = 1


@dataclass(frozen=True, slots=True)
class PreviewContext:
    """What every preview of one bot account needs: its Bot, how to word errors, and the
    pacer its chats' sends share (the adapter's)."""

    bot: Bot
    bot_key: str
    redact: Callable[[str], str]  # scrubs the token from any text
    pacer: Pacer[int] = field(default_factory=TelegramPacer)

    def failure(self, chat_id: int, exc: Exception) -> AdapterError:
        """The framework's error for a failed preview update (never the token)."""
        detail = self.redact(getattr(exc, "message", None) or str(exc))
        text = f"telegram bot {self.bot_key}: preview in chat {chat_id} failed: {detail}"
        if isinstance(exc, TelegramRetryAfter):
            return PreviewThrottled(text, retry_after=float(exc.retry_after))
        refused = isinstance(exc, TelegramForbiddenError | TelegramMigrateToChat)
        lowered = detail.lower()
        if refused or any(words in lowered for words in REFUSALS + NOT_EDITABLE):
            return PreviewUnavailable(text)
        return AdapterError(text)


class _Formatted(abc.ABC):
    """What both previews share: the answer's tail as HTML, as plain text once the chat
    rejected the formatting (for the rest of this preview)."""

    _context: PreviewContext
    _chat_id: int
    _plain: bool
    _what = "preview"  # how the log names it

    @abc.abstractmethod
    async def _put(self, text: str, parse_mode: str | None) -> None:
        """Show ``text`` (one message's worth) in the chat."""

    def _failure(self, exc: Exception) -> AdapterError:
        if isinstance(exc, TelegramRetryAfter):
            # The flood is the chat's, not this preview's: every sender of the chat waits.
            self._context.pacer.pause(self._chat_id, float(exc.retry_after))
        return self._context.failure(self._chat_id, exc)

    def _take_slot(self, *, message: bool) -> None:
        """Take the chat's next slot now (a new ``message``, or an edit), else raise
        PreviewThrottled saying when to try again: a preview never waits for one."""
        wait = self._context.pacer.try_take(self._chat_id, spaced=message, reserve=_RESERVED)
        if wait > 0:
            raise PreviewThrottled(
                f"telegram bot {self._context.bot_key}: chat {self._chat_id} is paced "
                f"(flood limits); the next slot in {wait:.1f}s",
                retry_after=wait,
            )

    async def _show(self, markdown: str) -> None:
        """Show the tail of ``markdown``: HTML, else plain text when the chat rejects it."""
        if not self._plain:
            try:
                await self._put(html_tail(markdown).html, "HTML")
                return
            except TelegramBadRequest as exc:
                if _BAD_ENTITIES not in exc.message.lower():
                    raise self._failure(exc) from exc
                log.warning(
                    "telegram bot %s: chat %s rejected a %s's formatting (%s); plain text",
                    self._context.bot_key,
                    self._chat_id,
                    self._what,
                    self._context.redact(exc.message),
                )
                self._plain = True
            except _ERRORS as exc:
                raise self._failure(exc) from exc
        try:
            await self._put(tail(markdown, MESSAGE_LIMIT), None)
        except _ERRORS as exc:
            raise self._failure(exc) from exc


class DraftPreview(_Formatted):
    """A draft in a private chat: ephemeral, replaced by the next draft or message.

    ``on_refused`` is called when Telegram refuses drafts in this chat (the adapter then stops
    offering previews there).
    """

    _what = "draft"

    def __init__(
        self,
        context: PreviewContext,
        chat_id: int,
        thread_id: int | None,
        settings: StreamSettings,
        *,
        on_refused: Callable[[], None],
        draft_id: int | None = None,
    ) -> None:
        self._context = context
        self._chat_id = chat_id
        self._thread_id = thread_id
        self._can_stop = settings.stop != "off"
        self._keep_on_stop = settings.stop == "keep"
        self._on_refused = on_refused
        # Fresh per preview (the stop update names it, and a new id never animates over the
        # draft of an earlier turn), unless it continues the draft of a generation that newer
        # input cut: the same id animates that draft into this one (no second bubble).
        self._draft_id = draft_id or secrets.randbelow(_MAX_DRAFT_ID) + 1
        self._shown: str | None = None
        self._plain = False

    @property
    def kind(self) -> Literal["draft"]:
        """An ephemeral draft."""
        return "draft"

    @property
    def draft_id(self) -> int:
        """The id the draft's stop update names."""
        return self._draft_id

    @property
    def message_id(self) -> None:
        """Drafts post no message."""
        return None

    async def show(self, text: str) -> None:
        """Show the tail of ``text`` as the draft (no call when it is what is shown)."""
        markdown = without_mentions(text)
        if markdown == self._shown:
            return
        self._take_slot(message=True)  # private chats: refused only while a 429 pauses it
        await self._show(markdown)
        self._shown = markdown

    async def discard(self) -> None:
        """Nothing to delete: a draft expires, and the next draft or message replaces it."""

    async def _put(self, text: str, parse_mode: str | None) -> None:
        method = SendMessageDraft(
            chat_id=self._chat_id,
            draft_id=self._draft_id,
            text=text,
            message_thread_id=self._thread_id,
            parse_mode=parse_mode,
            can_stop=self._can_stop,
            keep_on_stop=self._keep_on_stop,
        )
        await self._context.bot(method)

    def _failure(self, exc: Exception) -> AdapterError:
        error = super()._failure(exc)
        # TEXTDRAFT_PEER_INVALID (not a private chat) and its kin; 404: a Bot API server
        # without drafts. Neither changes during this process: stop offering drafts here.
        lowered = getattr(exc, "message", "").lower()
        refused = isinstance(exc, TelegramNotFound) or (
            isinstance(exc, TelegramBadRequest) and "draft" in lowered
        )
        if refused:
            self._on_refused()
            return PreviewUnavailable(str(error))
        return error


class EditPreview(_Formatted, PostedPreview):
    """A message posted in a group at the first update and edited in place after it."""

    def __init__(
        self,
        context: PreviewContext,
        chat_id: int,
        thread_id: int | None,
        *,
        reply_to: int | None,
    ) -> None:
        self._context = context
        self._chat_id = chat_id
        self._thread_id = thread_id
        self._reply_to = reply_to
        self._message_id: int | None = None
        self._shown: str | None = None
        self._plain = False

    async def show(self, text: str) -> None:
        """Post the tail of ``text`` (first update) or edit the posted message to it.

        Nothing is called for a text already shown or still blank; over the chat's budget
        PreviewThrottled says when a slot frees.
        """
        markdown = without_mentions(text)
        if markdown == self._shown or not markdown.strip():
            return
        self._take_slot(message=self._message_id is None)  # posting is a message, editing not
        await self._show(markdown)
        self._shown = markdown

    async def discard(self) -> None:
        """Delete the posted message; a failure is logged, never raised."""
        if self._message_id is None:
            return
        if await delete_message(self._context, self._chat_id, self._message_id):
            self._message_id = None
            self._shown = None

    async def _put(self, text: str, parse_mode: str | None) -> None:
        """Post the message, or edit it ("not modified" is success)."""
        bot = self._context.bot
        if self._message_id is None:
            reply = None
            if self._reply_to is not None:
                reply = ReplyParameters(message_id=self._reply_to, allow_sending_without_reply=True)
            posted: Message = await bot(
                SendMessage(
                    chat_id=self._chat_id,
                    text=text,
                    parse_mode=parse_mode,
                    message_thread_id=self._thread_id,
                    reply_parameters=reply,
                )
            )
            self._message_id = posted.message_id
            return
        try:
            await bot(
                EditMessageText(
                    chat_id=self._chat_id,
                    message_id=self._message_id,
                    text=text,
                    parse_mode=parse_mode,
                )
            )
        except TelegramBadRequest as exc:
            if NOT_MODIFIED not in exc.message.lower():
                raise


async def delete_message(context: PreviewContext, chat_id: int, message_id: int) -> bool:
    """Delete a posted preview; never raises (failures logged). False: it may still be there
    and a later try may work (network, server errors, flood wait); True: it is gone or can
    never be deleted (Telegram refused the request for good: not found, too old, no right)."""
    try:
        await context.bot(DeleteMessage(chat_id=chat_id, message_id=message_id))
    except (TelegramBadRequest, TelegramNotFound, TelegramForbiddenError) as exc:
        log.info(
            "telegram bot %s: preview %s in chat %s cannot be deleted (%s); not retried",
            context.bot_key,
            message_id,
            chat_id,
            context.redact(getattr(exc, "message", None) or str(exc)),
        )
        return True
    except Exception as exc:  # never raises, by contract
        log.warning(
            "telegram bot %s: deleting preview %s in chat %s failed: %s",
            context.bot_key,
            message_id,
            chat_id,
            context.redact(getattr(exc, "message", None) or str(exc)),
        )
        return False
    return True
