"""Column lists and row -> record mapping shared by the store backends.

Both backends select the same columns in the same order, so one mapping serves both; only
the SQL dialect (placeholders, upserts, locking) differs between them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, Final, get_args

from bot.core.choices import Choices
from bot.core.events import (
    ConversationKey,
    DueTimer,
    MessageOrigin,
    OutboxItem,
    RetentionEntry,
    SessionInfo,
    SessionKey,
    StoredMessage,
    StoredOutbox,
    StoredSummary,
    UsageStats,
    UserData,
    UserKey,
)
from bot.core.llm import Usage
from bot.core.media import MediaKind, MediaRef, Quote, QuoteOrigin, StoredMedia

MSG_COLS: Final = (
    "m.id, s.session_no, m.turn, m.role, m.author_id, m.display_name, m.text, m.created_at, "
    "m.version, m.platform_message_id, m.pending, m.answered_by, m.is_private, m.addressed, "
    "m.quote, m.media_count, m.origin, m.persona"
)
#: Where ``m.media_count`` is in MSG_COLS (a read looks for media rows only when it is > 0).
MEDIA_COUNT_AT: Final = 15
MEDIA_COLS: Final = (
    "id, message_id, position, kind, label, ref, unique_id, media_type, size, width, height, "
    "duration, status, prepared_type, prepared_width, prepared_height, note"
)
#: The columns ingest writes for each of a message's media (``media_rows``), after message_id.
MEDIA_INSERT_COLS: Final = (
    "position, kind, label, ref, unique_id, media_type, size, width, height, duration, updated_at"
)
_KINDS: Final = frozenset(get_args(MediaKind))
_ORIGINS: Final = frozenset(get_args(QuoteOrigin))
# Integers a BIGINT column holds (both backends): a platform's value outside is unknown.
_INT64: Final = (-(2**63), 2**63 - 1)
OUTBOX_COLS: Final = (
    "o.id, c.bot, c.platform, c.chat_id, c.thread_id, s.session_no, o.text, o.reply_message_id, "
    "o.created_at, o.attempts, o.reply_to, rm.persona, o.choices"
)
# A non-transcript outbox row (reply_message_id 0: a command answer, notice, greeting or denied
# reply) keeps its text only until it is sent or given up: an answer such as /memory's quotes
# what /forget must be able to erase, and nothing reads it afterwards.
FINISHED_TEXT: Final = "CASE WHEN reply_message_id = 0 THEN '' ELSE text END"
# History (what prompts and summaries read) leaves out what the model rejected: a message
# closed out as "rejected: ..." is never submitted again, not even as context.
NOT_REJECTED: Final = " AND (m.closed_reason IS NULL OR m.closed_reason NOT LIKE 'rejected%')"
MESSAGE_SELECT: Final = f"SELECT {MSG_COLS} FROM messages m JOIN sessions s ON s.id = m.session_id "
SESSION_COLS: Final = (
    "session_no, status, opened_at, last_activity_at, closed_at, close_reason, persona"
)
TIMER_SELECT: Final = (
    "SELECT c.bot, c.platform, c.chat_id, c.thread_id, t.due_at, t.first_pending_at, "
    "t.armed_version FROM timers t JOIN conversations c ON c.id = t.conversation_id "
)
#: ``bot.core.queue_rules.turn_lease`` of the conversation ``c``, in SQL (both dialects): the
#: claim finds the timers whose turn lease is free by it.
TURN_LEASE_SQL: Final = (
    "('turn:' || c.bot || ':' || c.platform || ':' || c.chat_id || "
    "CASE WHEN c.thread_id = '' THEN '' ELSE '/' || c.thread_id END)"
)
OUTBOX_SELECT: Final = (
    f"SELECT {OUTBOX_COLS} FROM outbox o JOIN conversations c ON c.id = o.conversation_id "
    "JOIN sessions s ON s.id = o.session_id LEFT JOIN messages rm ON rm.id = o.reply_message_id "
)


def thread_value(key: ConversationKey) -> str:
    """The stored thread column: '' for no thread (NULLs are never equal in a unique key)."""
    return "" if key.thread_id is None else key.thread_id


def conversation_key(bot: str, platform: str, chat_id: str, thread: str) -> ConversationKey:
    """A conversation key from its stored columns."""
    return ConversationKey(platform, chat_id, thread or None, bot)


def session_info(key: ConversationKey, row: Any) -> SessionInfo:
    """A SessionInfo from the SESSION_COLS of a row."""
    return SessionInfo(
        key=SessionKey(key, int(row[0])),
        status=row[1],
        opened_at=float(row[2]),
        last_activity_at=float(row[3]),
        closed_at=None if row[4] is None else float(row[4]),
        close_reason=row[5],
        persona=row[6],
    )


_NO_MEDIA: Final[Mapping[int, tuple[StoredMedia, ...]]] = {}


def message(
    key: ConversationKey, row: Any, media: Mapping[int, tuple[StoredMedia, ...]] = _NO_MEDIA
) -> StoredMessage:
    """A StoredMessage from the MSG_COLS of a row, with its media from ``media`` (by id)."""
    return StoredMessage(
        id=int(row[0]),
        session=SessionKey(key, int(row[1])),
        turn=int(row[2]),
        role=row[3],
        author_id=row[4],
        display_name=row[5],
        text=row[6],
        created_at=float(row[7]),
        version=int(row[8]),
        platform_message_id=row[9],
        answered=row[3] == "user" and row[11] is not None,
        is_private=bool(row[12]),
        addressed=bool(row[13]),
        media=media.get(int(row[0]), ()),
        quote=quote_of(row[14]),
        origin=_origin(row[16]),
        persona=row[17],
    )


_MESSAGE_ORIGINS: Final = frozenset(get_args(MessageOrigin))


def _origin(stored: Any) -> MessageOrigin | None:
    """``messages.origin`` (an unknown value reads as None: a read never fails over it)."""
    return stored if stored in _MESSAGE_ORIGINS else None


def quote_json(quote: Quote | None) -> str | None:
    """The stored ``messages.quote`` of a quote (None: the message quotes nothing)."""
    if quote is None:
        return None
    return json.dumps(
        {
            "origin": quote.origin,
            "author": quote.author,
            "text": quote.text,
            "author_id": quote.author_id,
            "from_bot": quote.from_bot,
        },
        ensure_ascii=False,
        separators=(",", ":"),
    )


def quote_of(stored: Any) -> Quote | None:
    """A Quote from ``messages.quote``; None when there is none or it cannot be read (a read
    never fails over one damaged row)."""
    if stored is None:
        return None
    try:
        data = json.loads(stored)
        origin = data["origin"]
        author_id = data.get("author_id")
        if origin not in _ORIGINS or not (author_id is None or isinstance(author_id, str)):
            return None
        return Quote(
            origin=origin,
            author=str(data.get("author", "")),
            text=str(data.get("text", "")),
            author_id=author_id,
            from_bot=bool(data.get("from_bot", False)),
        )
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def _int_or_none(value: int | None) -> int | None:
    """An integer a BIGINT holds, else None (unknown): a platform's absurd value never
    fails the ingest of the message it came with."""
    if value is None or not _INT64[0] <= value <= _INT64[1]:
        return None
    return int(value)


def _seconds_or_none(value: float | None) -> float | None:
    """A finite duration, else None (SQLite stores NaN as NULL: both backends agree)."""
    if value is None or not math.isfinite(value):
        return None
    return float(value)


def media_rows(media: Sequence[MediaRef], now: float) -> list[tuple[Any, ...]]:
    """The MEDIA_INSERT_COLS values of a message's media, in order (position from 0)."""
    return [
        (
            position,
            ref.kind,
            ref.label,
            ref.ref,
            ref.unique_id,
            ref.media_type,
            _int_or_none(ref.size),
            _int_or_none(ref.width),
            _int_or_none(ref.height),
            _seconds_or_none(ref.duration),
            now,
        )
        for position, ref in enumerate(media)
    ]


