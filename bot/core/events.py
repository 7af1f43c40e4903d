"""Plain frozen types that cross layer boundaries: keys, inbound events, turns, replies.

This module imports nothing from the rest of personabot, so every layer may depend on it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Final, Literal

from bot.core.choices import Choices
from bot.core.media import MediaRef, Quote, StoredMedia


class NotSet(enum.Enum):
    """Marker for a read that found nothing, distinct from an empty value."""

    NOT_SET = "not set"

    def __repr__(self) -> str:
        return "NOT_SET"


NOT_SET: Final = NotSet.NOT_SET

Role = Literal["user", "assistant"]
#: What wrote an assistant message that no person's message asked for (docs/initiatives.md).
MessageOrigin = Literal["initiative", "reminder"]
#: "press": a button of ours was pressed (docs/telegram.md#buttons); its text is the command
#: the button stands for, and it is never stored as a message.
InboundKind = Literal["message", "edit", "delete", "press"]


@dataclass(frozen=True, slots=True)
class ConversationKey:
    """Where a conversation happens: a platform chat, optionally a thread inside it.

    ``bot`` names the bot entry that talks there, so that two bots (two personas) in the same
    Telegram group, or one person's private chats with two bots (Telegram gives both the same
    chat id), stay two conversations. A display name is never part of a key.
    """

    platform: str
    chat_id: str
    thread_id: str | None = None
    bot: str = "default"

    def __str__(self) -> str:
        thread = f"/{self.thread_id}" if self.thread_id is not None else ""
        return f"{self.bot}:{self.platform}:{self.chat_id}{thread}"


@dataclass(frozen=True, slots=True)
class SessionKey:
    """One numbered session of a conversation; ``session_id`` is unique within it only."""

    conversation: ConversationKey
    session_id: int

    def __str__(self) -> str:
        return f"{self.conversation}#S{self.session_id}"


@dataclass(frozen=True, slots=True)
class UserKey:
    """A person on a platform: the key of user-scoped (long-term) memory."""

    platform: str
    user_id: str


#: Author ids of someone who is not one person: a group's anonymous admins (``anon:<chat>``)
#: and a channel posting or auto-forwarding into a group (``channel:<chat>``). Person ids are
#: the platform's own user ids and never carry these prefixes; nothing is learned about these
#: authors (docs/privacy.md).
COLLECTIVE_AUTHOR_PREFIXES: Final = ("anon:", "channel:")


def is_person(author_id: str) -> bool:
    """Whether an author id names one person (long-term memory may learn about them)."""
    return not author_id.startswith(COLLECTIVE_AUTHOR_PREFIXES)


@dataclass(frozen=True, slots=True)
class Inbound:
    """A normalized message from any platform adapter."""

    conversation: ConversationKey
    author_id: str
    display_name: str
    text: str
    platform_message_id: str | None = None
    is_private: bool = True
    # False for group messages stored only as context (no mention): they never arm a timer.
    triggers_reply: bool = True
    reply_to_bot: bool = False
    mentions_bot: bool = False
    # "edit": new text for ``platform_message_id``; "delete": the user deleted it.
    kind: InboundKind = "message"
    # What came with the text (photos, stickers, voice notes), in order; ``text`` is the
    # caption only (bot/core/media.py).
    media: tuple[MediaRef, ...] = ()
    # The message this one replies to, quotes or forwards.
    quote: Quote | None = None
    # A platform's native command (a Discord application command): run as a command, never
    # stored nor sent to the model, even when its text is no command (docs/discord.md#7-commands).
    command_only: bool = False
    # The author's language as their platform reports it (Telegram's ``language_code``,
    # Discord's interaction ``locale`` or the guild's preferred locale); may be forged or
    # unknown: it only picks the catalog of built-in texts (docs/i18n.md).
    locale: str | None = None


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """A session as stored: its key, whether it is open, and its timestamps."""

    key: SessionKey
    status: Literal["open", "closed", "expired"]
    opened_at: float
    last_activity_at: float
    closed_at: float | None = None
    close_reason: str | None = None
    # The persona id (docs/personas.md#several-personas); None: the bot's default persona.
    persona: str | None = None


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """One message of a session, user or assistant, with its turn number in the session."""

    id: int
    session: SessionKey
    turn: int
    role: Role
    author_id: str
    display_name: str
    text: str
    created_at: float
    version: int = 0
    platform_message_id: str | None = None
    answered: bool = False
    is_private: bool = True
    # False for a group message stored only as context (the bot was not addressed).
    addressed: bool = True
    media: tuple[StoredMedia, ...] = ()
    quote: Quote | None = None
    #: What wrote an assistant message no person's message asked for (None: a reply).
    origin: MessageOrigin | None = None
    #: The persona that wrote an assistant message in a scene (docs/scenes.md; None: the
    #: session's persona).
    persona: str | None = None

    @property
    def was_voice(self) -> bool:
        """Whether the person spoke this message (a voice or video note)."""
        return any(m.ref.kind in ("voice", "video_note") for m in self.media)


@dataclass(frozen=True, slots=True)
class StoredSummary:
    """A session's rolling summary as stored (JSON body) and the turns it covers."""

    session: SessionKey
    body: str
    first_turn: int
    last_turn: int
    updated_at: float


