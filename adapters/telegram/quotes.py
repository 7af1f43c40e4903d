"""The message a Telegram message forwards, replies to or quotes, as a ``Quote``.

Called by :mod:`adapters.telegram.inbound` once per message; reads the quoted message with the
leaf readers (:mod:`adapters.telegram.authors` for who wrote it,
:mod:`adapters.telegram.content` for what it holds), which never call back here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from aiogram.types import Message

from adapters.telegram.authors import chat_name, origin_of, sender_of
from adapters.telegram.content import content_of, said, unreadable
from adapters.text import QUOTE_LIMIT, cut_quote
from bot.core.media import Quote, QuoteOrigin

__all__ = ["QUOTE_LIMIT", "UNREADABLE_REPLY", "forward_quote", "reply_quote"]  # the limit: text.py

#: The quote of a reply whose replied-to message this bot could not read.
UNREADABLE_REPLY: Final = "[a message this bot could not read]"
_REPLIES: Final = frozenset({"reply_to_message", "external_reply"})


def forward_quote(
    message: Message, me_id: int, forwarded: str, voices: Mapping[int, str] | None = None
) -> Quote | None:
    """The forward ``message`` is (``forwarded``: its text as the model reads it), or None.

    An automatic forward (the linked channel's post copied into its discussion group) is the
    channel's own post, no forward: its author already is ``channel:<id>``.
    """
    if message.forward_origin is None or message.is_automatic_forward:
        return None
    origin = origin_of(message.forward_origin, me_id, voices)
    return Quote("forward", origin.name, cut_quote(forwarded), origin.author_id, origin.from_bot)


def reply_quote(
    message: Message, me_id: int, voices: Mapping[int, str] | None = None
) -> Quote | None:
    """The message ``message`` replies to (or the part of it quoted), else None.

    ``voices`` are the bot's persona accounts (user id -> persona name): a message one of them
    posted is the bot's own (``from_bot``) and its author is the persona's name, so that a
    reply to it addresses that persona (bot.core.scenes.replied_to).

    In a forum topic every message "replies" to the topic's first (service) message: that is
    no reply. A reply to a message of another chat (``external_reply``) names its origin.
    """
    part = message.quote.text if message.quote is not None else None
    origin: QuoteOrigin = "quote" if part else "reply"
    original = message.reply_to_message
    if original is not None and original.forum_topic_created is None:
        who = sender_of(original)
        text = cut_quote(part or said(original) or "[a message]")
        if who is None:
            return Quote(origin, "", text)
        voice = None if who.user_id is None or not voices else voices.get(who.user_id)
        if voice is not None:  # one of the bot's persona accounts: the bot's own, as it
            return Quote(origin, voice, text, who.id, True)
        mine = who.user_id == me_id
        if mine and part:
            # Part of our own message quoted: a scene's line names its persona in its header,
            # which the selected part may not hold; the header's name as the author lets the
            # reply address that persona (bot.core.scenes.replied_to), as a whole reply does.
            return Quote(origin, _header_name(said(original)) or who.name, text, who.id, True)
        return Quote(origin, who.name, text, who.id, mine)
    if message.external_reply is not None:
        external = message.external_reply
        source = origin_of(external.origin, me_id, voices)
        name = source.name or (chat_name(external.chat) if external.chat is not None else "")
        text = part or content_of(external).stand_in() or "[a message in another chat]"
        return Quote(origin, name, cut_quote(text), source.author_id, source.from_bot)
    if message.reply_to_story is not None:
        return Quote("reply", chat_name(message.reply_to_story.chat), "[story]")
    if part:
        return Quote("quote", "", cut_quote(part))
    if _REPLIES & set(unreadable(message)):
        # The replied-to message failed validation and was dropped (updates.py): still a reply.
        return Quote("reply", "", UNREADABLE_REPLY)
    return None


_HEADER: Final = re.compile(r"\s*([^:\n]{1,64}):\s")


def _header_name(text: str) -> str | None:
    """The name before the colon that starts a message (``Bob: ...``), if any."""
    found = _HEADER.match(text or "")
    return None if found is None else found.group(1).strip()
