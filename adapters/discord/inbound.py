"""Discord events -> normalized ``Inbound`` events (the discord.py side of the boundary).

Keys (docs/architecture.md#keys): a DM is ``(discord, dm_channel_id, None)``, a guild text channel
``(discord, channel_id, None)``, a thread ``(discord, parent_channel_id, thread_id)``. A display
name is never part of a key. discord.py objects are read here and never leave ``adapters/``.
"""

from __future__ import annotations

import logging
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Final, Literal

import discord

from adapters.discord.content import Directory, embed_text, message_text
from adapters.discord.media import media_of
from adapters.discord.quotes import forward_quote, reply_quote
from bot.core.events import ConversationKey, Inbound
from bot.core.media import MediaRef, Quote

log = logging.getLogger("personabot.discord")

PLATFORM: Final = "discord"
GroupTrigger = Literal["mention", "all"]

# Ordinary user messages; joins, pins, thread-created notices and the like are not chat.
_CHAT_TYPES: Final = frozenset({discord.MessageType.default, discord.MessageType.reply})
_COMMAND: Final = re.compile(r"^/(?P<name>[A-Za-z][A-Za-z0-9_]{0,31})(?:@\S+)?(?:\s|$)")
_PLACE_CACHE_SIZE: Final = 4096
#: A private message with nothing personabot can show (no text, file, poll or forward).
UNREADABLE: Final = "[a message with nothing the bot can read]"

FetchMessage = Callable[[int, int], Awaitable[discord.Message | None]]
#: ``(channel_id, webhook_id)`` -> whether that webhook is this bot's (a thread: its parent).
IsOurWebhook = Callable[[int, int], Awaitable[bool]]


@dataclass(frozen=True, slots=True)
class Place:
    """Where a Discord channel sits in personabot's keys."""

    chat_id: str
    thread_id: str | None
    is_private: bool

    def key(self, bot_key: str) -> ConversationKey:
        """The conversation key of this place for one bot entry."""
        return ConversationKey(PLATFORM, self.chat_id, self.thread_id, bot_key)

    @property
    def channel_id(self) -> int:
        """The channel to post in: the thread when there is one."""
        return int(self.thread_id or self.chat_id)


def known_place(channel: object) -> Place | None:
    """The place of a channel object, or None when discord.py does not know its kind."""
    if isinstance(channel, discord.Thread):
        return Place(str(channel.parent_id), str(channel.id), is_private=False)
    if isinstance(channel, discord.DMChannel | discord.GroupChannel):
        return Place(str(channel.id), None, is_private=True)
    if isinstance(channel, discord.PartialMessageable):
        # An uncached channel: without a guild it can only be a DM; in a guild it may be a
        # thread whose parent we do not know yet.
        return Place(str(channel.id), None, is_private=True) if channel.guild_id is None else None
    if isinstance(channel, discord.abc.GuildChannel):
        return Place(str(channel.id), None, is_private=False)
    return None


def _strip_leading_mention(content: str, bot_id: int) -> str:
    """``<@bot> /new`` -> ``/new``: a command addressed with a mention is still a command."""
    return re.sub(rf"^\s*<@!?{bot_id}>\s*", "", content, count=1)


