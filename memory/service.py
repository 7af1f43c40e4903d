"""Memory at run time: builds each turn's prompt from the store, and keeps the summary and the
users' long-term memory up to date in the background (never on the reply path).

Work is derived from data, not from in-process queues: compaction is due whenever more
history than the window lies after the summary, and extraction whenever a quiet or closed
session has user messages past its extraction mark. A crash therefore loses no memory work;
the next turn or sweep finds it again. Leases keep two processes from doing the same job.

User memory is written by compare-and-swap on the record's version, never blindly: /forget
(and a deleted message) bump the version, so an extraction that read the record or the
messages before them loses its write, re-reads, and learns only from what is still allowed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, Protocol

from bot.core.clock import Clock
from bot.core.errors import ModelError, StoreError
from bot.core.events import (
    NOT_SET,
    ConversationKey,
    NotSet,
    SessionKey,
    StoredMessage,
    Turn,
    UserKey,
    is_person,
)
from bot.core.llm import BaseLLM, ImageBlock, ModelResult
from bot.core.shares import weights
from bot.store.base import BaseStore
from memory.assemble import Assembled, Budget, Participant, PersonaPin, ShownImage, assemble
from memory.content import own_words
from memory.fit import fit_task
from memory.privacy import ForgetReport, agenda_export, export_document
from memory.records import (
    MemoryItem,
    RecordError,
    Summary,
    UserMemory,
    forget_sources,
    merge_memory,
    merge_summary,
    trim_memory,
)
from memory.retention.gaps import Gap, as_gaps, covered_range
from memory.tasks import (
    extraction_request,
    parse_extraction,
    parse_summary_update,
    summary_request,
)
from memory.tokens import MAX_IMAGE_TOKENS, image_tokens

log = logging.getLogger("personabot.memory")


@dataclass(frozen=True, slots=True)
class MemoryPolicy:
    """Memory settings of one bot (its persona's overrides applied)."""

    budget: Budget
    summary_model: str
    private_memory_in_groups: bool = False
    extract_after_idle_seconds: float = 300.0
    share_across_groups: bool = False
    # Images shown per request at most (the newest; 0 = none): docs/architecture.md#media.
    max_images: int = 6


class MediaPreparation(Protocol):
    """Fetches and prepares the media a turn's prompt needs (bot.runtime.media.MediaPreparer):
    the newest images (at most ``max_images``) and the turn's voice notes."""

    async def __call__(
        self,
        turn: Sequence[StoredMessage],
        history: Sequence[StoredMessage],
        *,
        max_images: int,
    ) -> tuple[tuple[StoredMessage, ...], tuple[StoredMessage, ...]]:
        """The turn's and the history's messages with their media rows as now stored."""
        ...


_CAS_ATTEMPTS = 3
#: Image bytes of one request at most, as base64: the Messages API refuses a body over 32 MB,
#: and a few prepared images of up to 5 MB each would pass it whatever ``max_images`` says.
_IMAGE_REQUEST_BYTES = 24 * 1024 * 1024


def _scoped(items: Sequence[MemoryItem], messages: Sequence[StoredMessage]) -> list[MemoryItem]:
    """Tie each item to where it was said: the private chat, or the group (by chat id)."""
    if all(m.is_private for m in messages):
        return [replace(i, private=True, scope=None) for i in items]
    chat = messages[0].session.conversation.chat_id
    return [replace(i, private=False, scope=chat) for i in items]


class ModelAccount(Protocol):
    """Limits and bookkeeping of memory tasks' model calls (bot.runtime.usage.Accounting)."""

    async def allow(self, conversation: ConversationKey, authors: Sequence[str]) -> bool:
        """Whether a task over these people's messages may call the model now."""

    async def charge(
        self,
        conversation: ConversationKey,
        purpose: str,
        result: ModelResult,
        by: Mapping[str, int],
    ) -> None:
        """Record an answered call, split between people by these weights."""


def load_memory(raw: str | None) -> UserMemory:
    """A stored record, or an empty one (an unreadable record is logged and not used)."""
    if raw is None:
        return UserMemory()
    try:
        return UserMemory.from_json(raw)
    except RecordError as exc:
        log.error("unreadable user memory record ignored: %s", exc)
        return UserMemory()


class Memory:
    """Prompt building plus background summary and user-memory upkeep."""

    def __init__(
        self,
        *,
        store: BaseStore,
        llm: BaseLLM,
        clock: Clock,
        policy_for: Callable[[str], MemoryPolicy],
        holder: str | None = None,
        lease_seconds: float = 60.0,
        retry_after_failure: float = 60.0,
        on_model_call: Callable[[ConversationKey, str, ModelResult], None] | None = None,
        account: ModelAccount | None = None,
        media: MediaPreparation | None = None,
    ) -> None:
        self._store = store
        self._llm = llm
        self._clock = clock
        self._policy_for = policy_for
        self._holder = holder or f"memory-{uuid.uuid4().hex[:12]}"
        self._lease_seconds = lease_seconds
        self._retry_after_failure = retry_after_failure
        self._on_model_call = on_model_call
        self._account = account
        self._media = media
        self._tasks: dict[SessionKey, asyncio.Task[None]] = {}
        self._sweep: asyncio.Task[None] | None = None
        self._failed_until: dict[str, float] = {}
        self._failures: dict[str, int] = {}

    # -- reading --------------------------------------------------------------------------------

    async def user_memory(self, user: UserKey) -> UserMemory:
        """A user's record (empty when none)."""
        raw = await self._store.get_user_memory(user)
        return load_memory(None if raw is NOT_SET else str(raw))

    async def _versioned(self, user: UserKey) -> tuple[UserMemory, int]:
        raw, version = await self._store.read_user_memory(user)
        return load_memory(raw), version

    async def summary(self, session: SessionKey) -> Summary | None:
        """The session's summary, or None (an unreadable one is logged and skipped)."""
        return (await self._summary_row(session))[0]

    async def _summary_row(self, session: SessionKey) -> tuple[Summary | None, int | None]:
        """The summary (None when there is none or it is unreadable) and the last turn of
        the stored row (None: no row). An unreadable row stands for nothing: the gap check
        then finds the turns only it held, and the next compaction replaces it (it never
        could: its save expected no row and lost to the unreadable one, every time)."""
        stored = await self._store.get_summary(session)
        if stored is None:
            return None, None
        try:
            return Summary.from_json(stored.body, stored.first_turn, stored.last_turn), (
                stored.last_turn
            )
        except RecordError as exc:
            log.error("unreadable summary of %s ignored: %s", session, exc)
            return None, stored.last_turn

    async def build(
        self,
        turn: Turn,
        pin: PersonaPin,
        *,
        gap_notice: str | None = None,
        summary: Summary | NotSet | None = NOT_SET,
        policy: MemoryPolicy | None = None,
    ) -> Assembled:
        """Load every layer of this turn's prompt from the store and assemble it (pass the
        ``summary`` when the caller already read it; ``policy``: the persona's, when not the
        bot's default)."""
        policy = policy or self._policy_for(turn.session.conversation.bot)
        if isinstance(summary, NotSet):
            summary = await self.summary(turn.session)
        after = 0 if summary is None else summary.last_turn
        history: Sequence[StoredMessage] = await self._store.history(
            turn.session, policy.budget.window_messages * 2, after_turn=after
        )
        if self._media is not None:
            messages, history = await self._media(
                turn.messages, history, max_images=policy.max_images
            )
            turn = replace(turn, messages=messages)
        participants = await self._participants(turn)
        return _logged(
            assemble(
                pin,
                turn,
                policy.budget,
                history=history,
                participants=participants,
                summary=summary,
                gap_notice=gap_notice,
                images=await self._images((*history, *turn.messages), policy.max_images),
            ),
            turn.session,
        )

    async def build_proactive(
        self,
        session: SessionKey,
        pin: PersonaPin,
        *,
        person: str | None,
        private: bool,
        note: str,
        layer: str,
        now: float,
        policy: MemoryPolicy | None = None,
    ) -> Assembled:
        """The prompt of a message the persona writes first (docs/initiatives.md): the
        session's summary and window as for a turn, the person's memory as this chat may show
        it, and ``note`` where a turn's messages would be. Images stay text stand-ins."""
        policy = policy or self._policy_for(session.conversation.bot)
        summary = await self.summary(session)
        after = 0 if summary is None else summary.last_turn
        history = await self._store.history(
            session, policy.budget.window_messages * 2, after_turn=after
        )
        participants: list[Participant] = []
        if person is not None:
            visible = await self.visible_memory(
                UserKey(session.conversation.platform, person),
                session.conversation,
                private_chat=private,
            )
            name = next((m.display_name for m in reversed(history) if m.author_id == person), "")
            participants.append(Participant(person, name, visible if visible.items else None))
        return _logged(
            assemble(
                pin,
                Turn(session=session, version=0, messages=(), first_pending_at=now),
                policy.budget,
                history=history,
                participants=participants,
                summary=summary,
                note=note,
                note_layer=layer,
                private=private,
            ),
            session,
        )

    async def _images(self, messages: Sequence[StoredMessage], limit: int) -> dict[int, ShownImage]:
        """The newest ``limit`` images of these messages that are ready, with their bytes
        (fewer when their bytes would pass ``_IMAGE_REQUEST_BYTES``)."""
        chosen = [
            media
            for message in reversed(messages)
            for media in reversed(message.media)
            if media.ref.kind == "image" and media.status == "ready" and media.media_type
        ][: max(0, limit)]
        if not chosen:
            return {}
        data = await self._store.media_data([m.id for m in chosen])
        shown: dict[int, ShownImage] = {}
        room = _IMAGE_REQUEST_BYTES
        for m in chosen:  # newest first: older ones go first when the bytes run out
            if m.id not in data:
                continue
            room -= 4 * math.ceil(len(data[m.id]) / 3)  # base64 of the bytes
            if room < 0:
                break
            tokens = image_tokens(m.width, m.height) if m.width and m.height else MAX_IMAGE_TOKENS
            shown[m.id] = ShownImage(ImageBlock(m.media_type, data[m.id]), tokens)
        return shown

    async def gaps(
        self, session: SessionKey, summary: Summary | NotSet | None = NOT_SET
    ) -> tuple[Gap, ...]:
        """Turns of the session (first to last) neither stored, covered by ``summary`` (the
        one the prompt carries), nor deleted by personabot itself (tombstoned; turns retention
        folded into a summary count only inside this one's range)."""
        if isinstance(summary, NotSet):
            summary = await self.summary(session)
        # One indexed query over the turns after the summary (bot/store/tombstones.py).
        return as_gaps(await self._store.missing_turns(session, covered_range(summary)))

    async def drop_sources(self, user: UserKey, message_ids: Sequence[int]) -> None:
        """A message was deleted: drop memory items whose only source it was.

        Written even when nothing changes: the version bump makes an extraction that read
        the deleted message lose its compare-and-swap and re-read the messages.
        """
        for _ in range(_CAS_ATTEMPTS):
            record, version = await self._versioned(user)
            kept = forget_sources(record, message_ids)
            if await self._store.set_user_memory(
                user, kept.to_json(), self._clock.now(), expected_version=version
            ):
                return
        # Every attempt lost to another writer: that writer re-read after the deletion
        # (extractions re-read the messages), so only the oldest sources could be left.
        log.warning("memory of user %s busy; deleted message sources may be kept", user.user_id)

    async def visible_memory(
        self, user: UserKey, conversation: ConversationKey, *, private_chat: bool
    ) -> UserMemory:
        """The part of a user's record that may be shown in this chat (prompts, /memory),
        under the bot's policy: see ``UserMemory.visible``."""
        policy = self._policy_for(conversation.bot)
        record = await self.user_memory(user)
        return record.visible(
            chat=None if private_chat else conversation.chat_id,
            private_in_groups=policy.private_memory_in_groups,
            across_groups=policy.share_across_groups,
        )

    async def _participants(self, turn: Turn) -> list[Participant]:
        private = all(m.is_private for m in turn.messages)
        conversation = turn.session.conversation
        people: list[Participant] = []
        for author in turn.authors:
            name = next(m.display_name for m in turn.messages if m.author_id == author)
            visible = await self.visible_memory(
                UserKey(conversation.platform, author), conversation, private_chat=private
            )
            people.append(Participant(author, name, visible if visible.items else None))
        return people

    # -- the rolling summary --------------------------------------------------------------------

    def schedule_compaction(self, session: SessionKey) -> None:
        """Fold overflowing history into the summary in the background (one task a session)."""
        running = self._tasks.get(session)
        if running is not None and not running.done():
            return
        self._tasks[session] = asyncio.create_task(self._compact_logged(session))

    async def _compact_logged(self, session: SessionKey) -> None:
        try:
            await self.compact(session)
        except Exception:
            log.exception("summary update of %s failed", session)
        finally:
            self._tasks.pop(session, None)

    async def compact(self, session: SessionKey, *, through_turn: int | None = None) -> int:
        """Fold the oldest history into the summary; return the number of chunks folded.

        Window overflow: once more than twice ``window_messages`` messages lie after the
        summary, the oldest are folded in one chunk down to ``window_messages``. The prompt
        prefix (summary + start of the window) then stays identical, and cached, for
        ``window_messages`` turns between two compactions, and the summary model runs once
        per ``window_messages`` messages instead of every few turns.

        ``through_turn`` (retention in message mode): fold at least up to that turn.
        """
        policy = self._policy_for(session.conversation.bot)
        window = policy.budget.window_messages
        key = f"summary:{session}"
        if through_turn is None and self._failed_until.get(key, 0.0) > self._clock.now():
            return 0
        folded = 0
        if through_turn is None and not await self._overflowing(session, window):
            # The common case after a turn: nothing to fold, known from one read, without
            # taking and releasing the summary lease (two write transactions a turn). What is
            # found to overflow is checked again under the lease below.
            return 0
        async with self._lease(key) as held:
            if not held:
                return 0
            while True:
                current, stored_last = await self._summary_row(session)
                after = 0 if current is None else current.last_turn
                count = await self._store.count_history(session, after_turn=after)
                if through_turn is not None and after < through_turn:
                    size = min(2 * window, count)
                elif through_turn is None and count > 2 * window:
                    size = count - window
                else:
                    return folded
                chunk = await self._store.history(
                    session, min(size, 4 * window), after_turn=after, oldest_first=True
                )
                if not chunk or not await self._fold(
                    session, current, chunk, policy, replacing=stored_last
                ):
                    return folded
                folded += 1

    async def _overflowing(self, session: SessionKey, window: int) -> bool:
        """Whether more than twice ``window`` messages lie after the summary (unleased)."""
        return await self._store.count_unsummarised(session) > 2 * window

    async def _fold(
        self,
        session: SessionKey,
        current: Summary | None,
        chunk: Sequence[StoredMessage],
        policy: MemoryPolicy,
        *,
        replacing: int | None,
    ) -> bool:
        """Fold ``chunk`` into ``current`` and save it in place of the stored row whose last
        turn is ``replacing`` (None: no row yet); False when the model or the save failed."""
        key = f"summary:{session}"
        # Fitted under the prompt budget: what does not fit is folded by the next call.
        shown = await self._images(chunk, policy.max_images)
        images = {media_id: image.block for media_id, image in shown.items()}
        chunk, request = fit_task(
            chunk,
            lambda part: summary_request(current, part, policy.summary_model, images),
            policy.budget.prompt_tokens,
            keep="oldest",
        )
        if not await self._allowed(session.conversation, chunk):
            self._failed_until[key] = self._clock.now() + self._retry_after_failure
            return False
        try:
            result = await self._llm.complete(request)
            await self._charge(session.conversation, "summary", result, chunk)
            update = parse_summary_update(result.text)
        except (ModelError, RecordError) as exc:
            log.warning("summary of %s not updated (kept as it was): %s", session, exc)
            self._failed_until[key] = self._clock.now() + self._retry_after_failure
            return False
        merged = merge_summary(
            current, update, chunk[0].turn, chunk[-1].turn, policy.budget.summary_tokens
        )
        saved = await self._store.save_summary(
            session,
            merged.to_json(),
            merged.first_turn,
            merged.last_turn,
            self._clock.now(),
            expected_last_turn=replacing,
            # Who is folded in (for /forget and /export), and what: a message deleted
            # meanwhile (/forget) makes the save lose, so it is never summarised back.
            authors=sorted({m.author_id for m in chunk if m.role == "user"}),
            sources=[m.id for m in chunk],
        )
        if saved:
            log.info(
                "summary of %s now covers turns %d-%d",
                session,
                merged.first_turn,
                merged.last_turn,
            )
            await self._drop_cached_images(chunk)
        return saved

    async def _drop_cached_images(self, chunk: Sequence[StoredMessage]) -> None:
        """Images of summarised messages are never shown again (the window starts after the
        summary, which describes them): their cached copies go, the rows stay (``ready``, so
        nothing fetches them again; /export still lists them)."""
        for message in chunk:
            for media in message.media:
                if media.ref.kind == "image" and media.status == "ready":
                    await self._store.save_media(
                        media.id,
                        status="ready",
                        data=None,
                        media_type=media.media_type,
                        width=media.width,
                        height=media.height,
                        note=media.note,
                    )

    # -- long-term user memory ------------------------------------------------------------------

    def schedule_sweep(self, bots: Sequence[str] | None = None) -> None:
        """Run one extraction sweep in the background now (e.g. when a session ends)."""
        running = self._sweep
        if running is not None and not running.done():
            return
        self._sweep = asyncio.create_task(self._sweep_logged(bots))

    async def _sweep_logged(self, bots: Sequence[str] | None) -> None:
        try:
            await self.extract_due(bots)
        except Exception:
            log.exception("memory sweep failed")

    async def extract_due(self, bots: Sequence[str] | None = None, limit: int = 20) -> int:
        """Learn from quiet or closed sessions; return how many sessions were processed."""
        done = 0
        now = self._clock.now()
        quiet = min(
            (self._policy_for(b).extract_after_idle_seconds for b in bots or ()), default=300.0
        )
        for session, mark in await self._store.sessions_to_extract(now - quiet, limit, bots):
            if await self.extract(session, mark):
                done += 1
        return done

    async def extract(self, session: SessionKey, mark: int) -> bool:
        """Learn user memory from the session's user messages after ``mark``.

        Only messages that addressed the bot count: a group message stored as context only
        (a bystander's chatter) is never learned from.
        """
        key = f"extract:{session}"
        if self._failed_until.get(key, 0.0) > self._clock.now():
            return False
        async with self._lease(key) as held:
            if not held:
                return False
            messages = [
                m for m in await self._store.messages(session) if m.role == "user" and m.turn > mark
            ]
            if not messages:
                return False
            ok = True
            # A collective author (a group's anonymous admins, a channel) is no one person:
            # nothing is learned of it, or all of a group's admins would share one memory.
            learned = (m.author_id for m in messages if m.addressed and is_person(m.author_id))
            for author in dict.fromkeys(learned):
                ok = await self._learn(session, author, mark) and ok
            if ok or self._give_up(key):
                await self._store.mark_extracted(session, max(m.turn for m in messages))
                return True
            self._failed_until[key] = self._clock.now() + self._retry_after_failure
            return False

    def _give_up(self, key: str) -> bool:
        """After three failed attempts the messages are skipped (logged), not retried forever."""
        self._failures[key] = self._failures.get(key, 0) + 1
        if self._failures[key] >= 3:
            log.error("giving up learning from %s after 3 failed extractions", key)
            self._failures.pop(key, None)
            return True
        return False

    async def _learnable(
        self, session: SessionKey, author: str, mark: int, forgotten_at: float | None
    ) -> list[StoredMessage]:
        """The author's addressed messages after ``mark`` that are still stored and were
        said after their last /forget (read afresh on every attempt)."""
        return [
            m
            for m in await self._store.messages(session)
            if m.role == "user"
            and m.author_id == author
            and m.addressed
            and m.turn > mark
            and (forgotten_at is None or m.created_at > forgotten_at)
            # Only their own words: a bare forward or a photo without a caption says nothing
            # about them (memory/content.py).
            and own_words(m)
        ]

    async def _learn(self, session: SessionKey, author: str, mark: int) -> bool:
        conversation = session.conversation
        policy = self._policy_for(conversation.bot)
        user = UserKey(conversation.platform, author)
        async with self._lease(f"memory:{user.platform}:{user.user_id}") as held:
            if not held:
                return False
            items: list[MemoryItem] = []
            basis: tuple[tuple[int, str], ...] | None = None
            for _ in range(_CAS_ATTEMPTS):
                record, version = await self._versioned(user)
                messages = await self._learnable(session, author, mark, record.forgotten_at)
                if not messages:
                    return True
                seen = tuple((m.id, own_words(m)) for m in messages)
                if seen != basis:
                    # First attempt, or the allowed messages changed (a /forget, a deletion,
                    # an edit): what the model said about the old set may not be kept.
                    parsed = await self._extract_items(conversation, author, messages, policy)
                    if parsed is None:
                        return False
                    items = _scoped(parsed, messages)
                    basis = seen
                merged = trim_memory(merge_memory(record, items), policy.budget.memory_tokens)
                if await self._store.set_user_memory(
                    user, merged.to_json(), self._clock.now(), expected_version=version
                ):
                    log.info("learned %d item(s) about user %s", len(items), author)
                    return True
                log.info("memory of user %s changed while learning; reading it again", author)
            log.warning("memory of user %s kept changing; learning postponed", author)
            return False

    async def _extract_items(
        self,
        conversation: ConversationKey,
        author: str,
        messages: list[StoredMessage],
        policy: MemoryPolicy,
    ) -> list[MemoryItem] | None:
        """One extraction model call over the author's messages (fitted under the prompt
        budget, newest kept); None when it may not run or failed."""
        name = messages[-1].display_name
        fitted, request = fit_task(
            messages,
            lambda part: extraction_request(name, part, policy.summary_model),
            policy.budget.prompt_tokens,
            keep="newest",
        )
        if len(fitted) < len(messages):
            log.warning(
                "learning about user %s from their newest %d of %d messages (budget)",
                author,
                len(fitted),
                len(messages),
            )
        if not await self._allowed(conversation, fitted):
            return None
        try:
            result = await self._llm.complete(request)
            self._called(conversation, "extract", result)
            await self._charge(conversation, "extract", result, fitted)
            return parse_extraction(result.text, fitted, self._clock.now())
        except (ModelError, RecordError) as exc:
            log.warning("memory of user %s not updated (kept as it was): %s", author, exc)
            return None

    async def forget_item(self, user: UserKey, section: str, field: str, value: str) -> bool:
        """Erase one remembered item (the operator console: docs/web.md); whether it was there.

        By compare-and-swap like every write of the record, so an extraction running now
        cannot write it back from what it read before."""
        for _ in range(_CAS_ATTEMPTS):
            record, version = await self._versioned(user)
            kept = tuple(
                item
                for item in record.items
                if (item.section, item.field, item.value) != (section, field, value)
            )
            if len(kept) == len(record.items):
                return False
            if await self._store.set_user_memory(
                user,
                replace(record, items=kept).to_json(),
                self._clock.now(),
                expected_version=version,
            ):
                return True
        raise StoreError(f"memory of user {user.user_id} busy; the item was not erased")

    async def forget(self, user: UserKey) -> int:
        """Erase a user's memory and never learn again from what they said before now;
        return how many items were erased.

        The tombstone is written unconditionally and bumps the record's version: every
        extraction or deletion that read before it loses its compare-and-swap.
        """
        before = await self.user_memory(user)
        tombstone = UserMemory(items=(), forgotten_at=self._clock.now())
        await self._store.set_user_memory(user, tombstone.to_json(), self._clock.now())
        return len(before.items)

    async def erase(self, user: UserKey, *, delete_messages: bool) -> ForgetReport:
        """/forget: erase the memory, and with ``delete_messages`` every message-shaped row
        about the person in every chat of the platform; report what went and what stays."""
        items = await self.forget(user)
        erasure = await self._store.erase_user_messages(user) if delete_messages else None
        # Reminders hold what the person said; the time zone is about them: both always go.
        reminders = await self._store.erase_agenda(user)
        log.info("user %s forgotten (messages deleted: %s)", user.user_id, delete_messages)
        return ForgetReport(items=items, erasure=erasure, reminders=reminders)

    async def export_all(
        self, user: UserKey, personas: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """Everything stored about the person on this platform, as a JSON-able document
        (``personas``: each bot's default persona id, shown for sessions that chose none)."""
        document = export_document(await self._store.user_data(user), self._clock.now(), personas)
        reminders = await self._store.reminders(user, pending_only=False)
        document.update(agenda_export(reminders, await self._store.timezone_of(user)))
        return document

    # -- plumbing -------------------------------------------------------------------------------

    async def _allowed(
        self, conversation: ConversationKey, messages: Sequence[StoredMessage]
    ) -> bool:
        if self._account is None:
            return True
        return await self._account.allow(conversation, list(weights(messages)))

    async def _charge(
        self,
        conversation: ConversationKey,
        purpose: str,
        result: ModelResult,
        messages: Sequence[StoredMessage],
    ) -> None:
        if self._account is not None:
            await self._account.charge(conversation, purpose, result, weights(messages))

    def _called(self, conversation: ConversationKey, purpose: str, result: ModelResult) -> None:
        if self._on_model_call is not None:
            self._on_model_call(conversation, purpose, result)

    @contextlib.asynccontextmanager
    async def _lease(self, name: str) -> AsyncIterator[bool]:
        lease = await self._store.acquire_lease(
            name, self._holder, self._lease_seconds, self._clock.now()
        )
        try:
            yield lease is not None
        finally:
            if lease is not None:
                await self._store.release_lease(lease)

    def _background(self) -> list[asyncio.Task[None]]:
        tasks = list(self._tasks.values())
        if self._sweep is not None and not self._sweep.done():
            tasks.append(self._sweep)
        return tasks

    async def wait_idle(self) -> None:
        """Wait until no background memory work is running (tests, shutdown, benches)."""
        while tasks := self._background():
            await asyncio.gather(*tasks, return_exceptions=True)

    async def aclose(self) -> None:
        """Wait briefly for background memory work, then cancel what is left."""
        tasks = self._background()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=5.0)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)


def _logged(assembled: Assembled, session: SessionKey) -> Assembled:
    """The prompt, after logging what its lorebook could not fit or could not match in time: a
    drop is never silent (docs/personas.md#lorebooks). A bad pattern is logged once, when
    the persona is loaded (bot/app/build.py pin_for), not on every prompt."""
    if assembled.lore is None:
        return assembled
    # One line a prompt, however many entries: a book of thousands dropped by budget (or by
    # a hostile text running out the time budget) logged a line per entry, every message.
    left = [s for s in assembled.lore.skipped if s.reason in _LEFT_OUT]
    if len(left) == 1:
        (one,) = left
        log.warning(
            "lorebook entry %r left out of %s: %s (%s)", one.label, session, one.reason, one.detail
        )
    elif left:
        counts = Counter(s.reason for s in left)
        log.warning(
            "lorebook: %d entries left out of %s (%s), e.g. %s",
            len(left),
            session,
            ", ".join(f"{reason}: {n}" for reason, n in sorted(counts.items())),
            ", ".join(f"{s.label!r} ({s.reason}: {s.detail})" for s in left[:3]),
        )
    return assembled


_LEFT_OUT: Final = frozenset({"budget", "regex timeout", "time budget"})
