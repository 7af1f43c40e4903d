"""Telegram messages as Inbound events: keys, authors, mentions, commands, triggers.

Pure functions over aiogram's ``Message`` (and :class:`Albums`, a small bounded memory): the
adapter (adapters/telegram/adapter.py) calls :func:`to_inbound` for every message and edit it
receives, then :meth:`Albums.apply`. :func:`to_inbound` is the intake's one pass; who wrote a
message is read by :mod:`adapters.telegram.authors`, what it holds by
:mod:`adapters.telegram.content` (its files by :mod:`adapters.telegram.attachments`), what it
quotes by :mod:`adapters.telegram.quotes`.
"""

from __future__ import annotations

import dataclasses
import re
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from aiogram.types import Message, MessageEntity, MessageGenerationStopped

from adapters.telegram.authors import sender_of
from adapters.telegram.content import content_of
from adapters.telegram.quotes import forward_quote, reply_quote
from bot.core.events import ConversationKey, Inbound

PLATFORM: Final = "telegram"

GroupTrigger = Literal["mention", "all"]
NonText = Literal["placeholder", "ignore"]

# A command ends where Telegram's ``bot_command`` entity ends: at any character that cannot
# be part of a name (``/new@mira_bot, please`` is the command /new, like ``/new please``).
_COMMAND = re.compile(
    r"^/(?P<name>[A-Za-z0-9_]{1,32})(?:@(?P<bot>[A-Za-z0-9_]+))?(?P<rest>[^A-Za-z0-9_@].*)?$",
    re.S,
)


# --------------------------------------------------------------------------- normalization


@dataclass(frozen=True, slots=True)
class BotIdentity:
    """Who the bot is on Telegram (from ``getMe``)."""

    id: int
    username: str


@dataclass(frozen=True, slots=True)
class InboundRules:
    """How the messages of one bot become Inbound events."""

    bot_key: str
    me: BotIdentity
    group_trigger: GroupTrigger = "mention"
    non_text: NonText = "placeholder"
    commands: frozenset[str] = frozenset()
    # A scene's persona accounts (user id -> persona name, docs/scenes.md#platforms): they
    # only send; a reply to one of their messages addresses the bot, as that persona.
    voices: Mapping[int, str] = field(default_factory=dict)


def to_inbound(message: Message, rules: InboundRules, *, edited: bool = False) -> Inbound | None:
    """A Telegram message as an Inbound event, or None when the bot must ignore it.

    One pass, top-down: who wrote it, where, what it holds, what it quotes, whom it addresses;
    each part read by a leaf reader that never calls back (docs/architecture.md#media).
    ``text`` is what the person wrote (text or caption) with short descriptions of file-less
    content (``[location: ...]``); a forward's own text is "" (what was forwarded is the
    quote's). Ignored: messages of bots (this one included), service messages, non-text
    content with ``non_text = "ignore"``, commands addressed to another bot
    (``/new@OtherBot``), unknown unaddressed commands in groups (they are another bot's),
    edits that are commands, and live location updates (edits).
    """
    # Who: a person, or a chat posting as itself; never a bot.
    author = sender_of(message)
    if author is None or author.is_bot or author.user_id == rules.me.id:
        return None
    if edited and message.location is not None:
        return None  # a live location moving: an edit every few seconds, nothing said
    # Where: the chat and, in a forum, its topic.
    private = message.chat.type == "private"
    thread = message.message_thread_id if message.is_topic_message else None
    # What: the media and descriptions, then the text or caption (a command, or words).
    content = content_of(message)
    if content.service:
        return None
    forward = message.forward_origin is not None and not message.is_automatic_forward
    command = None if forward else _command(message.text, rules, private=private)
    if command is False or (edited and command is not None):
        return None
    body, entities = _body(message)
    keep = rules.non_text == "placeholder"
    said = " ".join(p for p in (content.description if keep else "", body) if p)
    if not keep and not said.strip():
        return None  # nothing but media, and the bot is told to ignore media
    media = content.media if keep else ()
    # What it quotes: a forward's content is the quote (the person said nothing of their own),
    # else the message it replies to, or the part of it quoted.
    if forward:
        quote, text = forward_quote(message, rules.me.id, said, rules.voices), ""
    else:
        quote, text = reply_quote(message, rules.me.id, rules.voices), command or said
    if not text.strip() and not media and quote is None:
        if not private:
            return None
        text = "[an empty message]"  # never a silent drop in a private chat
    # Whom it addresses.
    mentions, replied = _addressed(message, body, entities, rules, forward=forward)
    asked = private or rules.group_trigger == "all" or mentions or replied or bool(command)
    return Inbound(
        conversation=_key(message.chat.id, thread, rules.bot_key),
        author_id=author.id,
        display_name=author.name,
        text=text,
        platform_message_id=str(message.message_id),
        is_private=private,
        triggers_reply=asked and not message.is_automatic_forward,
        reply_to_bot=replied,
        mentions_bot=mentions,
        kind="edit" if edited else "message",
        media=media,
        quote=quote,
        # The sender's Telegram app language (absent for channels and anonymous admins).
        locale=message.from_user.language_code if message.from_user else None,
    )


