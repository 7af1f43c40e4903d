"""Reading Telegram updates one at a time, so that one update aiogram cannot parse never stops
a bot.

aiogram validates a whole ``getUpdates`` answer at once: one update that fails its types (an
older self-hosted Bot API server omitting a field, a field Telegram adds or changes tomorrow)
rejects the batch, the offset never moves, and the bot asks for the same batch forever. Here
``getUpdates`` returns raw JSON (:class:`GetRawUpdates`) and :func:`parse_update` validates each
update on its own with aiogram's own :class:`~aiogram.types.Update`.

A message from an older Bot API server is first brought to today's shape where that is safe
(:func:`modernized`): a file without ``file_unique_id`` gets its ``file_id`` (a unique id only
names the file; the ``file_id`` still fetches it through ``getFile``), ``thumb`` is
``thumbnail``, a sticker from before animated and video stickers is a static one, and the
forward fields Bot API 7.0 replaced (``forward_from``, ``forward_from_chat``,
``forward_sender_name``, ``forward_date``) become the ``forward_origin`` they mean.

Rule for an update that still fails validation (:func:`parse_update`): keep the message when
only a non-essential part of it is at fault. The top-level field of the message that holds the
error (``photo`` whose sizes lack their width, ``reply_to_message``, ``entities``, a new kind of
attachment...) is dropped and the update validated again, a few times at most, so the text or
caption still arrives; a part of a content field (a game's ``animation``, a sticker's
``thumbnail``) is dropped alone first, and the whole field only when that part is required.
A dropped field's name is kept in the message's extra field :data:`UNREADABLE_FIELDS`, so the
message still says that something was there (adapters/telegram/content.py). Fields that
decide who said what, where and what was said (:data:`ESSENTIAL`) are never dropped: when one
of them fails, or the update is no message at all, the update is rejected (logged once without
content, counted, acknowledged, skipped).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from aiogram import Bot
from aiogram.methods.base import TelegramMethod
from aiogram.types import Update
from aiogram.types.update import UpdateTypeLookupError
from pydantic import ValidationError

#: Message fields never dropped to save an update: attribution, place, identity and content.
ESSENTIAL: Final = frozenset(
    {
        "message_id",
        "date",
        "chat",
        "from",
        "sender_chat",
        "message_thread_id",
        "is_topic_message",
        "text",
        "caption",
        "edit_date",
    }
)
#: Update kinds whose payload is a Message (the ones a repair may apply to).
MESSAGE_KINDS: Final = frozenset(
    {"message", "edited_message", "channel_post", "edited_channel_post", "business_message"}
)
#: Content fields (objects) a broken part of which is dropped alone, keeping the rest.
WITH_PARTS: Final = frozenset(
    {
        "animation",
        "audio",
        "checklist",
        "contact",
        "dice",
        "document",
        "game",
        "giveaway",
        "invoice",
        "live_photo",
        "location",
        "paid_media",
        "poll",
        "sticker",
        "story",
        "venue",
        "video",
        "video_note",
        "voice",
    }
)
#: The message's extra field naming the fields a repair dropped (Telegram sends no such key).
UNREADABLE_FIELDS: Final = "personabot_unreadable"
_MAX_REPAIRS: Final = 5
_SHOWN_ERRORS: Final = 3


class GetRawUpdates(TelegramMethod[list[Any]]):
    """``getUpdates`` whose result aiogram does not validate (each update is checked alone).

    Only the result's being a list is checked here: an entry that is no object at all (``null``,
    a number) must fail alone in :func:`parse_update`, not fail the whole batch.
    """

    __returning__ = list[Any]
    __api_method__ = "getUpdates"

    offset: int | None = None
    limit: int | None = None
    timeout: int | None = None
    allowed_updates: list[str] | None = None


@dataclass(frozen=True, slots=True)
class ParsedUpdate:
    """One raw update after validation: the Update (or None when rejected) and what happened."""

    update_id: int | None
    kind: str
    update: Update | None
    dropped: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()

    def describe(self) -> str:
        """Update id, kind and the first validation errors (locations and types, no values)."""
        where = "; ".join(self.errors) or "no details"
        return f"update {self.update_id} ({self.kind}): {where}"


def update_kind(raw: Mapping[str, Any]) -> str:
    """The update's kind: its one top-level key besides ``update_id``."""
    keys = [k for k in raw if k != "update_id"]
    return keys[0] if keys else "empty"


