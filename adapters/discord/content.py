"""What a Discord message says, as the person wrote it, for the model to read.

discord.py's ``Message.clean_content`` is not used: it inserts U+200B after every ``@`` of
``@everyone``/``@here`` (so that echoing the text cannot ping; our sends carry
``AllowedMentions.none()`` instead) and turns every mention it cannot resolve into
``#deleted-channel`` / ``@deleted-user`` / ``@deleted-role``, which is often false (the bot
merely does not see that channel). Here mentions become names where the bot knows them and an
honest ``#unknown-channel`` / ``@unknown-user`` / ``@unknown-role`` where it does not; nothing
is inserted. Custom emoji read ``:name:``, slash-command mentions ``/name``, timestamps
``2024-05-01 12:00 UTC``.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Protocol

import discord

UNKNOWN_USER: Final = "@unknown-user"
UNKNOWN_ROLE: Final = "@unknown-role"
UNKNOWN_CHANNEL: Final = "#unknown-channel"

# One alternation, so that one pass reads the content left to right and nothing a replacement
# produced is read again. Ids are 15-20 digits, as Discord's clients (and discord.py) match.
_MARKUP: Final = re.compile(
    r"<(?P<kind>@!?|@&|#)(?P<id>[0-9]{15,20})>"
    r"|<a?:(?P<emoji>[A-Za-z0-9_~]{1,32}):[0-9]{15,20}>"
    r"|</(?P<command>[-_\w]{1,32}(?: [-_\w]{1,32}){0,2}):[0-9]{15,20}>"
    r"|<t:(?P<time>-?[0-9]{1,16})(?::[tTdDfFsSR])?>"
)


class Directory(Protocol):
    """Who and what the bot knows across its guilds (``discord.Client`` is one)."""

    def get_user(self, id: int, /) -> discord.User | None:
        """A cached user."""
        ...

    def get_channel(self, id: int, /) -> object | None:
        """A cached channel or thread."""
        ...


@dataclass(frozen=True, slots=True)
class Names:
    """Where the mentions of one message are looked up."""

    guild: discord.Guild | None
    mentions: tuple[discord.abc.User, ...] = ()
    roles: tuple[discord.Role, ...] = ()
    directory: Directory | None = None

    @classmethod
    def of(cls, message: discord.Message, directory: Directory | None) -> Names:
        """The names a message's own payload and the bot's cache know."""
        return cls(message.guild, tuple(message.mentions), tuple(message.role_mentions), directory)

    def user(self, user_id: int) -> str:
        """``@display name`` of a mentioned user."""
        found: discord.abc.User | None = self.guild.get_member(user_id) if self.guild else None
        found = found or next((u for u in self.mentions if u.id == user_id), None)
        if found is None and self.directory is not None:
            found = self.directory.get_user(user_id)
        return f"@{found.display_name}" if found is not None else UNKNOWN_USER

    def role(self, role_id: int) -> str:
        """``@role name`` (the default role is named ``@everyone`` already)."""
        found = self.guild.get_role(role_id) if self.guild else None
        found = found or next((r for r in self.roles if r.id == role_id), None)
        if found is None:
            return UNKNOWN_ROLE
        return found.name if found.name.startswith("@") else f"@{found.name}"

    def channel(self, channel_id: int) -> str:
        """``#channel name``, a thread's too."""
        found: object | None = self.guild.get_channel_or_thread(channel_id) if self.guild else None
        if found is None and self.directory is not None:
            found = self.directory.get_channel(channel_id)
        name = getattr(found, "name", None)
        return f"#{name}" if isinstance(name, str) and name else UNKNOWN_CHANNEL


def readable(content: str, names: Names) -> str:
    """``content`` with Discord's markup shown as a person sees it in the client."""

    def show(match: re.Match[str]) -> str:
        if (kind := match["kind"]) is not None:
            target = int(match["id"])
            if kind == "#":
                return names.channel(target)
            return names.role(target) if kind == "@&" else names.user(target)
        if match["emoji"] is not None:
            return f":{match['emoji']}:"
        if match["command"] is not None:
            return f"/{match['command']}"
        return _timestamp(match)

    return _MARKUP.sub(show, content).strip()


def _timestamp(match: re.Match[str]) -> str:
    """``<t:1714564800:R>`` -> ``2024-05-01 12:00 UTC`` (absolute: the model has no "now" of
    the reader); a value no calendar holds stays as written."""
    try:
        moment = datetime.datetime.fromtimestamp(int(match["time"]), datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return match[0]
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def message_text(message: discord.Message, directory: Directory | None) -> str:
    """What the person wrote, as the model reads it: content with mentions shown as names, and
    a poll in words. Attachments and stickers are ``Inbound.media``, not text."""
    parts = [readable(message.content or "", Names.of(message, directory))]
    if message.poll is not None:
        parts.append(poll_text(message.poll))
    return "\n".join(p for p in parts if p)


def poll_text(poll: discord.Poll) -> str:
    """``[poll: Lunch? (pizza / soup)]``: a poll has no file, so it is told in words."""
    answers = " / ".join(_answer(a) for a in poll.answers)
    try:
        question = poll.question or ""
    except AttributeError:  # discord.py keeps no question at all when its text is missing
        question = ""
    question = question.strip() or "(no question)"
    return f"[poll: {question} ({answers})]" if answers else f"[poll: {question}]"


def _answer(answer: discord.PollAnswer) -> str:
    text = (answer.text or "").strip()
    if text:
        return text
    emoji = answer.emoji
    return str(emoji) if emoji is not None else "?"


def embed_text(embeds: Iterable[discord.Embed]) -> str:
    """``[embed: title: description]`` for content that exists only as embeds (a forward of a
    bot's card, a link preview forwarded on its own)."""
    parts = []
    for embed in embeds:
        words = ": ".join(p.strip() for p in (embed.title, embed.description) if p and p.strip())
        if words:
            parts.append(f"[embed: {words}]")
    return "\n".join(parts)
