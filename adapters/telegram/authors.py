"""Who wrote a Telegram message, and the chat or person a forward or an external reply names.

Leaf readers of the Telegram intake (docs/architecture.md#media): pure functions over aiogram
objects that call nothing else of personabot. :mod:`adapters.telegram.inbound` reads a
message's author here, :mod:`adapters.telegram.quotes` the author of what it quotes, and
:mod:`adapters.telegram.content` the name of a story's chat.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from aiogram.types import (
    Chat,
    Message,
    MessageOriginChat,
    MessageOriginHiddenUser,
    MessageOriginUnion,
    MessageOriginUser,
)


@dataclass(frozen=True, slots=True)
class Sender:
    """The author of a message: personabot's author id, a display name, the Telegram user."""

    id: str
    name: str
    user_id: int | None = None  # None when a chat wrote it (an anonymous admin, a channel)
    is_bot: bool = False


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a forwarded or externally replied-to message came from."""

    name: str
    author_id: str | None
    from_bot: bool


def sender_of(message: Message) -> Sender | None:
    """Who wrote ``message`` (None when Telegram names nobody).

    A post "as a chat" is never the chat's own id (a group's id is no person): the group's
    anonymous admins are ``anon:<chat id>`` (Telegram hides which admin), a channel (its
    automatic forwards, or someone posting as it) is ``channel:<channel id>``. Both are
    collective authors (bot.core.events.is_person): no long-term memory is learned of them.
    """
    if message.sender_chat is not None:  # anonymous admin, channel, or a user posting as one
        chat = message.sender_chat
        if chat.id == message.chat.id:
            return Sender(f"anon:{chat.id}", message.author_signature or "Anonymous admin")
        return Sender(f"channel:{chat.id}", chat.title or chat.username or "Channel")
    user = message.from_user
    if user is None:
        return None
    return Sender(str(user.id), user.full_name, user.id, user.is_bot)


def origin_of(
    origin: MessageOriginUnion, me_id: int, voices: Mapping[int, str] | None = None
) -> Origin:
    """The display name, author id and "it is this bot" of where a message came from.

    ``voices``: the bot's persona accounts (user id -> persona name, docs/scenes.md#platforms):
    a message one of them posted is the bot's own, written by that persona.
    """
    if isinstance(origin, MessageOriginUser):
        user = origin.sender_user
        if voices and user.id in voices:
            return Origin(voices[user.id], str(user.id), True)
        return Origin(user.full_name, str(user.id), user.id == me_id)
    if isinstance(origin, MessageOriginHiddenUser):
        return Origin(origin.sender_user_name, None, False)  # the user hides their account
    if isinstance(origin, MessageOriginChat):
        chat = origin.sender_chat
        prefix = "channel" if chat.type == "channel" else "anon"
        return Origin(
            _signed(chat_name(chat), origin.author_signature), f"{prefix}:{chat.id}", False
        )
    # MessageOriginChannel (an origin of a kind aiogram does not know fails validation, and
    # adapters/telegram/updates.py drops the field)
    name = _signed(chat_name(origin.chat), origin.author_signature)
    return Origin(name, f"channel:{origin.chat.id}", False)


def chat_name(chat: Chat) -> str:
    """A chat's title, or its person's name, or its @username ("" when it has none)."""
    name = chat.title or " ".join(p for p in (chat.first_name, chat.last_name) if p)
    return name.strip() or (f"@{chat.username}" if chat.username else "")


def _signed(name: str, signature: str | None) -> str:
    if not signature:
        return name
    return f"{name} ({signature})" if name else signature
