"""Learning about people: long-term user memory learned from a session's addressed messages, in
the background, never on the reply path (docs/architecture.md#prompt, "Learning about people").

Extraction is due whenever a quiet or closed session has user messages past its extraction
mark (memory/sweep.py finds them). A lease per session and one per person keep two processes
from learning the same thing twice. The person's record is written by compare-and-swap on its
version: /forget and a deleted message bump it, so an extraction that read the record or the
messages before them loses its write, reads both again, and learns only from what is still
allowed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Protocol

from bot.core.clock import Clock
from bot.core.errors import ModelError
from bot.core.events import ConversationKey, SessionKey, StoredMessage, UserKey, is_person
from bot.core.scenes import CastMember, addressed
from bot.store.contracts import MemoryStore, TranscriptReads
from memory import stored
from memory.calls import ChargedModel
from memory.content import own_words
from memory.fit import fit_task
from memory.jobs import JobGate
from memory.policy import MemoryPolicy
from memory.records import MemoryItem, RecordError, merge_memory, trim_memory
from memory.tasks import extraction_request, parse_extraction

log = logging.getLogger("personabot.memory")

#: Failed extractions of one session before its messages are skipped (logged).
_GIVE_UP_AFTER = 3


class ExtractionStore(MemoryStore, TranscriptReads, Protocol):
    """What extraction reads and writes: the people's records and the session's messages."""


class Extraction:
    """Learns each person's memory items from their own addressed messages of a session."""

    def __init__(
        self,
        *,
        store: ExtractionStore,
        model: ChargedModel,
        gate: JobGate,
        clock: Clock,
        policy_for: Callable[[str], MemoryPolicy],
    ) -> None:
        self._store = store
        self._model = model
        self._gate = gate
        self._clock = clock
        self._policy_for = policy_for
        self._failures: dict[str, int] = {}

    async def extract(self, session: SessionKey, mark: int) -> bool:
        """Learn user memory from the session's user messages after ``mark``.

        Only messages that addressed the bot count: a group message stored as context only
        (a bystander's chatter) is never learned from.
        """
        key = f"extract:{session}"
        if self._gate.waiting(key):
            return False
        async with self._gate.held(key) as held:
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
            self._gate.failed(key)
            return False

    def _give_up(self, key: str) -> bool:
        """After three failed attempts the messages are skipped (logged), not retried forever."""
        self._failures[key] = self._failures.get(key, 0) + 1
        if self._failures[key] >= _GIVE_UP_AFTER:
            log.error("giving up learning from %s after %d failed extractions", key, _GIVE_UP_AFTER)
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
        """Learn what ``author`` said after ``mark`` into their record, by compare-and-swap;
        False when it must be tried again later (busy, a limit, the model failed)."""
        conversation = session.conversation
        policy = self._policy_for(conversation.bot)
        user = UserKey(conversation.platform, author)
        async with self._gate.held(f"memory:{user.platform}:{user.user_id}") as held:
            if not held:
                return False
            items: list[MemoryItem] = []
            basis: tuple[tuple[int, str], ...] | None = None
            for _ in range(stored.CAS_ATTEMPTS):
                record, version = await stored.versioned_memory(self._store, user)
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
                    items = _told_to(_scoped(parsed, messages), messages, policy.cast)
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
            lambda part: extraction_request(
                name, part, policy.summary_model, policy.summary_provider
            ),
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
        if not await self._model.allowed(conversation, fitted):
            return None
        try:
            result = await self._model.complete(conversation, "extract", request, fitted)
            return parse_extraction(result.text, fitted, self._clock.now())
        except (ModelError, RecordError) as exc:
            log.warning("memory of user %s not updated (kept as it was): %s", author, exc)
            return None


def _told_to(
    items: Sequence[MemoryItem], messages: Sequence[StoredMessage], cast: Sequence[CastMember]
) -> list[MemoryItem]:
    """In a scene, each item for every persona its source messages addressed (a reply to its
    line, its name: bot/core/scenes.py), so that only they know it; an item said to the whole
    scene (nobody addressed) stays for every persona (docs/scenes.md#memory)."""
    if not cast:
        return list(items)
    by_id = {m.id: m for m in messages}
    out: list[MemoryItem] = []
    for item in items:
        sources = [by_id[s] for s in item.sources if s in by_id]
        told = dict.fromkeys(p for m in sources for p in addressed(m.text, m.quote, cast))
        out += [replace(item, persona=p) for p in told] if told else [item]
    return out


def _scoped(items: Sequence[MemoryItem], messages: Sequence[StoredMessage]) -> list[MemoryItem]:
    """Tie each item to where it was said: the private chat, or the group (by chat id)."""
    if all(m.is_private for m in messages):
        return [replace(i, private=True, scope=None) for i in items]
    chat = messages[0].session.conversation.chat_id
    return [replace(i, private=False, scope=chat) for i in items]