def stored_media(row: Any) -> StoredMedia:
    """A StoredMedia from the MEDIA_COLS of a row."""
    kind: MediaKind = row[3] if row[3] in _KINDS else "file"
    return StoredMedia(
        id=int(row[0]),
        message_id=int(row[1]),
        position=int(row[2]),
        ref=MediaRef(
            kind=kind,
            label=row[4],
            ref=row[5],
            unique_id=row[6],
            media_type=row[7],
            size=_opt_int(row[8]),
            width=_opt_int(row[9]),
            height=_opt_int(row[10]),
            duration=None if row[11] is None else float(row[11]),
        ),
        status=row[12],
        media_type=row[13],
        width=_opt_int(row[14]),
        height=_opt_int(row[15]),
        note=row[16],
    )


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def media_by_message(rows: Sequence[Any]) -> dict[int, tuple[StoredMedia, ...]]:
    """MEDIA_COLS rows (ordered by message, position) grouped by message id."""
    grouped: dict[int, list[StoredMedia]] = {}
    for row in rows:
        item = stored_media(row)
        grouped.setdefault(item.message_id, []).append(item)
    return {k: tuple(v) for k, v in grouped.items()}


def timer(row: Any) -> DueTimer:
    """A DueTimer from the columns of TIMER_SELECT."""
    return DueTimer(
        conversation=conversation_key(row[0], row[1], row[2], row[3]),
        due_at=float(row[4]),
        first_pending_at=float(row[5]),
        armed_version=int(row[6]),
    )


