"""A turn's prompt, built from the store: the layers `assemble` (pure) needs, read for one
turn or for a message the persona writes first (docs/architecture.md#prompt).

The window is read after the summary the prompt carries, so the two never overlap; the
summary may be passed in by a caller that already read it (the pipeline's gap check read the
same one, so the gap notice and the prompt agree).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Final, Protocol

from bot.core.events import (
    NOT_SET,
    ConversationKey,
    NotSet,
    SessionKey,
    StoredMessage,
    Turn,
    UserKey,
)
from bot.core.scenes import CastMember
from bot.store.contracts import MediaStore, MemoryStore, TranscriptReads
from memory import stored
from memory.assemble import Assembled, Participant, PersonaPin, assemble
from memory.images import shown_images
from memory.policy import MemoryPolicy
from memory.records import Summary, UserMemory
from memory.scene import Card, ScenePrompt, assemble_scene, people_in, speaker_stops

log = logging.getLogger("personabot.memory")


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


class PromptStore(MemoryStore, TranscriptReads, MediaStore, Protocol):
    """What a prompt reads: the summary and the people's records, the window, image bytes."""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class PromptBuilder:
    """Loads every layer of a prompt from the store and assembles it."""

    store: PromptStore
    policy_for: Callable[[str], MemoryPolicy]
    media: MediaPreparation | None = None

    async def build(
        self,
        turn: Turn,
        pin: PersonaPin,
        *,
        gap_notice: str | None = None,
        summary: Summary | NotSet | None = NOT_SET,
        policy: MemoryPolicy | None = None,
        persona: str | None = None,
    ) -> Assembled:
        """Load every layer of this turn's prompt from the store and assemble it (pass the
        ``summary`` when the caller already read it; ``policy``: the persona's, when not the
        bot's default; ``persona``: its id, which sees what it was told in a scene)."""
        policy = policy or self.policy_for(turn.session.conversation.bot)
        if isinstance(summary, NotSet):
            summary = await stored.summary(self.store, turn.session)
        history: Sequence[StoredMessage] = await self._window(turn.session, summary, policy)
        if self.media is not None:
            messages, history = await self.media(
                turn.messages, history, max_images=policy.max_images
            )
            turn = replace(turn, messages=messages)
        participants = await self._participants(turn, persona)
        images = await shown_images(self.store, (*history, *turn.messages), policy.max_images)
        return log_lore_drops(
            assemble(
                pin,
                turn,
                policy.budget,
                history=history,
                participants=participants,
                summary=summary,
                gap_notice=gap_notice,
                images=images,
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
        persona: str | None = None,
    ) -> Assembled:
        """The prompt of a message the persona writes first (docs/initiatives.md): the
        session's summary and window as for a turn, the person's memory as this chat may show
        it, and ``note`` where a turn's messages would be. Images stay text stand-ins."""
        policy = policy or self.policy_for(session.conversation.bot)
        summary = await stored.summary(self.store, session)
        history = await self._window(session, summary, policy)
        participants: list[Participant] = []
        if person is not None:
            name = next((m.display_name for m in reversed(history) if m.author_id == person), "")
            participants.append(
                await self._participant(session.conversation, person, name, private, persona)
            )
        return log_lore_drops(
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

    async def build_scene(
        self,
        session: SessionKey,
        new: Sequence[StoredMessage],
        speaker: CastMember,
        pin: PersonaPin,
        cards: Sequence[Card],
        *,
        summary: Summary | None,
        gap_notice: str | None = None,
        policy: MemoryPolicy | None = None,
    ) -> ScenePrompt:
        """A scene speaker's prompt (memory/scene.py): the session's window and the ``new``
        human messages as one transcript, the people in it as this speaker may know them,
        the stop sequences of the others' names (the cast's, from ``cards``, and the people's);
        with the people's names, which the answer's trim needs too (memory/voices.py)."""
        policy = policy or self.policy_for(session.conversation.bot)
        history: Sequence[StoredMessage] = await self._window(session, summary, policy)
        if self.media is not None:
            new, history = await self.media(new, history, max_images=policy.max_images)
        transcript = (*history, *new)
        private = all(m.is_private for m in transcript if m.role == "user")
        people = people_in(transcript)
        participants = [
            await self._participant(session.conversation, person, name, private, speaker.id)
            for person, name in people
        ]
        names = tuple(name for _, name in people)
        cast = [card.member for card in cards]
        images = await shown_images(self.store, transcript, policy.max_images)
        assembled = assemble_scene(
            cards=cards,
            speaker=speaker,
            pin=pin,
            transcript=transcript,
            budget=policy.budget,
            participants=participants,
            summary=summary,
            gap_notice=gap_notice,
            images=images,
            stop=speaker_stops(cast, speaker, names),
        )
        return ScenePrompt(assembled, names)

    async def visible_memory(
        self,
        user: UserKey,
        conversation: ConversationKey,
        *,
        private_chat: bool,
        persona: str | None = None,
    ) -> UserMemory:
        """The part of a user's record that may be shown in this chat (prompts, /memory),
        under the bot's policy, to ``persona`` (``EVERY_PERSONA``: the person's own view):
        see ``UserMemory.visible``."""
        policy = self.policy_for(conversation.bot)
        record = await stored.user_memory(self.store, user)
        return record.visible(
            chat=None if private_chat else conversation.chat_id,
            private_in_groups=policy.private_memory_in_groups,
            across_groups=policy.share_across_groups,
            persona=persona,
        )

    async def _window(
        self, session: SessionKey, summary: Summary | None, policy: MemoryPolicy
    ) -> list[StoredMessage]:
        """The history after ``summary``: at most ``fold_at`` messages (compaction folds the
        rest into the summary; docs/architecture.md#prompt, "Keeping the summary")."""
        after = 0 if summary is None else summary.last_turn
        return await self.store.history(session, policy.budget.fold_at, after_turn=after)

    async def _participants(self, turn: Turn, persona: str | None) -> list[Participant]:
        """The turn's authors (each by the name of their first message of it)."""
        private = all(m.is_private for m in turn.messages)
        return [
            await self._participant(
                turn.session.conversation,
                author,
                next(m.display_name for m in turn.messages if m.author_id == author),
                private,
                persona,
            )
            for author in turn.authors
        ]

    async def _participant(
        self,
        conversation: ConversationKey,
        person: str,
        name: str,
        private: bool,
        persona: str | None = None,
    ) -> Participant:
        """A person of the prompt with what this chat may show of their memory to ``persona``
        (None: nothing)."""
        visible = await self.visible_memory(
            UserKey(conversation.platform, person),
            conversation,
            private_chat=private,
            persona=persona,
        )
        return Participant(person, name, visible if visible.items else None)


def log_lore_drops(assembled: Assembled, session: SessionKey) -> Assembled:
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