@dataclass(frozen=True, slots=True)
class IngestResult:
    """What ingest did with one inbound message."""

    stored: bool  # False for a duplicate delivery
    message_id: int | None
    session: SessionKey
    version: int
    due_at: float | None  # when the conversation's timer is due; None if no turn is armed


@dataclass(frozen=True, slots=True)
class Lease:
    """A held lease: the fencing token grows on every acquisition."""

    name: str
    holder: str
    token: int
    expires_at: float


@dataclass(frozen=True, slots=True)
class DueTimer:
    """A conversation whose debounce timer is due."""

    conversation: ConversationKey
    due_at: float
    first_pending_at: float
    armed_version: int


@dataclass(frozen=True, slots=True)
class ClaimedTurn:
    """A due timer handed to one process with its turn lease already taken
    (docs/scaling.md#claims)."""

    conversation: ConversationKey
    due_at: float
    lease: Lease


@dataclass(frozen=True, slots=True)
class Claims:
    """What one claim took, and how many due timers it saw taken by another process between
    its read and its lease write (a lost compare-and-swap: rare, never a second turn)."""

    turns: tuple[ClaimedTurn, ...]
    lost: int = 0


@dataclass(frozen=True, slots=True)
class PlatformProblem:
    """The last failure of a bot's platform connection, as the operator may read it (the
    console's bot state, /readyz): what failed, never a token, and when."""

    message: str
    at: float


@dataclass(frozen=True, slots=True)
class QueueBacklog:
    """Due turns no process has started yet (their turn lease free): how many, and since
    when the oldest waits (None: none waits)."""

    turns: int
    oldest_due_at: float | None

    def age(self, now: float) -> float:
        """Seconds the oldest waiting turn is overdue (0 when none waits)."""
        return 0.0 if self.oldest_due_at is None else max(0.0, now - self.oldest_due_at)


@dataclass(frozen=True, slots=True)
class Turn:
    """Pending user messages of one session merged into one model turn."""

    session: SessionKey
    version: int  # v0: the conversation version the turn was built at
    messages: tuple[StoredMessage, ...]
    first_pending_at: float
    # The session's persona id (None: the bot's default), which answers this turn.
    persona: str | None = None

    @property
    def authors(self) -> tuple[str, ...]:
        """Distinct author ids in order of first appearance."""
        return tuple(dict.fromkeys(m.author_id for m in self.messages))


