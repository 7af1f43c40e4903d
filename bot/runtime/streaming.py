"""Streaming a reply while it is written (docs/architecture.md#streaming).

The relay (:class:`Relay`) shows one generation's text on a platform's preview;
:func:`streamed` races the model's work against the stop button. What a turn keeps on record
of its preview, and the hand-over of a cut generation's preview, are bot/runtime/previews.py's.
The turn kernel (bot/runtime/turn.py) closes the relay before the final check and takes its
preview back when the final check did not record its generation.

Stop requests: a person pressing a Telegram draft's stop button reaches the process that
receives the update, which may not be the one writing the reply. The request is therefore a
lease named after the conversation and the draft (held for an hour, so the store forgets it
by itself), checked by the writing turn at every preview update and every ``STOP_POLL``
seconds while none is due (a silent model, a throttled draft); a turn in the same process is
told at once through an in-process event as well.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Final, Literal, TypeVar

from bot.core.clock import Clock
from bot.core.errors import AdapterError, PreviewThrottled, PreviewUnavailable, StoreError
from bot.core.events import ConversationKey
from bot.core.ports import Preview
from bot.store.contracts import LeaseStore

log = logging.getLogger("personabot.streaming")

T = TypeVar("T")

#: How long a stop request is kept: far longer than any generation.
STOP_SECONDS: Final = 3600.0


def stop_lease(conversation: ConversationKey, draft_id: int) -> str:
    """The lease that records a stop request for one draft."""
    return f"stop:{conversation}:{draft_id}"


class StopSignals:
    """Stop requests for drafts being written, across processes."""

    def __init__(self, *, store: LeaseStore, clock: Clock) -> None:
        self._store = store
        self._clock = clock
        self._local: dict[tuple[ConversationKey, int], asyncio.Event] = {}

    def watch(self, conversation: ConversationKey, draft_id: int) -> asyncio.Event:
        """An event set when this process hears of a stop of the draft (``forget`` after)."""
        return self._local.setdefault((conversation, draft_id), asyncio.Event())

    def forget(self, conversation: ConversationKey, draft_id: int) -> None:
        """The draft's generation is over."""
        self._local.pop((conversation, draft_id), None)

    async def request(self, conversation: ConversationKey, draft_id: int) -> None:
        """Record a stop (the store, for any process), and tell a local turn at once."""
        event = self._local.get((conversation, draft_id))
        if event is not None:
            event.set()
        await self._store.acquire_lease(
            stop_lease(conversation, draft_id), "stop-button", STOP_SECONDS, self._clock.now()
        )
        log.info("%s: stop of draft %d requested", conversation, draft_id)

    async def requested(self, conversation: ConversationKey, draft_id: int) -> bool:
        """Whether a stop of the draft was requested, here or in another process."""
        event = self._local.get((conversation, draft_id))
        if event is not None and event.is_set():
            return True
        expires = await self._store.lease_expires_at(stop_lease(conversation, draft_id))
        return expires is not None and expires > self._clock.now()


#: How long closing a relay waits for a preview call already in flight before cancelling it,
#: so a slow or rate-limited preview never holds up the final message for long.
CLOSE_WAIT: Final = 2.0
#: Failed preview updates (other than throttling) after which a turn stops previewing.
MAX_FAILURES: Final = 3
#: A posted preview (``edit``) waits for this much text, so one word is never a message.
MIN_POSTED: Final = 24
#: While no update is due (a silent model, a throttled preview), how often a draft's relay
#: looks for a stop heard by another process, in seconds.
STOP_POLL: Final = 1.0


