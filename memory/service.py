"""Memory at run time, one object for the runtime: builds each turn's prompt from the store,
and keeps the summary and the users' long-term memory up to date in the background (never on
the reply path).

``Memory`` only composes the jobs (built on one store by the composition root,
bot/app/build/memory.py), each a module of its own with the store contracts it uses
(docs/architecture.md#map): prompt building (memory/prompting.py), compaction
(memory/compaction.py), extraction and its sweep (memory/extraction.py, memory/sweep.py),
erasure and export (memory/erasure.py); what they share is in memory/stored.py (records read
and written by compare-and-swap), memory/jobs.py (background tasks; the gate: a lease per job,
a pause after a failure) and memory/calls.py (model calls, limited and charged).

Work is derived from data, not from in-process queues: compaction is due whenever more
history than the window lies after the summary, and extraction whenever a quiet or closed
session has user messages past its extraction mark. A crash therefore loses no memory work;
the next turn or sweep finds it again. Leases keep two processes from doing the same job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from bot.core.events import NOT_SET, ConversationKey, NotSet, SessionKey, Turn, UserKey
from bot.store.contracts import MemoryStore, RetentionStore
from memory import stored
from memory.assemble import Assembled, PersonaPin
from memory.calls import ModelAccount as ModelAccount  # re-exported: its old home
from memory.compaction import Compaction
from memory.erasure import Eraser
from memory.extraction import Extraction
from memory.jobs import Jobs
from memory.policy import MemoryPolicy as MemoryPolicy  # re-exported: its old home
from memory.privacy import ForgetReport
from memory.prompting import MediaPreparation as MediaPreparation  # re-exported: its old home
from memory.prompting import PromptBuilder
from memory.records import Summary, UserMemory
from memory.retention.gaps import Gap, find_gaps
from memory.stored import load_memory as load_memory  # re-exported: its old home
from memory.sweep import Sweep


class ServiceStore(MemoryStore, RetentionStore, Protocol):
    """What the facade itself reads: a user's record, a session's summary and its gaps."""


@dataclass(frozen=True, slots=True)
class MemoryJobs:
    """The jobs the facade composes, each on the store contract it uses (built by the
    composition root: bot/app/build/memory.py ``memory_jobs``)."""

    prompts: PromptBuilder
    compaction: Compaction
    extraction: Extraction
    sweep: Sweep
    eraser: Eraser
    #: The background tasks the jobs run (compaction and sweeps).
    tasks: Jobs


class Memory:
    """Prompt building plus background summary and user-memory upkeep: the jobs composed on
    one store, for callers that need more than one of them."""

    def __init__(self, *, store: ServiceStore, jobs: MemoryJobs) -> None:
        self._store = store
        self._jobs = jobs.tasks
        self.prompts: Final = jobs.prompts
        self.compaction: Final = jobs.compaction
        self.extraction: Final = jobs.extraction
        self.sweep: Final = jobs.sweep
        self.eraser: Final = jobs.eraser

    # -- reading --------------------------------------------------------------------------------

    async def user_memory(self, user: UserKey) -> UserMemory:
        """A user's record (empty when none)."""
        return await stored.user_memory(self._store, user)

    async def summary(self, session: SessionKey) -> Summary | None:
        """The session's summary, or None (an unreadable one is logged and skipped)."""
        return await stored.summary(self._store, session)

    async def gaps(
        self, session: SessionKey, summary: Summary | NotSet | None = NOT_SET
    ) -> tuple[Gap, ...]:
        """The session's missing turns next to ``summary`` (the one the prompt carries; read
        when not given): memory/retention/gaps.py ``find_gaps``."""
        if isinstance(summary, NotSet):
            summary = await self.summary(session)
        return await find_gaps(self._store, session, summary)

    # -- prompts: memory/prompting.py -----------------------------------------------------------

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
        """This turn's prompt: ``PromptBuilder.build``."""
        return await self.prompts.build(
            turn, pin, gap_notice=gap_notice, summary=summary, policy=policy, persona=persona
        )

    async def visible_memory(
        self,
        user: UserKey,
        conversation: ConversationKey,
        *,
        private_chat: bool,
        persona: str | None = None,
    ) -> UserMemory:
        """What this chat may show of a user's record: ``PromptBuilder.visible_memory``."""
        return await self.prompts.visible_memory(
            user, conversation, private_chat=private_chat, persona=persona
        )

    # -- the rolling summary: memory/compaction.py ----------------------------------------------

    def schedule_compaction(self, session: SessionKey) -> None:
        """Fold overflowing history into the summary in the background (one task a session)."""
        self.compaction.schedule(session)

    async def compact(self, session: SessionKey, *, through_turn: int | None = None) -> int:
        """Fold the oldest history into the summary now: ``Compaction.compact``."""
        return await self.compaction.compact(session, through_turn=through_turn)

    # -- long-term user memory: memory/sweep.py, memory/extraction.py ---------------------------

    def schedule_sweep(self, bots: Sequence[str] | None = None) -> None:
        """Run one extraction sweep in the background now (e.g. when a session ends)."""
        self.sweep.schedule(bots)

    async def extract_due(self, bots: Sequence[str] | None = None, limit: int = 20) -> int:
        """Learn from quiet or closed sessions; return how many sessions were processed."""
        return await self.sweep.extract_due(bots, limit)

    async def extract(self, session: SessionKey, mark: int) -> bool:
        """Learn from the session's messages after ``mark``: ``Extraction.extract``."""
        return await self.extraction.extract(session, mark)

    # -- erasure and export: memory/erasure.py --------------------------------------------------

    async def drop_sources(self, user: UserKey, message_ids: Sequence[int]) -> None:
        """A message was deleted: drop memory items whose only source it was."""
        await self.eraser.drop_sources(user, message_ids)

    async def forget_item(self, user: UserKey, section: str, field: str, value: str) -> bool:
        """Erase one remembered item; whether it was there: ``Eraser.forget_item``."""
        return await self.eraser.forget_item(user, section, field, value)

    async def forget(self, user: UserKey) -> int:
        """Erase a user's memory for good; how many items went: ``Eraser.forget``."""
        return await self.eraser.forget(user)

    async def erase(self, user: UserKey, *, delete_messages: bool) -> ForgetReport:
        """/forget: ``Eraser.erase``."""
        return await self.eraser.erase(user, delete_messages=delete_messages)

    async def export_all(
        self, user: UserKey, personas: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """/export: everything stored about the person, ``Eraser.export_all``."""
        return await self.eraser.export_all(user, personas)

    # -- background work ------------------------------------------------------------------------

    async def wait_idle(self) -> None:
        """Wait until no background memory work is running (tests, shutdown, benches)."""
        await self._jobs.wait_idle()

    async def aclose(self) -> None:
        """Wait briefly for background memory work, then cancel what is left."""
        await self._jobs.aclose()
