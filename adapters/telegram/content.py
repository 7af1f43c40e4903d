"""What a Telegram message holds besides its text: media references and honest descriptions.

A leaf reader of the Telegram intake (docs/architecture.md#media): pure functions over
aiogram's ``Message`` (and ``ExternalReplyInfo``, which carries the same content fields).
:mod:`adapters.telegram.inbound` reads a message's content here, and
:mod:`adapters.telegram.quotes` the content of the message it replies to; nothing here calls
either. Kinds with a file become :class:`MediaRef` (:mod:`adapters.telegram.attachments`).
Kinds without a file (location, poll, contact...) become a short bracketed description the
model reads as part of the message, so nothing a person sends is an empty turn. Service
messages (someone joined, a pin, a topic created) are nothing a person said.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from aiogram.types import ExternalReplyInfo, Message

from adapters.telegram.attachments import DOWNLOAD_LIMIT, USEFUL_EDGE, choose_photo, media_of, short
from adapters.telegram.authors import chat_name
from adapters.telegram.updates import UNREADABLE_FIELDS
from bot.core.media import MediaRef

# DOWNLOAD_LIMIT, USEFUL_EDGE and choose_photo live in attachments.py; named here too.
__all__ = [
    "DOWNLOAD_LIMIT",
    "UNREADABLE",
    "USEFUL_EDGE",
    "Content",
    "choose_photo",
    "content_of",
    "said",
    "unreadable",
]

#: Said for a message that holds nothing aiogram could read (a kind newer than aiogram).
UNREADABLE: Final = "[a message of a kind this bot cannot read]"
#: What a content field dropped because it failed validation (adapters/telegram/updates.py)
#: was: said as ``[a photo this bot could not read]``, so a file there is never silent.
_DROPPED_KINDS: Final = {
    "photo": "a photo",
    "live_photo": "a live photo",
    "sticker": "a sticker",
    "animation": "a GIF",
    "document": "a file",
    "voice": "a voice message",
    "video_note": "a video message",
    "audio": "an audio file",
    "video": "a video",
    "location": "a location",
    "venue": "a place",
    "contact": "a contact",
    "dice": "a dice",
    "poll": "a poll",
    "checklist": "a checklist",
    "game": "a game",
    "invoice": "an invoice",
    "story": "a story",
    "giveaway": "a giveaway",
    "giveaway_winners": "giveaway winners",
    "paid_media": "paid media",
}

#: Fields of service messages: events in the chat, nothing a person said to anyone.
_SERVICE: Final = (
    "new_chat_members",
    "left_chat_member",
    "chat_owner_left",
    "chat_owner_changed",
    "new_chat_title",
    "new_chat_photo",
    "delete_chat_photo",
    "group_chat_created",
    "supergroup_chat_created",
    "channel_chat_created",
    "message_auto_delete_timer_changed",
    "migrate_to_chat_id",
    "migrate_from_chat_id",
    "pinned_message",
    "successful_payment",
    "refunded_payment",
    "users_shared",
    "user_shared",
    "chat_shared",
    "gift_upgrade_sent",
    "connected_website",
    "write_access_allowed",
    "passport_data",
    "proximity_alert_triggered",
    "boost_added",
    "chat_background_set",
    "checklist_tasks_done",
    "checklist_tasks_added",
    "direct_message_price_changed",
    "forum_topic_created",
    "forum_topic_edited",
    "forum_topic_closed",
    "forum_topic_reopened",
    "general_forum_topic_hidden",
    "general_forum_topic_unhidden",
    "giveaway_created",
    "giveaway_completed",
    "managed_bot_created",
    "paid_message_price_changed",
    "poll_option_added",
    "poll_option_deleted",
    "suggested_post_approved",
    "suggested_post_approval_failed",
    "suggested_post_declined",
    "suggested_post_paid",
    "suggested_post_refunded",
    "video_chat_scheduled",
    "video_chat_started",
    "video_chat_ended",
    "video_chat_participants_invited",
    "web_app_data",
    "community_chat_added",
    "community_chat_removed",
    "community_chat_joined",
)


@dataclass(frozen=True, slots=True)
class Content:
    """A message's media and the description of its file-less parts ("" if none)."""

    media: tuple[MediaRef, ...] = ()
    description: str = ""
    #: A service message (a join, a pin...): no media, no description, nothing to answer.
    service: bool = False

    def stand_in(self) -> str:
        """The content as text, for a quoted message: ``[photo] [poll: Q? (a / b)]``."""
        parts = [f"[{m.label}]" for m in self.media]
        if self.description:
            parts.append(self.description)
        return " ".join(parts)


