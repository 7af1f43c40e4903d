"""Claude through Anthropic's Messages API (the official ``anthropic`` SDK).

SDK objects and exceptions stay inside this module: callers get a ModelResult, or one of
ModelUnavailable / RateLimited / ModelRejected translated once, here, with ``raise ... from``.
The SDK does its own retries (``max_retries``, honouring ``retry-after``); what reaches us is
the final failure. A streamed answer (:meth:`AnthropicLLM.stream`) is retried by the SDK only
until it starts; a failure after that is ModelUnavailable (docs/architecture.md#streaming).
"""

from __future__ import annotations

import base64
import logging
from typing import Literal, TypedDict, cast

import anthropic
import httpx2
from anthropic.lib.streaming import AsyncMessageStream
from anthropic.types import (
    AssistantMessageParam,
    Base64ImageSourceParam,
    CacheControlEphemeralParam,
    ContentBlockParam,
    ImageBlockParam,
    Message,
    MessageParam,
    TextBlockParam,
    ToolChoiceAnyParam,
    ToolChoiceNoneParam,
    ToolParam,
    ToolResultBlockParam,
    ToolUseBlockParam,
    UserMessageParam,
)
from anthropic.types import TextBlock as SDKTextBlock
from anthropic.types import ToolUseBlock as SDKToolUseBlock

from bot.core.errors import (
    ConfigError,
    ModelError,
    ModelRejected,
    ModelUnavailable,
    RateLimited,
    RequestRejected,
)
from bot.core.llm import (
    MAX_BREAKPOINTS,
    BaseLLM,
    CacheTTL,
    ChatMessage,
    ContentBlock,
    ImageBlock,
    ModelRequest,
    ModelResult,
    TextBlock,
    TextSink,
    ToolSpec,
    ToolUse,
    Usage,
    breakpoints,
)
from bot.llm.headers import retry_after as retry_after_seconds

__all__ = ["AnthropicLLM"]

log = logging.getLogger("personabot.llm")

_MAX_DETAIL = 500
_EPHEMERAL: CacheControlEphemeralParam = {"type": "ephemeral"}
_HOUR: CacheControlEphemeralParam = {"type": "ephemeral", "ttl": "1h"}


def _control(ttl: CacheTTL) -> CacheControlEphemeralParam:
    """A breakpoint's ``cache_control``: the 5-minute default as it always was sent (no
    ``ttl`` key), a 1-hour one with ``"ttl": "1h"``."""
    return _HOUR if ttl == "1h" else _EPHEMERAL


def _blocks(blocks: tuple[TextBlock, ...]) -> list[TextBlockParam]:
    out: list[TextBlockParam] = []
    for block in blocks:
        param: TextBlockParam = {"type": "text", "text": block.text}
        if block.cache:
            param["cache_control"] = _control(block.ttl)
        out.append(param)
    return out


def _hour_first(
    tools: list[ToolParam], system: list[TextBlockParam], messages: list[MessageParam]
) -> None:
    """Every breakpoint before the last 1-hour one made 1-hour too (in place).

    The API refuses a 1-hour breakpoint after a 5-minute one, in its cache order tools ->
    system -> messages. So the tools' breakpoint, and a tool loop's or an image's 5-minute
    one placed before the prompt's last 1-hour breakpoint, live an hour as well: the prefix
    they end is part of that hour-long entry anyway (docs/architecture.md#prompt)."""
    points: list[dict[str, object]] = [
        cast(dict[str, object], p) for p in (*tools, *system) if "cache_control" in p
    ]
    for message in messages:
        content = message["content"]
        if not isinstance(content, str):
            points += [
                cast(dict[str, object], b)
                for b in content
                if isinstance(b, dict) and "cache_control" in b
            ]
    last = max((i for i, p in enumerate(points) if p["cache_control"] == _HOUR), default=0)
    for point in points[:last]:
        point["cache_control"] = _HOUR


_ImageType = Literal["image/jpeg", "image/png", "image/gif", "image/webp"]


def _image(block: ImageBlock) -> ImageBlockParam:
    # The media type is sent as given: bot/runtime/images.py only makes the API's four types,
    # and the API itself refuses anything else (or bytes of another type) with a 400, which
    # becomes RequestRejected like every other malformed request.
    source: Base64ImageSourceParam = {
        "type": "base64",
        "media_type": cast(_ImageType, block.media_type),
        "data": base64.b64encode(block.data).decode("ascii"),
    }
    param: ImageBlockParam = {"type": "image", "source": source}
    if block.cache:
        param["cache_control"] = _EPHEMERAL
    return param


