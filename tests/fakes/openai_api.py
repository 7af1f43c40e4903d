"""A small, scriptable fake of an OpenAI-compatible Chat Completions endpoint for tests.

A real HTTP server (aiohttp, ``127.0.0.1``, a free port), so tests drive the real ``openai``
SDK through it: retries, headers, error parsing, server-sent events and timeouts happen for real.

::

    async with FakeOpenAIAPI() as api:
        llm = OpenAICompatLLM(base_url=api.api_url, api_key="sk-test")  # .../v1
        api.fail_next(status=429, retry_after=2)
        api.reply_next("hello", cached_tokens=30)
        body = api.last_request.body                  # the JSON the SDK sent

Behaviour of ``POST /v1/chat/completions``:

* Every call is recorded in :attr:`FakeOpenAIAPI.requests`, failures included.
* With :attr:`api_key` set, a request without ``Authorization: Bearer <that key>`` is answered
  ``401 invalid_api_key`` (a local server takes any key: ``api_key = None``, the default).
* Requests are checked as the real API checks them, each failure a ``400
  invalid_request_error`` in OpenAI's error shape (``{"error": {"message", "type", "param",
  "code"}}``): ``model`` and ``messages`` required; every role one of system, developer, user,
  assistant, tool; every ``tool`` message answers an id of the assistant ``tool_calls`` right
  before it, and every such id is answered before the next other message; an ``image_url``
  part holds an http(s) URL or a ``data:image/<jpeg|png|gif|webp>;base64,`` URL whose bytes
  are that kind of image; ``stream_options`` only with ``stream``. With
  :attr:`reject_max_tokens` (OpenAI's reasoning models) ``max_tokens`` is refused
  (``param: "max_tokens"``) in favour of ``max_completion_tokens``. More than 4 ``stop``
  sequences are refused (``param: "stop"``), and with :attr:`reject_stop` (OpenAI's reasoning
  models) any ``stop`` is.
* Otherwise the next scripted outcome is popped (:meth:`fail_next`, :meth:`reply_next`,
  :meth:`tool_calls_next`); with none the default answer is :attr:`reply_text` (None: an echo
  of the last user text), ``finish_reason`` ``"stop"``, usage from :attr:`usage` (None: the
  answer reports no usage, as some local servers do). Its text ends before the earliest of
  the request's ``stop`` sequences in it, as a real model's does.
* :attr:`latency` seconds are waited before every answer; :attr:`received` is set when a
  request arrives.

Streaming (``"stream": true``): checks and scripted errors still answer before the stream, as
plain HTTP errors. A successful answer is ``text/event-stream`` of ``data: {chunk}`` events: one
with the role, the content in word-ish tokens (tests.fakes.messages_api.tokens), each tool call
as a first delta (id, name, empty arguments) and its arguments in pieces, a chunk with the
``finish_reason``, a usage chunk with no choices when ``stream_options.include_usage`` asked
for it (and the answer reports usage), and ``data: [DONE]``. A *token* is one content or
arguments delta.

* :attr:`token_interval` seconds between two tokens.
* :meth:`fail_midstream_next`: the next stream breaks after ``after_tokens`` tokens, by an
  ``error`` event (``"error"``), a connection closed mid-body (``"disconnect"``), or a body that
  ends cleanly but early, without finish_reason and ``[DONE]`` (``"truncate"``).
* :meth:`pause_after_tokens` holds the next stream after ``n`` tokens (a StreamPause).
* :attr:`RecordedRequest.abandoned_at`: when the client closed the request before its answer
  was complete (a failed write, or with ``notice_disconnects=True`` any request still waiting).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import itertools
import json
import time
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

from tests.fakes.messages_api import MAX_REQUEST_BYTES, StreamPause, stop_at, tokens
from tests.fakes.server import FakeServer, json_body

__all__ = ["CannedError", "CannedReply", "FakeOpenAIAPI", "RecordedRequest"]

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
_IMAGE_MAGIC: dict[str, tuple[bytes, ...]] = {
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),
}
MAX_STOP = 4  # stop sequences the real API takes
_ERROR_TYPES = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "unsupported_country_region_territory"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
    500: ("server_error", None),
}


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request the fake received; ``headers`` keys are lower-case."""

    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    received_at: float = 0.0
    token_times: list[float] = field(default_factory=list)
    abandoned_at: list[float] = field(default_factory=list)

    @property
    def streamed(self) -> bool:
        return self.body.get("stream") is True

    @property
    def api_key(self) -> str | None:
        auth = self.headers.get("authorization", "")
        return auth.removeprefix("Bearer ").strip() or None if auth.startswith("Bearer ") else None

    @property
    def stop(self) -> list[str]:
        """The request's stop sequences (``stop`` may be one string or a list; [] for none)."""
        stop = self.body.get("stop")
        if isinstance(stop, str):
            return [stop]
        return [s for s in stop if isinstance(s, str)] if isinstance(stop, list) else []

    @property
    def messages(self) -> list[dict[str, Any]]:
        messages = self.body.get("messages", [])
        return [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []

    @property
    def last_user_text(self) -> str:
        for message in reversed(self.messages):
            if message.get("role") == "user":
                return _text_of(message.get("content"))
        return ""

    @property
    def images(self) -> list[bytes]:
        """The decoded bytes of every data-URL image part, in order."""
        return [
            base64.b64decode(url.split(",", 1)[1])
            for url in _image_urls(self.messages)
            if url.startswith("data:")
        ]


@dataclass(frozen=True, slots=True)
class CannedError:
    """A scripted error answer."""

    status: int
    message: str
    headers: Mapping[str, str] = field(default_factory=dict)
    param: str | None = None


@dataclass(frozen=True, slots=True)
class CannedReply:
    """A scripted answer: text and/or tool calls (arguments: an object, or raw text)."""

    text: str | None = None
    calls: tuple[tuple[str, str, Mapping[str, Any] | str], ...] = ()  # id, name, arguments
    finish_reason: str | None = None
    usage: Mapping[str, Any] | Literal["default"] | None = "default"
    model: str | None = None


@dataclass(frozen=True, slots=True)
class _Break:
    after_tokens: int
    kind: Literal["error", "disconnect", "truncate"]
    message: str


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n\n".join(
            str(p.get("text", ""))
            for p in content
            if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""


def _image_urls(messages: list[dict[str, Any]]) -> Iterator[str]:
    for message in messages:
        content = message.get("content")
        for part in content if isinstance(content, list) else ():
            if isinstance(part, dict) and part.get("type") == "image_url":
                image = part.get("image_url")
                yield str(image.get("url", "")) if isinstance(image, dict) else ""


def _image_problem(url: str) -> str | None:
    if url.startswith(("http://", "https://")):
        return None
    head, _, data = url.partition(",")
    media_type = head.removeprefix("data:").removesuffix(";base64")
    if not head.startswith("data:") or not head.endswith(";base64") or not data:
        return "Invalid image URL: expected an http(s) URL or a base64 data URL."
    if media_type not in _IMAGE_MAGIC:
        return f"Invalid MIME type {media_type!r}: only image/jpeg, png, gif and webp."
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return "Invalid base64 image data."
    if not raw.startswith(_IMAGE_MAGIC[media_type]):
        return "You uploaded an unsupported image. Please make sure your image is valid."
    return None


def _tool_problem(messages: list[Any]) -> tuple[str, str | None] | None:
    """Roles, and every tool message answering the assistant tool_calls right before it."""
    open_ids: set[str] = set()
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in _ROLES:
            return f"Invalid value: '{role}'. Supported values are: {sorted(_ROLES)}.", (
                f"messages[{i}].role"
            )
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in open_ids:
                return (
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceeding message with 'tool_calls'.",
                    f"messages.[{i}].role",
                )
            open_ids.discard(call_id)
            continue
        if open_ids:
            return (
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {', '.join(sorted(open_ids))}",
                f"messages.[{i}].role",
            )
        if role == "assistant":
            open_ids = {str(c.get("id")) for c in message.get("tool_calls") or ()}
    if open_ids:
        return "The following tool_call_ids did not have response messages: " + ", ".join(
            sorted(open_ids)
        ), "messages"
    return None


def _request_problem(body: dict[str, Any]) -> tuple[str, str | None] | None:
    """What the real API would refuse (its message, the parameter), or None."""
    for name in ("model", "messages"):
        if name not in body:
            return f"Missing required parameter: '{name}'.", name
    messages = body["messages"]
    if not isinstance(messages, list) or not messages:
        return "Invalid 'messages': empty array. Expected an array with minimum length 1.", (
            "messages"
        )
    stop = body.get("stop")
    if isinstance(stop, list) and len(stop) > MAX_STOP:
        return (
            "Invalid 'stop': array too long. Expected an array with maximum length "
            f"{MAX_STOP}, but got an array with length {len(stop)} instead."
        ), "stop"
    if "stream_options" in body and body.get("stream") is not True:
        return "The 'stream_options' parameter is only allowed when 'stream' is enabled.", (
            "stream_options"
        )
    if problem := _tool_problem(messages):
        return problem
    for url in _image_urls(messages):
        if problem := _image_problem(url):
            return problem, "messages"
    return None


def _sse(data: Mapping[str, Any] | str) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data)
    return f"data: {text}\n\n".encode()


