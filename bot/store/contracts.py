"""The store contracts the runtime uses, split by consumer; the backends implement all of them
(``BaseStore`` in bot/store/base.py, the composition root's view).

Written once, here: each is a ``Protocol`` whose methods are abstract, so a backend that
inherits them (``BaseStore``) must implement every one and restates no docstring, and a
consumer that needs two of them declares the pair next to itself
(``class _Store(UsageStore, LeaseStore, Protocol)``) without the store naming it.
A consumer annotates the narrowest contract it uses (``Exports`` takes a LeaseStore);
the operator console's own reads are in bot/store/console.py, which only ``bot/app`` imports.

Every method that writes is one transaction. Methods that the coalescing queue relies on
(``ingest``, ``acquire_lease``, ``finish_turn``) are atomic across processes, not just
coroutines: docs/architecture.md#queue must hold with several processes on one database.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from typing import Final, Literal, Protocol, Self

from bot.core.agenda import (
    AgendaKind,
    CheckinCap,
    DueItem,
    InitiativeState,
    NewReminder,
    Reminder,
    ReminderStatus,
)
from bot.core.choices import Choices
from bot.core.events import (
    Claims,
    ConversationKey,
    DueTimer,
    EditOutcome,
    Erasure,
    FinishResult,
    Inbound,
    IngestResult,
    Lease,
    NotSet,
    OldMessages,
    OutboxItem,
    QueueBacklog,
    QueuePolicy,
    Reservation,
    SceneLine,
    SessionInfo,
    SessionKey,
    SessionPolicy,
    StoredMessage,
    StoredSummary,
    ToolCallRecord,
    Turn,
    UsageStats,
    UserData,
    UserKey,
)
from bot.core.llm import Price, Usage
from bot.core.media import MediaStatus
from bot.core.scenes import SceneState

#: The most bytes ``save_media`` caches for one media row (a prepared image is far smaller:
#: bot/runtime/images.py keeps it under the Messages API's 5 MB per image).
MAX_MEDIA_BYTES: Final = 20 * 1024 * 1024


class StoreLifecycle(Protocol):
    """Opening and closing a store (every consumer's store has these)."""

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect and apply pending schema migrations."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Close connections."""

    @abc.abstractmethod
    async def schema_version(self) -> int:
        """The applied schema version."""


class SessionReads(Protocol):
    """A conversation's open session, read (the console, ``personabot prompt``, commands)."""

    @abc.abstractmethod
    async def current_session(self, conversation: ConversationKey) -> SessionInfo | None:
        """The open session, or None (no conversation, or its last session was closed)."""


class SessionStore(SessionReads, Protocol):
    """Sessions of a conversation and their session-scoped values (docs/architecture.md#keys)."""

    @abc.abstractmethod
    async def open_session(
        self, conversation: ConversationKey, now: float, policy: SessionPolicy | None = None
    ) -> SessionInfo:
        """The conversation's open session; opens the next one if none is open or it expired."""

    @abc.abstractmethod
    async def new_session(
        self,
        conversation: ConversationKey,
        now: float,
        reason: str = "new",
        persona: str | None = None,
    ) -> SessionInfo:
        """Close the open session (if any) and open the next one, atomically. The new
        session has ``persona`` (an id), or when None the persona of the conversation's
        newest session; every session opened otherwise (expiry, a first message) inherits
        it the same way."""

    @abc.abstractmethod
    async def get_state(self, session: SessionKey, name: str) -> str | NotSet:
        """A session-scoped value, or NOT_SET."""

    @abc.abstractmethod
    async def set_state(self, session: SessionKey, name: str, value: str, now: float) -> None:
        """Set a session-scoped value; raises StoreError for an unknown session."""

    @abc.abstractmethod
    async def delete_state(self, session: SessionKey, name: str | None = None) -> int:
        """Delete one value (or all of the session's, with None); return how many."""


class TranscriptReads(Protocol):
    """A session's stored messages, read (the prompt, the console, exports)."""

    @abc.abstractmethod
    async def history(
        self,
        session: SessionKey,
        limit: int,
        *,
        after_turn: int = 0,
        oldest_first: bool = False,
    ) -> list[StoredMessage]:
        """Answered or context messages of a session with ``turn > after_turn``.

        The newest ``limit`` of them (or the oldest, with ``oldest_first``), in turn order.
        Pending messages are not history: they are the next turn. Messages closed out because
        the model rejected them are not history either: they are never submitted again.
        """

    @abc.abstractmethod
    async def messages(
        self, session: SessionKey, *, before_turn: int | None = None, limit: int | None = None
    ) -> list[StoredMessage]:
        """Stored messages of a session in turn order: every one, or the newest ``limit``
        before ``before_turn`` (a page of the console's transcript)."""


class ConversationReads(Protocol):
    """Whether a chat is active and its version (the turns' checks before they write)."""

    @abc.abstractmethod
    async def conversation_active(self, conversation: ConversationKey) -> bool:
        """False when the conversation was marked inactive (True if unknown)."""

    @abc.abstractmethod
    async def conversation_version(self, conversation: ConversationKey) -> int:
        """The conversation's version counter (0 if it does not exist)."""


class MessageStore(TranscriptReads, ConversationReads, Protocol):
    """Messages as they arrive, change and are read back (ingest is the queue's entry)."""

    @abc.abstractmethod
    async def ingest(
        self,
        inbound: Inbound,
        now: float,
        queue: QueuePolicy,
        sessions: SessionPolicy | None = None,
    ) -> IngestResult:
        """Store a message, bump the version and arm the timer, in one short transaction.

        A second delivery of the same platform message id in the conversation is a no-op.
        """

    @abc.abstractmethod
    async def ingest_many(
        self,
        items: Sequence[tuple[Inbound, QueuePolicy]],
        now: float,
        sessions: SessionPolicy | None = None,
    ) -> list[IngestResult]:
        """``ingest`` for each (message, its bot's policy) in order, all in one transaction:
        every message is stored, or (StoreError) none is. Results come in the same order.
        """

    @abc.abstractmethod
    async def edit_message(
        self,
        conversation: ConversationKey,
        platform_message_id: str,
        text: str,
        now: float,
        queue: QueuePolicy,
        *,
        author_id: str | None = None,
        triggers_reply: bool = False,
        sessions: SessionPolicy | None = None,
    ) -> EditOutcome:
        """Replace a user message's text if it has not been answered yet (its media and quote
        stay as they were).

        Editing a pending message bumps the version (a generation that read the old text is
        discarded by the final check) and re-arms the timer like new input. With
        ``triggers_reply`` (the edited text now addresses the bot), a message stored as
        context only (not addressed, never pending, not closed out) in the conversation's
        open session becomes addressed and pending, exactly like a new triggering message:
        the version is bumped and the timer armed (not when ``sessions`` says that session
        has expired: the next message opens a new one). An answered message is left as it
        was (``too_late``) and never triggers again. With ``author_id``, only a message of
        that author is touched (someone else's is ``unknown``).
        """

    @abc.abstractmethod
    async def delete_message(
        self,
        conversation: ConversationKey,
        platform_message_id: str,
        *,
        author_id: str | None = None,
        now: float | None = None,
    ) -> StoredMessage | None:
        """Remove a message deleted on the platform; the removed message or None.

        With ``author_id``, only a message of that author is removed. The turn is tombstoned
        (at ``now``), so the gap check knows why it is missing.
        """

    @abc.abstractmethod
    async def set_conversation_status(
        self, conversation: ConversationKey, active: bool, reason: str | None = None
    ) -> None:
        """Mark a conversation inactive (delivery refused) or active again."""

    @abc.abstractmethod
    async def count_history(self, session: SessionKey, *, after_turn: int = 0) -> int:
        """How many history messages have ``turn > after_turn``."""

    @abc.abstractmethod
    async def count_unsummarised(self, session: SessionKey) -> int:
        """How many history messages lie after the session's summary (all of them when it
        has none): what the summary check after a reply asks, in one read."""


class MediaStore(Protocol):
    """Media of stored messages: what the turn made of them and their cached bytes
    (bot/core/media.py). Ingest writes the rows with their message (status ``new``); they
    are deleted with it (retention, /forget, a platform deletion)."""

    @abc.abstractmethod
    async def save_media(
        self,
        media_id: int,
        *,
        status: MediaStatus,
        data: bytes | None = None,
        media_type: str = "",
        width: int | None = None,
        height: int | None = None,
        note: str = "",
    ) -> None:
        """Record what the turn made of one media row; every field given is replaced.

        ``data``: the prepared bytes to cache (None: none, and any cached before are
        dropped), with their ``media_type``, ``width`` and ``height``; ``note``: a
        transcript, or why it failed or was skipped. No error when the row is gone (its
        message was deleted meanwhile). An unknown status, or more than MAX_MEDIA_BYTES of
        data, raises StoreError.
        """

    @abc.abstractmethod
    async def media_data(self, ids: Sequence[int]) -> dict[int, bytes]:
        """The cached bytes of those media rows (by media id) that have some."""


class PendingReads(Protocol):
    """The turn waiting for a reply, read (the pipeline, the console, ``personabot prompt``)."""

    @abc.abstractmethod
    async def pending_turn(
        self, conversation: ConversationKey, limit: int | None = None
    ) -> Turn | None:
        """Pending user messages of the oldest session that has some, merged as one turn:
        the oldest ``limit`` of them (all with None); the rest wait for the next turn.

        ``Turn.version`` is the conversation version read in the same transaction (v0).
        """


class QueueStore(PendingReads, Protocol):
    """The coalescing queue: pending turns, timers, the final check (docs/architecture.md#queue)."""

    @abc.abstractmethod
    async def newer_input(self, session: SessionKey, version: int) -> bool:
        """Whether ``session`` holds pending input newer than ``version`` (the final check's
        reason to discard a turn read at that version: a message stored, or one of its
        messages edited, since), read without locks (docs/architecture.md#queue rule 9)."""

    @abc.abstractmethod
    async def due_timers(
        self, now: float, limit: int = 100, bots: Sequence[str] | None = None
    ) -> list[DueTimer]:
        """Timers due at ``now``, earliest first (only of these bots, when given)."""

    @abc.abstractmethod
    async def claim_due_turns(
        self,
        now: float,
        limit: int,
        *,
        holder: str,
        ttl: float,
        bots: Sequence[str],
        skip: Sequence[str] = (),
    ) -> Claims:
        """Hand up to ``limit`` due timers of ``bots`` to ``holder``, each with its turn lease
        taken, earliest first; never one whose lease is held or named in ``skip``. Of several
        processes claiming at once, each timer goes to at most one (docs/scaling.md#claims).
        """

    async def listen_timers(
        self,
        on_timer: Callable[[str | None, float | None], None],
        on_input: Callable[[ConversationKey | None], None] | None = None,
    ) -> None:
        """Until cancelled, call ``on_timer(bot, due_at)`` for every timer any process arms
        or moves, and ``on_timer(None, None)`` when announcements may have been missed (look
        at the store); with ``on_input``, also ``on_input(conversation)`` for the timer's
        conversation (``on_input(None)``: any). A store of one process (SQLite) returns at
        once: its scheduler and its generations are told in-process. A shortcut only: the
        scheduler's scan and the final check stay the guarantee."""
        return

    @abc.abstractmethod
    async def next_claim_at(
        self, now: float, bots: Sequence[str], skip: Sequence[str] = ()
    ) -> float | None:
        """The earliest due time of a timer of ``bots`` that ``claim_due_turns`` could take
        (its turn lease free, not named in ``skip``); None if there is none."""

    @abc.abstractmethod
    async def queue_backlog(self, now: float, bots: Sequence[str]) -> QueueBacklog:
        """Due timers of ``bots`` whose turn no process has started (lease free)."""

    @abc.abstractmethod
    async def timer(self, conversation: ConversationKey) -> DueTimer | None:
        """The conversation's armed timer, or None."""

    @abc.abstractmethod
    async def rearm_timer(
        self, conversation: ConversationKey, due_at: float, *, keep_earlier: bool = False
    ) -> None:
        """Move the conversation's timer (e.g. retry after a model failure); arm if missing.
        ``keep_earlier``: a timer due sooner stays as it is (a person's burst armed it)."""

    @abc.abstractmethod
    async def clear_timer(
        self, conversation: ConversationKey, armed_version: int, *, only_if_idle: bool = True
    ) -> bool:
        """Remove the timer unless input newer than ``armed_version`` re-armed it.

        With ``only_if_idle`` (the default) the timer also stays while any message of the
        conversation is pending, checked in the same transaction: a message ingested between
        a worker's reads can never be left without a timer.
        """

    @abc.abstractmethod
    async def skip_turn(
        self, turn: Turn, lease: Lease, now: float, queue: QueuePolicy, reason: str = "limited"
    ) -> bool:
        """Mark the turn's messages handled without a reply, storing ``reason`` (a limit was
        hit, the model rejected the turn, its session was reset): they stay as context and
        are never submitted again; fenced (False) when the lease is no longer ours."""

    @abc.abstractmethod
    async def finish_turn(
        self,
        turn: Turn,
        lease: Lease,
        reply: str,
        now: float,
        queue: QueuePolicy,
        usage: Usage | None = None,
        model: str | None = None,
        reminders: Sequence[NewReminder] = (),
        *,
        committed: bool = False,
        line: SceneLine | None = None,
    ) -> FinishResult:
        """The final check and, if it passes, recording of the reply, in one transaction.

        Fenced: the lease token is no longer ours; nothing is written. Discarded: newer input
        arrived in the turn's session and the hard cap has not passed; the timer stays armed.
        ``committed``: an effectful outside tool ran in this turn, so newer input never
        discards it (the reply reports what was done; the newer input is the next turn's).
        Recorded: the reply is stored as the next turn, exactly the turn's messages are marked
        answered, an outbox row is written, and the timer is removed unless newer input armed
        it (a timer is kept or armed while any message of the conversation is pending).
        An empty or whitespace-only ``reply`` raises StoreError: it is never recorded.
        ``reminders`` the reply agreed to are stored with it (never without it).
        ``line``: the reply is a scene's first line (its speaker, the text sent).
        """


class SceneStore(Protocol):
    """A scene's lines after the first of a turn, and its hourly cap (docs/scenes.md)."""

    @abc.abstractmethod
    async def finish_line(
        self,
        turn: Turn,
        lease: Lease,
        reply: str,
        now: float,
        line: SceneLine,
        usage: Usage | None = None,
        model: str | None = None,
    ) -> FinishResult:
        """The final check of a scene's next line, and its recording, in one transaction:
        fenced when the lease is no longer ours; discarded when any input newer than the
        turn's version is pending in its session (whatever the hard cap); else the line is
        the session's next turn (answering no message) with its outbox row."""

    @abc.abstractmethod
    async def scene_lines_since(self, conversation: ConversationKey, since: float) -> int:
        """Persona lines recorded in the conversation after ``since`` (the hourly cap)."""

    @abc.abstractmethod
    async def scene_state(self, conversation: ConversationKey) -> SceneState:
        """The conversation's scene state (an empty one when none was written)."""

    @abc.abstractmethod
    async def mute_scene(
        self, conversation: ConversationKey, until: float | None, now: float
    ) -> None:
        """Set when the scene's mute ends (None: not muted), nothing else."""

    @abc.abstractmethod
    async def note_scene(
        self,
        conversation: ConversationKey,
        now: float,
        *,
        caps: Sequence[float] | None = None,
        last_plan: str | None = None,
    ) -> None:
        """Write the caps and/or the last plan given (the others stay as they are)."""


class AgendaStore(Protocol):
    """Check-ins and reminders: when the persona writes first (docs/initiatives.md)."""

    @abc.abstractmethod
    async def initiative_state(self, conversation: ConversationKey) -> InitiativeState | None:
        """What the check-in rules need, from one snapshot (None: unknown conversation)."""

    @abc.abstractmethod
    async def arm_initiative(
        self,
        conversation: ConversationKey,
        due_at: float | None,
        now: float,
        decision: str | None = None,
    ) -> None:
        """Set when the next check-in is due (None: not armed), noting the last decision."""

    @abc.abstractmethod
    async def set_checkins(self, conversation: ConversationKey, enabled: bool, now: float) -> None:
        """``/checkins on|off`` for this chat (off also disarms)."""

    @abc.abstractmethod
    async def due_agenda(
        self, now: float, limit: int = 100, bots: Sequence[str] | None = None
    ) -> list[DueItem]:
        """Armed check-ins of chats that allow them and pending reminders due by ``now``,
        earliest first."""

    @abc.abstractmethod
    async def finish_proactive(
        self,
        conversation: ConversationKey,
        lease: Lease,
        *,
        version: int,
        session_no: int,
        text: str,
        now: float,
        origin: AgendaKind,
        addressee: str,
        usage: Usage | None = None,
        model: str | None = None,
        reminder: int | None = None,
        next_due: float | None = None,
        cap: CheckinCap | None = None,
    ) -> FinishResult:
        """The final check of a message the persona writes first, and its recording, in one
        transaction.

        Fenced: the lease token is no longer ours. Discarded: the conversation changed since
        ``version`` (a person wrote), a turn is pending, the open session is no longer
        ``session_no``, check-ins were turned off (an initiative) or the reminder is no
        longer pending. Recorded: an assistant message marked with ``origin`` and written to
        the person ``addressee`` (their /export and /forget include it) in the open session
        and its outbox row; an initiative re-armed at ``next_due``, a reminder marked
        sent. An initiative past ``cap`` (the bot's check-ins of the window, counted under a
        lock per bot so that it holds across processes) is discarded and re-armed, in the
        same transaction, for when the window frees.
        """

    @abc.abstractmethod
    async def recent_checkins(self, bot: str, since: float, limit: int) -> list[float]:
        """When the bot's check-ins written after ``since`` were written, over all its chats
        (for ``CheckinCap``)."""

    @abc.abstractmethod
    async def reminder(self, reminder_id: int) -> Reminder | None:
        """One reminder."""

    @abc.abstractmethod
    async def reminders(
        self, user: UserKey, *, bot: str | None = None, pending_only: bool = True
    ) -> list[Reminder]:
        """A person's reminders (of one bot), earliest due first."""

    @abc.abstractmethod
    async def cancel_reminder(
        self, user: UserKey, reminder_id: int, now: float, *, bot: str | None = None
    ) -> bool:
        """Cancel a pending reminder of this person (set with ``bot``); False when there is
        none."""

    @abc.abstractmethod
    async def fail_reminder(
        self, reminder_id: int, note: str, now: float, *, was: ReminderStatus = "pending"
    ) -> bool:
        """Give up on a reminder still in status ``was``, with the reason: a pending one in a
        chat that refuses delivery, or one recorded as ``sent`` whose message the platform
        then refused; False when it is no longer in that status."""

    @abc.abstractmethod
    async def set_timezone(self, user: UserKey, timezone: str | None, now: float) -> None:
        """A person's time zone (None: forget it)."""

    @abc.abstractmethod
    async def timezone_of(self, user: UserKey) -> str | None:
        """A person's time zone, if they set one."""

    @abc.abstractmethod
    async def erase_agenda(self, user: UserKey) -> int:
        """Delete a person's reminders and settings (for /forget); return the reminders."""


class LeaseStore(Protocol):
    """Fenced leases: turns of one conversation, elections and rate windows."""

    @abc.abstractmethod
    async def acquire_lease(self, name: str, holder: str, ttl: float, now: float) -> Lease | None:
        """Compare-and-swap: take the lease if free or expired; the token grows every time."""

    @abc.abstractmethod
    async def renew_lease(self, lease: Lease, ttl: float, now: float) -> Lease | None:
        """Extend a lease we still hold (same token); None if it was taken over."""

    @abc.abstractmethod
    async def release_lease(self, lease: Lease) -> None:
        """Free a lease we hold (keeps the token so the next holder's is larger)."""

    @abc.abstractmethod
    async def lease_expires_at(self, name: str) -> float | None:
        """When the lease of this name expires (in the past when free); None if never taken."""


class OutboxStore(Protocol):
    """The outbox: replies recorded by the final check, sent at least once."""

    @abc.abstractmethod
    async def record_outbox(
        self,
        conversation: ConversationKey,
        text: str,
        now: float,
        reply_to: str | None = None,
        choices: Choices | None = None,
    ) -> OutboxItem:
        """An outbox row for a message that is not part of the transcript (a command answer,
        notice, greeting or denied reply): ``reply_message_id`` 0, in the conversation's open
        session (the conversation and a session are created when missing). Its text (and its
        ``choices``, bot/core/choices.py) is cleared once the row is sent or failed. Empty
        text raises StoreError."""

    @abc.abstractmethod
    async def record_ran(
        self, conversation: ConversationKey, platform_message_id: str, now: float
    ) -> None:
        """Note that the command of this platform message ran and answered by itself (a file,
        or nothing): a finished outbox row without text, so ``answered`` finds it and a second
        delivery of the command does not run it again."""

    @abc.abstractmethod
    async def answered(self, conversation: ConversationKey, platform_message_id: str) -> bool:
        """Whether a non-transcript outbox row answers this platform message (a command
        delivered again by the platform was already answered: it must not run twice)."""

    @abc.abstractmethod
    async def begin_send(self, item: OutboxItem, now: float) -> bool:
        """Claim a send attempt: CAS on the attempt count, so one process sends each attempt."""

    @abc.abstractmethod
    async def unsent_outbox(self, older_than: float, limit: int = 50) -> list[OutboxItem]:
        """Pending rows never attempted, recorded at or before ``older_than``."""

    @abc.abstractmethod
    async def uncertain_outbox(self, older_than: float, limit: int = 50) -> list[OutboxItem]:
        """Rows attempted at or before ``older_than`` but never confirmed (died mid-send)."""

    @abc.abstractmethod
    async def mark_sent(self, outbox_id: int, now: float) -> None:
        """Confirm delivery of an outbox row (clearing the text of a non-transcript row)."""

    @abc.abstractmethod
    async def mark_failed(self, outbox_id: int, now: float, reason: str) -> None:
        """Give up on an outbox row (logged and kept for the operator; the text of a
        non-transcript row is cleared)."""


class ToolCallStore(Protocol):
    """The ledger of effectful outside tools' calls: recorded before each is made, so that
    none is made twice (docs/tools.md#effectful-tools)."""

    @abc.abstractmethod
    async def begin_tool_call(
        self,
        conversation: ConversationKey,
        first_message_id: int,
        call_key: str,
        tool: str,
        now: float,
    ) -> tuple[bool, ToolCallRecord]:
        """Record a call of ``tool`` (``call_key``: the tool and its arguments' digest) for
        the turn that answers ``first_message_id``, before it is made: (True, the new
        "started" record), or (False, the record of the same call made before: never make it
        again)."""

    @abc.abstractmethod
    async def finish_tool_call(
        self, record_id: int, status: Literal["done", "failed"], result: str, now: float
    ) -> None:
        """Close a started call with its outcome and the result the model was shown."""

    @abc.abstractmethod
    async def tool_calls_of(
        self, conversation: ConversationKey, first_message_id: int
    ) -> list[ToolCallRecord]:
        """The calls recorded for the turn that answers ``first_message_id``, oldest first
        (a retried attempt is shown them, and makes none of their tools again)."""


class CommandRecordStore(Protocol):
    """The commands a bot registered on its platform itself (Discord application commands),
    so that a sync deletes only its own (docs/discord.md#sync)."""

    @abc.abstractmethod
    async def registered_commands(self, bot: str, scope: str) -> dict[str, str]:
        """The commands ``bot`` recorded in ``scope`` (``global``, ``guild:<id>``): name -> the
        platform's command id."""

    @abc.abstractmethod
    async def command_scopes(self, bot: str) -> tuple[str, ...]:
        """Every scope where ``bot`` has recorded commands (a sync also visits those it no
        longer syncs, to remove its own there)."""

    @abc.abstractmethod
    async def record_commands(self, bot: str, scope: str, commands: Mapping[str, str]) -> None:
        """Replace what ``bot`` has recorded in ``scope`` with ``commands``."""


class UsageReads(Protocol):
    """Model usage, read (limits, /stats, the console's overview)."""

    @abc.abstractmethod
    async def input_tokens_since(self, user: UserKey, since: float) -> int:
        """Input tokens (uncached, cache writes and cache reads) charged to a person since
        ``since``, over every bot of the store."""

    @abc.abstractmethod
    async def cost_since(self, user: UserKey, since: float) -> float:
        """Dollars charged to a person since ``since`` (priced calls), over every bot."""

    @abc.abstractmethod
    async def usage_since(self, since: float, bot: str | None = None) -> UsageStats:
        """Replies recorded and tokens of every model call since ``since`` (of one bot, when
        given)."""


class UsageStore(UsageReads, Protocol):
    """Per-person turn limits and model usage."""

    @abc.abstractmethod
    async def reserve_turn(
        self,
        user: UserKey,
        bot: str,
        now: float,
        *,
        per_hour: int = 0,
        per_day: int = 0,
    ) -> Reservation:
        """Atomically count the user's turns in the last hour and day and, when both are under
        their limits (0 = none), record one more; else say when the user may continue."""

    @abc.abstractmethod
    async def release_turn(self, reservation_id: int) -> None:
        """Give back a reservation whose turn did not reach the user (discarded, failed)."""

    @abc.abstractmethod
    async def record_usage(
        self,
        conversation: ConversationKey,
        purpose: str,
        model: str | None,
        charges: Sequence[tuple[str | None, Usage]],
        now: float,
        price: Price | None = None,
    ) -> None:
        """Record one model call's usage (a reply or a memory task), split into shares
        charged to people (user id) or to the bot alone (None); each share's cost priced
        with ``price`` (None: the model has no price, its cost unknown)."""


class SummaryReads(Protocol):
    """A session's rolling summary, read (the prompt, the console)."""

    @abc.abstractmethod
    async def get_summary(self, session: SessionKey) -> StoredSummary | None:
        """The session's rolling summary, or None."""


class MemoryStore(SummaryReads, Protocol):
    """Long-term memory: user records, rolling summaries, extraction bookkeeping."""

    @abc.abstractmethod
    async def get_user_memory(self, user: UserKey) -> str | NotSet:
        """A user's long-term memory record (JSON text), or NOT_SET."""

    @abc.abstractmethod
    async def read_user_memory(self, user: UserKey) -> tuple[str | None, int]:
        """A user's record (None when there is none) and its version (0 when none)."""

    @abc.abstractmethod
    async def set_user_memory(
        self, user: UserKey, record: str, now: float, *, expected_version: int | None = None
    ) -> bool:
        """Replace a user's record and bump its version; return whether it was written.

        With ``expected_version`` it is a compare-and-swap: written only if the stored
        version is still that one (0: no record yet). Without it the write always wins
        (erasure): every writer that read the record before it then loses its CAS.
        """

    @abc.abstractmethod
    async def save_summary(
        self,
        session: SessionKey,
        body: str,
        first_turn: int,
        last_turn: int,
        now: float,
        *,
        expected_last_turn: int | None,
        authors: Sequence[str] = (),
        sources: Sequence[int] = (),
    ) -> bool:
        """Replace the summary if it still covers up to ``expected_last_turn`` (None: no
        summary yet) and every message id in ``sources`` (what was folded) still exists;
        False when another worker got there first or a source was deleted meanwhile.

        ``authors`` (whose messages were folded) are added to the summary's author list,
        which /forget and /export use to find the summaries that mention a person.
        """

    @abc.abstractmethod
    async def sessions_to_extract(
        self, quiet_before: float, limit: int = 20, bots: Sequence[str] | None = None
    ) -> list[tuple[SessionKey, int]]:
        """Sessions with user messages not yet learned from, that are closed or have been
        quiet since ``quiet_before``: (session, last extracted turn)."""

    @abc.abstractmethod
    async def mark_extracted(self, session: SessionKey, turn: int) -> None:
        """Record that user memory was learned from the session up to ``turn``."""


class RetentionStore(Protocol):
    """Retention and gaps: expiry, message age, tombstones (docs/architecture.md#retention)."""

    @abc.abstractmethod
    async def session_bounds(self, session: SessionKey) -> tuple[int, int] | None:
        """(first, last) turn of the session's stored messages, or None when it has none."""

    @abc.abstractmethod
    async def missing_turns(
        self, session: SessionKey, covered: tuple[int, int] | None = None
    ) -> list[tuple[int, int]]:
        """Ranges (inclusive) of the session's turns 1..next_turn-1 that are neither stored,
        inside ``covered`` (the summary's range) nor tombstoned for a reason that explains them
        alone (a message-age tombstone does not: it leans on ``covered``): one indexed query."""

    @abc.abstractmethod
    async def sessions_page(
        self, status: str, cursor: int = 0, limit: int = 500
    ) -> tuple[list[SessionInfo], int]:
        """Sessions with this status in a stable order, from ``cursor``; and the next cursor
        (0 when there are no more)."""

    @abc.abstractmethod
    async def expired_sessions(self, closed_before: float, limit: int = 100) -> list[SessionKey]:
        """Closed sessions that closed at or before ``closed_before`` (not yet expired)."""

    @abc.abstractmethod
    async def expire_session(self, session: SessionKey, now: float) -> int:
        """Delete a closed session's messages, state and summary in ONE transaction (none or
        all of them go), mark it expired and log the deletion; return the messages deleted."""

    @abc.abstractmethod
    async def old_messages(self, session: SessionKey, cutoff: float) -> OldMessages | None:
        """The session's answered/context messages created at or before ``cutoff``."""

    @abc.abstractmethod
    async def sessions_with_old_messages(self, cutoff: float, limit: int = 100) -> list[SessionKey]:
        """Open sessions holding answered/context messages older than ``cutoff`` (closed
        sessions are not listed: they expire as units)."""

    @abc.abstractmethod
    async def delete_old_messages(
        self, session: SessionKey, through_turn: int, cutoff: float, now: float, limit: int
    ) -> int:
        """Delete up to ``limit`` answered/context messages with ``turn <= through_turn`` and
        created at or before ``cutoff``, oldest first, logging the range (and tombstoning
        the turns); return how many. Only turns inside the stored summary's range go (read in
        the same transaction; none without a summary), and rejected messages anywhere."""

    @abc.abstractmethod
    async def prune_outbox(self, finished_before: float) -> int:
        """Delete outbox rows sent or failed at or before ``finished_before``; how many."""

    @abc.abstractmethod
    async def prune_leases(self, expired_before: float, prefixes: Sequence[str]) -> int:
        """Delete the leases whose name starts with one of ``prefixes`` and that expired at or
        before ``expired_before``; how many. Only for leases that mark something done (no
        fencing token is compared on them, no claim locks their row): a deleted row's next
        acquisition starts its token again (memory/retention/worker.py MARKER_LEASES)."""


class PeopleStore(Protocol):
    """A person's data across every chat (/forget, /export)."""

    @abc.abstractmethod
    async def erase_user_messages(self, user: UserKey) -> Erasure:
        """Delete, in one transaction, everything message-shaped about a person on a platform.

        Every conversation and bot, open sessions included: their own messages (except the
        ones still waiting for a reply), the bot's replies that answered only them, the
        outbox rows of those replies and the finished outbox rows of replies that also
        answered others, and every summary that folded in their messages (dropped: history
        still stored is summarised again when needed; the message-age tombstones that leaned
        on a dropped summary are re-tagged as dropped by /forget, so they are no gap). A
        summary being written at the same time loses its compare-and-swap (its sources are
        gone).
        """

    @abc.abstractmethod
    async def user_data(self, user: UserKey) -> UserData:
        """Every stored row about a person on a platform, across all chats and bots."""
