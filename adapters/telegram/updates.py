"""Reading Telegram updates one at a time, so that one update aiogram cannot parse never stops
a bot.

aiogram validates a whole ``getUpdates`` answer at once: one update that fails its types (an
older self-hosted Bot API server omitting a field, a field Telegram adds or changes tomorrow)
rejects the batch, the offset never moves, and the bot asks for the same batch forever. Here
``getUpdates`` returns raw JSON (:class:`GetRawUpdates`) and :func:`parse_update` validates each
update on its own with aiogram's own :class:`~aiogram.types.Update`.

Rule for an update that fails validation (:func:`parse_update`): keep the message when only a
non-essential part of it is at fault. The top-level field of the message that holds the error
(``photo`` whose sizes lack ``file_unique_id``, ``reply_to_message``, ``entities``, a new kind
of attachment...) is dropped and the update validated again, a few times at most, so the text
or caption still arrives. Fields that decide who said what, where and what was said
(:data:`ESSENTIAL`) are never dropped: when one of them fails, or the update is no message at
all, the update is rejected (logged once without content, counted, acknowledged, skipped).
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
    """Validate one raw update, repairing a message by dropping non-essential fields."""
    if not isinstance(raw, dict):
        return ParsedUpdate(None, type(raw).__name__, None, errors=("not a JSON object",))
    update_id = raw.get("update_id")
    uid = update_id if isinstance(update_id, int) and not isinstance(update_id, bool) else None
    kind = update_kind(raw)
    candidate = raw
    dropped: list[str] = []
    first_errors: tuple[str, ...] = ()
    for _ in range(_MAX_REPAIRS + 1):
        try:
            update = Update.model_validate(candidate, context={"bot": bot})
        except ValidationError as exc:
            errors = exc.errors(include_url=False, include_input=False, include_context=False)
            shown = tuple(_error_text(e) for e in errors[:_SHOWN_ERRORS])
            first_errors = first_errors or shown
            fields = _droppable(errors, kind, candidate)
            if uid is None or fields is None:
                return ParsedUpdate(uid, kind, None, tuple(dropped), first_errors)
            candidate = copy.deepcopy(candidate) if candidate is raw else candidate
            for name in fields:
                candidate[kind].pop(name, None)
            dropped += fields
            continue
        try:
            update.event_type  # noqa: B018 - raises for an update of no kind aiogram knows
        except UpdateTypeLookupError:
            return ParsedUpdate(uid, kind, None, tuple(dropped), ("no update kind aiogram knows",))
        # The validated id (an id sent as "5" is 5): the offset must move past this update.
        return ParsedUpdate(update.update_id, kind, update, tuple(dropped), first_errors)
    return ParsedUpdate(uid, kind, None, tuple(dropped), first_errors)


def _droppable(errors: list[Any], kind: str, raw: Mapping[str, Any]) -> list[str] | None:
    """The message fields to drop for these errors, or None when the update cannot be saved."""
    if kind not in MESSAGE_KINDS or not isinstance(raw.get(kind), dict):
        return None
    fields: list[str] = []
    for error in errors:
        loc = tuple(error.get("loc", ()))
        if len(loc) < 2 or loc[0] != kind:
            return None
        name = str(loc[1])
        if name in ESSENTIAL or name not in raw[kind]:
            return None
        if name not in fields:
            fields.append(name)
    return fields or None


def _error_text(error: Mapping[str, Any]) -> str:
    loc = ".".join(str(part) for part in error.get("loc", ()))
    return f"{loc or '(root)'}: {error.get('type', 'invalid')}"