class FakeOpenAIAPI(FakeServer):
    """A local Chat Completions endpoint; use as ``async with FakeOpenAIAPI() as api``."""

    def __init__(
        self,
        *,
        reply_text: str | None = None,
        api_key: str | None = None,
        notice_disconnects: bool = False,
    ) -> None:
        super().__init__()
        self.handler_cancellation = notice_disconnects
        self.reply_text = reply_text
        self.api_key = api_key
        self.usage: dict[str, Any] | None = {"prompt_tokens": 10, "completion_tokens": 5}
        self.latency = 0.0
        self.token_interval = 0.0
        self.reject_max_tokens = False
        self.reject_stop = False
        self.requests: list[RecordedRequest] = []
        self.received = asyncio.Event()
        #: Set when a client closed a request before its answer was complete.
        self.abandoned = asyncio.Event()
        self._script: deque[CannedError | CannedReply] = deque()
        self._breaks: deque[_Break] = deque()
        self._pauses: deque[StreamPause] = deque()
        self._all_pauses: list[StreamPause] = []
        self._ids = itertools.count(1)

    @property
    def api_url(self) -> str:
        """The SDK's ``base_url``: ``http://127.0.0.1:<port>/v1``."""
        return f"{self.base_url}/v1"

    @property
    def last_request(self) -> RecordedRequest:
        return self.requests[-1]

    @property
    def call_count(self) -> int:
        return sum(1 for r in self.requests if r.path == "/v1/chat/completions")

    # ------------------------------------------------------------------------- scripting

    def fail_next(
        self,
        *,
        status: int,
        message: str | None = None,
        retry_after: float | str | None = None,
        times: int = 1,
    ) -> None:
        """Queue ``times`` error answers with ``status`` (``retry_after``: its header)."""
        headers = {"retry-after": str(retry_after)} if retry_after is not None else {}
        canned = CannedError(status, message or f"fake error ({status})", headers)
        self._script.extend([canned] * times)

    def reply_next(
        self,
        text: str | None = None,
        *,
        finish_reason: str | None = None,
        usage: Mapping[str, Any] | Literal["default"] | None = "default",
        cached_tokens: int | None = None,
        model: str | None = None,
    ) -> None:
        """Queue one text answer; ``usage=None``: it reports none; ``cached_tokens``: the
        ``prompt_tokens_details.cached_tokens`` of the default usage."""
        if cached_tokens is not None:
            base = dict(self.usage or {}) if usage == "default" else dict(usage or {})
            usage = {**base, "prompt_tokens_details": {"cached_tokens": cached_tokens}}
        self._script.append(CannedReply(text, (), finish_reason, usage, model))

    def tool_calls_next(
        self,
        *calls: tuple[str, Mapping[str, Any] | str],
        text: str | None = None,
        finish_reason: str = "tool_calls",
    ) -> list[str]:
        """Queue one answer calling tools (name, arguments: an object or raw text); their ids."""
        ids = [f"call_fake_{next(self._ids)}" for _ in calls]
        made = tuple((i, name, args) for i, (name, args) in zip(ids, calls, strict=True))
        self._script.append(CannedReply(text, made, finish_reason))
        return ids

    def fail_midstream_next(
        self,
        *,
        after_tokens: int,
        kind: Literal["error", "disconnect", "truncate"] = "error",
        message: str = "The server had an error while processing your request.",
    ) -> None:
        """Break the next streamed answer after ``after_tokens`` tokens (module doc)."""
        self._breaks.append(_Break(after_tokens, kind, message))

    def pause_after_tokens(self, n: int) -> StreamPause:
        """Hold the next streamed answer after ``n`` tokens until ``release()``."""
        pause = StreamPause(n)
        self._pauses.append(pause)
        self._all_pauses.append(pause)
        return pause

    # ------------------------------------------------------------------------- lifecycle

    def _build_app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_REQUEST_BYTES)
        app.router.add_post("/v1/chat/completions", self._handle)
        app.router.add_route("*", "/{tail:.*}", self._unknown)
        return app

    async def _before_cleanup(self) -> None:
        for pause in self._all_pauses:
            pause.release()

    # -------------------------------------------------------------------------- handlers

    async def _record(self, request: web.Request) -> RecordedRequest:
        recorded = RecordedRequest(
            method=request.method,
            path=request.path,
            headers={k.lower(): v for k, v in request.headers.items()},
            body=await json_body(request),
            received_at=time.monotonic(),
        )
        self.requests.append(recorded)
        self.received.set()
        return recorded

    def _error(self, canned: CannedError) -> web.Response:
        kind, code = _ERROR_TYPES.get(canned.status, ("server_error", None))
        payload = {
            "error": {"message": canned.message, "type": kind, "param": canned.param, "code": code}
        }
        headers = {"x-request-id": f"req_fake_{next(self._ids)}", **canned.headers}
        return web.json_response(payload, status=canned.status, headers=headers)

    async def _unknown(self, request: web.Request) -> web.Response:
        await self._record(request)
        return self._error(CannedError(404, f"Unknown request URL: {request.path}"))

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        recorded = await self._record(request)
        try:
            return await self._answer(request, recorded)
        except asyncio.CancelledError:
            recorded.abandoned_at.append(time.monotonic())
            self.abandoned.set()
            raise

    async def _answer(self, request: web.Request, recorded: RecordedRequest) -> web.StreamResponse:
        if self.latency > 0:
            await asyncio.sleep(self.latency)
        if self.api_key is not None and recorded.api_key != self.api_key:
            return self._error(CannedError(401, "Incorrect API key provided."))
        if problem := _request_problem(recorded.body):
            return self._error(CannedError(400, problem[0], param=problem[1]))
        if self.reject_max_tokens and "max_tokens" in recorded.body:
            return self._error(
                CannedError(
                    400,
                    "Unsupported parameter: 'max_tokens' is not supported with this model. "
                    "Use 'max_completion_tokens' instead.",
                    param="max_tokens",
                )
            )
        if self.reject_stop and "stop" in recorded.body:
            return self._error(
                CannedError(
                    400,
                    "Unsupported parameter: 'stop' is not supported with this model.",
                    param="stop",
                )
            )
        step = self._script.popleft() if self._script else CannedReply()
        if isinstance(step, CannedError):
            return self._error(step)
        # An answer calling tools has only the text scripted with it.
        text = step.text if step.text is not None or step.calls else self.reply_text
        if text is None and not step.calls:
            text = recorded.last_user_text
        if text is not None:  # the real API's finish_reason is "stop" either way
            text, _ = stop_at(text, recorded.stop)
        usage = self.usage if step.usage == "default" else step.usage
        if usage is not None:
            usage = {
                **usage,
                "total_tokens": sum(
                    usage.get(k, 0) for k in ("prompt_tokens", "completion_tokens")
                ),
            }
        answer = {
            "id": f"chatcmpl-fake{next(self._ids)}",
            "created": int(time.time()),
            "model": step.model or recorded.body["model"],
            "text": text,
            "calls": step.calls,
            "finish_reason": step.finish_reason or ("tool_calls" if step.calls else "stop"),
            "usage": usage,
        }
        if recorded.streamed:
            return await self._stream(request, recorded, answer)
        return web.json_response(_completion(answer))

    async def _stream(
        self, request: web.Request, recorded: RecordedRequest, answer: dict[str, Any]
    ) -> web.StreamResponse:
        failure = self._breaks.popleft() if self._breaks else None
        pause = self._pauses.popleft() if self._pauses else None
        response = web.StreamResponse(
            headers={"content-type": "text/event-stream", "cache-control": "no-cache"}
        )
        await response.prepare(request)
        options = recorded.body.get("stream_options") or {}
        with_usage = bool(options.get("include_usage"))
        sent = 0
        try:
            for chunk, token in _chunks(answer, with_usage):
                if token or chunk == "[DONE]" or not chunk["choices"] or _finishes(chunk):
                    if pause is not None and (not token or sent >= pause.after_tokens):
                        await pause._hold()
                        pause = None
                    if failure is not None and (not token or sent >= failure.after_tokens):
                        await self._break(request, response, failure)
                        return response
                    if token and sent and self.token_interval > 0:
                        await asyncio.sleep(self.token_interval)
                await response.write(_sse(chunk))
                if token:
                    sent += 1
                    recorded.token_times.append(time.monotonic())
            await response.write_eof()
        except ConnectionResetError:
            recorded.abandoned_at.append(time.monotonic())
            self.abandoned.set()
        return response

    async def _break(
        self, request: web.Request, response: web.StreamResponse, failure: _Break
    ) -> None:
        if failure.kind == "error":
            error = {
                "message": failure.message,
                "type": "server_error",
                "param": None,
                "code": None,
            }
            await response.write(_sse({"error": error}))
            await response.write_eof()
        elif failure.kind == "truncate":
            await response.write_eof()
        else:
            assert request.transport is not None
            request.transport.close()


