"""Telegram messages as Inbound events: keys, authors, mentions, commands, placeholders.

Pure functions over aiogram's ``Message``: the adapter (adapters/telegram/adapter.py) calls
:func:`to_inbound` for every message and edit it receives.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from aiogram.types import Message, MessageEntity

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


def to_inbound(message: Message, rules: InboundRules, *, edited: bool = False) -> Inbound | None:
    """A Telegram message as an Inbound event, or None when the bot must ignore it.

    Ignored: messages of bots (this one included), service messages, non-text messages with
    ``non_text = "ignore"``, commands addressed to another bot (``/new@OtherBot``), unknown
    unaddressed commands in groups (they are another bot's), and edits that are commands.
    """
    author = _author(message, rules.me)
    body, entities = _body(message)
    if author is None:
        return None
    private = message.chat.type == "private"
    command = _command(message.text, rules, private=private)
    if command is False or (edited and command is not None):
        return None
    text = command or _with_placeholder(message, body, rules.non_text)
    if text is None:
        return None
    mentions = _mentions_bot(body or "", entities, rules.me)
    replied = _replies_to_bot(message, rules.me)
    if message.is_automatic_forward:
        # The linked channel's post copied into its discussion group: context, never a turn
        # of its own (with group_trigger = "all" the bot would answer every channel post,
        # and a command or mention in it is the channel's, addressed to its subscribers).
        mentions = replied = False
        command = None
    triggers = private or rules.group_trigger == "all" or mentions or replied or bool(command)
    triggers = triggers and not message.is_automatic_forward
    thread = message.message_thread_id if message.is_topic_message else None
    return Inbound(
        conversation=ConversationKey(
            PLATFORM, str(message.chat.id), None if thread is None else str(thread), rules.bot_key
        ),
        author_id=author[0],
        display_name=author[1],
        text=text,
        platform_message_id=str(message.message_id),
        is_private=private,
        triggers_reply=triggers,
        reply_to_bot=replied,
        mentions_bot=mentions,
        kind="edit" if edited else "message",
    )


def _author(message: Message, me: BotIdentity) -> tuple[str, str] | None:
    """(author id, display name); None for bots.

    A post "as a chat" is never the chat's own id (a group's id is no person): the group's
    anonymous admins are ``anon:<chat id>`` (Telegram hides which admin), a channel (its
    automatic forwards, or someone posting as it) is ``channel:<channel id>``. Both are
    collective authors (bot.core.events.is_person): no long-term memory is learned of them.
    """
    if message.sender_chat is not None:  # anonymous admin, channel, or a user posting as one
        chat = message.sender_chat
        if chat.id == message.chat.id:
            return f"anon:{chat.id}", message.author_signature or "Anonymous admin"
        return f"channel:{chat.id}", chat.title or chat.username or "Channel"
    user = message.from_user
    if user is None or user.is_bot or user.id == me.id:
        return None
    return str(user.id), user.full_name


def _body(message: Message) -> tuple[str | None, list[MessageEntity]]:
    """The text or, for media, the caption (captions are text), with its entities."""
    if message.text is not None:
        return message.text, list(message.entities or [])
    return message.caption, list(message.caption_entities or [])


def _placeholder(message: Message) -> str | None:
    """A short bracketed stand-in for non-text content, or None for text and service messages."""
    if message.sticker is not None:
        return f"[sticker {message.sticker.emoji}]" if message.sticker.emoji else "[sticker]"
    if message.document is not None and message.animation is None:
        name = message.document.file_name
        return f"[file {name}]" if name else "[file]"
    if message.poll is not None:
        return f"[poll: {message.poll.question}]"
    if message.dice is not None:
        return f"[dice {message.dice.emoji} {message.dice.value}]"
    for attribute, label in _PLACEHOLDERS:
        if getattr(message, attribute, None) is not None:
            return label
    return None


_PLACEHOLDERS: Final = (
    ("animation", "[GIF]"),
    ("photo", "[photo]"),
    ("video", "[video]"),
    ("video_note", "[video message]"),
    ("voice", "[voice message]"),
    ("audio", "[audio]"),
    ("venue", "[place]"),
    ("location", "[location]"),
    ("contact", "[contact]"),
    ("story", "[story]"),
    ("game", "[game]"),
)


def _with_placeholder(message: Message, body: str | None, non_text: NonText) -> str | None:
    """The text to store: the body, with the media placeholder in front when configured."""
    marker = _placeholder(message)
    if marker is None or non_text == "ignore":
        return body or None
    return f"{marker} {body}" if body else marker


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


def _mentions_bot(text: str, entities: Sequence[MessageEntity], me: BotIdentity) -> bool:
    """An ``@username`` mention or a text mention of this bot."""
    handle = f"@{me.username}".lower()
    for entity in entities:
        if entity.type == "mention" and entity.extract_from(text).lower() == handle:
            return True
        if entity.type == "text_mention" and entity.user is not None and entity.user.id == me.id:
            return True
    return False


def _replies_to_bot(message: Message, me: BotIdentity) -> bool:
    """A reply to one of this bot's messages (not the implicit reply to a topic's start)."""
    original = message.reply_to_message
    if original is None or original.forum_topic_created is not None:
        return False
    return original.from_user is not None and original.from_user.id == me.id


# ------------------------------------------------------------------------------- transport