@dataclass(frozen=True, slots=True)
class OutboxItem:
    """A reply recorded by the final check, waiting to be (or already) sent."""

    id: int
    conversation: ConversationKey
    session: SessionKey
    text: str
    reply_message_id: int
    created_at: float
    attempts: int = 0
    reply_to_platform_message_id: str | None = None
    # A scene's line: the persona that wrote it (docs/scenes.md; None: not a scene's).
    persona: str | None = None
    # A command answer's choices (buttons on Telegram; bot/core/choices.py).
    choices: Choices | None = None


@dataclass(frozen=True, slots=True)
class SceneLine:
    """A scene's line as its final check records it (docs/scenes.md): the persona that
    speaks (its outbox row goes out in that persona's voice)."""

    persona: str


@dataclass(frozen=True, slots=True)
class Voice:
    """Who a scene's line goes out as (docs/scenes.md#platforms): the persona's name and
    avatar. An adapter that can post as it does (a Discord webhook, the persona's own
    Telegram account); else the line carries the name as a bold header (``voiced``)."""

    persona: str
    name: str
    avatar_url: str | None = None


def voiced(text: str, voice: Voice | None) -> str:
    """The text as a shared account posts it: under the persona's bold name header."""
    return text if voice is None else f"**{voice.name}:** {text}"


FinishOutcome = Literal["recorded", "discarded", "fenced"]
EditOutcome = Literal["updated", "too_late", "unknown"]


@dataclass(frozen=True, slots=True)
class FinishResult:
    """Outcome of the final check: recorded (send it), discarded (re-armed) or fenced (drop)."""

    outcome: FinishOutcome
    outbox: OutboxItem | None = None
    current_version: int = 0


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file that goes out with a reply (a data export): its name, bytes and media type."""

    filename: str
    data: bytes = field(repr=False)
    media_type: str = "application/json"


@dataclass(frozen=True, slots=True)
class VoiceMessage:
    """A reply spoken (docs/voices.md): the audio an adapter sends as a voice message, and
    whether the reply's text goes with it (Telegram: the caption; Discord: the message)."""

    audio: bytes = field(repr=False)
    media_type: str = "audio/ogg"
    duration: float | None = None  # seconds, when known
    with_text: bool = True


@dataclass(frozen=True, slots=True)
class Reply:
    """A reply for an adapter to deliver; with an ``attachment``, ``text`` is its caption."""

    conversation: ConversationKey
    text: str
    outbox_id: int | None = None
    reply_to_platform_message_id: str | None = None
    extra: tuple[tuple[str, str], ...] = field(default=())
    attachment: Attachment | None = None
    # A streamed preview message (edit mode, docs/architecture.md#streaming) that this reply
    # replaces: its first chunk is an edit of that platform message, the rest are new messages.
    replaces: str | None = None
    # A scene's line (docs/scenes.md#platforms): the persona it goes out as (None: the bot's
    # own voice), and the line alone for an adapter that can post as that persona (a Discord
    # webhook, the persona's own account); ``text`` is it under the bold name header, as
    # every other adapter posts it.
    voice: Voice | None = None
    line: str | None = None
    # The reply spoken (docs/voices.md): sent as a voice message by an adapter that can
    # (bot.core.speech.VoiceOutlet); ``text`` is still the reply, for the caption or a
    # fallback, and every other adapter sends it alone.
    voice_message: VoiceMessage | None = None
    # For the asker's eyes only where the platform can show it so (an answer to a Discord
    # application command goes out ephemeral); elsewhere an ordinary message.
    private: bool = False
    # Choices shown as buttons under the message (an outlet that ``ShowsChoices``; others
    # get the typed commands in ``text``, bot/core/choices.py).
    choices: Choices | None = None


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """Debounce and hard cap, in seconds, for arming a conversation's timer."""

    debounce: float = 1.5
    max_wait: float = 8.0

    def due_at(self, now: float, first_pending_at: float) -> float:
        """``min(now + debounce, first_pending_at + max_wait)``: docs/architecture.md#queue
        rule 1."""
        return min(now + self.debounce, first_pending_at + self.max_wait)


