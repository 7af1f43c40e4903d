"""What /forget removed and kept (its answer), and the /export document: pure functions.

docs/privacy.md describes the same facts for operators and users; keep the two in step.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from bot.core.agenda import Reminder, ZoneError, describe_local, utc_text, zone
from bot.core.events import (
    ConversationKey,
    Erasure,
    SessionKey,
    StoredMessage,
    StoredOutbox,
    StoredSummary,
    UserData,
)
from bot.core.i18n import Texts, english
from bot.core.media import Quote, StoredMedia


@dataclass(frozen=True, slots=True)
class ForgetReport:
    """The outcome of /forget: memory items erased and, when enabled, rows deleted."""

    items: int
    erasure: Erasure | None  # None: messages were kept (forget_deletes_messages is off)
    reminders: int = 0  # deleted with the time zone setting (docs/initiatives.md)

    def describe(self, texts: Texts | None = None) -> str:
        """The answer to /forget: exactly what was removed, what is kept, and why (in the
        language of ``texts``; English without)."""
        _ = texts or english()
        facts = _.ngettext("{count} thing", "{count} things", self.items).format(count=self.items)
        lines = [
            _(
                "Done: I erased what I remembered about you ({facts}), and I will never learn "
                "anything from what you said before now."
            ).format(facts=facts)
        ]
        reminders = _.ngettext("{count} reminder", "{count} reminders", self.reminders)
        lines.append(
            _("I deleted {reminders} of yours and your time zone setting.").format(
                reminders=reminders.format(count=self.reminders)
            )
        )
        kept = []
        e = self.erasure
        if e is None:
            kept.append(
                _(
                    "your messages in our chats, and the conversation summaries that include "
                    "them, stay as conversation history until the retention policy deletes "
                    "them (this bot is set to keep them on /forget)"
                )
            )
        else:
            lines.append(
                _(
                    "In every chat with me on this platform I deleted {messages}, {replies} "
                    "that answered only you, {records} of replies, and {summaries} that "
                    "included you (what is left of those conversations is summarised again "
                    "when needed)."
                ).format(
                    messages=_.ngettext(
                        "{count} of your messages", "{count} of your messages", e.messages
                    ).format(count=e.messages),
                    replies=_.ngettext(
                        "{count} reply of mine", "{count} replies of mine", e.replies
                    ).format(count=e.replies),
                    records=_.ngettext(
                        "{count} delivery record", "{count} delivery records", e.outbox
                    ).format(count=e.outbox),
                    summaries=_.ngettext(
                        "{count} conversation summary",
                        "{count} conversation summaries",
                        e.summaries,
                    ).format(count=e.summaries),
                )
            )
            if e.shared_replies:
                replies = _.ngettext(
                    "{count} reply of mine", "{count} replies of mine", e.shared_replies
                )
                kept.append(
                    _(
                        "{replies} that also answered other people (they are part of their "
                        "conversation too)"
                    ).format(replies=replies.format(count=e.shared_replies))
                )
            if e.pending:
                messages = _.ngettext("{count} message", "{count} messages", e.pending)
                kept.append(
                    _("{messages} of yours still waiting for my answer").format(
                        messages=messages.format(count=e.pending)
                    )
                )
        kept.append(
            _(
                "the times and token counts of the model calls made for you, without any text, "
                "for the usage limits, and the time of this request, so that earlier messages "
                "are never learned from"
            )
        )
        lines.append(_("Kept: {items}.").format(items="; ".join(kept)))
        return " ".join(lines)


def _chat(c: ConversationKey) -> dict[str, Any]:
    """Which chat of which bot a row of the export belongs to."""
    return {"bot": c.bot, "platform": c.platform, "chat_id": c.chat_id, "thread_id": c.thread_id}


def _where(session: SessionKey) -> dict[str, Any]:
    return {**_chat(session.conversation), "session": session.session_id}


def _message(m: StoredMessage, persona: str | None = None) -> dict[str, Any]:
    return {
        **_where(m.session),
        # Who the bot was in that session (docs/personas.md#several-personas).
        "persona": persona,
        "id": m.id,
        "turn": m.turn,
        "at": m.created_at,
        "display_name": m.display_name,
        "text": m.text,
        "private_chat": m.is_private,
        "addressed_to_the_bot": m.addressed,
        "media": [_media(item) for item in m.media],
        "quote": None if m.quote is None else _quote(m.quote),
    }


#: Media whose ``note`` is a transcript once ``ready`` (otherwise it says why not).
_SPOKEN = ("voice", "video_note", "audio")


def _media(item: StoredMedia) -> dict[str, Any]:
    """What the export says of one piece of media: never its bytes, and never the platform's
    reference (a Telegram file id or a Discord URL fetches the file: it is a key, not data
    about the person); the stable ``unique_id`` names it."""
    ref = item.ref
    ready = item.status == "ready"
    return {
        "kind": ref.kind,
        "label": ref.label,
        "unique_id": ref.unique_id,
        "media_type": ref.media_type,
        "size": ref.size,
        "width": ref.width,
        "height": ref.height,
        "duration": ref.duration,
        "status": item.status,
        # The copy kept for the model (an image after downscaling), if any.
        "stored_copy": {"media_type": item.media_type, "width": item.width, "height": item.height}
        if ready and item.media_type
        else None,
        "transcript": item.note if ready and ref.kind in _SPOKEN else None,
    }


def _quote(quote: Quote) -> dict[str, Any]:
    return {
        "origin": quote.origin,
        "author": quote.author,
        "author_id": quote.author_id,
        "from_bot": quote.from_bot,
        "text": quote.text,
    }


def _json_or_text(body: str | None) -> Any:
    if body is None:
        return None
    try:
        return json.loads(body)
    except ValueError:
        return body  # an unreadable stored body is exported as it is


def _local(instant: float, name: str) -> str:
    """``Thu 3 Dec 2026, 09:00`` in the reminder's zone (UTC when the name no longer reads)."""
    try:
        tz = zone(name)
    except ZoneError:
        return utc_text(instant)
    return describe_local(instant, tz)


