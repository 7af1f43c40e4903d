"""A press of one of our inline buttons (a ``callback_query`` update): checked, handed to the
router as the command it stands for, answered, and the keyboard updated
(docs/telegram.md#buttons).

Invariants:
- every callback query gets exactly one ``answerCallbackQuery`` from here (a refusal says why),
  within ``ANSWER_WITHIN`` seconds of a verified press (its outcome, or no text when the
  command takes longer), so no client is left with a spinner; a failure is answered too
  before it propagates (a store fault: the update is handed over again and runs then);
- nothing runs unless the data verifies (:mod:`adapters.telegram.buttons`) and the presser is
  the person the buttons are for: another member of a group gets a refusal, and the data can
  name no other person or chat;
- the press reaches the router as an ``Inbound`` of kind ``press`` whose text is the command;
  the router runs it once per message and command (``Router.press``), never stores it;
- after a press that ran (or ran before), its keyboard is taken away (``closes``) or loses the
  pressed button, so the chat shows the question settled. Each press carries the message as
  the client had it, so two quick presses both carry the full keyboard: the keyboard sent is
  the one the press carried without *every* button pressed on that message in this process,
  computed and sent under that message's lock, so the last edit is never one that puts an
  earlier press's button back (two processes editing one message at once are not ordered).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Final

from aiogram import Bot
from aiogram.exceptions import ClientDecodeError, TelegramAPIError
from aiogram.methods import AnswerCallbackQuery, EditMessageReplyMarkup
from aiogram.types import CallbackQuery, InaccessibleMessage, InlineKeyboardMarkup, Message

from adapters.telegram.buttons import ButtonSigner, Pressed, without_buttons
from adapters.telegram.inbound import PLATFORM
from bot.core.choices import PressOutcome
from bot.core.errors import StoreError
from bot.core.events import ConversationKey, Inbound
from bot.core.i18n import N_, Texts, english
from bot.core.ports import InboundHandler, PressHandler

log = logging.getLogger("personabot.telegram")

# The answers are in the presser's language (the persona's, or theirs with ``auto``):
# ``PressHandler.texts``, docs/i18n.md.
GARBLED: Final = N_("This button is not valid. Send the command again.")
EXPIRED: Final = N_("These buttons have expired. Send the command again.")
NOT_YOURS: Final = N_("These buttons are for the person who asked.")
TOO_OLD: Final = N_("This message is too old for its buttons. Send the command again.")
NOT_OURS: Final = N_("Nothing to do here.")
FAILED: Final = N_("That did not work. Please try again.")
#: What the press's answer says for each outcome of the router ("" shows no text).
ANSWERS: Final[dict[PressOutcome, str]] = {
    "ran": "",
    "done": N_("Already done."),
    "refused": N_("You cannot use this bot here."),
    "dropped": "",
    # Being run by another process (or one that died running it: then it runs here soon).
    "pending": "",
}
_ERRORS: Final = (TelegramAPIError, ClientDecodeError)
#: Seconds (real time) a press's answer waits for its outcome before it goes without text.
ANSWER_WITHIN: Final = 1.0
#: Messages whose pressed buttons a desk remembers (the most recently pressed).
PRESSED_MEMORY: Final = 1024


class PressDesk:
    """Handles the callback queries of one bot account."""

    def __init__(
        self,
        *,
        bot: Bot,
        bot_key: str,
        signer: ButtonSigner,
        now: Callable[[], float],
        redact: Callable[[str], str],
        answer_within: float = ANSWER_WITHIN,
    ) -> None:
        self._answer_within = answer_within
        self._bot = bot
        self._bot_key = bot_key
        self._signer = signer
        self._now = now
        self._redact = redact
        # (chat, message) -> the data of its buttons pressed here; and each message's lock
        # while its keyboard is being edited (module docstring).
        self._pressed: OrderedDict[tuple[int, int], set[str]] = OrderedDict()
        self._editing: weakref.WeakValueDictionary[tuple[int, int], asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )

    async def handle(self, handler: InboundHandler, query: CallbackQuery) -> None:
        """Check one press, run its command through ``handler``, answer it."""
        message, data = query.message, query.data
        texts = (
            handler.texts(query.from_user.language_code)
            if isinstance(handler, PressHandler)
            else english()
        )
        if message is None or data is None:  # an inline-mode message or a game: not ours
            await self._answer(query, texts, NOT_OURS)
            return
        if isinstance(message, InaccessibleMessage):
            await self._answer(query, texts, TOO_OLD)
            return
        verdict = self._signer.verify(message.chat.id, data, self._now())
        if verdict == "garbled":
            await self._garbled(query, texts, message, "data that is not ours")
            return
        if verdict == "expired":
            await self._answer(query, texts, EXPIRED)
            await self._edit(message, None)
            return
        if str(query.from_user.id) != verdict.asker:
            await self._answer(query, texts, NOT_YOURS, alert=True)
            return
        markup = message.reply_markup
        if markup is not None and data not in {
            button.callback_data for row in markup.inline_keyboard for button in row
        }:
            # The data verifies (chat and asker) but is none of this message's buttons: a
            # modified client sending the data of another of the asker's keyboards here. It
            # must not act on this message (nor take its keyboard away). Without a keyboard
            # (settled already) the press goes on: it can only be "already done" or run what
            # the asker could type.
            await self._garbled(query, texts, message, "data of another message")
            return
        if not isinstance(handler, PressHandler):
            await self._answer(query, texts, NOT_OURS)
            return
        press = handler.press(self._inbound(query, message, verdict))
        outcome = await self._run(press, query, texts)
        if outcome in ("ran", "done"):
            await self._settle(message, data, closes=verdict.closes)

    async def _settle(self, message: Message, data: str, *, closes: bool) -> None:
        """Take the pressed button (or, ``closes``, the keyboard) off the message."""
        key = (message.chat.id, message.message_id)
        pressed = self._pressed.setdefault(key, set())
        pressed.add(data)
        self._pressed.move_to_end(key)
        while len(self._pressed) > PRESSED_MEMORY:
            self._pressed.popitem(last=False)
        lock = self._editing.setdefault(key, asyncio.Lock())
        async with lock:
            left = None if closes else without_buttons(message.reply_markup, pressed)
            if left != message.reply_markup:
                await self._edit(message, left)

    async def _garbled(
        self, query: CallbackQuery, texts: Texts, message: Message, what: str
    ) -> None:
        """Refuse a press whose data must not act here (logged: a modified client, or data
        made up)."""
        log.warning(
            "telegram bot %s: a press in chat %s with %s; refused",
            self._bot_key,
            message.chat.id,
            what,
        )
        await self._answer(query, texts, GARBLED, alert=True)

    async def _run(
        self, press: Awaitable[PressOutcome], query: CallbackQuery, texts: Texts
    ) -> PressOutcome:
        """Run the press and answer the query with its outcome, or with no text once
        ``answer_within`` passed (the command's answer may wait for the chat's turn in the
        pacer; the client's spinner must not). A failure is answered too, then raised: a
        store fault with no text (the update comes again and runs it then), anything else
        with FAILED."""
        task = asyncio.ensure_future(press)
        answered = False
        try:
            done, _ = await asyncio.wait({task}, timeout=self._answer_within)
            if not done:
                answered = True
                await self._answer(query, texts, "")
            outcome = await task
        except asyncio.CancelledError:
            task.cancel()  # shutdown: the command with it (a press not done is taken again)
            raise
        except Exception as exc:
            if not answered:
                await self._answer(query, texts, "" if isinstance(exc, StoreError) else FAILED)
            raise
        if not answered:
            await self._answer(query, texts, ANSWERS[outcome])
        return outcome

    def _inbound(self, query: CallbackQuery, message: Message, pressed: Pressed) -> Inbound:
        """The press as the router takes it: the command, by the presser, in the buttons'
        chat (and forum topic), naming the buttons' message."""
        thread = message.message_thread_id if message.is_topic_message else None
        return Inbound(
            conversation=ConversationKey(
                PLATFORM,
                str(message.chat.id),
                None if thread is None else str(thread),
                self._bot_key,
            ),
            author_id=str(query.from_user.id),
            display_name=query.from_user.full_name,
            text=pressed.command,
            platform_message_id=str(message.message_id),
            is_private=message.chat.type == "private",
            kind="press",
            locale=query.from_user.language_code,  # the presser's (docs/i18n.md)
        )

    async def _answer(
        self, query: CallbackQuery, texts: Texts, text: str, *, alert: bool = False
    ) -> None:
        """``answerCallbackQuery`` with ``text`` in ``texts``' language ("": no text); a
        failure (e.g. too late) is only logged."""
        shown = texts.finish(texts(text)) if text else None
        method = AnswerCallbackQuery(
            callback_query_id=query.id, text=shown, show_alert=alert or None
        )
        try:
            await self._bot(method)
        except _ERRORS as exc:
            log.info(
                "telegram bot %s: answerCallbackQuery failed: %s",
                self._bot_key,
                self._redact(str(exc)),
            )

    async def _edit(self, message: Message, markup: InlineKeyboardMarkup | None) -> None:
        """Replace the message's keyboard (None: take it away); a failure is only logged
        (the message may be gone, or show this keyboard already)."""
        method = EditMessageReplyMarkup(
            chat_id=message.chat.id,
            message_id=message.message_id,
            reply_markup=markup,
        )
        try:
            await self._bot(method)
        except _ERRORS as exc:
            log.info(
                "telegram bot %s: the keyboard of message %d in chat %s was not changed: %s",
                self._bot_key,
                message.message_id,
                message.chat.id,
                self._redact(str(exc)),
            )