class InboundBuilder:
    """Turns discord.py messages and raw events into ``Inbound`` events for one bot entry.

    ``fetch_place`` resolves a guild channel that discord.py has not cached (it may be a
    thread, whose key needs the parent id); results are kept in a small LRU cache.
    ``fetch_message(channel_id, message_id)`` looks up a replied-to message that neither the
    payload nor discord.py's cache holds (bounded in time by the adapter; None: unavailable).
    ``is_our_webhook`` tells whether a replied-to webhook message is the bot's own, posted as a
    scene persona (None: the bot posts through no webhooks).
    """

    def __init__(
        self,
        *,
        bot_key: str,
        group_trigger: GroupTrigger,
        guilds: Collection[int],
        fetch_place: Callable[[int], Awaitable[Place | None]],
        fetch_message: FetchMessage,
        is_our_webhook: IsOurWebhook | None = None,
    ) -> None:
        self._bot_key = bot_key
        self._group_trigger = group_trigger
        self._guilds = frozenset(guilds)
        self._fetch_place = fetch_place
        self._fetch_message = fetch_message
        self._is_our_webhook = is_our_webhook
        self._places: OrderedDict[int, Place] = OrderedDict()
        self.command_names: frozenset[str] = frozenset()
        self.message_content_intent = True
        self._warned_empty = False

    def allowed(self, guild_id: int | None) -> bool:
        """DMs always; guild messages only from allow-listed guilds (empty list = all)."""
        return guild_id is None or not self._guilds or guild_id in self._guilds

    async def place(self, channel: object, channel_id: int, guild_id: int | None) -> Place:
        """The place of a channel, asking Discord once when discord.py does not know it."""
        found = known_place(channel) if channel is not None else None
        if found is None and guild_id is None:
            found = Place(str(channel_id), None, is_private=True)
        if found is not None:
            return found
        if channel_id in self._places:
            self._places.move_to_end(channel_id)
            return self._places[channel_id]
        fetched = await self._fetch_place(channel_id)
        if fetched is None:
            # Not cached: a failed lookup is retried next time rather than remembered.
            return Place(str(channel_id), None, is_private=False)
        self._places[channel_id] = fetched
        if len(self._places) > _PLACE_CACHE_SIZE:
            self._places.popitem(last=False)
        return fetched

    async def message(
        self, message: discord.Message, me: discord.ClientUser, directory: Directory | None
    ) -> Inbound | None:
        """A new message, or None when it is not for personabot (bots, system, other guilds)."""
        if not self._is_chat(message):
            return None
        text = message_text(message, directory)
        media = media_of(message.attachments, message.stickers)
        quote = await self._quote(message, me, directory)
        if forwarded := message.message_snapshots[:1]:
            media += media_of(forwarded[0].attachments, forwarded[0].stickers)
        guild_id = message.guild.id if message.guild else None
        if not text and not media and quote is None:
            if guild_id is not None:
                self._warn_if_content_hidden(message)
                return None
            # Never a silent drop in a private chat: say what arrived, honestly.
            log.info("a Discord DM %d with nothing readable; told as a stand-in", message.id)
            text = embed_text(message.embeds) or UNREADABLE
        place = await self.place(message.channel, message.channel.id, guild_id)
        command = self._command(message.content, me.id)
        return self._inbound(
            message,
            me,
            place,
            command or text,
            media,
            replies=quote is not None and quote.origin == "reply" and quote.from_bot,
            command=command is not None,
            quote=quote,
        )

    async def _quote(
        self, message: discord.Message, me: discord.ClientUser, directory: Directory | None
    ) -> Quote | None:
        """The forward's or reply's quote (a reply's target looked up when needed)."""
        reference = message.reference
        if reference is None:
            return None
        if reference.type is discord.MessageReferenceType.forward:
            return forward_quote(message, me_id=me.id, directory=directory)
        if message.type is not discord.MessageType.reply or reference.message_id is None:
            return None
        target = await self._reply_target(reference)
        ours = target is not None and await self._from_our_webhook(message, target)
        return reply_quote(target, me_id=me.id, directory=directory, our_webhook=ours)

    async def _from_our_webhook(self, message: discord.Message, target: discord.Message) -> bool:
        """Whether ``target`` (replied to by ``message``, so in the same channel or thread)
        was posted through the bot's webhook, which belongs to the parent of a thread."""
        if target.webhook_id is None or self._is_our_webhook is None:
            return False
        guild_id = message.guild.id if message.guild else None
        place = await self.place(message.channel, message.channel.id, guild_id)
        return await self._is_our_webhook(int(place.chat_id), target.webhook_id)

    async def _reply_target(self, reference: discord.MessageReference) -> discord.Message | None:
        """The payload's resolved message, else the cached one, else one lookup over REST."""
        resolved = reference.resolved
        if isinstance(resolved, discord.DeletedReferencedMessage):
            return None  # Discord says it was deleted
        if isinstance(resolved, discord.Message):
            return resolved
        cached = reference.cached_message
        if cached is not None or reference.message_id is None:
            return cached
        return await self._fetch_message(reference.channel_id, reference.message_id)

    async def edit(
        self,
        event: discord.RawMessageUpdateEvent,
        me: discord.ClientUser,
        directory: Directory | None,
    ) -> Inbound | None:
        """An edit whose text changed (embed unfurls and pins change nothing we store).

        It asks for a reply by the rules of a new message (an edit that now mentions the bot
        does); the store decides whether an edit of an answered message may re-trigger.
        """
        message = event.message
        # Only a person's edit sets edited_timestamp; unfurls, pins and flag changes do not,
        # which tells them apart even when the message is not cached.
        if not self._is_chat(message) or message.edited_at is None:
            return None
        text = message_text(message, directory)
        media = media_of(message.attachments, message.stickers)
        if not text and not media:
            return None  # nothing readable (the content intent is off): not a change we know
        cached = event.cached_message
        if cached is not None and message_text(cached, directory) == text:
            return None
        place = await self.place(message.channel, event.channel_id, event.guild_id)
        replies = _replies_to(message, me.id)
        return self._inbound(message, me, place, text, media, replies=replies, kind="edit")

    def _inbound(
        self,
        message: discord.Message,
        me: discord.ClientUser,
        place: Place,
        text: str,
        media: tuple[MediaRef, ...],
        *,
        replies: bool,
        command: bool = False,
        kind: Literal["message", "edit"] = "message",
        quote: Quote | None = None,
    ) -> Inbound:
        """``message`` as an Inbound in ``place``: a new message and an edit ask for a reply
        by the same rule (a DM, ``group_trigger = "all"``, a mention, a reply to the bot, a
        command)."""
        mentions = self._mentions_bot(message, me)
        asked = place.is_private or self._group_trigger == "all" or mentions or replies
        return Inbound(
            conversation=place.key(self._bot_key),
            author_id=str(message.author.id),
            display_name=message.author.display_name,
            text=text,
            platform_message_id=str(message.id),
            is_private=place.is_private,
            triggers_reply=asked or command,
            reply_to_bot=replies,
            mentions_bot=mentions,
            kind=kind,
            media=media,
            quote=quote,
            # A typed message carries no person's locale: a server's preferred one, if any.
            locale=message.guild.preferred_locale.value if message.guild else None,
        )

    async def deletions(
        self, channel: object, channel_id: int, guild_id: int | None, message_ids: Iterable[int]
    ) -> list[Inbound]:
        """One ``delete`` event per removed message (raw events: uncached messages too)."""
        if not self.allowed(guild_id):
            return []
        place = await self.place(channel, channel_id, guild_id)
        key = place.key(self._bot_key)
        return [
            Inbound(
                conversation=key,
                author_id="",
                display_name="",
                text="",
                platform_message_id=str(message_id),
                is_private=place.is_private,
                kind="delete",
            )
            for message_id in sorted(message_ids)
        ]

    def _is_chat(self, message: discord.Message) -> bool:
        """A person's chat message in a place this bot serves (never a bot, itself included)."""
        return (
            not message.author.bot
            and message.webhook_id is None
            and message.type in _CHAT_TYPES
            and self.allowed(message.guild.id if message.guild else None)
        )

    def _mentions_bot(self, message: discord.Message, me: discord.ClientUser) -> bool:
        """A user mention of the bot, or a mention of one of its roles (not @everyone/@here)."""
        if me.id in message.raw_mentions or any(u.id == me.id for u in message.mentions):
            return True
        member = message.guild.me if message.guild else None
        if member is None:
            return False
        own_roles = {role.id for role in member.roles if not role.is_default()}
        return bool(own_roles.intersection(message.raw_role_mentions))

    def _command(self, content: str, bot_id: int) -> str | None:
        """The command text if the message is one of the bot's chat commands, else None."""
        text = _strip_leading_mention(content, bot_id).strip()
        match = _COMMAND.match(text)
        if match is None or match["name"].lower() not in self.command_names:
            return None
        return text

    def _warn_if_content_hidden(self, message: discord.Message) -> None:
        """Warn once when guild messages arrive empty because the content intent is off."""
        if message.guild is None or message.embeds or message.poll or self._warned_empty:
            return
        if self.message_content_intent:
            return  # content was granted: an empty message is a component or embed-only post
        self._warned_empty = True
        log.warning(
            "a guild message arrived with empty content: the Message Content Intent is off, "
            "so in guilds the bot only sees messages that mention it or reply to it. Enable it "
            "in the Discord Developer Portal (your application > Bot > Privileged Gateway "
            "Intents > Message Content Intent) and restart."
        )


def _replies_to(message: discord.Message, bot_id: int) -> bool:
    """Whether the message is a reply to one of the bot's messages."""
    reference = message.reference
    if reference is None:
        return False
    target = reference.resolved or reference.cached_message
    return isinstance(target, discord.Message) and target.author.id == bot_id