class Relay:
    """Shows one generation's text on a Preview while the model writes it.

    Invariants (docs/architecture.md#streaming):
    - at most one preview call is in flight, and at most one starts per ``interval``; the
      deltas that arrive meanwhile are coalesced into the next update (the newest text wins);
    - a throttled preview (the platform's ``retry_after``, our own rate limiter) only skips
      updates: the final message never waits for it;
    - after :meth:`close` returns, no preview call is running or will start, so nothing
      shown can land after the final message;
    - the first update goes out as soon as there is text to show (``MIN_POSTED`` characters
      for a posted message), the first token is never throttled;
    - a lost lease (another worker took the turn over) stops all updates at once.
    """

    def __init__(
        self,
        preview: Preview,
        *,
        clock: Clock,
        interval: float,
        conversation: ConversationKey,
        stops: StopSignals | None = None,
        lost: asyncio.Event | None = None,
        on_posted: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        self.preview = preview
        self._clock = clock
        self._interval = max(0.0, interval)
        self._conversation = conversation
        self._stops = stops
        self._lost = lost
        self._on_posted = on_posted
        self._step = 0
        self._text = ""
        self._shown = ""
        self._wake = asyncio.Event()
        self._closing = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        #: Set when the person pressed the draft's stop button.
        self.stopped = asyncio.Event()
        self._stop_event: asyncio.Event | None = None
        #: Preview calls made (shown, throttled or failed), for metrics and benchmarks.
        self.calls = 0
        #: Posted previews of cut generations this one took over and has not yet replaced,
        #: and how to delete one (bot/runtime/previews.py deletes them once this one posts,
        #: or when the turn ends).
        self.predecessors: tuple[str, ...] = ()
        self.retract: Callable[[str], Awaitable[bool]] | None = None
        self._throttled_until = -float("inf")

    @property
    def shown(self) -> str:
        """The whole text as of the last update the person saw ("" when none)."""
        return self._shown

    def written(self, step: int) -> str:
        """What model call ``step`` streamed so far, shown or not ("" before its first text)."""
        return self._text if step == self._step else ""

    def text(self, step: int, delta: str) -> None:
        """The sink of ``ToolLoop.run``: a new model step starts its preview afresh."""
        if step != self._step:
            self._step, self._text = step, ""
        self._text += delta
        self._wake.set()

    def start(self) -> None:
        """Start the updater (idempotent)."""
        draft = self.preview.draft_id
        if self._stops is not None and draft is not None:
            self._stop_event = self._stops.watch(self._conversation, draft)
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"preview {self._conversation}")

    async def close(self) -> None:
        """Stop updating: an update in flight gets ``CLOSE_WAIT`` seconds, then is cancelled."""
        self._closing.set()
        self._wake.set()
        task, self._task = self._task, None
        if task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(task), CLOSE_WAIT)
            except TimeoutError:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            except Exception:  # a bug in a preview must never fail the turn
                log.exception("%s: the preview updater failed", self._conversation)
        draft = self.preview.draft_id
        if self._stops is not None and draft is not None:
            self._stops.forget(self._conversation, draft)

    async def discard(self) -> None:
        """Close, then take back what was shown (a posted message is deleted)."""
        await self.close()
        if self._shown or self.preview.message_id is not None or self._may_have_posted():
            await self.preview.discard()

    async def take_back_unknown(self) -> None:
        """After a reply that replaced no posted preview: a post whose answer never came may
        have arrived all the same; the preview takes it back if it can find it (Discord, by
        its nonce), so no half reply stays beside the reply."""
        if self.preview.message_id is None and self._may_have_posted():
            await self.preview.discard()

    def _may_have_posted(self) -> bool:
        """Whether a posted preview was tried without the preview knowing of a message."""
        return self.preview.kind == "edit" and self.preview.message_id is None and self.calls > 0

    def _gone(self) -> bool:
        return self._closing.is_set() or (self._lost is not None and self._lost.is_set())

    def _ready(self, text: str) -> bool:
        """Whether ``text`` is worth an update (new, visible, long enough to post)."""
        if text == self._shown or not text.strip():
            return False
        posting = self.preview.kind == "edit" and self.preview.message_id is None
        return not posting or len(text.strip()) >= MIN_POSTED

    async def _run(self) -> None:
        last = -float("inf")  # when the last update started
        not_before = -float("inf")  # throttled until
        failures = 0
        while not self._gone() and not self.stopped.is_set():
            if not self._wake.is_set():
                await self._wait(None, text=True)
                continue
            self._wake.clear()
            due = max(last + self._interval, not_before)
            if due > self._clock.now():
                await self._wait(due, text=False)
                if self._gone() or self.stopped.is_set():
                    return
            text = self._text
            if not self._ready(text):
                continue  # the next delta wakes us again
            last = self._clock.now()
            outcome = await self._update(text)
            if outcome == "throttled":
                not_before = self._throttled_until
                self._wake.set()  # try again once the wait is over
            elif outcome == "failed":
                failures += 1
                if failures >= MAX_FAILURES:
                    break
            elif outcome == "unavailable":
                break
            elif await self._stop_requested():
                self.stopped.set()
                return
        if self._shown and not self._gone():
            # No more updates, but what was shown keeps its stop button: still heard.
            await self._wait(None, text=False)

    async def _wait(self, until: float | None, *, text: bool) -> None:
        """Wait until the clock reaches ``until`` (None: no limit), new text (``text``), the
        close, a lost lease or a stop. A stop heard in this process ends the wait at once; one
        heard by another process is looked for every ``STOP_POLL`` seconds of a longer wait
        (a silent model, a long ``retry_after``), so a stop never waits for the next delta.
        Sets :attr:`stopped` on a stop."""
        stop = self._stop_event
        if until is None and text and stop is None:
            await self._wake.wait()  # nothing to look for but text (close sets it too)
            return
        events = [self._closing, self.stopped]
        events += [e for e in (self._lost, stop, self._wake if text else None) if e is not None]
        while True:
            left = None if until is None else until - self._clock.now()
            if left is not None and left <= 0:
                return
            polling = stop is not None and (left is None or left > STOP_POLL)
            fired = await self._sleep(STOP_POLL if polling else left, events)
            if stop is not None and stop.is_set():
                self.stopped.set()
                return
            if fired:
                return
            if polling and await self._stop_requested():
                self.stopped.set()
                return

    async def _update(self, text: str) -> Literal["shown", "throttled", "failed", "unavailable"]:
        """One preview call."""
        self.calls += 1
        posted = self.preview.message_id
        try:
            await self.preview.show(text)
        except PreviewThrottled as exc:
            self._throttled_until = self._clock.now() + max(0.0, exc.retry_after)
            log.debug("%s: preview throttled for %.1fs", self._conversation, exc.retry_after)
            return "throttled"
        except PreviewUnavailable as exc:
            log.info("%s: no preview in this chat (%s)", self._conversation, exc)
            return "unavailable"
        except AdapterError as exc:
            log.warning("%s: preview update failed: %s", self._conversation, exc)
            return "failed"
        self._shown = text
        message = self.preview.message_id
        if posted is None and message is not None and self._on_posted is not None:
            await self._on_posted(message)
        return "shown"

    async def _sleep(self, seconds: float | None, events: list[asyncio.Event]) -> bool:
        """Wait ``seconds`` on the clock (None: no limit) or until one of ``events`` is set:
        whether an event ended the wait."""
        waiters: list[asyncio.Future[object]] = [
            asyncio.ensure_future(event.wait()) for event in events
        ]
        if seconds is not None:
            waiters.append(asyncio.ensure_future(self._clock.sleep(seconds)))
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in waiters:
                task.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)
        return any(event.is_set() for event in events)

    async def _stop_requested(self) -> bool:
        """Whether the person stopped this draft (checked after each update: one read)."""
        draft = self.preview.draft_id
        if draft is None or self._stops is None:
            return False
        if self._stop_event is not None and self._stop_event.is_set():
            return True
        try:
            return await self._stops.requested(self._conversation, draft)
        except StoreError as exc:
            log.warning("%s: could not check for a stop request: %s", self._conversation, exc)
            return False


async def streamed(work: Coroutine[Any, Any, T], relay: Relay) -> T | None:
    """The result of ``work`` (the model writing into ``relay``), or None when the person
    pressed stop first: the work is cancelled then (its error, if any, is raised here)."""
    task = asyncio.ensure_future(work)
    stop = asyncio.ensure_future(relay.stopped.wait())
    try:
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if not task.cancelled():
        return task.result()  # the whole answer arrived (or its error is raised here)
    return None
