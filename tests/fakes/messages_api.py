"""A small, scriptable fake of Anthropic's Messages API for tests.

It is a real HTTP server (aiohttp, on ``127.0.0.1`` and a free port), so tests drive the real
``anthropic`` SDK through it: retries, headers, error parsing and timeouts all happen for real.

::

    async with FakeMessagesAPI() as api:
        llm = AnthropicLLM(api_key="sk-test", base_url=api.base_url)
        api.fail_next(status=429, retry_after_ms=10)       # first call: rate limited
        api.reply_text = "hello"                           # then: a normal reply
        result = await llm.complete(request)
        assert api.call_count == 2
        body = api.requests[-1].body                       # the JSON the SDK sent
        assert api.requests[-1].cache_breakpoints == [("system", 0)]

Behaviour of ``POST /v1/messages``:

* Every call is recorded in :attr:`FakeMessagesAPI.requests` (headers and JSON body), failures
  included, in arrival order; :attr:`FakeMessagesAPI.call_count` counts them.
* If the request carries no API key (neither ``x-api-key`` nor ``Authorization: Bearer ...``),
  it is answered ``401 authentication_error`` (set ``require_api_key = False`` to disable).
  Note that SDK 2.x sends the key as ``Authorization: Bearer``, not ``x-api-key``; read it
  with :attr:`RecordedRequest.api_key`.
* Like the real API at ``anthropic-version: 2026-10-21`` (what SDK 2.x sends), a body with
  ``temperature``, ``top_p`` or ``top_k`` is answered ``400 invalid_request_error``
  (set ``reject_sampling_params = False`` to disable).
* Like the real API, a request whose messages hold ``tool_use`` or ``tool_result`` blocks but
  that defines no ``tools``, whose ``tool_use`` blocks are not each answered by a
  ``tool_result`` at the start of the next user message, or that holds an empty text block, is
  answered ``400 invalid_request_error``.
* ``image`` blocks (base64 sources) are checked like the real API checks them, with its
  messages: more than 100 images; a media type other than image/jpeg, png, gif or webp; more
  than 5 MB of base64; bytes whose magic number is not of the stated type; more than 8000 px
  on an edge (2000 px when the request holds more than 20 images): ``400
  invalid_request_error``. :attr:`RecordedRequest.images` gives what arrived (decoded bytes,
  media type, pixel size), and the reply's ``input_tokens`` grow by each image's cost
  (``memory.tokens.image_tokens``), so benchmarks see what images cost.
* Cache breakpoints are checked like the real API checks them: more than 4, a ``ttl`` other
  than ``5m`` or ``1h``, or a 1-hour breakpoint after a 5-minute one (in the order tools ->
  system -> messages) is answered ``400 invalid_request_error``;
  :attr:`RecordedRequest.cache_ttls` gives each breakpoint's lifetime in that order. A
  ``usage`` may hold the API's nested ``cache_creation`` object (the writes by lifetime).
* Otherwise a request that matches a rule (:meth:`answer_when`: a predicate on the
  :class:`RecordedRequest`, an answer or a function making one, an extra delay) gets that
  rule's answer; rules stay until :meth:`clear_rules`, and the first match wins. They answer
  by what a request is rather than when it comes, so several clients calling at once (e.g.
  worker processes) each get the answer meant for their kind of call.
* Otherwise the next scripted outcome is popped from a FIFO queue (:meth:`fail_next`,
  :meth:`reply_next`, :meth:`tool_use_next`); with an empty queue the default reply is sent:
  one text block with :attr:`reply_text` (or, when that is None, an echo of the last user
  message's text),
  ``stop_reason`` :attr:`stop_reason`, and :attr:`usage`.
* A text answer (the default reply or :meth:`reply_next`'s text, not scripted ``content``)
  honours the request's ``stop_sequences`` as the real API does: it ends before the earliest
  one in it, with ``stop_reason`` ``"stop_sequence"`` and ``stop_sequence`` naming it.
* :attr:`latency` seconds (``asyncio.sleep``) are waited before every answer; while
  :attr:`hold` is an unset ``asyncio.Event``, answers also wait for it (a held model call);
  :attr:`received` is set when a request arrives, so a test can wait for the call it holds.

Streaming (a body with ``"stream": true``, what ``client.messages.stream(...)`` sends): every
check and scripted error above still answers before the stream starts, as a plain HTTP error
(the SDK retries it as usual). A successful answer is sent as ``text/event-stream`` in the wire
format of the real API: ``message_start`` (empty content, input usage), ``ping``, then per
content block ``content_block_start``, ``content_block_delta`` events and
``content_block_stop``, then ``message_delta`` (``stop_reason``, ``usage.output_tokens``) and
``message_stop``. A text block streams as ``text_delta`` tokens: the text cut into word-ish
pieces that keep their whitespace (:func:`tokens`; joined, they are the text); a ``tool_use``
block starts with ``input: {}`` and streams its arguments as ``input_json_delta`` pieces of
partial JSON; a ``thinking`` block as ``thinking_delta`` and ``signature_delta``. A *token* is
one ``content_block_delta`` event.

* :attr:`token_interval` seconds are waited between two tokens (not before the first one).
* :meth:`fail_midstream_next` makes the next streamed answer break after ``after_tokens``
  tokens: ``kind="overloaded_error"`` sends an SSE ``event: error`` with Anthropic's error
  payload and ends the body (as the real API does when it is overloaded mid-answer);
  ``kind="disconnect"`` closes the connection without ending the chunked body;
  ``kind="truncate"`` ends the body cleanly but early, without ``message_stop`` (a proxy that
  cut the answer at an event boundary).
* :meth:`pause_after_tokens` holds the next streamed answer once it has sent ``n`` tokens:
  it returns a :class:`StreamPause`; ``await pause.reached.wait()`` until the tokens are sent,
  then ``pause.release()`` lets the stream go on.
* :attr:`RecordedRequest.abandoned_at` holds when the client closed the request before its
  answer was complete: a stream whose next write failed, or (with ``notice_disconnects=True``:
  aiohttp's handler cancellation) any request still waiting for its answer.
* :attr:`RecordedRequest.streamed` says whether a request asked for a stream;
  :attr:`RecordedRequest.token_times` holds the ``time.monotonic()`` at which each token was
  written, :attr:`RecordedRequest.received_at` when the request arrived (so a benchmark can
  measure time to first token).

A streamed answer consumes the scripted answer it streams like any other call; midstream
failures and pauses are kept in their own FIFO queues, each consumed by the next streamed
answer (a non-streamed call leaves them queued).

Errors use Anthropic's error shape: ``{"type": "error", "error": {"type": ..., "message": ...}}``
plus a ``request-id`` header. Any other path answers ``404 not_found_error``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
import itertools
import json
import re
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web
from PIL import Image

from memory.tokens import image_tokens
from tests.fakes.server import FakeServer, json_body

__all__ = [
    "DEFAULT_ERROR_TYPES",
    "CannedError",
    "CannedReply",
    "FakeMessagesAPI",
    "MidstreamFailure",
    "ReceivedImage",
    "RecordedRequest",
    "Rule",
    "StreamPause",
    "stop_at",
    "tokens",
]

#: The ``error.type`` Anthropic uses for each status, used when ``fail_next`` gets none.
DEFAULT_ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}


_SAMPLING_PARAMS = frozenset({"temperature", "top_p", "top_k"})

# The real API's limits for images (its vision documentation).
_IMAGE_MAGIC: dict[str, tuple[bytes, ...]] = {
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),  # and "WEBP" at offset 8
}
MAX_REQUEST_BYTES = 32 * 1024 * 1024  # the real API's body limit (aiohttp's default: 1 MB)
MAX_IMAGES = 100
MAX_IMAGE_BASE64 = 5 * 1024 * 1024
MAX_IMAGE_EDGE = 8000
MANY_IMAGES = 20  # above this many, every image must fit MANY_IMAGES_EDGE
MANY_IMAGES_EDGE = 2000


@dataclass(frozen=True, slots=True)
class ReceivedImage:
    """An image block the fake received: where it was, and the decoded picture."""

    message: int  # index in ``messages``
    block: int  # index in that message's content
    media_type: str
    data: bytes
    width: int
    height: int

    @property
    def size(self) -> tuple[int, int]:
        return self.width, self.height


def _image_type_matches(media_type: str, data: bytes) -> bool:
    magic = _IMAGE_MAGIC.get(media_type, ())
    if not data.startswith(magic):
        return False
    return media_type != "image/webp" or data[8:12] == b"WEBP"


def _pixel_size(data: bytes) -> tuple[int, int] | None:
    """Width and height from the image header (over every limit for a bomb), None if unreadable."""
    try:
        with Image.open(io.BytesIO(data)) as im:
            return im.size
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        return (MAX_IMAGE_EDGE * 100, MAX_IMAGE_EDGE * 100)  # over every limit
    except Exception:  # any decoder failure is "Could not process image", never a 500
        return None


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request the fake received. ``headers`` keys are lower-case."""

    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    received_at: float = 0.0  # time.monotonic() when the request arrived
    # time.monotonic() of each token written to a streamed answer, in order (the list fills
    # while the answer streams).
    token_times: list[float] = field(default_factory=list)
    # time.monotonic() when the client closed the request before its answer was complete
    # (one entry at most; only noticed with ``FakeMessagesAPI(notice_disconnects=True)``).
    abandoned_at: list[float] = field(default_factory=list)

    @property
    def streamed(self) -> bool:
        """Whether the request asked for a streamed answer (``"stream": true``)."""
        return self.body.get("stream") is True

    @property
    def api_key(self) -> str | None:
        """The credential sent, from ``x-api-key`` or ``Authorization: Bearer``."""
        if key := self.headers.get("x-api-key"):
            return key
        auth = self.headers.get("authorization", "")
        if not auth.startswith("Bearer "):
            return None
        return auth.removeprefix("Bearer ").strip() or None

    @property
    def api_version(self) -> str:
        """The ``anthropic-version`` header ("" when absent)."""
        return self.headers.get("anthropic-version", "")

    @property
    def system_blocks(self) -> list[dict[str, Any]]:
        """The ``system`` field as a list of content blocks (a plain string becomes one block)."""
        return _as_blocks(self.body.get("system", []))

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The ``messages`` field, each ``content`` normalised to a list of blocks."""
        messages = self.body.get("messages", [])
        return [{**m, "content": _as_blocks(m.get("content", []))} for m in messages]

    @property
    def cache_breakpoints(self) -> list[tuple[Any, ...]]:
        """Where ``cache_control`` is set, in prompt order.

        ``("tools", i)`` for the i-th tool definition (tools come first in the cache's
        order), ``("system", i)`` for the i-th system block, ``("messages", m, b)`` for block
        ``b`` of message ``m``, and ``("request",)`` for a top-level ``cache_control``.
        """
        points: list[tuple[Any, ...]] = []
        if "cache_control" in self.body:
            points.append(("request",))
        points.extend(("tools", i) for i, t in enumerate(self.tools) if "cache_control" in t)
        points.extend(
            ("system", i) for i, b in enumerate(self.system_blocks) if "cache_control" in b
        )
        for m, message in enumerate(self.messages):
            points.extend(
                ("messages", m, b)
                for b, block in enumerate(message["content"])
                if "cache_control" in block
            )
        return points

    @property
    def cache_ttls(self) -> list[str]:
        """Each breakpoint's lifetime (``"5m"`` when no ``ttl`` is given), in prompt order."""
        return [str(c.get("ttl", "5m")) for c in self._cache_controls]

    @property
    def _cache_controls(self) -> list[dict[str, Any]]:
        blocks = [*self.tools, *self.system_blocks]
        blocks += [b for m in self.messages for b in m["content"]]
        return [b["cache_control"] for b in blocks if "cache_control" in b]

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The ``tools`` field (tool definitions offered to the model)."""
        return list(self.body.get("tools", []))

    @property
    def tool_names(self) -> list[str]:
        """The names of the tools offered, in order."""
        return [str(t.get("name", "")) for t in self.tools]

    @property
    def tool_choice(self) -> str:
        """The ``tool_choice`` type sent (``"auto"``, the API's default, when absent)."""
        choice = self.body.get("tool_choice")
        return str(choice.get("type", "")) if isinstance(choice, dict) else "auto"

    @property
    def tool_results(self) -> list[dict[str, Any]]:
        """The ``tool_result`` blocks of the last user message, in order."""
        for message in reversed(self.messages):
            if message.get("role") == "user":
                return [b for b in message["content"] if b.get("type") == "tool_result"]
        return []

    @property
    def images(self) -> list[ReceivedImage]:
        """Every well-formed base64 ``image`` block of the messages, in prompt order."""
        found = []
        for m, message in enumerate(self.messages):
            for b, block in enumerate(message["content"]):
                source = block.get("source") if block.get("type") == "image" else None
                if not isinstance(source, dict) or source.get("type") != "base64":
                    continue
                try:
                    data = base64.b64decode(str(source.get("data", "")), validate=True)
                except (binascii.Error, ValueError):
                    continue
                size = _pixel_size(data)
                if size is not None:
                    media_type = str(source.get("media_type", ""))
                    found.append(ReceivedImage(m, b, media_type, data, *size))
        return found

    def text_of(self, role: str) -> list[str]:
        """Every text block of every message of ``role``, in order."""
        return [
            b.get("text", "")
            for m in self.messages
            if m.get("role") == role
            for b in m["content"]
            if b.get("type") == "text"
        ]

    @property
    def last_user_text(self) -> str:
        """The text of the last ``user`` message (text blocks joined by a blank line)."""
        for message in reversed(self.messages):
            if message.get("role") == "user":
                return "\n\n".join(
                    b.get("text", "") for b in message["content"] if b.get("type") == "text"
                )
        return ""

    @property
    def stop_sequences(self) -> list[str]:
        """The request's ``stop_sequences`` ([] when it sent none)."""
        sequences = self.body.get("stop_sequences", [])
        return [s for s in sequences if isinstance(s, str)] if isinstance(sequences, list) else []


@dataclass(frozen=True, slots=True)
class CannedError:
    """A scripted error answer (see :meth:`FakeMessagesAPI.fail_next`)."""

    status: int
    error_type: str
    message: str
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CannedReply:
    """A scripted successful answer (see :meth:`FakeMessagesAPI.reply_next`)."""

    text: str | None = None
    usage: dict[str, int | dict[str, int] | None] | None = None
    stop_reason: str | None = None
    model: str | None = None
    content: list[dict[str, Any]] | None = None


Answer = CannedError | CannedReply


@dataclass(frozen=True, slots=True)
class Rule:
    """Answers every request ``match`` accepts (see :meth:`FakeMessagesAPI.answer_when`)."""

    match: Callable[[RecordedRequest], bool]
    answer: Answer | Callable[[RecordedRequest], Answer]
    delay: float = 0.0
    gate: asyncio.Event | None = None  # its answers wait until it is set

    def answer_for(self, request: RecordedRequest) -> Answer:
        """This rule's answer to ``request``."""
        if isinstance(self.answer, CannedError | CannedReply):
            return self.answer
        return self.answer(request)


StreamFailureKind = Literal["overloaded_error", "disconnect", "truncate"]


@dataclass(frozen=True, slots=True)
class MidstreamFailure:
    """A scripted break of a streamed answer (see :meth:`FakeMessagesAPI.fail_midstream_next`)."""

    after_tokens: int
    kind: StreamFailureKind
    message: str


class StreamPause:
    """Holds a streamed answer once it sent ``after_tokens`` tokens, until :meth:`release`.

    ``reached`` is set when the tokens are written (with fewer tokens in the answer: before
    its ``message_delta``); the stream then waits, before its next token, for ``release()``.
    """

    def __init__(self, after_tokens: int) -> None:
        self.after_tokens = after_tokens
        self.reached = asyncio.Event()
        self._released = asyncio.Event()

    def release(self) -> None:
        """Let the held stream go on (also before it was reached: it then does not stop)."""
        self._released.set()

    async def _hold(self) -> None:
        self.reached.set()
        await self._released.wait()


_TOKEN = re.compile(r"\s*\S+|\s+")


def tokens(text: str) -> list[str]:
    """``text`` cut into word-ish tokens, each with the whitespace before it; joined: ``text``."""
    return _TOKEN.findall(text)


def stop_at(text: str, sequences: Sequence[str]) -> tuple[str, str | None]:
    """``text`` up to the earliest of ``sequences`` in it (excluded), and that sequence: what a
    real model writes when it reaches a stop sequence; ``(text, None)`` when none occurs."""
    found = [(i, s) for s in sequences if s and (i := text.find(s)) >= 0]
    if not found:
        return text, None
    at, sequence = min(found, key=lambda f: f[0])
    return text[:at], sequence


def _sse(event: str, data: Mapping[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _block_events(index: int, block: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """One content block as the real API streams it: start, deltas, stop."""

    def delta(payload: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return "content_block_delta", {
            "type": "content_block_delta",
            "index": index,
            "delta": payload,
        }

    kind = block.get("type")
    start: dict[str, Any] = dict(block)
    deltas: list[tuple[str, dict[str, Any]]] = []
    if kind == "text":
        start["text"] = ""
        deltas = [delta({"type": "text_delta", "text": t}) for t in tokens(str(block["text"]))]
    elif kind == "tool_use":
        start["input"] = {}
        # Cut at whitespace (after json.dumps' ", " and ": " and inside strings), never
        # inside an escape: every prefix is partial JSON the SDK's accumulator can read.
        dumped = json.dumps(block.get("input", {}))
        deltas = [delta({"type": "input_json_delta", "partial_json": t}) for t in tokens(dumped)]
    elif kind == "thinking":
        start["thinking"], start["signature"] = "", ""
        deltas = [
            delta({"type": "thinking_delta", "thinking": t})
            for t in tokens(str(block.get("thinking", "")))
        ]
        deltas.append(delta({"type": "signature_delta", "signature": block.get("signature", "")}))
    yield (
        "content_block_start",
        {
            "type": "content_block_start",
            "index": index,
            "content_block": start,
        },
    )
    yield from deltas
    yield "content_block_stop", {"type": "content_block_stop", "index": index}


def _stream_events(message: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """A whole message as the real API streams it (event name, data)."""
    usage = dict(message["usage"])
    output_tokens = usage.get("output_tokens") or 0
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    yield "message_start", {"type": "message_start", "message": start}
    yield "ping", {"type": "ping"}
    for index, block in enumerate(message["content"]):
        yield from _block_events(index, block)
    yield (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {
                "stop_reason": message["stop_reason"],
                "stop_sequence": message.get("stop_sequence"),
            },
            "usage": {"output_tokens": output_tokens},
        },
    )
    yield "message_stop", {"type": "message_stop"}


def _as_blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [dict(b) for b in content]


def _cache_error(recorded: RecordedRequest) -> str | None:
    """The real API's answer to breakpoints it refuses (None: they are fine)."""
    ttls = recorded.cache_ttls
    if len(ttls) > 4:
        return f"A maximum of 4 blocks with cache_control may be provided. Found {len(ttls)}."
    if bad := sorted(set(ttls) - {"5m", "1h"}):
        return f"cache_control.ttl: Input should be '5m' or '1h' (got {bad[0]!r})"
    if "5m" in ttls and "1h" in ttls[ttls.index("5m") :]:
        return (
            "a ttl='1h' cache_control block must not come after a ttl='5m' cache_control "
            "block (the order is tools, system, messages)"
        )
    return None


def _tool_protocol_error(recorded: RecordedRequest) -> str | None:
    """What the real API would refuse about tool blocks and empty text, or None."""
    messages = recorded.messages
    kinds = {b.get("type") for m in messages for b in m["content"]}
    if kinds & {"tool_use", "tool_result"} and not recorded.tools:
        return "Requests which include `tool_use` or `tool_result` blocks must define tools."
    for i, message in enumerate(messages):
        for block in message["content"]:
            if block.get("type") == "text" and not block.get("text"):
                return f"messages.{i}: text content blocks must be non-empty"
        if message.get("role") != "assistant":
            continue
        ids = [b.get("id") for b in message["content"] if b.get("type") == "tool_use"]
        if not ids:
            continue
        following = messages[i + 1]["content"] if i + 1 < len(messages) else []
        answered = []
        for block in following:
            if block.get("type") != "tool_result":
                break
            answered.append(block.get("tool_use_id"))
        if sorted(map(str, answered)) != sorted(map(str, ids)):
            return (
                f"messages.{i + 1}: `tool_use` ids were found without `tool_result` blocks "
                f"immediately after: {', '.join(map(str, ids))}"
            )
    return None


def _image_error(recorded: RecordedRequest) -> str | None:
    """What the real API would refuse about image blocks (its wording), or None."""
    blocks = [
        (m, b, block)
        for m, message in enumerate(recorded.messages)
        for b, block in enumerate(message["content"])
        if block.get("type") == "image"
    ]
    if len(blocks) > MAX_IMAGES:
        return f"too many images and documents: {len(blocks)} + 0 > {MAX_IMAGES}"
    edge = MANY_IMAGES_EDGE if len(blocks) > MANY_IMAGES else MAX_IMAGE_EDGE
    for m, b, block in blocks:
        where = f"messages.{m}.content.{b}.image.source"
        source = block.get("source")
        if not isinstance(source, dict) or source.get("type") != "base64":
            return f"{where}: the fake Messages API takes base64 image sources only"
        media_type = source.get("media_type")
        if media_type not in _IMAGE_MAGIC:
            return (
                f"{where}.base64.media_type: Input should be 'image/jpeg', 'image/png', "
                "'image/gif' or 'image/webp'"
            )
        text = source.get("data")
        if not isinstance(text, str) or not text:
            return f"{where}.base64.data: Field required"
        if len(text) > MAX_IMAGE_BASE64:
            return (
                f"{where}.base64: image exceeds 5 MB maximum: {len(text)} bytes > "
                f"{MAX_IMAGE_BASE64} bytes"
            )
        try:
            data = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            return f"{where}.base64.data: Invalid base64 data"
        if not _image_type_matches(media_type, data):
            return f"{where}.base64.data: Image does not match the provided media type {media_type}"
        size = _pixel_size(data)
        if size is None:
            return f"{where}.base64.data: Could not process image"
        if max(size) > edge:
            many = " for many-image requests" if edge == MANY_IMAGES_EDGE else ""
            return (
                f"{where}.base64.data: At least one of the image dimensions exceed max "
                f"allowed size{many}: {edge} pixels"
            )
    return None


class FakeMessagesAPI(FakeServer):
    """A local Messages API server; use as ``async with FakeMessagesAPI() as api``.

    Attributes you may set at any time:

    * ``reply_text``: text of default replies; None (default) echoes the last user message.
    * ``usage``: the ``usage`` object of replies (missing keys count as 0; ``reply_next``
      may override single keys).
    * ``stop_reason``: of default replies, ``"end_turn"``.
    * ``latency``: seconds to wait before answering any request, 0 by default.
    * ``token_interval``: seconds between two tokens of a streamed answer, 0 by default.
    * ``require_api_key``: answer 401 when no API key header is present, True by default.
    * ``reject_sampling_params``: answer 400 to sampling parameters, True by default.
    """

    def __init__(
        self,
        *,
        reply_text: str | None = None,
        usage: Mapping[str, int | dict[str, int] | None] | None = None,
        latency: float = 0.0,
        shutdown_timeout: float = 0.5,
        notice_disconnects: bool = False,
    ) -> None:
        super().__init__(shutdown_timeout=shutdown_timeout)
        # A request whose client goes away is cancelled and marked (abandoned_at): a test of
        # a cut-off sees the provider told to stop. Off by default: a handler goes on as the
        # real API's might, and scripted answers are consumed as before.
        self.handler_cancellation = notice_disconnects
        self.reply_text = reply_text
        self.usage: dict[str, int | dict[str, int] | None] = dict(
            usage
            or {
                "input_tokens": 10,
                "output_tokens": 5,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            }
        )
        self.stop_reason = "end_turn"
        self.latency = latency
        self.token_interval = 0.0
        self.hold: asyncio.Event | None = None
        self.require_api_key = True
        self.reject_sampling_params = True
        self.requests: list[RecordedRequest] = []
        #: Set when a request arrives (clear it to wait for the next): a held call has come.
        self.received = asyncio.Event()
        self._script: deque[CannedError | CannedReply] = deque()
        self._rules: list[Rule] = []
        self._breaks: deque[MidstreamFailure] = deque()
        self._pauses: deque[StreamPause] = deque()
        self._all_pauses: list[StreamPause] = []  # released on close: no handler stays held
        self._ids = itertools.count(1)

    # ----------------------------------------------------------------- scripting

    def fail_next(
        self,
        *,
        status: int,
        error_type: str | None = None,
        message: str | None = None,
        retry_after: float | str | None = None,
        retry_after_ms: float | None = None,
        headers: Mapping[str, str] | None = None,
        times: int = 1,
    ) -> None:
        """Queue ``times`` error answers with ``status``.

        ``error_type`` defaults from :data:`DEFAULT_ERROR_TYPES` (``api_error`` otherwise);
        ``retry_after`` / ``retry_after_ms`` set the ``retry-after`` / ``retry-after-ms``
        headers (the SDK waits that long before retrying, so keep them small); ``headers``
        adds any other header, e.g. ``{"x-should-retry": "false"}``.
        """
        extra = dict(headers or {})
        if retry_after is not None:
            extra["retry-after"] = str(retry_after)
        if retry_after_ms is not None:
            extra["retry-after-ms"] = str(retry_after_ms)
        kind = error_type or DEFAULT_ERROR_TYPES.get(status, "api_error")
        canned = CannedError(status, kind, message or f"fake {kind} ({status})", extra)
        self._script.extend([canned] * times)

    def reply_next(
        self,
        text: str | None = None,
        *,
        usage: Mapping[str, int | dict[str, int] | None] | None = None,
        stop_reason: str | None = None,
        model: str | None = None,
        content: list[dict[str, Any]] | None = None,
    ) -> None:
        """Queue one successful answer; unset fields fall back to the defaults.

        ``usage`` keys override the default usage one by one (a value may be None, as the API
        sends for absent cache counts); ``content`` replaces the whole ``content`` array with raw
        blocks (e.g. several text blocks, or a thinking block), and then ``text`` is ignored.
        """
        self._script.append(
            CannedReply(text, dict(usage) if usage else None, stop_reason, model, content)
        )

    def tool_use_next(
        self,
        name: str,
        arguments: Mapping[str, Any],
        *,
        text: str | None = None,
        calls: list[tuple[str, Mapping[str, Any]]] | None = None,
        usage: Mapping[str, int | dict[str, int] | None] | None = None,
    ) -> list[str]:
        """Queue one answer asking for tool calls (``stop_reason`` ``"tool_use"``).

        The answer holds an optional ``text`` block, then a ``tool_use`` block calling
        ``name`` with ``arguments`` and one more for each of ``calls``; returns their ids.
        """
        reply = self.tool_use_reply(name, arguments, text=text, calls=calls, usage=usage)
        self._script.append(reply)
        assert reply.content is not None
        return [str(b["id"]) for b in reply.content if b["type"] == "tool_use"]

    def tool_use_reply(
        self,
        name: str,
        arguments: Mapping[str, Any],
        *,
        text: str | None = None,
        calls: list[tuple[str, Mapping[str, Any]]] | None = None,
        usage: Mapping[str, int | dict[str, int] | None] | None = None,
    ) -> CannedReply:
        """The answer :meth:`tool_use_next` queues, with fresh ids, for a rule to give."""
        content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        for tool, args in [(name, arguments), *(calls or [])]:
            call_id = f"toolu_fake_{next(self._ids)}"
            content.append({"type": "tool_use", "id": call_id, "name": tool, "input": dict(args)})
        return CannedReply(None, dict(usage) if usage else None, "tool_use", None, content)

    def answer_when(
        self,
        match: Callable[[RecordedRequest], bool],
        answer: Answer | Callable[[RecordedRequest], Answer],
        *,
        delay: float = 0.0,
        gate: asyncio.Event | None = None,
    ) -> Rule:
        """Answer every request that ``match`` accepts with ``answer`` (or what it makes of
        the request), ``delay`` seconds after :attr:`latency` and once ``gate`` (if any) is
        set; before the FIFO script."""
        rule = Rule(match, answer, delay, gate)
        self._rules.append(rule)
        return rule

    def clear_rules(self) -> None:
        """Forget every rule of :meth:`answer_when`."""
        self._rules.clear()

    def fail_midstream_next(
        self,
        *,
        after_tokens: int,
        kind: StreamFailureKind = "overloaded_error",
        message: str = "Overloaded",
    ) -> None:
        """Break the next streamed answer once it sent ``after_tokens`` tokens.

        ``"overloaded_error"``: an SSE ``error`` event (``{"type": "error", "error": {"type":
        "overloaded_error", "message": message}}``), then the body ends; ``"disconnect"``: the
        connection is closed in the middle of the chunked body; ``"truncate"``: the body ends
        properly but without the rest of the answer. With fewer tokens in the answer
        it breaks before ``message_delta``. The HTTP status was 200 either way.
        """
        if after_tokens < 0:
            raise ValueError("after_tokens must be >= 0")
        self._breaks.append(MidstreamFailure(after_tokens, kind, message))

    def pause_after_tokens(self, n: int) -> StreamPause:
        """Hold the next streamed answer after ``n`` tokens (see :class:`StreamPause`)."""
        pause = StreamPause(n)
        self._pauses.append(pause)
        self._all_pauses.append(pause)
        return pause

    # ---------------------------------------------------------------- inspection

    @property
    def call_count(self) -> int:
        """How many ``POST /v1/messages`` calls arrived (failed ones included)."""
        return sum(1 for r in self.requests if r.method == "POST" and r.path == "/v1/messages")

    @property
    def last_request(self) -> RecordedRequest:
        """The most recent request (raises IndexError when there was none)."""
        return self.requests[-1]

    @property
    def pending(self) -> int:
        """Scripted answers not consumed yet."""
        return len(self._script)

    # ``base_url`` (from FakeServer) is the SDK's ``base_url``: it appends ``/v1/messages``.

    # ----------------------------------------------------------------- lifecycle

    def _build_app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_REQUEST_BYTES)
        app.router.add_post("/v1/messages", self._handle_messages)
        app.router.add_route("*", "/{tail:.*}", self._handle_unknown)
        return app

    async def _before_cleanup(self) -> None:
        for pause in self._all_pauses:
            pause.release()

    # ------------------------------------------------------------------ handlers

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
        payload = {"type": "error", "error": {"type": canned.error_type, "message": canned.message}}
        headers = {"request-id": f"req_fake_{next(self._ids)}", **canned.headers}
        return web.json_response(payload, status=canned.status, headers=headers)

    async def _handle_unknown(self, request: web.Request) -> web.Response:
        await self._record(request)
        return self._error(
            CannedError(404, "not_found_error", f"{request.method} {request.path} not found")
        )

    async def _next_step(self, recorded: RecordedRequest) -> Answer:
        """The first matching rule's answer (after its delay), else the script's next."""
        rule = next((r for r in self._rules if r.match(recorded)), None)
        if rule is None:
            return self._script.popleft() if self._script else CannedReply()
        if rule.delay > 0:
            await asyncio.sleep(rule.delay)
        if rule.gate is not None:
            await rule.gate.wait()
        return rule.answer_for(recorded)

    async def _handle_messages(self, request: web.Request) -> web.StreamResponse:
        recorded = await self._record(request)
        try:
            return await self._answer(request, recorded)
        except asyncio.CancelledError:
            # Only with handler_cancellation (or at shutdown): the client closed the request.
            recorded.abandoned_at.append(time.monotonic())
            raise

    async def _answer(self, request: web.Request, recorded: RecordedRequest) -> web.StreamResponse:
        if self.latency > 0:
            await asyncio.sleep(self.latency)
        if self.hold is not None:
            await self.hold.wait()
        if self.require_api_key and recorded.api_key is None:
            return self._error(CannedError(401, "authentication_error", "invalid x-api-key"))
        if "model" not in recorded.body or "messages" not in recorded.body:
            return self._error(
                CannedError(400, "invalid_request_error", "model and messages are required")
            )
        sampling = sorted(_SAMPLING_PARAMS & recorded.body.keys())
        if sampling and self.reject_sampling_params and recorded.api_version >= "2026-10-21":
            detail = f"{sampling[0]}: Extra inputs are not permitted"
            return self._error(CannedError(400, "invalid_request_error", detail))
        problem = _tool_protocol_error(recorded) or _image_error(recorded)
        if problem := problem or _cache_error(recorded):
            return self._error(CannedError(400, "invalid_request_error", problem))
        step = await self._next_step(recorded)
        if isinstance(step, CannedError):
            return self._error(step)
        text = step.text if step.text is not None else self.reply_text
        usage = {
            "input_tokens": 0,
            "output_tokens": 0,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            **self.usage,
            **(step.usage or {}),
        }
        if images := recorded.images:  # as the real API bills them (input, never cached here)
            seen = sum(image_tokens(i.width, i.height) for i in images)
            billed = usage["input_tokens"]
            usage["input_tokens"] = (billed if isinstance(billed, int) else 0) + seen
        stopped: str | None = None
        if step.content is not None:
            content = step.content
        else:
            said = recorded.last_user_text if text is None else text
            said, stopped = stop_at(said, recorded.stop_sequences)
            content = [{"type": "text", "text": said}]
        n = next(self._ids)
        payload = {
            "id": f"msg_fake_{n}",
            "type": "message",
            "role": "assistant",
            "model": step.model or recorded.body["model"],
            "content": content,
            "stop_reason": "stop_sequence" if stopped else step.stop_reason or self.stop_reason,
            "stop_sequence": stopped,
            "usage": usage,
        }
        headers = {"request-id": f"req_fake_{n}"}
        if recorded.streamed:
            return await self._stream(request, recorded, payload, headers)
        return web.json_response(payload, headers=headers)

    async def _stream(
        self,
        request: web.Request,
        recorded: RecordedRequest,
        message: Mapping[str, Any],
        headers: Mapping[str, str],
    ) -> web.StreamResponse:
        """Send ``message`` as an event stream, with the next scripted break and pause."""
        failure = self._breaks.popleft() if self._breaks else None
        pause = self._pauses.popleft() if self._pauses else None
        response = web.StreamResponse(
            headers={**headers, "content-type": "text/event-stream", "cache-control": "no-cache"}
        )
        await response.prepare(request)
        # The client may go away (e.g. its read timeout, a cut-off): nothing more to send.
        try:
            await self._send_events(request, recorded, message, response, failure, pause)
        except ConnectionResetError:
            recorded.abandoned_at.append(time.monotonic())
        return response

    async def _send_events(
        self,
        request: web.Request,
        recorded: RecordedRequest,
        message: Mapping[str, Any],
        response: web.StreamResponse,
        failure: MidstreamFailure | None,
        pause: StreamPause | None,
    ) -> None:
        sent = 0
        for event, data in _stream_events(message):
            token = event == "content_block_delta"
            # "After n tokens" is before the next token, or before message_delta for an answer
            # with fewer tokens: a scripted pause or break always happens in its stream.
            if token or event == "message_delta":
                last = not token
                if pause is not None and (last or sent >= pause.after_tokens):
                    await pause._hold()
                    pause = None
                if failure is not None and (last or sent >= failure.after_tokens):
                    await self._break(request, response, failure)
                    return
                if token and sent and self.token_interval > 0:
                    await asyncio.sleep(self.token_interval)
            await response.write(_sse(event, data))
            if token:
                sent += 1
                recorded.token_times.append(time.monotonic())
        await response.write_eof()

    async def _break(
        self, request: web.Request, response: web.StreamResponse, failure: MidstreamFailure
    ) -> None:
        if failure.kind == "overloaded_error":
            error = {"type": "overloaded_error", "message": failure.message}
            await response.write(_sse("error", {"type": "error", "error": error}))
            await response.write_eof()
            return
        if failure.kind == "truncate":
            await response.write_eof()
            return
        # close(), not abort(): the tokens written so far reach the client first; the chunked
        # body never gets its terminating chunk, so the client sees a cut-off body.
        assert request.transport is not None
        request.transport.close()