def parse_update(raw: Any, bot: Bot) -> ParsedUpdate:
    """Validate one raw update (modernized), repairing a message by dropping what fails."""
    if not isinstance(raw, dict):
        return ParsedUpdate(None, type(raw).__name__, None, errors=("not a JSON object",))
    update_id = raw.get("update_id")
    uid = update_id if isinstance(update_id, int) and not isinstance(update_id, bool) else None
    kind = update_kind(raw)
    candidate = raw
    if kind in MESSAGE_KINDS and isinstance(raw.get(kind), dict):
        message = modernized(raw[kind])
        candidate = raw if message is raw[kind] else {**raw, kind: message}
    copied = False  # the raw update (and what modernized shares with it) is never changed
    dropped: list[str] = []
    first_errors: tuple[str, ...] = ()
    for _ in range(_MAX_REPAIRS + 1):
        try:
            update = Update.model_validate(candidate, context={"bot": bot})
        except ValidationError as exc:
            errors = exc.errors(include_url=False, include_input=False, include_context=False)
            shown = tuple(_error_text(e) for e in errors[:_SHOWN_ERRORS])
            first_errors = first_errors or shown
            repairs = _repairs(errors, kind, candidate)
            if uid is None or repairs is None:
                return ParsedUpdate(uid, kind, None, tuple(dropped), first_errors)
            if not copied:
                candidate, copied = copy.deepcopy(candidate), True
            dropped += _drop(candidate[kind], repairs)
            continue
        try:
            update.event_type  # noqa: B018 - raises for an update of no kind aiogram knows
        except UpdateTypeLookupError:
            return ParsedUpdate(uid, kind, None, tuple(dropped), ("no update kind aiogram knows",))
        # The validated id (an id sent as "5" is 5): the offset must move past this update.
        return ParsedUpdate(update.update_id, kind, update, tuple(dropped), first_errors)
    return ParsedUpdate(uid, kind, None, tuple(dropped), first_errors)


# ------------------------------------------------------------------------ older servers


def modernized(message: dict[str, Any]) -> dict[str, Any]:
    """``message`` as today's Bot API sends it (see the module doc); ``message`` itself when
    nothing is to change, else a new dict sharing the unchanged parts (``message`` is never
    changed). Fields of :data:`ESSENTIAL` are left as they are."""
    changed: dict[str, Any] = {}
    for name, value in message.items():
        if name not in ESSENTIAL:
            new = _files_modernized(value, name)
            if new is not value:
                changed[name] = new
    origin = _legacy_origin(message)
    if origin is not None:
        changed["forward_origin"] = origin
    return {**message, **changed} if changed else message


def _files_modernized(value: Any, key: str) -> Any:
    """Files (objects with a ``file_id``) within ``value`` in today's shape."""
    if isinstance(value, list):
        items = [_files_modernized(item, key) for item in value]
        same = all(new is old for new, old in zip(items, value, strict=True))
        return value if same else items
    if not isinstance(value, dict):
        return value
    changed: dict[str, Any] = {}
    for name, item in value.items():
        new = _files_modernized(item, name)
        if new is not item:
            changed[name] = new
    if isinstance(value.get("file_id"), str):
        if "file_unique_id" not in value:
            changed["file_unique_id"] = value["file_id"]
        if "thumb" in value and "thumbnail" not in value:  # renamed in Bot API 6.6
            changed["thumbnail"] = changed.pop("thumb", value["thumb"])
        if key == "sticker":
            # Before Bot API 4.5 (animated) and 5.5 (video) every sticker was a static image;
            # before 6.2 a mask was told by its mask_position.
            changed.setdefault("is_animated", value.get("is_animated", False))
            changed.setdefault("is_video", value.get("is_video", False))
            kind = "mask" if value.get("mask_position") else "regular"
            changed.setdefault("type", value.get("type", kind))
    if not changed:
        return value
    fixed = {**value, **changed}
    if "thumbnail" in changed and "thumb" in fixed:
        del fixed["thumb"]
    return fixed