def _content(block: ContentBlock) -> ContentBlockParam:
    if isinstance(block, TextBlock):
        return _blocks((block,))[0]
    if isinstance(block, ImageBlock):
        return _image(block)
    if isinstance(block, ToolUse):
        use: ToolUseBlockParam = {
            "type": "tool_use",
            "id": block.id,
            "name": block.name,
            "input": dict(block.input),
        }
        if block.cache:
            use["cache_control"] = _EPHEMERAL
        return use
    result: ToolResultBlockParam = {
        "type": "tool_result",
        "tool_use_id": block.tool_use_id,
        "content": block.content,
        "is_error": block.is_error,
    }
    if block.cache:
        result["cache_control"] = _EPHEMERAL
    return result


def _message(message: ChatMessage) -> MessageParam:
    if message.role == "assistant" and any(isinstance(b, ImageBlock) for b in message.blocks):
        # Only people send images; a model answer holding one is a bug of the prompt builder.
        raise ValueError("an image block in an assistant message (images are user content)")
    content = [_content(b) for b in message.blocks]
    if message.role == "user":
        return UserMessageParam(role="user", content=content)
    return AssistantMessageParam(role="assistant", content=content)


def _tool(spec: ToolSpec) -> ToolParam:
    return {
        "name": spec.name,
        "description": spec.description,
        "input_schema": dict(spec.input_schema),
    }


def _tools(request: ModelRequest) -> list[ToolParam]:
    """The request's tool definitions, in its order (the registry sorts them by name), with a
    cache breakpoint on the last one when the prompt leaves one free.

    Claude's cache prefix is tools -> system -> messages, so the definitions are cached first
    and apart from the prompt: every conversation of a bot and persona with the same tools
    reads them, and a changed pin or memory block no longer costs them again. The prompt
    spends at most three breakpoints (memory/assemble.py) and the tool loop one more, on its
    newest step. When that makes four, the limit, this one gives way: in a later call of the
    loop it saves nothing, since the loop's first call wrote the definitions' entry seconds
    before and the later call reads a longer prefix (docs/architecture.md#prompt).
    """
    tools = [_tool(t) for t in request.tools]
    if tools and breakpoints(request) < MAX_BREAKPOINTS:
        tools[-1]["cache_control"] = _EPHEMERAL
    return tools


def _answer(block: object) -> TextBlock | ToolUse | None:
    """A response block we use; None for others (e.g. thinking) and for empty text."""
    if isinstance(block, SDKTextBlock):
        return TextBlock(block.text) if block.text else None
    if isinstance(block, SDKToolUseBlock):
        return ToolUse(block.id, block.name, dict(block.input))
    return None


class _Call(TypedDict):
    """What ``messages.create`` and ``messages.stream`` are called with (the same request)."""

    model: str
    max_tokens: int
    messages: list[MessageParam]
    system: list[TextBlockParam] | anthropic.Omit
    tools: list[ToolParam] | anthropic.Omit
    tool_choice: ToolChoiceNoneParam | ToolChoiceAnyParam | anthropic.Omit
    stop_sequences: list[str] | anthropic.Omit


# What reading a started stream may raise (docs/architecture.md#streaming): an SSE `error`
# event (APIStatusError), a dropped connection or a read timeout (httpx errors the SDK lets
# through unwrapped once the response is open), and events it cannot parse or order.
_BROKEN: tuple[type[Exception], ...] = (
    anthropic.AnthropicError,
    httpx2.HTTPError,
    httpx2.StreamError,
    ValueError,
    RuntimeError,
)


def _result(response: Message, how: str) -> ModelResult:
    """Our result of a whole answer (of ``create``, or a stream's final message)."""
    raw = response.usage
    # The writes split by lifetime (absent from older answers: then all count as 5-minute).
    split = raw.cache_creation
    usage = Usage(
        input_tokens=raw.input_tokens or 0,
        output_tokens=raw.output_tokens or 0,
        cache_creation_input_tokens=raw.cache_creation_input_tokens or 0,
        cache_read_input_tokens=raw.cache_read_input_tokens or 0,
        cache_creation_1h_input_tokens=(split.ephemeral_1h_input_tokens or 0) if split else 0,
    )
    # May be empty (e.g. stop_reason "refusal"): callers must never record or send that.
    text = "".join(b.text for b in response.content if isinstance(b, SDKTextBlock))
    content = tuple(b for b in map(_answer, response.content) if b is not None)
    if not any(isinstance(b, ToolUse) for b in content):
        content = ()  # a text answer is its text alone, as before tools existed
    log.debug(
        "anthropic %s: model=%s stop=%s tool_uses=%d in=%d out=%d cache_write=%d (1h %d) "
        "cache_read=%d",
        how,
        response.model,
        response.stop_reason,
        sum(isinstance(b, ToolUse) for b in content),
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_creation_input_tokens,
        usage.cache_creation_1h_input_tokens,
        usage.cache_read_input_tokens,
    )
    return ModelResult(
        text=text,
        usage=usage,
        model=str(response.model),
        stop_reason=response.stop_reason,
        content=content,
    )