@dataclass(frozen=True, slots=True)
class SessionPolicy:
    """When a session ends by itself: idle timeout and daily reset (None = never)."""

    idle_seconds: float | None = None
    daily_reset_hour: int | None = None
    utc_offset_hours: float = 0.0


@dataclass(frozen=True, slots=True)
class OldMessages:
    """Messages of a session older than a retention cutoff (answered or context only)."""

    session: SessionKey
    first_turn: int
    last_turn: int
    count: int
    oldest_at: float


@dataclass(frozen=True, slots=True)
class RetentionEntry:
    """One line of the retention audit trail: what was deleted, never the content."""

    at: float
    session: SessionKey
    first_turn: int
    last_turn: int
    messages: int
    reason: str


@dataclass(frozen=True, slots=True)
class Reservation:
    """A per-user turn reservation: ``id`` when granted, else when the user may continue."""

    id: int | None
    until: float | None = None

    @property
    def granted(self) -> bool:
        """Whether the turn may call the model."""
        return self.id is not None


@dataclass(frozen=True, slots=True)
class UsageStats:
    """Model usage over a period (for /stats and cost limits)."""

    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    conversations: int = 0
    by_model: tuple[tuple[str, int, int, int, int], ...] = ()
    # (purpose, input, output, cache write, cache read): replies and memory tasks apart.
    by_purpose: tuple[tuple[str, int, int, int, int], ...] = ()
    # Dollars of the priced calls, as priced when each was charged ([llm.prices]).
    cost: float = 0.0


@dataclass(frozen=True, slots=True)
class Tombstone:
    """Turns of a session that personabot deleted itself, and why (never the content)."""

    session: SessionKey
    first_turn: int
    last_turn: int
    reason: str
    at: float


@dataclass(frozen=True, slots=True)
class StoredOutbox:
    """An outbox row as stored, with its delivery status (for /export)."""

    id: int
    session: SessionKey
    reply_message_id: int
    text: str
    status: str
    created_at: float
    finished_at: float | None = None


@dataclass(frozen=True, slots=True)
class UserData:
    """Every stored row about one person on one platform, across all chats and bots."""

    user: UserKey
    memory: str | None  # the long-term memory record (JSON text), if any
    messages: tuple[StoredMessage, ...]  # their own messages, every conversation
    replies: tuple[StoredMessage, ...]  # the bot's replies to their messages
    summaries: tuple[StoredSummary, ...]  # summaries that folded in their messages
    outbox: tuple[StoredOutbox, ...]  # outbox rows of those replies
    usage: tuple[tuple[str, float], ...]  # (bot, at) of each model turn counted for them
    # (at, bot, purpose, model, input, output, cache write, cache read) charged to them
    charges: tuple[tuple[float, str, str, str, int, int, int, int], ...] = ()
    # The persona of each session their messages and replies are in (None: the bot's default).
    personas: tuple[tuple[SessionKey, str | None], ...] = ()


@dataclass(frozen=True, slots=True)
class Erasure:
    """What deleting a person's messages removed, and what it kept (for /forget)."""

    messages: int = 0  # their own messages deleted
    replies: int = 0  # bot replies that answered only them, deleted
    outbox: int = 0  # outbox rows holding those replies (or finished shared ones), deleted
    summaries: int = 0  # session summaries that folded in their messages, dropped
    shared_replies: int = 0  # replies that also answered someone else: kept
    pending: int = 0  # their messages still waiting for a reply: kept


@dataclass(frozen=True, slots=True)
class ToolCallRecord:
    """A recorded call of an effectful outside tool (``tool_calls``): ``status`` "started"
    (made, its outcome unknown: a crash came between), "done" or "failed" with its result."""

    id: int
    status: Literal["started", "done", "failed"]
    result: str | None
    tool: str = ""
    key: str = ""  # the tool and its arguments' digest (bot/runtime/tools.py call_key)