def stop_conversation(stopped: MessageGenerationStopped, bot_key: str) -> ConversationKey:
    """The conversation of a draft's stop button, keyed as :func:`to_inbound` keys the chat's
    messages: the thread only when it is a topic (the update has no ``is_topic_message``, but
    a private chat has no reply threads, and in a group only a forum has topics)."""
    chat = stopped.chat
    topics = chat.type == "private" or bool(chat.is_forum)
    return _key(chat.id, stopped.message_thread_id if topics else None, bot_key)


def _key(chat_id: int, thread: int | None, bot_key: str) -> ConversationKey:
    return ConversationKey(PLATFORM, str(chat_id), None if thread is None else str(thread), bot_key)


class Albums:
    """Which recent albums addressed the bot, so that all their items are one turn.

    An album (several photos sent at once) is one update per item, sharing a
    ``media_group_id``; only the captioned item (Telegram sends it first) carries the mention
    that addresses the bot in a group. Later items of an album that triggered a reply trigger
    too, so the queue's debounce merges them into the same turn. Items that arrived before
    the triggering one stay context: they are stored just before it, so the turn still sees
    them. The memory is per process and bounded (ids are unique: nothing expires but the
    oldest); in a private chat every item triggers anyway.
    """

    def __init__(self, capacity: int = 256) -> None:
        self._capacity = capacity
        self._triggered: OrderedDict[tuple[str, str | None, str], None] = OrderedDict()

    def apply(self, message: Message, inbound: Inbound) -> Inbound:
        """``inbound`` as its album decides: triggering when an earlier item of it did."""
        group = message.media_group_id
        if group is None or inbound.is_private or inbound.kind != "message":
            return inbound
        if message.is_automatic_forward:
            return inbound  # a channel's album is context, whatever else happened
        key = (inbound.conversation.chat_id, inbound.conversation.thread_id, group)
        if inbound.triggers_reply:
            self._triggered[key] = None
            self._triggered.move_to_end(key)
            while len(self._triggered) > self._capacity:
                self._triggered.popitem(last=False)
            return inbound
        if key in self._triggered:
            return dataclasses.replace(inbound, triggers_reply=True)
        return inbound


def _body(message: Message) -> tuple[str, list[MessageEntity]]:
    """The text or, for media, the caption (captions are text), with its entities."""
    if message.text is not None:
        return message.text, list(message.entities or [])
    return message.caption or "", list(message.caption_entities or [])


def _command(
    text: str | None, rules: InboundRules, *, private: bool
) -> str | Literal[False] | None:
    """``/name args`` for a command this bot should take, False for one to drop, else None."""
    match = _COMMAND.match(text or "")
    if match is None:
        return None
    target, name = match["bot"], match["name"].lower()
    if target is not None and target.lower() != rules.me.username.lower():
        return False  # /cmd@OtherBot: not ours, not even as context
    if target is None and not private and name not in rules.commands:
        return False  # an unaddressed command some other bot in the group knows
    rest = match["rest"] or ""
    # The router reads arguments after whitespace: "/weather, Paris" becomes "/weather , Paris".
    return f"/{name}{rest if not rest or rest[0].isspace() else ' ' + rest}"


def _addressed(
    message: Message,
    body: str,
    entities: Sequence[MessageEntity],
    rules: InboundRules,
    *,
    forward: bool,
) -> tuple[bool, bool]:
    """(it mentions the bot, it replies to the bot). The linked channel's post copied into its
    discussion group (an automatic forward) addresses no one: it is context, never a turn of
    its own (with group_trigger = "all" the bot would answer every channel post; a command or
    mention in it is the channel's, addressed to its subscribers)."""
    if message.is_automatic_forward:
        return False, False
    mentioned = not forward and _mentions_bot(body, entities, rules.me)
    return mentioned, _replies_to_bot(message, rules)


def _mentions_bot(text: str, entities: Sequence[MessageEntity], me: BotIdentity) -> bool:
    """An ``@username`` mention or a text mention of this bot."""
    handle = f"@{me.username}".lower()
    for entity in entities:
        if entity.type == "mention" and entity.extract_from(text).lower() == handle:
            return True
        if entity.type == "text_mention" and entity.user is not None and entity.user.id == me.id:
            return True
    return False


def _replies_to_bot(message: Message, rules: InboundRules) -> bool:
    """A reply to one of this bot's messages, its persona accounts' included (not the
    implicit reply to a topic's start)."""
    original = message.reply_to_message
    if original is None or original.forum_topic_created is not None:
        return False
    author = original.from_user
    return author is not None and (author.id == rules.me.id or author.id in rules.voices)


# ------------------------------------------------------------------------------- transport