def _legacy_origin(message: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``forward_origin`` a message's pre-7.0 forward fields mean (None: no forward, or
    the message has its ``forward_origin``)."""
    if "forward_origin" in message:
        return None
    user, chat = message.get("forward_from"), message.get("forward_from_chat")
    name, date = message.get("forward_sender_name"), message.get("forward_date")
    forwarded = isinstance(user, dict) or isinstance(chat, dict) or isinstance(name, str)
    if not forwarded and date is None:
        return None
    # A malformed value fails the origin's validation and the origin is dropped (with the
    # legacy field that fails too): never a guessed author.
    when = date if date is not None else message.get("date")
    if isinstance(user, dict):
        return {"type": "user", "date": when, "sender_user": user}
    signature = message.get("forward_signature")
    signed = {"author_signature": signature} if isinstance(signature, str) else {}
    if isinstance(chat, dict):
        post = message.get("forward_from_message_id")
        if chat.get("type") == "channel" and isinstance(post, int) and post > 0:
            return {"type": "channel", "date": when, "chat": chat, "message_id": post, **signed}
        return {"type": "chat", "date": when, "sender_chat": chat, **signed}
    # A user who hides their account, or a forward whose origin the server did not say.
    return {"type": "hidden_user", "date": when, "sender_user_name": name or ""}


# ------------------------------------------------------------------------------ repairs


def _repairs(
    errors: list[Any], kind: str, raw: Mapping[str, Any]
) -> dict[str, set[str] | None] | None:
    """What to drop for these errors: field -> its parts to drop (None: the whole field), or
    None when the update cannot be saved."""
    message = raw.get(kind)
    if kind not in MESSAGE_KINDS or not isinstance(message, dict):
        return None
    repairs: dict[str, set[str] | None] = {}
    for error in errors:
        loc = tuple(error.get("loc", ()))
        if len(loc) < 2 or loc[0] != kind:
            return None
        name = str(loc[1])
        if name in ESSENTIAL or name not in message:
            return None
        value = message[name]
        part = loc[2] if len(loc) > 3 else None  # a field *inside* the part failed
        if (
            name in WITH_PARTS
            and isinstance(value, dict)
            and isinstance(part, str)
            and isinstance(value.get(part), dict | list)
        ):
            parts = repairs.setdefault(name, set())
            if parts is not None:
                parts.add(part)
        else:
            repairs[name] = None
    return repairs or None


def _drop(message: dict[str, Any], repairs: Mapping[str, set[str] | None]) -> list[str]:
    """Apply ``repairs`` to ``message`` (a copy): what was dropped, as ``field[.part]``."""
    dropped = []
    for name, parts in repairs.items():
        if parts is None:
            message.pop(name, None)
            unreadable = message.get(UNREADABLE_FIELDS)
            if not isinstance(unreadable, list):
                unreadable = message[UNREADABLE_FIELDS] = []
            unreadable.append(name)
            dropped.append(name)
            continue
        for part in sorted(parts):
            message[name].pop(part, None)
            dropped.append(f"{name}.{part}")
    return dropped


def _error_text(error: Mapping[str, Any]) -> str:
    loc = ".".join(str(part) for part in error.get("loc", ()))
    return f"{loc or '(root)'}: {error.get('type', 'invalid')}"
