"""Inline keyboards for a message's choices, and their signed callback data
(docs/telegram.md#buttons).

A button's ``callback_data`` (at most 64 bytes) carries everything its press needs, so a press
works after a restart (another process, a new adapter) with nothing kept in memory::

    <flag><asker, base 36>.<issued, base 36>.<mac: 12 chars><command without its slash>

``flag`` is ``c`` when the press settles the question (every button goes) or ``k`` when only
that button goes. The mac is a truncated HMAC-SHA256 (72 bits) of the chat id and everything
else in the data, keyed with a key derived from the bot token (the token itself is never in the
data, nor is the key): data changed in any way (another person, another chat, another
command, a later time) or made up is refused, and so is data older than ``BUTTON_LIFETIME``.
A Telegram client may send any data for any message with a keyboard, so nothing of the data is
trusted before its mac is checked, and the presser is checked against the asker after.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import string
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from aiogram.types import InlineKeyboardButton, InlineKeyboardMarkup

from bot.core.choices import BUTTON_LIFETIME, Choice

#: Telegram's limit for ``callback_data``, in bytes.
DATA_LIMIT: Final = 64
#: More choices than this are no keyboard (a long list of buttons is no help, and Telegram
#: refuses a message whose keyboard is too large: the answer would be lost).
MAX_BUTTONS: Final = 24
_MAC_BYTES: Final = 9  # 12 characters of base64url
_MAC_CHARS: Final = 12
_KEY_LABEL: Final = b"personabot telegram buttons v1"
_DIGITS: Final = string.digits + string.ascii_lowercase

Refusal = Literal["garbled", "expired"]


@dataclass(frozen=True, slots=True)
class Pressed:
    """What verified callback data says: who may press, the command, whether it settles."""

    asker: str
    command: str
    closes: bool


class ButtonSigner:
    """Signs and checks one bot's callback data with a key derived from its token."""

    def __init__(self, token: str) -> None:
        # One way from the token: the data and the logs never show it, and the key is the
        # same in every process of the bot (a press after a restart verifies).
        self._key = hmac.new(token.encode(), _KEY_LABEL, hashlib.sha256).digest()

    def keyboard(
        self, chat_id: int, asker: str, choices: Sequence[Choice], now: float
    ) -> InlineKeyboardMarkup | None:
        """The keyboard of ``choices`` for ``asker`` in ``chat_id``; None when they cannot be
        buttons (the asker is no Telegram user, a button's data would pass 64 bytes, more
        than ``MAX_BUTTONS``): the message then shows the typed commands instead."""
        if len(choices) > MAX_BUTTONS:
            return None
        buttons = []
        for choice in choices:
            data = self.data(chat_id, asker, choice, now)
            if data is None:
                return None
            buttons.append(InlineKeyboardButton(text=choice.label[:64], callback_data=data))
        if not buttons:
            return None
        # A yes/no question side by side; a list (personas, reminders) one per row.
        side_by_side = len(buttons) <= 2 and all(c.closes for c in choices)
        rows = [buttons] if side_by_side else [[b] for b in buttons]
        return InlineKeyboardMarkup(inline_keyboard=rows)

    def data(self, chat_id: int, asker: str, choice: Choice, now: float) -> str | None:
        """The callback data of one choice (None: it cannot be one, see ``keyboard``)."""
        if not asker.isdecimal() or not choice.command.startswith("/"):
            return None
        flag = "c" if choice.closes else "k"
        body = f"{flag}{_base36(int(asker))}.{_base36(int(now))}."
        command = choice.command[1:]
        data = body + self._mac(chat_id, body + command) + command
        return data if len(data.encode()) <= DATA_LIMIT else None

    def verify(self, chat_id: int, data: str, now: float) -> Pressed | Refusal:
        """What ``data`` pressed in ``chat_id`` says, or why it is refused."""
        parts = data.split(".", 2)
        if len(parts) != 3 or len(parts[2]) <= _MAC_CHARS:
            return "garbled"
        head, issued36, tail = parts
        mac, command = tail[:_MAC_CHARS], tail[_MAC_CHARS:]
        body = f"{head}.{issued36}."
        # As bytes: compare_digest refuses str with characters past ASCII (made-up data).
        expected = self._mac(chat_id, body + command).encode()
        if not hmac.compare_digest(mac.encode(), expected):
            return "garbled"
        # Signed by us: the fields are ours, and well formed.
        # Dated ahead of our clock: written by a host of this bot whose clock runs ahead
        # (webhook workers, a restart elsewhere). Still ours (the MAC says so) and not old.
        issued = int(issued36, 36)
        if now - issued > BUTTON_LIFETIME:
            return "expired"
        return Pressed(str(int(head[1:], 36)), f"/{command}", head[0] == "c")

    def _mac(self, chat_id: int, signed: str) -> str:
        digest = hmac.new(self._key, f"{chat_id}|{signed}".encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest[:_MAC_BYTES]).decode()


def without_buttons(
    markup: InlineKeyboardMarkup | None, data: Collection[str]
) -> InlineKeyboardMarkup | None:
    """``markup`` without the buttons whose data is in ``data`` (None when none is left)."""
    if markup is None:
        return None
    rows = [[b for b in row if b.callback_data not in data] for row in markup.inline_keyboard]
    rows = [row for row in rows if row]
    return InlineKeyboardMarkup(inline_keyboard=rows) if rows else None


def _base36(number: int) -> str:
    if number < 0:
        raise ValueError("negative")
    out = ""
    while True:
        number, digit = divmod(number, 36)
        out = _DIGITS[digit] + out
        if number == 0:
            return out