def agenda_export(reminders: Sequence[Reminder], timezone: str | None) -> dict[str, Any]:
    """The /export part about reminders and the person's time zone (docs/initiatives.md)."""
    return {
        "timezone": timezone,
        "reminders": [
            {
                **_chat(r.conversation),
                "id": r.id,
                "about": r.about,
                "due_at": r.due_at,
                "due_local": _local(r.due_at, r.timezone),
                "timezone": r.timezone,
                "status": r.status,
                "note": r.note,
                "created_at": r.created_at,
            }
            for r in reminders
        ],
    }


def export_document(
    data: UserData, now: float, defaults: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The JSON-able /export document of everything in ``data``; ``defaults``: each bot's
    default persona id (a session that chose none has it)."""
    chosen = dict(data.personas)
    defaults = defaults or {}

    def persona(session: SessionKey) -> str | None:
        return chosen.get(session) or defaults.get(session.conversation.bot)

    return {
        "user": {"platform": data.user.platform, "id": data.user.user_id},
        "exported_at": now,
        "memory": _json_or_text(data.memory),
        "messages": [_message(m, persona(m.session)) for m in data.messages],
        "replies_to_you": [_reply(m, persona(m.session)) for m in data.replies],
        "summaries": [_summary(s) for s in data.summaries],
        "outbox": [_delivery(o) for o in data.outbox],
        "usage": [{"bot": bot, "at": at} for bot, at in data.usage],
        "model_usage": [dict(zip(_CHARGE_FIELDS, row, strict=True)) for row in data.charges],
        "notes": [
            "Covers every chat and bot of this platform.",
            "Summaries are of whole conversations you took part in; they may mention others.",
            "The retention log (counts of deleted messages, no text) is not about one person "
            "and is not included.",
        ],
    }


def _reply(m: StoredMessage, persona: str | None) -> dict[str, Any]:
    """A reply of the bot's that answered the person, as a message (without whether it was
    addressed to the bot) with its origin."""
    return {
        **{k: v for k, v in _message(m, persona).items() if k != "addressed_to_the_bot"},
        # None: a reply; "initiative" or "reminder": the persona wrote first.
        "origin": m.origin,
    }


def _summary(s: StoredSummary) -> dict[str, Any]:
    return {
        **_where(s.session),
        "first_turn": s.first_turn,
        "last_turn": s.last_turn,
        "updated_at": s.updated_at,
        "summary": _json_or_text(s.body),
    }


def _delivery(o: StoredOutbox) -> dict[str, Any]:
    return {
        **_where(o.session),
        "id": o.id,
        "reply_id": o.reply_message_id,
        "status": o.status,
        "created_at": o.created_at,
        "finished_at": o.finished_at,
        "text": o.text,
    }


#: The fields of one model call's charge, in the order of ``UserData.charges``' rows.
_CHARGE_FIELDS: Final = (
    "at",
    "bot",
    "purpose",
    "model",
    "input_tokens",
    "output_tokens",
    "cache_write_tokens",
    "cache_read_tokens",
)