def _completion(answer: Mapping[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": answer["text"], "refusal": None}
    if answer["calls"]:
        message["tool_calls"] = [
            {
                "id": call_id,
                "type": "function",
                "function": {
                    "name": name,
                    "arguments": args if isinstance(args, str) else json.dumps(dict(args)),
                },
            }
            for call_id, name, args in answer["calls"]
        ]
    payload = {
        "id": answer["id"],
        "object": "chat.completion",
        "created": answer["created"],
        "model": answer["model"],
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": answer["finish_reason"],
                "logprobs": None,
            }
        ],
    }
    if answer["usage"] is not None:
        payload["usage"] = answer["usage"]
    return payload


def _finishes(chunk: Mapping[str, Any]) -> bool:
    return any(c.get("finish_reason") for c in chunk["choices"])


def _chunks(answer: Mapping[str, Any], with_usage: bool) -> Iterator[tuple[Any, bool]]:
    """The stream's chunks (or "[DONE]"), each with whether it is a token."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": answer["id"],
            "object": "chat.completion.chunk",
            "created": answer["created"],
            "model": answer["model"],
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }

    yield chunk({"role": "assistant", "content": ""}), False
    for piece in tokens(answer["text"] or ""):
        yield chunk({"content": piece}), True
    for index, (call_id, name, args) in enumerate(answer["calls"]):
        start = {"index": index, "id": call_id, "type": "function"}
        start["function"] = {"name": name, "arguments": ""}
        yield chunk({"tool_calls": [start]}), False
        dumped = args if isinstance(args, str) else json.dumps(dict(args))
        for piece in tokens(dumped):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}), True
    yield chunk({}, answer["finish_reason"]), False
    if with_usage and answer["usage"] is not None:
        last = {k: v for k, v in chunk({}).items() if k != "choices"}
        yield {**last, "choices": [], "usage": answer["usage"]}, False
    yield "[DONE]", False
