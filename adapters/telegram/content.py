"""What a Telegram message holds besides its text: media references and honest descriptions.

Pure functions over aiogram's ``Message`` (and ``ExternalReplyInfo``, which carries the same
content fields). Kinds with a file become :class:`MediaRef` (``bot.core.media``): the model may
get the bytes later (bot/runtime/media.py fetches them through the adapter's MediaSource).
Kinds without a file (location, poll, contact...) become a short bracketed description the
model reads as part of the message, so nothing a person sends is an empty turn. Service
messages (someone joined, a pin, a topic created) are nothing a person said.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from aiogram.types import (
    Animation,
    Chat,
    Document,
    ExternalReplyInfo,
    LivePhoto,
    Message,
    PhotoSize,
    Sticker,
)

from adapters.telegram.updates import UNREADABLE_FIELDS
from bot.core.media import MediaKind, MediaRef

#: Bots may download files up to 20 MB (``getFile``); a larger one can never be fetched.
DOWNLOAD_LIMIT: Final = 20 * 1024 * 1024
#: A long edge beyond this costs the model tokens without benefit (the image is downscaled).
USEFUL_EDGE: Final = 1568
#: A description or label is a stand-in, never a copy of a whole payload.
_DESCRIPTION_LIMIT: Final = 300
_NAME_LIMIT: Final = 100
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
    media = _media(holder)
    described = [*_descriptions(holder), *_dropped(holder)]
    if media or described:
        return Content(media, " ".join(described))
    if isinstance(holder, Message):
        if any(getattr(holder, name, None) for name in _SERVICE):
            return Content(service=True)
        if holder.text is not None or holder.caption is not None:
            return Content()
    return Content(description=UNREADABLE)


def choose_photo(sizes: Sequence[PhotoSize]) -> PhotoSize | None:
    """The size to give the model: the smallest whose long edge reaches :data:`USEFUL_EDGE`,
    else the largest; never one the Bot API would refuse to download (None if all are)."""
    fits = [s for s in sizes if s.file_size is None or s.file_size <= DOWNLOAD_LIMIT]
    if not fits:
        return None
    big = [s for s in fits if max(s.width, s.height) >= USEFUL_EDGE]
    if big:
        return min(big, key=lambda s: s.width * s.height)
    return max(fits, key=lambda s: s.width * s.height)


# --------------------------------------------------------------------------------- media


def _media(holder: Message | ExternalReplyInfo) -> tuple[MediaRef, ...]:
    """Media references in a fixed order (a message rarely has more than one kind)."""
    found: list[MediaRef] = []
    if holder.photo:
        found.append(_photo(holder.photo, "photo"))
    if holder.live_photo is not None:
        found.append(_live_photo(holder.live_photo))
    if holder.sticker is not None:
        found.append(_sticker(holder.sticker))
    if holder.animation is not None:
        found.append(_animation(holder.animation))
    elif holder.document is not None:  # an animation comes with its document twin
        found.append(_document(holder.document))
    if holder.voice is not None:
        voice = holder.voice
        found.append(
            _file(
                "voice",
                "voice message",
                voice,
                voice.mime_type or "audio/ogg",
                duration=voice.duration,
            )
        )
    if holder.video_note is not None:
        note = holder.video_note
        found.append(
            _file(
                "video_note",
                "video message",
                note,
                "video/mp4",
                width=note.length,
                height=note.length,
                duration=note.duration,
            )
        )
    if holder.audio is not None:
        audio = holder.audio
        title = " - ".join(p for p in (audio.performer, audio.title) if p) or audio.file_name
        found.append(
            _file(
                "audio",
                _labelled("audio", title),
                audio,
                audio.mime_type or "",
                duration=audio.duration,
            )
        )
    if holder.video is not None:
        video = holder.video
        found.append(
            _file(
                "video",
                _labelled("video", video.file_name),
                video,
                video.mime_type or "",
                width=video.width,
                height=video.height,
                duration=video.duration,
            )
        )
    return tuple(found)


class _File(Protocol):
    """What every Telegram file object has."""

    @property
    def file_id(self) -> str: ...
    @property
    def file_unique_id(self) -> str: ...
    @property
    def file_size(self) -> int | None: ...


def _file(
    kind: MediaKind,
    label: str,
    file: _File,
    media_type: str,
    *,
    width: int | None = None,
    height: int | None = None,
    duration: float | None = None,
) -> MediaRef:
    """The reference of one Telegram file (fetched by its ``file_id``)."""
    return MediaRef(
        kind,
        label,
        file.file_id,
        file.file_unique_id,
        media_type,
        file.file_size,
        width,
        height,
        None if duration is None else float(duration),
    )


def _photo(sizes: Sequence[PhotoSize], label: str) -> MediaRef:
    """A photo as the size :func:`choose_photo` picks (ref "" when none can be downloaded)."""
    size = choose_photo(sizes)
    if size is None:
        return MediaRef("image", label)
    # Telegram re-encodes every photo it stores as JPEG.
    return _file("image", label, size, "image/jpeg", width=size.width, height=size.height)


def _live_photo(live: LivePhoto) -> MediaRef:
    """A live photo: its still photo, else the short video."""
    if live.photo and choose_photo(live.photo) is not None:
        return _photo(live.photo, "live photo")
    return _file(
        "video",
        "live photo",
        live,
        live.mime_type or "",
        width=live.width,
        height=live.height,
        duration=live.duration,
    )


def _sticker(sticker: Sticker) -> MediaRef:
    """A static sticker is its image (WebP); an animated or video one is its thumbnail."""
    emoji = f" {sticker.emoji}" if sticker.emoji else ""
    if not (sticker.is_animated or sticker.is_video):
        return _file(
            "image",
            f"sticker{emoji}",
            sticker,
            "image/webp",
            width=sticker.width,
            height=sticker.height,
        )
    label = f"{'video' if sticker.is_video else 'animated'} sticker{emoji}"
    return _thumbnail(sticker.thumbnail, label)


def _animation(animation: Animation) -> MediaRef:
    """A GIF (Telegram sends MP4): its thumbnail shows the model what it is of."""
    if animation.thumbnail is not None:
        return _thumbnail(animation.thumbnail, "GIF")
    return _file(
        "video",
        "GIF",
        animation,
        animation.mime_type or "",
        width=animation.width,
        height=animation.height,
        duration=animation.duration,
    )


def _thumbnail(thumbnail: PhotoSize | None, label: str) -> MediaRef:
    """A still of something the model cannot watch; without one a label only (ref "")."""
    if thumbnail is None:
        return MediaRef("file", label)
    # Telegram's thumbnails are JPEG or WebP: the preparation reads the bytes.
    return _file("image", label, thumbnail, "", width=thumbnail.width, height=thumbnail.height)


def _document(document: Document) -> MediaRef:
    """A file; one whose MIME type is an image (sent "as a file", uncompressed) is an image."""
    mime = (document.mime_type or "").lower()
    kind: MediaKind = "image" if mime.startswith("image/") else "file"
    return _file(
        kind, _labelled("image" if kind == "image" else "file", document.file_name), document, mime
    )


def _labelled(what: str, name: str | None) -> str:
    """``file report.pdf``: a kind and the name the sender gave, on one short line."""
    name = _short(name or "", _NAME_LIMIT)
    return f"{what} {name}" if name else what


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
    return "" if venue is None else f"[place: {_short(f'{venue.title}, {venue.address}')}]"


def _contact(holder: _Holder) -> str:
    contact = holder.contact
    if contact is None:
        return ""
    name = _short(" ".join(p for p in (contact.first_name, contact.last_name) if p))
    return f"[contact: {name}]" if name else "[contact]"


def _dice(holder: _Holder) -> str:
    return "" if holder.dice is None else f"[dice {holder.dice.emoji} {holder.dice.value}]"


def _poll(holder: _Holder) -> str:
    poll = holder.poll
    if poll is None:
        return ""
    options = " / ".join(o.text for o in poll.options)
    return f"[poll: {_short(f'{poll.question} ({options})')}]"


def _checklist(holder: _Holder) -> str:
    checklist = holder.checklist
    if checklist is None:
        return ""
    tasks = " / ".join(t.text for t in checklist.tasks)
    return f"[checklist: {_short(f'{checklist.title} ({tasks})')}]"


def _game(holder: _Holder) -> str:
    return "" if holder.game is None else f"[game: {_short(holder.game.title)}]"


def _invoice(holder: _Holder) -> str:
    return "" if holder.invoice is None else f"[invoice: {_short(holder.invoice.title)}]"


def _story(holder: _Holder) -> str:
    if holder.story is None:
        return ""
    source = _short(chat_name(holder.story.chat))
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


def chat_name(chat: Chat) -> str:
    """A chat's title, or its person's name, or its @username ("" when it has none)."""
    name = chat.title or " ".join(p for p in (chat.first_name, chat.last_name) if p)
    return name.strip() or (f"@{chat.username}" if chat.username else "")


def _short(text: str, limit: int = _DESCRIPTION_LIMIT) -> str:
    """One line (whitespace collapsed, no brackets to close ours), at most ``limit`` chars."""
    line = " ".join(text.replace("[", "(").replace("]", ")").split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
