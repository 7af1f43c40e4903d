"""Who wrote a Telegram message, and the message it replies to, quotes or forwards.

Pure functions over aiogram's ``Message``; :mod:`adapters.telegram.inbound` puts the result on
the Inbound (``author_id``/``display_name`` and ``Inbound.quote``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from aiogram.types import (
    Message,
    MessageOriginChat,
    MessageOriginHiddenUser,
    MessageOriginUnion,
    MessageOriginUser,
)

from adapters.telegram.content import chat_name, content_of, unreadable
from bot.core.media import Quote, QuoteOrigin

#: Quoted text is context, not a second copy of a long message (docs/architecture.md#media).
QUOTE_LIMIT: Final = 1000
#: The quote of a reply whose replied-to message this bot could not read.
UNREADABLE_REPLY: Final = "[a message this bot could not read]"
_REPLIES: Final = frozenset({"reply_to_message", "external_reply"})


@dataclass(frozen=True, slots=True)
class Sender:
    """The author of a message: personabot's author id, a display name, the Telegram user."""

    id: str
    name: str
    user_id: int | None = None  # None when a chat wrote it (an anonymous admin, a channel)
    is_bot: bool = False


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


def forward_quote(message: Message, me_id: int, forwarded: str) -> Quote | None:
    """The forward ``message`` is (``forwarded``: its text as the model reads it), or None.

    An automatic forward (the linked channel's post copied into its discussion group) is the
    channel's own post, no forward: its author already is ``channel:<id>``.
    """
    if message.forward_origin is None or message.is_automatic_forward:
        return None
    name, author_id, from_bot = _origin(message.forward_origin, me_id)
    return Quote("forward", name, cut(forwarded), author_id, from_bot)


def reply_quote(message: Message, me_id: int) -> Quote | None:
    """The message ``message`` replies to (or the part of it quoted), else None.

    In a forum topic every message "replies" to the topic's first (service) message: that is
    no reply. A reply to a message of another chat (``external_reply``) names its origin.
    """
    part = message.quote.text if message.quote is not None else None
    origin: QuoteOrigin = "quote" if part else "reply"
    original = message.reply_to_message
    if original is not None and original.forum_topic_created is None:
        who = sender_of(original)
        text = part or said(original) or "[a message]"
        if who is None:
            return Quote(origin, "", cut(text))
        return Quote(origin, who.name, cut(text), who.id, who.user_id == me_id)
    if message.external_reply is not None:
        external = message.external_reply
        name, author_id, from_bot = _origin(external.origin, me_id)
        if not name and external.chat is not None:
            name = chat_name(external.chat)
        text = part or content_of(external).stand_in() or "[a message in another chat]"
        return Quote(origin, name, cut(text), author_id, from_bot)
    if message.reply_to_story is not None:
        return Quote("reply", chat_name(message.reply_to_story.chat), "[story]")
    if part:
        return Quote("quote", "", cut(part))
    if _REPLIES & set(unreadable(message)):
        # The replied-to message failed validation and was dropped (updates.py): still a reply.
        return Quote("reply", "", UNREADABLE_REPLY)
    return None


def said(message: Message) -> str:
    """A message as text: its media and descriptions as stand-ins, then its text or caption."""
    body = message.text or message.caption or ""
    stand_in = content_of(message).stand_in() if not message.text else ""
    return " ".join(p for p in (stand_in, body) if p)


def cut(text: str) -> str:
    """``text`` cut to :data:`QUOTE_LIMIT` characters (an ellipsis marks the cut)."""
    return text if len(text) <= QUOTE_LIMIT else text[: QUOTE_LIMIT - 1] + "…"


def _origin(origin: MessageOriginUnion, me_id: int) -> tuple[str, str | None, bool]:
    """(display name, author id, it is this bot) of where a message came from."""
    if isinstance(origin, MessageOriginUser):
        user = origin.sender_user
        return user.full_name, str(user.id), user.id == me_id
    if isinstance(origin, MessageOriginHiddenUser):
        return origin.sender_user_name, None, False  # the user hides their account
    if isinstance(origin, MessageOriginChat):
        chat = origin.sender_chat
        prefix = "channel" if chat.type == "channel" else "anon"
        return _signed(chat_name(chat), origin.author_signature), f"{prefix}:{chat.id}", False
    # MessageOriginChannel (an origin of a kind aiogram does not know fails validation, and
    # adapters/telegram/updates.py drops the field)
    name = _signed(chat_name(origin.chat), origin.author_signature)
    return name, f"channel:{origin.chat.id}", False


def _signed(name: str, signature: str | None) -> str:
    if not signature:
        return name
    return f"{name} ({signature})" if name else signature
