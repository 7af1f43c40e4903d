"""A small, scriptable fake of OpenAI's ``POST /v1/audio/transcriptions`` for tests.

A real HTTP server (aiohttp, ``127.0.0.1``, a free port), so the transcriber's real aiohttp
client does the multipart upload, timeouts and error parsing for real.

::

    async with FakeTranscriptionAPI() as api:
        stt = OpenAITranscriber(api.base_url, model="whisper-1", api_key="sk-test")
        api.fail_next(status=429, retry_after=3)           # first call: rate limited
        api.transcript = "hello"                           # then: this transcript
        text = await stt.transcribe(b"...", filename="voice.ogg", media_type="audio/ogg")
        call = api.calls[-1]                               # what the client sent

Behaviour, like OpenAI's endpoint:

* Every POST to the endpoint is recorded in :attr:`FakeTranscriptionAPI.calls` (failures
  included), as soon as its form is read.
* A body that is not ``multipart/form-data``, a form without a ``file`` part or without a
  ``model`` field, a file over :attr:`max_bytes` (413), a file name whose extension is not an
  audio format OpenAI decodes (400) or a model not in :attr:`models` (404, when set) is refused
  with OpenAI's error shape ``{"error": {"message", "type", "param", "code"}}``; with
  :attr:`api_key` set, a missing or different ``Authorization: Bearer`` is answered 401.
* Otherwise the next scripted outcome is popped (:meth:`fail_next`, :meth:`hang_next`,
  :meth:`plain_text_next`, :meth:`disconnect_next`); with none, the transcript is
  :attr:`transcript`, or, when that is None, the audio bytes decoded as UTF-8 (so a test can
  tell calls apart by what it uploads). ``response_format`` ``json`` answers ``{"text"}``,
  ``text`` a plain body, ``verbose_json`` adds ``language``, ``duration`` and ``segments``.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any, Literal

from aiohttp import BodyPartReader, web

from tests.fakes.server import FakeServer

__all__ = ["OPENAI_EXTENSIONS", "FakeTranscriptionAPI", "RecordedCall", "Scripted"]

PATH = "/v1/audio/transcriptions"
#: The file extensions OpenAI's endpoint accepts (it decodes by extension).
OPENAI_EXTENSIONS = frozenset(
    {"flac", "m4a", "mp3", "mp4", "mpeg", "mpga", "oga", "ogg", "opus", "wav", "webm"}
)
_ERROR_TYPES = {401: "invalid_api_key", 429: "rate_limit_exceeded"}


@dataclass(frozen=True, slots=True)
class RecordedCall:
    """One request the fake received; ``fields`` are the form's text fields."""

    path: str
    authorization: str | None
    content_type: str  # of the whole request
    filename: str | None = None
    file_type: str | None = None  # the file part's Content-Type
    audio: bytes = b""
    fields: dict[str, str] = field(default_factory=dict)

    @property
    def model(self) -> str | None:
        return self.fields.get("model")

    @property
    def language(self) -> str | None:
        return self.fields.get("language")

    @property
    def prompt(self) -> str | None:
        return self.fields.get("prompt")

    @property
    def response_format(self) -> str | None:
        return self.fields.get("response_format")


@dataclass(frozen=True, slots=True)
class Scripted:
    """One scripted outcome (see the ``*_next`` methods)."""

    action: Literal["fail", "hang", "plain", "disconnect"]
    status: int = 200
    message: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    echo_authorization: bool = False
    text: str = ""
    raw_body: bytes | None = None


