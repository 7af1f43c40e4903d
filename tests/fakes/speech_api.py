"""A small, scriptable fake of OpenAI's ``POST /v1/audio/speech`` for tests.

A real HTTP server (aiohttp, ``127.0.0.1``, a free port), so the synthesizer's real aiohttp
client sends the JSON, reads the audio and meets errors and hangs for real.

::

    async with FakeSpeechAPI() as api:
        voice = OpenAISpeech(api.base_url + "/v1", api_key="sk-test")
        api.fail_next(status=500)                      # first call: a server error
        api.hang_next()                                # next: no answer until closed
        call = api.calls[-1]                           # what the client sent (JSON body)

Behaviour, like OpenAI's endpoint:

* Every POST is recorded in :attr:`FakeSpeechAPI.calls` as soon as its body is read, and
  :attr:`FakeSpeechAPI.arrived` is set (a test waits for a synthesis in flight on it).
* A body without ``model``, ``voice`` or ``input`` is answered 400 with OpenAI's error shape;
  with :attr:`api_key` set, a missing or different ``Authorization: Bearer`` 401.
* With :attr:`FakeSpeechAPI.gate` set to an event, every call waits for it first (a test
  holds a synthesis in flight until it saw what happens meanwhile).
* Otherwise the next scripted outcome is popped (:meth:`fail_next`, :meth:`hang_next`,
  :meth:`not_audio_next`); with none, the audio of ``response_format``: a small Ogg Opus file
  (:func:`fake_ogg`, ``seconds_per_char`` seconds for each character of ``input``) for
  ``opus``, MP3 frame bytes for ``mp3``.
"""

from __future__ import annotations

import asyncio
import struct
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

from tests.fakes.server import FakeServer, json_body

__all__ = ["FakeSpeechAPI", "SpeechCall", "fake_mp3", "fake_ogg"]

PATH = "/v1/audio/speech"
_PRE_SKIP = 312


def _page(granule: int, payload: bytes, sequence: int) -> bytes:
    """One Ogg page (no real CRC: nothing here checks it)."""
    header = b"OggS" + bytes([0, 0]) + struct.pack("<qIII", granule, 1, sequence, 0)
    return header + bytes([1, len(payload)]) + payload


def fake_ogg(seconds: float) -> bytes:
    """A tiny Ogg Opus file that says it lasts ``seconds`` (its last page's granule)."""
    head = b"OpusHead" + bytes([1, 1]) + struct.pack("<HIhB", _PRE_SKIP, 48_000, 0, 0)
    tags = b"OpusTags" + struct.pack("<I", 4) + b"fake" + struct.pack("<I", 0)
    granule = _PRE_SKIP + round(seconds * 48_000)
    return _page(0, head, 0) + _page(0, tags, 1) + _page(granule, b"\xfc\xff\xfe", 2)


def fake_mp3() -> bytes:
    """A few bytes that start like an MP3 frame."""
    return b"\xff\xfb\x90\x64" + bytes(60)


@dataclass(frozen=True, slots=True)
class SpeechCall:
    """One request the fake received: its ``Authorization`` header and JSON body."""

    authorization: str | None
    body: dict[str, Any] = field(default_factory=dict)

    @property
    def input(self) -> str | None:
        value = self.body.get("input")
        return value if isinstance(value, str) else None


@dataclass(frozen=True, slots=True)
class _Scripted:
    kind: Literal["fail", "hang", "not_audio"]
    status: int = 500
    message: str = "the server had an error"


class FakeSpeechAPI(FakeServer):
    """``POST /v1/audio/speech`` on 127.0.0.1; ``base_url + "/v1"`` is the client's base."""

    def __init__(self, *, api_key: str | None = None, seconds_per_char: float = 0.06) -> None:
        super().__init__()
        self.api_key = api_key
        self.seconds_per_char = seconds_per_char
        self.calls: list[SpeechCall] = []
        self.arrived = asyncio.Event()
        self._script: deque[_Scripted] = deque()
        self._released = asyncio.Event()
        #: When set, each call waits for this event before it answers.
        self.gate: asyncio.Event | None = None

    @property
    def url(self) -> str:
        """The base URL a voice config names (``.../v1``)."""
        return self.base_url + "/v1"

    def fail_next(self, status: int = 500, message: str = "the server had an error") -> None:
        """The next call is answered ``status`` with OpenAI's error body."""
        self._script.append(_Scripted("fail", status, message))

    def hang_next(self) -> None:
        """The next call gets no answer until the fake closes (or the client gives up)."""
        self._script.append(_Scripted("hang"))

    def not_audio_next(self) -> None:
        """The next call is answered 200 with JSON instead of audio (a confused gateway)."""
        self._script.append(_Scripted("not_audio"))

    def inputs(self) -> list[str | None]:
        """The texts asked to be spoken, in order."""
        return [c.input for c in self.calls]

    def _build_app(self) -> web.Application:
        app = web.Application()
        app.router.add_post(PATH, self._speech)
        return app

    async def _before_cleanup(self) -> None:
        self._released.set()

    async def _speech(self, request: web.Request) -> web.StreamResponse:
        body = await json_body(request)
        self.calls.append(SpeechCall(request.headers.get("Authorization"), body))
        self.arrived.set()
        if self.api_key is not None and request.headers.get("Authorization") != (
            f"Bearer {self.api_key}"
        ):
            return _error(401, "Incorrect API key provided")
        if self.gate is not None:
            await self.gate.wait()
        missing = [k for k in ("model", "voice", "input") if not body.get(k)]
        if missing:
            return _error(400, f"Missing required parameter: '{missing[0]}'")
        if self._script:
            scripted = self._script.popleft()
            if scripted.kind == "fail":
                return _error(scripted.status, scripted.message)
            if scripted.kind == "hang":
                await self._released.wait()
                return _error(503, "closing")
            return web.json_response({"status": "queued"})
        if body.get("response_format") == "mp3":
            return web.Response(body=fake_mp3(), content_type="audio/mpeg")
        seconds = len(str(body["input"])) * self.seconds_per_char
        return web.Response(body=fake_ogg(seconds), content_type="audio/ogg")


def _error(status: int, message: str) -> web.Response:
    return web.json_response(
        {"error": {"message": message, "type": "invalid_request_error", "code": None}},
        status=status,
    )
