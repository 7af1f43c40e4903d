"""The cut-off: a reply's generation cut as soon as newer input makes it stale
(docs/architecture.md#queue rule 9).

Input stored while a turn generates would make the final check discard its reply (rule 5);
rather than let the model write it to the end, the ingestor tells the running generations of
the conversation here, in this process, at once (:meth:`Cutoffs.notify`). Each running
generation watches with its own predicate (:meth:`Cutoffs.watch`): only it knows its session,
its ``v0``, its messages and its hard cap, so it alone decides whether the final check would
discard it.

Input stored by another process (PostgreSQL) comes as an announcement naming the conversation
only (:meth:`Cutoffs.announced`, from the listener of bot/store/postgres/_wakeups.py): each of
its generations then asks the store whether the final check would discard it now (its
``stale`` check, one read). Checks of one generation never overlap: announcements that come
while one runs make one more run after it, so a burst of input costs at most two reads.

The signal is a hint that saves a generation, never a verdict that records or sends anything:
a signal that is missed (input stored between the turn's snapshot and its watch, an
announcement lost while the listener reconnects) only leaves the turn to the final check, as
before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from bot.core.errors import StoreError
from bot.core.events import ConversationKey, SessionKey

T = TypeVar("T")

log = logging.getLogger("personabot.queue")


@dataclass(frozen=True, slots=True)
class Stored:
    """A new pending message (one that asks for a reply), stored at ``at`` on the ingest
    clock (the clock ``first_pending_at`` is written by) as ``version`` of ``session``."""

    session: SessionKey
    version: int
    at: float


@dataclass(frozen=True, slots=True)
class Edited:
    """An unanswered message (by its platform id) edited at ``at`` (whether that re-armed a
    pending message, the store knows: a generation asks it)."""

    message_id: str
    at: float


NewerInput = Stored | Edited
#: Whether this newer input makes a running generation stale (its own rules decide); None:
#: only the store can tell (the generation's ``stale`` check runs then).
CutBy = Callable[[NewerInput], bool | None]
#: Whether the store holds input that makes the generation stale now (another process's).
Stale = Callable[[], Awaitable[bool]]


@dataclass(frozen=True, slots=True)
class Cut:
    """The generation was cut by newer input before it answered."""


CUT: Final = Cut()


@dataclass(eq=False, slots=True)
class _Watch:
    """One running generation: its predicate, its signal, its store check in flight."""

    cut_by: CutBy
    stale: Stale | None
    event: asyncio.Event = field(default_factory=asyncio.Event)
    checking: asyncio.Task[None] | None = None
    again: bool = False  # announced while a check ran: check once more after it


class Cutoffs:
    """The running reply generations of this process by conversation, and their signals."""

    def __init__(self) -> None:
        self._watching: dict[ConversationKey, list[_Watch]] = {}
        #: Store checks run for announcements (tests, the console).
        self.checks = 0

    @contextlib.contextmanager
    def watch(
        self, conversation: ConversationKey, cut_by: CutBy, stale: Stale | None = None
    ) -> Iterator[asyncio.Event]:
        """For the body: an event set when newer input ``cut_by`` accepts is stored here, or
        when, on an announcement of the conversation, ``stale`` says the store holds some."""
        entry = _Watch(cut_by, stale)
        self._watching.setdefault(conversation, []).append(entry)
        try:
            yield entry.event
        finally:
            watching = self._watching.get(conversation, [])
            watching.remove(entry)
            if not watching:
                self._watching.pop(conversation, None)
            if entry.checking is not None:
                entry.checking.cancel()  # its answer would set an event nobody waits for

    def notify(self, conversation: ConversationKey, newer: NewerInput) -> None:
        """Newer input of ``conversation`` was stored (committed): tell its generations.
        Synchronous, so nothing runs between the commit and the events being set."""
        for entry in tuple(self._watching.get(conversation, ())):
            if entry.event.is_set():
                continue
            verdict = entry.cut_by(newer)
            if verdict:
                entry.event.set()
            elif verdict is None:
                self._check_soon(entry)

    def announced(self, conversation: ConversationKey | None) -> None:
        """Some process armed ``conversation``'s timer (None: announcements may have been
        missed, every conversation): its generations check the store."""
        if conversation is None:
            entries = [e for watching in self._watching.values() for e in watching]
        else:
            entries = list(self._watching.get(conversation, ()))
        for entry in entries:
            self._check_soon(entry)

    def _check_soon(self, entry: _Watch) -> None:
        """Run the entry's store check (one at a time: a request during one runs after it)."""
        if entry.stale is None or entry.event.is_set():
            return
        if entry.checking is not None:
            entry.again = True
            return
        entry.checking = asyncio.ensure_future(self._check(entry, entry.stale))

    async def _check(self, entry: _Watch, stale: Stale) -> None:
        try:
            while not entry.event.is_set():
                entry.again = False
                self.checks += 1
                try:
                    if await stale():
                        entry.event.set()
                except StoreError as exc:
                    # A failed read cuts nothing: the final check still decides.
                    log.warning("could not check the store for newer input: %s", exc)
                except Exception:
                    log.exception("the check for newer input failed")
                if not entry.again:
                    break
        finally:
            entry.checking = None

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
