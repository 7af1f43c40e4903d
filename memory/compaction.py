"""Keeping the summary: the oldest history folded into the session's rolling summary, in the
background, never on the reply path (docs/architecture.md#prompt, "Keeping the summary").

Compaction is due whenever more history than the window lies after the summary: derived from
the data, so a crash loses no work. The summary lease keeps two processes from folding the
same chunk; the save is a compare-and-swap on the turn the stored summary covered and on the
chunk's messages still existing, so a message erased meanwhile (/forget) is never summarised
back. Retention folds before it deletes through ``compact(through_turn=...)``
(docs/architecture.md#retention, rule 2).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from bot.core.clock import Clock
from bot.core.errors import ModelError
from bot.core.events import SessionKey, StoredMessage
from bot.core.llm import ModelRequest
from bot.store.contracts import MediaStore, MemoryStore, MessageStore
from memory import stored
from memory.calls import ChargedModel
from memory.fit import fit_task
from memory.images import shown_images
from memory.jobs import JobGate, Jobs
from memory.policy import MemoryPolicy
from memory.records import RecordError, Summary, merge_summary
from memory.tasks import parse_summary_update, summary_request

log = logging.getLogger("personabot.memory")


class CompactionStore(MemoryStore, MessageStore, MediaStore, Protocol):
    """What compaction reads and writes: the summary, the history past it, the chunk's images
    (shown to the summariser, then their cached copies dropped)."""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Compaction:
    """Folds overflowing history into the summary, one chunk at a time, under a lease."""

    store: CompactionStore
    model: ChargedModel
    gate: JobGate
    jobs: Jobs
    clock: Clock
    policy_for: Callable[[str], MemoryPolicy]

    def schedule(self, session: SessionKey) -> None:
        """Fold overflowing history into the summary in the background (one task a session)."""
        self.jobs.start(session, lambda: self.compact(session), what=f"summary update of {session}")

    async def compact(self, session: SessionKey, *, through_turn: int | None = None) -> int:
        """Fold the oldest history into the summary; return the number of chunks folded.

        Window overflow: once more than ``Budget.fold_at`` messages (twice ``window_messages``
        unless ``window_max_messages`` says) lie after the summary, the oldest are folded in
        one chunk down to ``window_messages``. The prompt prefix (summary + start of the
        window) then stays identical, and cached, until the next fold, and the summary model
        runs once per ``fold_at - window_messages`` messages instead of every few turns.

        ``through_turn`` (retention in message mode): fold at least up to that turn.
        """
        policy = self.policy_for(session.conversation.bot)
        if through_turn is None and self.gate.waiting(_key(session)):
            return 0
        if through_turn is None and not await self._overflowing(session, policy):
            # The common case after a turn: nothing to fold, known from one read, without
            # taking and releasing the summary lease (two write transactions a turn). What is
            # found to overflow is checked again under the lease below.
            return 0
        async with self.gate.held(_key(session)) as held:
            if not held:
                return 0
            folded = 0
            while await self._fold_next(session, policy, through_turn):
                folded += 1
            return folded

    async def _overflowing(self, session: SessionKey, policy: MemoryPolicy) -> bool:
        """Whether more than ``fold_at`` messages lie after the summary (read without the
        lease)."""
        return await self.store.count_unsummarised(session) > policy.budget.fold_at

    async def _fold_next(
        self, session: SessionKey, policy: MemoryPolicy, through_turn: int | None
    ) -> bool:
        """Fold the next chunk, if one is due (under the summary lease); whether one was."""
        window = policy.budget.window_messages
        current, stored_last = await stored.summary_row(self.store, session)
        after = 0 if current is None else current.last_turn
        count = await self.store.count_history(session, after_turn=after)
        if through_turn is not None and after < through_turn:
            size = min(2 * window, count)
        elif through_turn is None and count > policy.budget.fold_at:
            size = count - window
        else:
            return False
        chunk = await self.store.history(
            session, min(size, 4 * window), after_turn=after, oldest_first=True
        )
        return bool(chunk) and await self._fold(
            session, current, chunk, policy, replacing=stored_last
        )

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
        # Fitted under the prompt budget: what does not fit is folded by the next call.
        shown = await shown_images(self.store, chunk, policy.max_images)
        images = {media_id: image.block for media_id, image in shown.items()}
        chunk, request = fit_task(
            chunk,
            lambda part: summary_request(
                current, part, policy.summary_model, images, policy.summary_provider
            ),
            policy.budget.prompt_tokens,
            keep="oldest",
        )
        update = await self._summarised(session, chunk, request)
        if update is None:
            self.gate.failed(_key(session))
            return False
        merged = merge_summary(
            current, update, chunk[0].turn, chunk[-1].turn, policy.budget.summary_tokens
        )
        return await self._save(session, merged, chunk, replacing=replacing)

    async def _summarised(
        self, session: SessionKey, chunk: Sequence[StoredMessage], request: ModelRequest
    ) -> dict[str, Any] | None:
        """The model's update of the summary from ``chunk``; None when a limit defers the call
        or the model failed (logged: the summary is kept as it was)."""
        if not await self.model.allowed(session.conversation, chunk):
            return None
        try:
            result = await self.model.complete(session.conversation, "summary", request, chunk)
            return parse_summary_update(result.text)
        except (ModelError, RecordError) as exc:
            log.warning("summary of %s not updated (kept as it was): %s", session, exc)
            return None

    async def _save(
        self,
        session: SessionKey,
        merged: Summary,
        chunk: Sequence[StoredMessage],
        *,
        replacing: int | None,
    ) -> bool:
        """Save ``merged`` if the stored summary still ends at ``replacing`` and every message
        of ``chunk`` is still stored; then drop the chunk's cached images."""
        saved = await self.store.save_summary(
            session,
            merged.to_json(),
            merged.first_turn,
            merged.last_turn,
            self.clock.now(),
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
                    await self.store.save_media(
                        media.id,
                        status="ready",
                        data=None,
                        media_type=media.media_type,
                        width=media.width,
                        height=media.height,
                        note=media.note,
                    )


def _key(session: SessionKey) -> str:
    """The summary job's name at the gate (its lease, its pause after a failure)."""
    return f"summary:{session}"
