"""The relay between a model's text and a platform preview (bot/runtime/streaming.py), on
the manual clock: throttling, coalescing, rate limits, closing, stop requests, lost leases.

The preview here is a recording implementation of the ``Preview`` port (the adapters' own
previews are tested against the fake platforms in tests/adapters/).
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Literal

import pytest

from bot.core.clock import ManualClock
from bot.core.errors import AdapterError, PreviewThrottled, PreviewUnavailable
from bot.core.events import ConversationKey
from bot.runtime.streaming import CLOSE_WAIT, MIN_POSTED, Relay, StopSignals
from bot.store.base import BaseStore
from tests.backends import StoreFactory

CHAT = ConversationKey("telegram", "42", None, "bot")


class Shown:
    """A preview that records what it was asked to show, with scripted failures."""

    def __init__(
        self, clock: ManualClock, kind: Literal["draft", "edit", "console"] = "draft"
    ) -> None:
        self._clock = clock
        self._kind = kind
        self.shown: list[tuple[float, str]] = []
        self.failures: list[Exception] = []
        self.gate: asyncio.Event | None = None
        self.discarded = 0
        self._posted: str | None = None

    @property
    def kind(self) -> Literal["draft", "edit", "console"]:
        return self._kind

    @property
    def draft_id(self) -> int | None:
        return 7 if self._kind == "draft" else None

    @property
    def message_id(self) -> str | None:
        return self._posted

    async def show(self, text: str) -> None:
        if self.gate is not None:
            await self.gate.wait()
        if self.failures:
            raise self.failures.pop(0)
        self.shown.append((self._clock.now(), text))
        if self._kind == "edit":
            self._posted = "m1"

    async def discard(self) -> None:
        self.discarded += 1

    @property
    def texts(self) -> list[str]:
        return [t for _, t in self.shown]


async def _idle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


async def test_the_first_text_is_shown_at_once_and_later_deltas_are_coalesced(
    clock: ManualClock,
) -> None:
    preview = Shown(clock)
    relay = Relay(preview, clock=clock, interval=1.0, conversation=CHAT)
    relay.start()
    relay.text(0, "Hello")
    await _idle()
    assert preview.texts == ["Hello"]  # no throttle before the first update
    for word in [" there", ",", " how", " are", " you"]:
        relay.text(0, word)
        await _idle()
    assert preview.texts == ["Hello"]  # within the interval: nothing more yet
    await clock.advance(1.0)
    await _idle()
    assert preview.texts == ["Hello", "Hello there, how are you"]  # one update, newest text
    await relay.close()
    assert relay.shown == "Hello there, how are you"


async def test_updates_never_come_faster_than_the_interval(clock: ManualClock) -> None:
    preview = Shown(clock)
    relay = Relay(preview, clock=clock, interval=1.0, conversation=CHAT)
    relay.start()
    for n in range(50):
        relay.text(0, f"w{n} ")
        await _idle()
        await clock.advance(0.1)
    await relay.close()
    times = [t for t, _ in preview.shown]
    assert len(times) >= 4
    assert all(b - a >= 1.0 - 1e-9 for a, b in itertools.pairwise(times))


async def test_a_rate_limited_preview_skips_updates_and_never_delays_closing(
    clock: ManualClock,
) -> None:
    preview = Shown(clock)
    preview.failures.append(PreviewThrottled("429", retry_after=30))
    relay = Relay(preview, clock=clock, interval=1.0, conversation=CHAT)
    relay.start()
    relay.text(0, "Hello")
    await _idle()
    assert preview.texts == []  # throttled
    relay.text(0, " world")
    await clock.advance(10)
    await _idle()
    assert preview.texts == []  # still inside retry_after
    await clock.advance(21)
    await _idle()
    assert preview.texts == ["Hello world"]
    relay.text(0, "!")
    preview.failures.append(PreviewThrottled("429", retry_after=600))
    await clock.advance(1)
    await _idle()
    # Closing during a 600 s flood wait returns at once: the final message is not delayed.
    await asyncio.wait_for(relay.close(), 0.5)


async def test_closing_waits_for_the_update_in_flight_and_nothing_starts_after(
    clock: ManualClock,
) -> None:
    preview = Shown(clock)
    preview.gate = asyncio.Event()
    relay = Relay(preview, clock=clock, interval=1.0, conversation=CHAT)
    relay.start()
    relay.text(0, "Hello")
    await _idle()
    closing = asyncio.ensure_future(relay.close())
    await _idle()
    assert not closing.done()  # the update in flight is waited for (briefly)
    preview.gate.set()
    await closing
    relay.text(0, " more")
    await clock.advance(5)
    await _idle()
    assert preview.texts == ["Hello"]  # nothing after close


async def test_a_hung_update_is_cancelled_after_the_close_wait(clock: ManualClock) -> None:
    preview = Shown(clock)
    preview.gate = asyncio.Event()  # never set: the platform does not answer
    relay = Relay(preview, clock=clock, interval=1.0, conversation=CHAT)
    relay.start()
    relay.text(0, "Hello")
    await _idle()
    await asyncio.wait_for(relay.close(), CLOSE_WAIT + 2)
    assert preview.texts == []


async def test_an_unavailable_preview_is_not_tried_again(clock: ManualClock) -> None:
    preview = Shown(clock)
    preview.failures.append(PreviewUnavailable("TEXTDRAFT_PEER_INVALID"))
    relay = Relay(preview, clock=clock, interval=1.0, conversation=CHAT)
    relay.start()
    relay.text(0, "Hello")
    await _idle()
    for _ in range(5):
        relay.text(0, " more")
        await clock.advance(1)
    await relay.close()
    assert preview.texts == []
    assert relay.calls == 1


async def test_repeated_failures_end_previewing_for_the_turn(clock: ManualClock) -> None:
    preview = Shown(clock)
    preview.failures.extend(AdapterError("boom") for _ in range(10))
    relay = Relay(preview, clock=clock, interval=1.0, conversation=CHAT)
    relay.start()
    for _ in range(10):
        relay.text(0, "x ")
        await _idle()
        await clock.advance(1)
    await relay.close()
    assert relay.calls == 3


async def test_a_posted_preview_waits_for_enough_text_and_is_recorded(clock: ManualClock) -> None:
    preview = Shown(clock, kind="edit")
    posted: list[str] = []

    async def on_posted(message_id: str) -> None:
        posted.append(message_id)

    relay = Relay(preview, clock=clock, interval=1.0, conversation=CHAT, on_posted=on_posted)
    relay.start()
    relay.text(0, "Hi")
    await _idle()
    await clock.advance(2)
    assert preview.texts == []  # one word is never posted as a message
    relay.text(0, " " + "x" * MIN_POSTED)
    await _idle()
    assert len(preview.texts) == 1
    assert posted == ["m1"]  # on record once, when posted
    relay.text(0, " and more")
    await clock.advance(1)
    await relay.close()
    assert posted == ["m1"]
    await relay.discard()
    assert preview.discarded == 1


async def test_a_new_model_step_starts_the_preview_afresh(clock: ManualClock) -> None:
    preview = Shown(clock)
    relay = Relay(preview, clock=clock, interval=1.0, conversation=CHAT)
    relay.start()
    relay.text(0, "Let me look that up.")
    await _idle()
    relay.text(1, "It is sunny")
    await clock.advance(1)
    await relay.close()
    assert preview.texts == ["Let me look that up.", "It is sunny"]


async def test_a_lost_lease_stops_all_updates(clock: ManualClock) -> None:
    preview = Shown(clock)
    lost = asyncio.Event()
    relay = Relay(preview, clock=clock, interval=1.0, conversation=CHAT, lost=lost)
    relay.start()
    relay.text(0, "Hello")
    await _idle()
    lost.set()
    relay.text(0, " world")
    await clock.advance(3)
    await relay.close()
    assert preview.texts == ["Hello"]


async def test_a_stop_request_from_another_process_reaches_the_relay(
    clock: ManualClock, stores: object
) -> None:
    assert isinstance(stores, StoreFactory)
    async with stores.new() as writer, stores.new() as receiver:
        assert isinstance(writer, BaseStore)
        preview = Shown(clock)
        here = StopSignals(store=writer, clock=clock)
        there = StopSignals(store=receiver, clock=clock)  # the process that got the update
        relay = Relay(preview, clock=clock, interval=1.0, conversation=CHAT, stops=here)
        relay.start()
        relay.text(0, "Hello")
        await _idle()
        await there.request(CHAT, 7)
        assert not await there.requested(CHAT, 8)  # another draft is not stopped
        relay.text(0, " world")
        await clock.advance(1)
        await asyncio.wait_for(relay.stopped.wait(), 5)
        await relay.close()
        assert await here.requested(CHAT, 7)
        await clock.advance(3700)
        assert not await here.requested(CHAT, 7)  # the request expires by itself


async def test_a_stop_ends_the_relay_while_the_model_is_silent(
    clock: ManualClock, stores: StoreFactory
) -> None:
    # A stalled stream sends no delta, a throttled preview makes no call: neither may hold
    # the stop back (the model call would run on, and a stall would even be retried).
    async with stores.new() as writer, stores.new() as receiver:
        preview = Shown(clock)
        stops = StopSignals(store=writer, clock=clock)
        relay = Relay(preview, clock=clock, interval=1.0, conversation=CHAT, stops=stops)
        relay.start()
        relay.text(0, "Hello")
        await _idle()
        await stops.request(CHAT, 7)  # heard in this process; no more text comes
        await asyncio.wait_for(relay.stopped.wait(), 1)
        await relay.close()

        throttled = Shown(clock)
        throttled.failures.append(PreviewThrottled("429", retry_after=600))
        relay = Relay(throttled, clock=clock, interval=1.0, conversation=CHAT, stops=stops)
        relay.start()
        relay.text(0, "Hello")
        await _idle()
        await stops.request(CHAT, 7)
        await asyncio.wait_for(relay.stopped.wait(), 1)  # not after the 600 s
        await relay.close()

        # Heard by another process, while the model is silent: seen within a few seconds.
        there = StopSignals(store=receiver, clock=clock)
        quiet = Shown(clock)
        other = ConversationKey("telegram", "43", None, "bot")
        relay = Relay(quiet, clock=clock, interval=1.0, conversation=other, stops=stops)
        relay.start()
        relay.text(0, "Hello")
        await _idle()
        await there.request(other, 7)
        for _ in range(3):
            await clock.advance(1.0)
            await _idle()
        await asyncio.wait_for(relay.stopped.wait(), 1)
        await relay.close()


async def test_a_post_that_may_have_arrived_unanswered_is_taken_back(clock: ManualClock) -> None:
    # The first post of an edit preview gave up (its answer never came): the relay does not
    # know of a message, yet discarding still asks the preview to take back what may be there.
    preview = Shown(clock, kind="edit")
    preview.failures.append(PreviewThrottled("answer too late", retry_after=3))
    relay = Relay(preview, clock=clock, interval=1.0, conversation=CHAT)
    relay.start()
    relay.text(0, "x" * MIN_POSTED)
    await _idle()
    await relay.discard()
    assert preview.texts == [] and preview.discarded == 1
    untried = Relay(Shown(clock, kind="edit"), clock=clock, interval=1.0, conversation=CHAT)
    untried.start()
    await untried.take_back_unknown()
    assert isinstance(untried.preview, Shown) and untried.preview.discarded == 0
    await untried.close()
