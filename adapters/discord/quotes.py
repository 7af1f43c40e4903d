"""Replies and forwards -> ``Quote``: the earlier message as context for the model.

A reply's target comes from the payload (``referenced_message``, which Discord includes when it
could resolve it), else discord.py's message cache, else one bounded REST lookup (the caller's
``fetch``); a target that is deleted or cannot be read is the stand-in :data:`UNAVAILABLE`. A
forward carries a snapshot of the forwarded message (content, attachments, stickers) but not
who wrote it: the author is known only when discord.py still caches the original.
"""

from __future__ import annotations

from typing import Final

import discord

from adapters.discord.content import Directory, Names, embed_text, message_text, readable
from adapters.discord.media import media_of, stand_ins
from adapters.text import cut_quote
from bot.core.media import Quote

UNAVAILABLE: Final = "[a message that is no longer available]"
_NO_TEXT: Final = "[a message without text]"


def reply_quote(
    target: discord.Message | None,
    *,
    me_id: int,
    directory: Directory | None,
    our_webhook: bool = False,
) -> Quote:
    """The quote of a reply to ``target`` (None: deleted or unreadable).

    ``our_webhook``: ``target`` was posted through this bot's webhook, as a scene persona
    (adapters/discord/webhooks.py). It is the bot's message, and its author is the name it was
    posted under, which is the persona's (bot.core.scenes.replied_to reads both).
    """
    if target is None:
        return Quote("reply", "", UNAVAILABLE)
    return Quote(
        "reply",
        target.author.display_name,
        cut_quote(message_words(target, directory) or _NO_TEXT),
        author_id=str(target.author.id),
        from_bot=our_webhook or target.author.id == me_id,
    )


def forward_quote(
    message: discord.Message, *, me_id: int, directory: Directory | None
) -> Quote | None:
    """The quote of a forward (its first snapshot: Discord forwards one message), else None."""
    if not message.message_snapshots:
        return None
    snapshot = message.message_snapshots[0]
    names = Names(message.guild, directory=directory)
    text = readable(snapshot.content or "", names) or embed_text(snapshot.embeds)
    original = snapshot.cached_message
    if original is None:
        return Quote("forward", "", cut_quote(text))
    return Quote(
        "forward",
        original.author.display_name,
        cut_quote(text),
        author_id=str(original.author.id),
        from_bot=original.author.id == me_id,
    )


def message_words(message: discord.Message, directory: Directory | None) -> str:
    """A message told in words: its text, poll, media stand-ins and forwarded content."""
    parts = [
        message_text(message, directory),
        stand_ins(media_of(message.attachments, message.stickers)),
    ]
    for snapshot in message.message_snapshots[:1]:
        forwarded = readable(snapshot.content or "", Names(message.guild, directory=directory))
        media = stand_ins(media_of(snapshot.attachments, snapshot.stickers))
        words = " ".join(p for p in (forwarded, media) if p)
        if words:
            parts.append(f"[forwarded: {words}]")
    if not any(parts):
        parts.append(embed_text(message.embeds))
    return "\n".join(p for p in parts if p)
