"""A platform's file store as an adapter's MediaSource sees it, in memory: registered files,
latency on the test's clock, and faults (the platform side of bot/runtime/media.py)."""

from __future__ import annotations

from collections.abc import Callable

from bot.core.clock import Clock
from bot.core.errors import MediaRejected
from bot.core.media import MediaRef
from tests.fakes.outlet import RecordingOutlet


class FakeFiles:
    """Serves registered bytes by ``MediaRef.ref``; ``faults[ref]`` raise, one per fetch."""

    def __init__(self, clock: Clock, *, latency: float = 0.0) -> None:
        self._clock = clock
        self.latency = latency
        self.files: dict[str, bytes] = {}
        self.faults: dict[str, list[Exception]] = {}
        self.fetched: list[str] = []

    async def fetch(
        self, media: MediaRef, *, chat_id: str, platform_message_id: str | None, max_bytes: int
    ) -> bytes:
        """The file's bytes after ``latency``; the next queued fault first, if any."""
        self.fetched.append(media.ref)
        if self.latency:
            await self._clock.sleep(self.latency)
        queued = self.faults.get(media.ref)
        if queued:
            raise queued.pop(0)
        data = self.files.get(media.ref)
        if data is None:
            raise MediaRejected("no such file")
        if len(data) > max_bytes:
            raise MediaRejected(f"{len(data)} bytes, more than {max_bytes}")
        return data


class MediaOutlet(RecordingOutlet):
    """A recording outlet whose platform also serves files (``media``, as adapters do)."""

    def __init__(self, clock: Clock, files: FakeFiles) -> None:
        super().__init__(clock)
        self.media = files


def files_of(factory: Callable[[], bytes], *refs: str, files: FakeFiles) -> None:
    """Register the same kind of file under several refs."""
    for ref in refs:
        files.files[ref] = factory()
