"""The cut-off: a reply's generation cut as soon as newer input makes it stale
(docs/architecture.md#queue rule 9).

Input stored while a turn generates would make the final check discard its reply (rule 5);
rather than let the model write it to the end, the ingestor tells the running generations of
the conversation here, in this process, at once (:meth:`Cutoffs.notify`). Each running
generation watches with its own predicate (:meth:`Cutoffs.watch`): only it knows its session,
its ``v0``, its messages and its hard cap, so it alone decides whether the final check would
discard it. The signal is a hint that saves a generation, never a verdict that records or
sends anything: a signal that is missed (input stored between the turn's snapshot and its
watch, or by another process) only leaves the turn to the final check, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from bot.core.events import ConversationKey, SessionKey

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Stored:
    """A new pending message (one that asks for a reply), stored at ``at`` on the ingest
    clock (the clock ``first_pending_at`` is written by) as ``version`` of ``session``."""

    session: SessionKey
    version: int
    at: float


@dataclass(frozen=True, slots=True)
class Edited:
    """An unanswered message (by its platform id) edited to ``text`` at ``at``."""

    message_id: str
    text: str
    at: float


NewerInput = Stored | Edited
#: Whether this newer input makes a running generation stale (its own rules decide).
CutBy = Callable[[NewerInput], bool]


@dataclass(frozen=True, slots=True)
class Cut:
    """The generation was cut by newer input before it answered."""


CUT: Final = Cut()


class Cutoffs:
    """The running reply generations of this process by conversation, and their signals."""

    def __init__(self) -> None:
        self._watching: dict[ConversationKey, list[tuple[CutBy, asyncio.Event]]] = {}

    @contextlib.contextmanager
    def watch(self, conversation: ConversationKey, cut_by: CutBy) -> Iterator[asyncio.Event]:
        """For the body: an event set when newer input ``cut_by`` accepts is stored here."""
        entry = (cut_by, asyncio.Event())
        self._watching.setdefault(conversation, []).append(entry)
        try:
            yield entry[1]
        finally:
            watching = self._watching.get(conversation, [])
            watching.remove(entry)
            if not watching:
                self._watching.pop(conversation, None)

    def notify(self, conversation: ConversationKey, newer: NewerInput) -> None:
        """Newer input of ``conversation`` was stored (committed): tell its generations.
        Synchronous, so nothing runs between the commit and the events being set."""
        for cut_by, event in tuple(self._watching.get(conversation, ())):
            if not event.is_set() and cut_by(newer):
                event.set()

    def running(self, conversation: ConversationKey) -> int:
        """How many generations of ``conversation`` watch now (tests, the console)."""
        return len(self._watching.get(conversation, ()))


async def unless_cut(work: Coroutine[Any, Any, T], cut: asyncio.Event) -> T | Cut:
    """The result of ``work``, or :data:`CUT` when ``cut`` is set first: the work is then
    cancelled and awaited (a model call's HTTP request or stream is closed by its
    cancellation). When both finish in the same step, the finished work wins: its answer
    goes to the final check, which decides as ever. Set before the call: ``work`` never
    starts."""
    if cut.is_set():
        work.close()
        return CUT
    task = asyncio.ensure_future(work)
    signal = asyncio.ensure_future(cut.wait())
    try:
        await asyncio.wait({task, signal}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        signal.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if task.cancelled():
        if not cut.is_set():
            raise asyncio.CancelledError  # cancelled from elsewhere, not by the cut
        return CUT
    return task.result()