def content_of(holder: Message | ExternalReplyInfo) -> Content:
    """The media and descriptions of a message (or of the message an external reply names).

    A message that holds no text, no content aiogram knows and is no service message gets
    :data:`UNREADABLE` (so a private chat never drops it silently); text alone is no content.
    """
    media = media_of(holder)
    described = [*_descriptions(holder), *_dropped(holder)]
    if media or described:
        return Content(media, " ".join(described))
    if isinstance(holder, Message):
        if any(getattr(holder, name, None) for name in _SERVICE):
            return Content(service=True)
        if holder.text is not None or holder.caption is not None:
            return Content()
    return Content(description=UNREADABLE)


def said(message: Message) -> str:
    """A message as text (a replied-to one, for its quote): its media and descriptions as
    stand-ins, then its text or caption."""
    body = message.text or message.caption or ""
    stand_in = content_of(message).stand_in() if not message.text else ""
    return " ".join(p for p in (stand_in, body) if p)


# --------------------------------------------------------------------------- descriptions


def _descriptions(holder: Message | ExternalReplyInfo) -> list[str]:
    """Bracketed descriptions of the file-less kinds (each cut to a short line)."""
    found = [describe(holder) for describe in _DESCRIBERS]
    if isinstance(holder, Message):
        if holder.gift is not None or holder.unique_gift is not None:
            found.append("[a gift]")
        if holder.rich_message is not None:
            found.append("[a rich message]")
    return [d for d in found if d]


_Holder = Message | ExternalReplyInfo


def unreadable(holder: _Holder) -> tuple[str, ...]:
    """The fields the update's repair dropped from this message (adapters/telegram/updates.py
    names them in the message's extra field :data:`UNREADABLE_FIELDS`)."""
    names = (holder.model_extra or {}).get(UNREADABLE_FIELDS)
    if not isinstance(names, list):
        return ()
    return tuple(name for name in names if isinstance(name, str))


def _dropped(holder: _Holder) -> list[str]:
    """Stand-ins for the dropped content fields (formatting, replies and such are no content)."""
    kinds = [_DROPPED_KINDS.get(name) for name in unreadable(holder)]
    return [f"[{kind} this bot could not read]" for kind in dict.fromkeys(kinds) if kind]


def _location(holder: _Holder) -> str:
    where = holder.location
    if where is None or holder.venue is not None:  # a venue carries its location
        return ""
    live = "live location" if where.live_period else "location"
    return f"[{live}: {where.latitude:.5f}, {where.longitude:.5f}]"


def _venue(holder: _Holder) -> str:
    venue = holder.venue
    return "" if venue is None else f"[place: {short(f'{venue.title}, {venue.address}')}]"


def _contact(holder: _Holder) -> str:
    contact = holder.contact
    if contact is None:
        return ""
    name = short(" ".join(p for p in (contact.first_name, contact.last_name) if p))
    return f"[contact: {name}]" if name else "[contact]"


def _dice(holder: _Holder) -> str:
    return "" if holder.dice is None else f"[dice {holder.dice.emoji} {holder.dice.value}]"


def _poll(holder: _Holder) -> str:
    poll = holder.poll
    return "" if poll is None else _listing("poll", poll.question, [o.text for o in poll.options])


def _checklist(holder: _Holder) -> str:
    checklist = holder.checklist
    if checklist is None:
        return ""
    return _listing("checklist", checklist.title, [t.text for t in checklist.tasks])


def _listing(kind: str, title: str, items: list[str]) -> str:
    """``[poll: Coffee? (yes / no)]``: a title and its items, on one short line."""
    listed = " / ".join(items)
    return f"[{kind}: {short(f'{title} ({listed})')}]"


def _game(holder: _Holder) -> str:
    return "" if holder.game is None else f"[game: {short(holder.game.title)}]"


def _invoice(holder: _Holder) -> str:
    return "" if holder.invoice is None else f"[invoice: {short(holder.invoice.title)}]"


def _story(holder: _Holder) -> str:
    if holder.story is None:
        return ""
    source = short(chat_name(holder.story.chat))
    return f"[story from {source}]" if source else "[story]"


def _giveaway(holder: _Holder) -> str:
    if holder.giveaway is not None:
        return f"[giveaway: {_count(holder.giveaway.winner_count, 'winner')}]"
    return "" if holder.giveaway_winners is None else "[giveaway winners]"


def _paid_media(holder: _Holder) -> str:
    paid = holder.paid_media
    if paid is None:
        return ""
    items = _count(len(paid.paid_media), "item")
    return f"[paid media: {items} for {_count(paid.star_count, 'star')}]"


_DESCRIBERS: Final = (
    _location,
    _venue,
    _contact,
    _dice,
    _poll,
    _checklist,
    _game,
    _invoice,
    _story,
    _giveaway,
    _paid_media,
)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"