class AnthropicLLM(BaseLLM):
    """Claude via ``anthropic.AsyncAnthropic``.

    ``base_url=None`` lets the SDK choose (``ANTHROPIC_BASE_URL``, else the public API).
    ``ModelRequest.temperature`` is not sent: SDK 2.x speaks API version 2026-10-21, which
    rejects every sampling parameter; a non-None value is logged (once) and ignored.
    """

    name = "anthropic"

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str | None = None,
        timeout_seconds: float = 60.0,
        max_retries: int = 2,
    ) -> None:
        if not api_key.strip():
            raise ConfigError(["anthropic.api_key: empty API key (set ANTHROPIC_API_KEY)"])
        self._api_key = api_key
        self._timeout = timeout_seconds
        self._warned_temperature = False
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key, base_url=base_url, timeout=timeout_seconds, max_retries=max_retries
        )

    async def complete(self, request: ModelRequest) -> ModelResult:
        call = self._call(request)
        try:
            response = await self._client.messages.create(**call)
        except anthropic.AnthropicError as exc:
            error = self._translate(exc)
            log.warning("anthropic call failed: %s", error)
            raise error from exc
        return _result(response, "reply")

    async def stream(self, request: ModelRequest, on_text: TextSink) -> ModelResult:
        """The request of :meth:`complete`, answered as a stream (docs/architecture.md#streaming).

        Until the response headers arrived, errors are those of ``complete`` (and the SDK
        retries them). Once the answer streams, any failure is ModelUnavailable: the SDK does
        not retry a stream, and pieces already given to ``on_text`` cannot be taken back.
        """
        call = self._call(request)
        try:
            async with self._client.messages.stream(**call) as live:
                message = await self._read(live, on_text)
        except anthropic.AnthropicError as exc:
            # Only the opening call gets here: _read turns every later error into ModelError.
            error = self._translate(exc)
            log.warning("anthropic stream failed before it started: %s", error)
            raise error from exc
        return _result(message, "stream")

    def _call(self, request: ModelRequest) -> _Call:
        """The keyword arguments of the SDK call, the same for a plain and a streamed answer."""
        if request.temperature is not None and not self._warned_temperature:
            # SDK 2.x sends anthropic-version 2026-10-21, which has no sampling parameters:
            # the SDK dropped `temperature` and the API answers 400 to any value of it.
            self._warned_temperature = True
            log.warning(
                "anthropic: ignoring temperature=%s (not supported by the API)", request.temperature
            )
        system = _blocks(request.system)
        messages = [_message(m) for m in request.messages]
        log.debug(
            "anthropic request: model=%s layers=%s system_blocks=%d messages=%d images=%d tools=%d",
            request.model,
            ",".join(request.layers) or "-",
            len(system),
            len(messages),
            sum(isinstance(b, ImageBlock) for m in request.messages for b in m.blocks),
            len(request.tools),
        )
        tools = _tools(request)
        _hour_first(tools, system, messages)
        # Only a request offering tools names a choice: a text-only request stays as it was.
        no_tools: ToolChoiceNoneParam = {"type": "none"}
        must: ToolChoiceAnyParam = {"type": "any"}
        choice: ToolChoiceNoneParam | ToolChoiceAnyParam | anthropic.Omit = anthropic.omit
        if tools and request.tool_choice == "none":
            choice = no_tools
        elif tools and request.tool_choice == "any":
            choice = must
        return _Call(
            model=request.model,
            max_tokens=request.max_tokens,
            messages=messages,
            system=system if system else anthropic.omit,
            tools=tools if tools else anthropic.omit,
            tool_choice=choice,
            # The API returns the text before the sequence and names it (stop_reason
            # "stop_sequence"): a scene's line ends where another speaker's would begin.
            stop_sequences=list(request.stop) if request.stop else anthropic.omit,
        )

    async def _read(self, live: AsyncMessageStream[None], on_text: TextSink) -> Message:
        """The whole streamed message, its text pieces given to ``on_text`` as they arrive.

        Errors of the stream itself become ModelUnavailable; an exception of ``on_text`` is
        the caller's and propagates unchanged (it is raised outside the guarded read).
        """
        finished = False
        while True:
            try:
                event = await anext(live)
            except StopAsyncIteration:
                break
            except _BROKEN as exc:
                error = self._broken(exc)
                log.warning("anthropic stream failed: %s", error)
                raise error from exc
            if event.type == "text" and event.text:
                on_text(event.text)
            elif event.type == "message_stop":
                finished = True
        if not finished:
            # A body that ended cleanly but early: what arrived is only part of an answer.
            error = ModelUnavailable("Claude's answer stream ended before message_stop")
            log.warning("anthropic stream failed: %s", error)
            raise error
        return await live.get_final_message()

    def _broken(self, exc: Exception) -> ModelUnavailable:
        """A stream that failed after it started: always transient, never a partial result."""
        if isinstance(exc, anthropic.APIStatusError):
            # An SSE `error` event: the SDK builds the error from the 200 response it came in,
            # so status_code is 200 and only the event's error.type tells what happened.
            kind = exc.type or "error"
            detail = exc.api_message or (str(exc.body) if exc.body else type(exc).__name__)
            detail = self._redact(detail[:_MAX_DETAIL])
            return ModelUnavailable(f"Claude's answer broke off mid-stream ({kind}): {detail}")
        # SDK 2.17 and later wrap the transport's errors of a started stream in its own
        # APITimeoutError / APIConnectionError (the raw httpx2 error is the cause); earlier
        # versions let the raw error through. Both read the same.
        if isinstance(exc, httpx2.TimeoutException | anthropic.APITimeoutError):
            return ModelUnavailable(
                f"Claude's stream stalled for {self._timeout:g} s mid-answer (read timeout)"
            )
        if isinstance(exc, httpx2.TransportError | anthropic.APIConnectionError):
            cause = exc.__cause__ if isinstance(exc, anthropic.APIConnectionError) else exc
            name = type(cause).__name__ if cause is not None else type(exc).__name__
            return ModelUnavailable(f"Claude's stream was cut off mid-answer ({name})")
        if isinstance(exc, anthropic.AnthropicError):
            return ModelUnavailable(self._redact(f"Claude's stream failed: {type(exc).__name__}"))
        # Other httpx errors, or events the SDK could not read (ValueError, RuntimeError).
        return ModelUnavailable(f"Claude's stream could not be read ({type(exc).__name__})")

    async def aclose(self) -> None:
        await self._client.close()

    def _translate(self, exc: anthropic.AnthropicError) -> ModelError:
        """Map an SDK exception onto the personabot error tree."""
        if isinstance(exc, anthropic.APITimeoutError):
            return ModelUnavailable(f"Claude did not answer within {self._timeout:g} s (timeout)")
        if isinstance(exc, anthropic.APIConnectionError):
            cause = type(exc.__cause__).__name__ if exc.__cause__ else "connection error"
            where = f"{exc.request.url.host}:{exc.request.url.port or ''}".rstrip(":")
            return ModelUnavailable(f"Could not connect to Claude at {where} ({cause})")
        if not isinstance(exc, anthropic.APIStatusError):
            return ModelUnavailable(self._redact(f"Claude call failed: {type(exc).__name__}"))

        status = exc.status_code
        kind = "/".join(k for k in (exc.type, exc.error_code) if k) or "error"
        detail = exc.api_message or (str(exc.body) if exc.body else type(exc).__name__)
        detail = self._redact(detail[:_MAX_DETAIL])
        head = f"({status} {kind}): {detail}"
        if isinstance(exc, anthropic.RateLimitError) or status == 429:
            retry_after = retry_after_seconds(exc.response.headers)
            hint = f"; retry after {retry_after:g} s" if retry_after is not None else ""
            msg = f"Claude rate-limited the request {head}{hint}"
            return RateLimited(msg, status=status, retry_after=retry_after)
        if status == 529:
            return ModelUnavailable(f"Claude is overloaded {head}", status=status)
        if status in (408, 504):  # 408 is a timeout too: transient, unlike other 4xx
            return ModelUnavailable(f"Claude timed out {head}", status=status)
        if status >= 500:
            return ModelUnavailable(f"Claude had a server error {head}", status=status)
        if status == 401:
            return ModelRejected(
                f"Claude authentication failed (401): check ANTHROPIC_API_KEY ({detail})",
                status=status,
            )
        if status == 403:
            return ModelRejected(f"Claude denied permission {head}", status=status)
        if status in (400, 413, 422):
            # About this request (too long, malformed, an empty message): do not resend it.
            return RequestRejected(f"Claude rejected the request {head}", status=status)
        return ModelRejected(f"Claude rejected the request {head}", status=status)

    def _redact(self, text: str) -> str:
        """Belt and braces: the provider's text must never echo our key back."""
        return text.replace(self._api_key, "[redacted]")
