"""Memory's jobs wired on one store (memory/service.py): the one place that hands the whole
store to them, each job taking it as the narrow contract it uses. The facade itself reads
only its own ``ServiceStore``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Required, TypedDict, Unpack

from bot.core.clock import Clock
from bot.core.llm import BaseLLM
from bot.store.base import BaseStore
from memory.calls import ChargedModel, ModelAccount
from memory.compaction import Compaction
from memory.erasure import Eraser
from memory.extraction import Extraction
from memory.jobs import JobGate, Jobs
from memory.policy import MemoryPolicy
from memory.prompting import MediaPreparation, PromptBuilder
from memory.service import Memory, MemoryJobs
from memory.sweep import Sweep


def memory_jobs(
    store: BaseStore,
    *,
    llm: BaseLLM,
    clock: Clock,
    policy_for: Callable[[str], MemoryPolicy],
    holder: str | None = None,
    lease_seconds: float = 60.0,
    retry_after_failure: float = 60.0,
    account: ModelAccount | None = None,
    media: MediaPreparation | None = None,
) -> MemoryJobs:
    """Prompt building, compaction, extraction and its sweep, erasure: on one store, one
    model (charged to ``account``) and one gate (a lease per job, a pause after a failure)."""
    tasks = Jobs()
    model = ChargedModel(llm=llm, account=account)
    gate = JobGate(
        store=store,
        clock=clock,
        holder=holder,
        lease_seconds=lease_seconds,
        retry_after_failure=retry_after_failure,
    )
    extraction = Extraction(store=store, model=model, gate=gate, clock=clock, policy_for=policy_for)
    return MemoryJobs(
        prompts=PromptBuilder(store=store, policy_for=policy_for, media=media),
        compaction=Compaction(
            store=store, model=model, gate=gate, jobs=tasks, clock=clock, policy_for=policy_for
        ),
        extraction=extraction,
        sweep=Sweep(
            store=store, extraction=extraction, jobs=tasks, clock=clock, policy_for=policy_for
        ),
        eraser=Eraser(store=store, clock=clock),
        tasks=tasks,
    )


class JobOptions(TypedDict, total=False):
    """``memory_jobs``' keyword arguments, for ``memory_on`` to pass on unchanged."""

    llm: Required[BaseLLM]
    clock: Required[Clock]
    policy_for: Required[Callable[[str], MemoryPolicy]]
    holder: str | None
    lease_seconds: float
    retry_after_failure: float
    account: ModelAccount | None
    media: MediaPreparation | None


def memory_on(store: BaseStore, **options: Unpack[JobOptions]) -> Memory:
    """The memory service on one store: ``memory_jobs`` composed by the facade."""
    return Memory(store=store, jobs=memory_jobs(store, **options))