class FakeTranscriptionAPI(FakeServer):
    """A local transcription server; use as ``async with FakeTranscriptionAPI() as api``.

    Attributes you may set at any time: ``transcript`` (None: the audio decoded as UTF-8),
    ``api_key`` (None: any or no key is accepted), ``models`` (None: any model),
    ``max_bytes`` (OpenAI's 25 MB), ``check_extension`` (True).
    """

    def __init__(self, *, transcript: str | None = None, api_key: str | None = None) -> None:
        super().__init__()
        self.transcript = transcript
        self.api_key = api_key
        self.models: set[str] | None = None
        self.max_bytes = 25 * 1024 * 1024
        self.check_extension = True
        self.calls: list[RecordedCall] = []
        self._script: deque[Scripted] = deque()
        self._release = asyncio.Event()  # set on close: held requests end
        self.arrived = asyncio.Event()  # set whenever a call has been recorded

    # ----------------------------------------------------------------- scripting

    def fail_next(
        self,
        *,
        status: int,
        message: str | None = None,
        retry_after: float | str | None = None,
        echo_authorization: bool = False,
        raw_body: bytes | None = None,
        times: int = 1,
    ) -> None:
        """Queue ``times`` error answers in OpenAI's shape.

        ``echo_authorization`` appends the request's ``Authorization`` header to the message
        (a careless server); ``raw_body`` replaces the JSON error with these bytes.
        """
        headers = {} if retry_after is None else {"Retry-After": str(retry_after)}
        canned = Scripted(
            "fail",
            status=status,
            message=message or f"fake error ({status})",
            headers=headers,
            echo_authorization=echo_authorization,
            raw_body=raw_body,
        )
        self._script.extend([canned] * times)

    def hang_next(self) -> None:
        """The next call gets no answer until the fake closes (a client timeout test)."""
        self._script.append(Scripted("hang"))

    def plain_text_next(self, text: str, *, content_type: str = "text/plain") -> None:
        """The next call is answered ``text`` as a plain body, ignoring ``response_format``."""
        self._script.append(Scripted("plain", text=text, headers={"Content-Type": content_type}))

    def disconnect_next(self) -> None:
        """The next call gets its headers and half a JSON body, then the connection drops."""
        self._script.append(Scripted("disconnect"))

    # ---------------------------------------------------------------- inspection

    @property
    def base_url(self) -> str:
        """The ``/v1`` base URL a client appends ``/audio/transcriptions`` to."""
        return f"{super().base_url}/v1"

    # ----------------------------------------------------------------- handlers

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        auth = request.headers.get("Authorization")
        call = RecordedCall(request.path, auth, request.content_type)
        if request.content_type != "multipart/form-data":
            self._record(call)
            return _error(400, "Expected multipart/form-data.", param=None)
        call = await _read_form(request, call)
        self._record(call)
        if self.api_key is not None and auth != f"Bearer {self.api_key}":
            return _error(401, "Incorrect API key provided.", code="invalid_api_key")
        if refused := self._validate(call):
            return refused
        scripted = self._script.popleft() if self._script else None
        if scripted is None:
            return self._answer(call)
        if scripted.action == "fail":
            return _scripted_error(scripted, auth)
        if scripted.action == "plain":
            return web.Response(body=scripted.text.encode(), headers=scripted.headers)
        if scripted.action == "hang":
            await self._release.wait()
            return web.Response(status=503)
        return await _disconnect(request)

    def _validate(self, call: RecordedCall) -> web.Response | None:
        if call.filename is None:
            return _error(400, "you must provide a file", param="file")
        if not call.model:
            return _error(400, "you must provide a model parameter", param="model")
        if len(call.audio) > self.max_bytes:
            message = f"Maximum content size limit ({self.max_bytes}) exceeded."
            return _error(413, message, param="file")
        extension = PurePosixPath(call.filename).suffix.lstrip(".").lower()
        if self.check_extension and extension not in OPENAI_EXTENSIONS:
            supported = ", ".join(f"'{e}'" for e in sorted(OPENAI_EXTENSIONS))
            return _error(400, f"Invalid file format. Supported formats: [{supported}]")
        if self.models is not None and call.model not in self.models:
            message = f"The model `{call.model}` does not exist or you do not have access to it."
            return _error(404, message, param="model", code="model_not_found")
        return None

    def _answer(self, call: RecordedCall) -> web.Response:
        text = self.transcript
        if text is None:
            text = call.audio.decode("utf-8", errors="replace")
        fmt = call.response_format or "json"
        if fmt == "text":
            return web.Response(text=text)
        body: dict[str, Any] = {"text": text}
        if fmt == "verbose_json":
            body |= {"task": "transcribe", "language": call.language or "english", "segments": []}
            body["duration"] = 1.0
        elif fmt != "json":
            return _error(400, f"Unsupported response_format: {fmt}", param="response_format")
        return web.json_response(body)

    def _record(self, call: RecordedCall) -> None:
        self.calls.append(call)
        self.arrived.set()

    async def _unknown(self, request: web.Request) -> web.Response:
        self._record(RecordedCall(request.path, request.headers.get("Authorization"), ""))
        return _error(404, f"Invalid URL ({request.method} {request.path})")

    # ----------------------------------------------------------------- lifecycle

    def _build_app(self) -> web.Application:
        # Above the biggest upload a test makes, so ``max_bytes`` is what answers 413.
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post(PATH, self._handle)
        app.router.add_route("*", "/{tail:.*}", self._unknown)
        return app

    async def _before_cleanup(self) -> None:
        self._release.set()


async def _read_form(request: web.Request, call: RecordedCall) -> RecordedCall:
    fields: dict[str, str] = {}
    filename = file_type = None
    audio = b""
    reader = await request.multipart()
    async for part in reader:
        if not isinstance(part, BodyPartReader):
            continue  # a nested multipart: not something a client of this endpoint sends
        if part.name == "file":
            filename = part.filename or ""
            file_type = part.headers.get("Content-Type")
            audio = bytes(await part.read())
        elif part.name:
            fields[part.name] = await part.text()
    return RecordedCall(
        call.path, call.authorization, call.content_type, filename, file_type, audio, fields
    )


def _error(
    status: int, message: str, *, param: str | None = None, code: str | None = None
) -> web.Response:
    kind = "invalid_request_error" if status < 500 else "server_error"
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return web.json_response(body, status=status)


def _scripted_error(scripted: Scripted, auth: str | None) -> web.Response:
    if scripted.raw_body is not None:
        return web.Response(
            status=scripted.status, body=scripted.raw_body, headers=scripted.headers
        )
    message = scripted.message
    if scripted.echo_authorization:
        message += f" (you sent Authorization: {auth})"
    response = _error(scripted.status, message, code=_ERROR_TYPES.get(scripted.status))
    response.headers.update(scripted.headers)
    return response


async def _disconnect(request: web.Request) -> web.StreamResponse:
    """Promise a JSON body, send part of it, and drop the connection."""
    full = json.dumps({"text": "this answer never arrives whole"}).encode()
    response = web.StreamResponse(
        headers={"Content-Type": "application/json", "Content-Length": str(len(full))}
    )
    await response.prepare(request)
    await response.write(full[: len(full) // 2])
    if request.transport is not None:
        request.transport.close()
    return response
