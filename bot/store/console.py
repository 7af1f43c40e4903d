"""The operator console's store contract: its reads and its audit log (docs/web.md).

Owned by the console: only ``bot/app`` (the console in ``bot/app/web``, ``personabot prompt``,
and the composition root, whose ``BaseStore`` includes it) imports this module, so no runtime
component sees these methods
(import-linter: "Only the console reads the console's store contract"). What the console
reads that the runtime reads too (a turn, a transcript, usage) is in bot/store/contracts.py
(the ``*Reads`` contracts).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Protocol

from bot.core.console import (
    AuditEntry,
    ConsoleEvent,
    ConversationRow,
    PersonUsage,
    PersonView,
    QueueView,
    TopMeasure,
    UsageBucket,
)
from bot.core.events import (
    ConversationKey,
    RetentionEntry,
    SessionInfo,
    SessionKey,
    Tombstone,
    UserKey,
)
from bot.core.scenes import SceneState


class PendingCounts(Protocol):
    """A conversation's backlog, counted (the console and ``personabot prompt``)."""

    @abc.abstractmethod
    async def pending_count(self, conversation: ConversationKey) -> int:
        """How many messages of the conversation wait for an answer (every session): what a
        console or ``personabot prompt`` says beside the one bounded turn it shows."""


class ConsoleStore(PendingCounts, Protocol):
    """What the operator console reads and the audit log it writes (docs/web.md)."""

    # -- a conversation's sessions and what personabot deleted of them ----------------------------

    @abc.abstractmethod
    async def get_session(self, session: SessionKey) -> SessionInfo | None:
        """A session by key, open or closed."""

    @abc.abstractmethod
    async def list_sessions(
        self, conversation: ConversationKey, limit: int | None = None
    ) -> list[SessionInfo]:
        """Sessions of a conversation, oldest first: all, or the newest ``limit``."""

    @abc.abstractmethod
    async def tombstones(self, session: SessionKey, limit: int | None = None) -> list[Tombstone]:
        """Turns of the session that personabot deleted itself, with the reasons, in turn
        order: all, or the newest ``limit`` ranges."""

    @abc.abstractmethod
    async def retention_log(self, limit: int = 100) -> list[RetentionEntry]:
        """The newest entries of the retention audit trail."""

    # -- the console's own views ------------------------------------------------------------------

    @abc.abstractmethod
    async def console_conversations(
        self, *, search: str = "", after: tuple[float, int] | None = None, limit: int = 50
    ) -> list[ConversationRow]:
        """Conversations by their newest session's activity, newest first, ``limit`` at a
        time after the keyset ``after`` (a row's activity and session row id). ``search``:
        a chat id, or part of a participant's display name (any case)."""

    @abc.abstractmethod
    async def console_conversation(self, conversation_id: int) -> ConversationKey | None:
        """A conversation by its row id (the console's handle), or None."""

    @abc.abstractmethod
    async def console_person(
        self, user: UserKey, sources: Sequence[int], names: int = 20, chats: int = 20
    ) -> PersonView:
        """Their message count, their newest ``names`` display names, the ``chats``
        conversations they wrote in most recently (one query: newest message first), those
        of their messages (or the replies to them) whose ids are in ``sources``, and whether
        anything of them is stored at all."""

    @abc.abstractmethod
    async def console_edits(self, session: SessionKey) -> dict[int, float]:
        """When each edited message of the session was last edited, by message id."""

    @abc.abstractmethod
    async def console_scene(self, conversation: ConversationKey) -> SceneState:
        """The conversation's scene state (docs/scenes.md: the last plan and why, the caps
        hit, the mute); an empty one for a chat that is no scene."""

    @abc.abstractmethod
    async def console_lease(self, name: str, now: float) -> tuple[str, float] | None:
        """Who holds the lease ``name`` now, and until when (None: nobody)."""

    @abc.abstractmethod
    async def console_queue(self, now: float) -> QueueView:
        """Armed timers, how many are due, turn leases held now by holder."""

    @abc.abstractmethod
    async def console_usage(self, since: float, bucket_seconds: float) -> list[UsageBucket]:
        """Model calls since ``since`` in buckets of ``bucket_seconds`` (empty ones left out)."""

    @abc.abstractmethod
    async def console_last_inbound(self, bot: str) -> float | None:
        """When a person last wrote to ``bot`` (its newest stored user message; None:
        none)."""

    @abc.abstractmethod
    async def console_events(self, limit: int = 10) -> list[ConsoleEvent]:
        """The newest sessions found with turns missing and turns the model rejected,
        newest first."""

    @abc.abstractmethod
    async def console_top(self, measure: TopMeasure, since: float, limit: int) -> list[PersonUsage]:
        """The ``limit`` people who used the most since ``since`` (every bot), most first, by
        what a per-person limit counts: input tokens (cached or not), dollars charged, or
        turns."""

    @abc.abstractmethod
    async def record_audit(
        self, actor: str, action: str, target: str, detail: str, now: float
    ) -> None:
        """Append to the operator audit log."""

    @abc.abstractmethod
    async def audit_log(self, *, before: int | None = None, limit: int = 50) -> list[AuditEntry]:
        """Audit entries, newest first, older than entry id ``before``."""