def outbox(row: Any) -> OutboxItem:
    """An OutboxItem from the OUTBOX_COLS of a row."""
    key = conversation_key(row[1], row[2], row[3], row[4])
    return OutboxItem(
        id=int(row[0]),
        conversation=key,
        session=SessionKey(key, int(row[5])),
        text=row[6],
        reply_message_id=int(row[7]),
        created_at=float(row[8]),
        attempts=int(row[9]),
        reply_to_platform_message_id=row[10],
        persona=row[11],
        choices=Choices.loads(row[12]),
    )


def retention_entry(row: Any) -> RetentionEntry:
    """A RetentionEntry from (at, bot, platform, chat_id, thread_id, session_no, first_turn,
    last_turn, messages, reason)."""
    return RetentionEntry(
        float(row[0]),
        SessionKey(conversation_key(row[1], row[2], row[3], row[4]), int(row[5])),
        int(row[6]),
        int(row[7]),
        int(row[8]),
        row[9],
    )


def usage_stats(total: Any, models: Any) -> UsageStats:
    """UsageStats from the totals row and the per-model rows of ``usage_since``."""
    turns, inp, out, write, read, conversations = (int(v) for v in total)
    return UsageStats(
        turns,
        inp,
        out,
        write,
        read,
        conversations,
        by_model=tuple((str(r[0]), int(r[1]), int(r[2]), int(r[3]), int(r[4])) for r in models),
    )


def usage_values(usage: Usage) -> tuple[int, int, int, int]:
    """The four token counts of a usage, in model_usage column order."""
    return (
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_creation_input_tokens,
        usage.cache_read_input_tokens,
    )


def model_usage_stats(turns: Any, total: Any, models: Any, purposes: Any) -> UsageStats:
    """UsageStats from ``usage_since``'s reply count and its model_usage sums."""
    inp, out, write, read = (int(v) for v in total[:4])
    return UsageStats(
        int(turns[0]),
        inp,
        out,
        write,
        read,
        int(turns[1]),
        by_model=tuple((str(r[0]), int(r[1]), int(r[2]), int(r[3]), int(r[4])) for r in models),
        by_purpose=tuple((str(r[0]), int(r[1]), int(r[2]), int(r[3]), int(r[4])) for r in purposes),
        cost=float(total[4]),
    )


def user_data(
    user: UserKey,
    record: Any,
    own: Sequence[Any],
    replies: Sequence[Any],
    summaries: Sequence[Any],
    outbox: Sequence[Any],
    usage: Sequence[Any],
    charges: Sequence[Any] = (),
    media: Mapping[int, tuple[StoredMedia, ...]] = _NO_MEDIA,
    personas: Sequence[Any] = (),
) -> UserData:
    """UserData from the rows of ``user_data`` (the same columns on both backends)."""

    def keyed(row: Any) -> StoredMessage:
        return message(conversation_key(row[0], row[1], row[2], row[3]), tuple(row)[4:], media)

    def session(row: Any, at: int) -> SessionKey:
        return SessionKey(
            conversation_key(row[at], row[at + 1], row[at + 2], row[at + 3]),
            int(row[at + 4]),
        )

    return UserData(
        user=user,
        memory=None if record is None else str(record),
        messages=tuple(keyed(r) for r in own),
        replies=tuple(keyed(r) for r in replies),
        summaries=tuple(
            StoredSummary(session(r, 0), r[5], int(r[6]), int(r[7]), float(r[8])) for r in summaries
        ),
        outbox=tuple(
            StoredOutbox(
                id=int(r[0]),
                session=session(r, 1),
                reply_message_id=int(r[6]),
                text=r[7],
                status=r[8],
                created_at=float(r[9]),
                finished_at=None if r[10] is None else float(r[10]),
            )
            for r in outbox
        ),
        usage=tuple((str(r[0]), float(r[1])) for r in usage),
        charges=tuple(
            (
                float(r[0]),
                str(r[1]),
                str(r[2]),
                str(r[3] or ""),
                int(r[4]),
                int(r[5]),
                int(r[6]),
                int(r[7]),
            )
            for r in charges
        ),
        personas=tuple((session(r, 0), None if r[5] is None else str(r[5])) for r in personas),
    )


# Arm or extend a conversation's timer for new input (queue rule 1: the burst's first pending
# time is kept): ingest and edits, $1-$4 = conversation id, due_at, first_pending_at, version.
ARM_TIMER_SQL: Final = (
    "INSERT INTO timers (conversation_id, due_at, first_pending_at, armed_version) "
    "VALUES ($1, $2, $3, $4) ON CONFLICT (conversation_id) DO UPDATE SET "
    "due_at = excluded.due_at, armed_version = excluded.armed_version"
)
