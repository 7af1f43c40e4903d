"""Any OpenAI-compatible Chat Completions endpoint through the official ``openai`` SDK: Ollama,
vLLM, LM Studio, llama.cpp's server, OpenRouter, OpenAI itself (docs/providers.md).

SDK objects and exceptions stay inside this module, as in bot/llm/anthropic.py: callers get a
ModelResult, or one of ModelUnavailable / RateLimited / ModelRejected / RequestRejected
translated once, here, with ``raise ... from``. The SDK retries (``max_retries``, honouring
``retry-after``) until an answer starts; a streamed answer that breaks after that is
ModelUnavailable, never a partial result (docs/architecture.md#streaming).

What the wire format cannot say is decided here:

* Prompt-cache breakpoints (``cache`` and ``ttl`` on a block) are Anthropic's and are not
  sent; an endpoint that caches by itself reports ``prompt_tokens_details.cached_tokens``,
  counted as cache reads and left out of ``input_tokens`` (as Anthropic's usage counts them,
  so ``Usage.total`` is every token once).
* An endpoint that reports no usage (or only zeros for an answer that has text) is charged by
  the local estimate (bot/core/tokens.py): a model that says nothing is never free.
* Tool-call arguments that are not a JSON object (a small local model's broken JSON) become
  ``{"_unreadable_arguments": <text>}``: the tool loop refuses that as bad arguments, an error
  result the model reads and may correct (bot/runtime/tools.py), never a crash or a failed
  turn. Empty arguments are ``{}`` (some servers send "" for a call without parameters).
* ``max_tokens`` is sent, which every local server reads; an endpoint that refuses it in
  favour of ``max_completion_tokens`` (OpenAI's reasoning models) gets the request again with
  that field once, and the client keeps using it.
* Stop sequences: OpenAI takes at most 4, so only a request's first 4 are sent (the caller
  orders them most likely first and trims what the model wrote past the others); an endpoint
  that refuses ``stop`` altogether (OpenAI's reasoning models) gets the request again without
  it, and never again.
"""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import Final, Literal, TypeVar, cast

import httpx2
import openai
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from bot.core.errors import (
    ConfigError,
    ModelError,
    ModelRejected,
    ModelUnavailable,
    RateLimited,
    RequestRejected,
)
from bot.core.llm import BaseLLM, ImageBlock, ModelRequest, ModelResult, TextSink, ToolUse
from bot.llm.headers import retry_after
from bot.llm.openai_wire import (
    Assembly,
    Call,
    arguments_of,
    choice_of,
    messages_of,
    result_of,
    stop_of,
    tools_of,
)

__all__ = ["NO_KEY", "OpenAICompatLLM"]

log = logging.getLogger("personabot.llm")
#: Headers the SDK fills from the environment that no endpoint of ours should receive.
_NO_ACCOUNT_HEADERS: Final = {"OpenAI-Organization": openai.Omit(), "OpenAI-Project": openai.Omit()}

#: Sent as the key when the endpoint needs none (the SDK requires one, and without it would
#: read OPENAI_API_KEY from the environment: a real key never goes to a server by accident).
NO_KEY: Final = "no-key"
_MAX_DETAIL: Final = 500

_T = TypeVar("_T")
_TokensField = Literal["max_tokens", "max_completion_tokens"]


# What reading a started stream may raise: an error event (APIError), a dropped connection or
# a read timeout (the SDK's APIConnectionError / APITimeoutError, or httpx2's own), and data
# it cannot parse (ValueError).
_BROKEN: Final[tuple[type[Exception], ...]] = (
    openai.OpenAIError,
    httpx2.HTTPError,
    httpx2.StreamError,
    ValueError,
    RuntimeError,
)


def _host(base_url: str) -> str:
    """Host and port of the endpoint, for error texts (never its path, query or userinfo)."""
    parts = urllib.parse.urlsplit(base_url)
    return f"{parts.hostname or '?'}{f':{parts.port}' if parts.port else ''}"


def _wants_completion_tokens(exc: openai.BadRequestError) -> bool:
    """The endpoint refuses ``max_tokens`` and asks for ``max_completion_tokens``."""
    return exc.param == "max_tokens" or (
        "max_tokens" in exc.message and "max_completion_tokens" in exc.message
    )


def _refuses_stop(exc: openai.BadRequestError) -> bool:
    """The endpoint does not take stop sequences (OpenAI's reasoning models)."""
    return exc.param == "stop" or "'stop'" in exc.message


class OpenAICompatLLM(BaseLLM):
    """A Chat Completions endpoint via ``openai.AsyncOpenAI`` (docs/providers.md).

    ``api_key=None``: the endpoint takes none (Ollama, a local vLLM): :data:`NO_KEY` is sent.
    ``ModelRequest.temperature`` is sent when set; no other sampling parameter is.
    """

    name = "openai"

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str | None = None,
        timeout_seconds: float = 60.0,
        max_retries: int = 2,
    ) -> None:
        if not base_url.strip():
            raise ConfigError(["llm.base_url: required with llm.provider = 'openai'"])
        self._api_key = api_key.strip() if api_key and api_key.strip() else None
        self._timeout = timeout_seconds
        self._where = _host(base_url)
        self._tokens_field: _TokensField = "max_tokens"
        self._send_stop = True
        self._client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=self._api_key or NO_KEY,
            timeout=timeout_seconds,
            max_retries=max_retries,
            # The SDK would add OPENAI_ORG_ID / OPENAI_PROJECT_ID from the environment to
            # every request, to whatever endpoint base_url names: only what we configure goes.
            default_headers=cast(dict[str, str], _NO_ACCOUNT_HEADERS),
        )

    async def complete(self, request: ModelRequest) -> ModelResult:
        response = await self._open(request, self._completion)
        if not response.choices:
            raise ModelUnavailable(f"the model at {self._where} answered without a choice")
        choice = response.choices[0]
        message = choice.message
        calls = tuple(
            ToolUse(c.id, c.function.name, arguments_of(c.function.arguments))
            for c in message.tool_calls or ()
            if c.type == "function"
        )
        return result_of(
            request,
            text=message.content or "",
            calls=calls,
            finish=choice.finish_reason,
            refused=bool(message.refusal),
            model=response.model or request.model,
            usage=response.usage,
            how="reply",
        )

    async def stream(self, request: ModelRequest, on_text: TextSink) -> ModelResult:
        """The request of :meth:`complete`, answered as a stream (docs/architecture.md#streaming).

        Until the response headers arrived, errors are those of ``complete`` (and the SDK
        retries them). Once the answer streams, any failure is ModelUnavailable. The HTTP
        response is closed on every way out, a cancellation (the stop button, a cut-off)
        included: the endpoint sees the client go and stops generating.
        """
        live = await self._open(request, self._chunks)
        async with live:
            answer = Assembly(model=request.model)
            while True:
                try:
                    chunk = await anext(live)
                except StopAsyncIteration:
                    break
                except _BROKEN as exc:
                    error = self._broken(exc)
                    log.warning("openai stream failed: %s", error)
                    raise error from exc
                # Outside the guarded read: an exception of on_text is the caller's own.
                if piece := answer.add(chunk):
                    on_text(piece)
        if answer.finish is None:
            # A body that ended early (no finish_reason): only part of an answer arrived.
            error = ModelUnavailable(
                f"the model's answer stream from {self._where} ended before its finish_reason"
            )
            log.warning("openai stream failed: %s", error)
            raise error
        return result_of(
            request,
            text="".join(answer.text),
            calls=answer.tool_uses(),
            finish=answer.finish,
            refused=answer.refused,
            model=answer.model,
            usage=answer.usage,
            how="stream",
        )

    async def aclose(self) -> None:
        await self._client.close()

    # ---------------------------------------------------------------------------- calling

    def _call(self, request: ModelRequest) -> Call:
        messages = messages_of(request)
        log.debug(
            "openai request: model=%s layers=%s messages=%d images=%d tools=%d",
            request.model,
            ",".join(request.layers) or "-",
            len(messages),
            sum(isinstance(b, ImageBlock) for m in request.messages for b in m.blocks),
            len(request.tools),
        )
        tools = tools_of(request)
        limit_field = self._tokens_field
        return Call(
            model=request.model,
            messages=messages,
            max_tokens=request.max_tokens if limit_field == "max_tokens" else openai.omit,
            max_completion_tokens=(
                request.max_tokens if limit_field == "max_completion_tokens" else openai.omit
            ),
            temperature=request.temperature if request.temperature is not None else openai.omit,
            tools=tools if tools else openai.omit,
            tool_choice=choice_of(request),
            stop=stop_of(request) if self._send_stop else openai.omit,
        )

    async def _completion(self, call: Call) -> ChatCompletion:
        return await self._client.chat.completions.create(**call)

    async def _chunks(self, call: Call) -> openai.AsyncStream[ChatCompletionChunk]:
        return await self._client.chat.completions.create(
            **call, stream=True, stream_options={"include_usage": True}
        )

    async def _open(self, request: ModelRequest, send: Callable[[Call], Awaitable[_T]]) -> _T:
        """``send`` the request; SDK errors translated (those of a started stream are not
        raised here). A refused field is given up once and the request sent again
        (:meth:`_adapt`): at most once per field, so at most three sends."""
        try:
            while True:
                try:
                    return await send(self._call(request))
                except openai.BadRequestError as exc:
                    if not self._adapt(exc):
                        raise
        except openai.OpenAIError as exc:
            error = self._translate(exc)
            log.warning("openai call failed: %s", error)
            raise error from exc

    def _adapt(self, exc: openai.BadRequestError) -> bool:
        """Change how requests are sent when the endpoint refused a field it does not take;
        False when this refusal is not one of those (or that field was given up already)."""
        if self._tokens_field == "max_tokens" and _wants_completion_tokens(exc):
            log.info(
                "openai: %s refuses max_tokens; sending max_completion_tokens from now on",
                self._where,
            )
            self._tokens_field = "max_completion_tokens"
            return True
        if self._send_stop and _refuses_stop(exc):
            # The model writes on past a speaker change; the caller trims it (memory/voices.py).
            log.info("openai: %s refuses stop sequences; not sending them from now on", self._where)
            self._send_stop = False
            return True
        return False

    # ----------------------------------------------------------------------------- errors

    def _translate(self, exc: openai.OpenAIError) -> ModelError:
        """Map an SDK exception raised before an answer started onto our error tree."""
        where = self._where
        if isinstance(exc, openai.APITimeoutError):
            return ModelUnavailable(
                f"the model at {where} did not answer within {self._timeout:g} s (timeout)"
            )
        if isinstance(exc, openai.APIConnectionError):
            cause = type(exc.__cause__).__name__ if exc.__cause__ else "connection error"
            return ModelUnavailable(f"Could not connect to the model at {where} ({cause})")
        if not isinstance(exc, openai.APIStatusError):
            return ModelUnavailable(self._redact(f"the model call failed: {type(exc).__name__}"))
        status = exc.status_code
        kind = "/".join(str(k) for k in (exc.type, exc.code) if k) or "error"
        detail = self._redact((exc.message or type(exc).__name__)[:_MAX_DETAIL])
        head = f"({status} {kind}): {detail}"
        if status == 429:
            wait = retry_after(exc.response.headers)
            hint = f"; retry after {wait:g} s" if wait is not None else ""
            return RateLimited(
                f"the model at {where} rate-limited the request {head}{hint}",
                status=status,
                retry_after=wait,
            )
        if status in (408, 409) or status >= 500:  # timeouts, conflicts, server errors
            return ModelUnavailable(f"the model at {where} failed {head}", status=status)
        if status == 401:
            return ModelRejected(
                f"the model at {where} refused the API key (401): check llm.api_key_env and "
                f"the variable it names ({detail})",
                status=status,
            )
        if status in (400, 413, 422):
            # About this request (too long, malformed): do not resend it.
            return RequestRejected(
                f"the model at {where} rejected the request {head}", status=status
            )
        # 403 permission, 404 an unknown model or a wrong base_url: every request fails alike.
        return ModelRejected(f"the model at {where} rejected the request {head}", status=status)

    def _broken(self, exc: Exception) -> ModelUnavailable:
        """A stream that failed after it started: always transient, never a partial result."""
        where = self._where
        if isinstance(exc, openai.APITimeoutError | httpx2.TimeoutException):
            return ModelUnavailable(
                f"the model's stream from {where} stalled for {self._timeout:g} s mid-answer"
            )
        if isinstance(exc, openai.APIConnectionError | httpx2.TransportError):
            cause = exc.__cause__ if isinstance(exc, openai.APIConnectionError) else exc
            name = type(cause).__name__ if cause is not None else type(exc).__name__
            return ModelUnavailable(f"the model's stream from {where} was cut off ({name})")
        if isinstance(exc, openai.APIError):
            # An error event inside the 200 response (the SDK raises it as a plain APIError).
            detail = self._redact((exc.message or type(exc).__name__)[:_MAX_DETAIL])
            return ModelUnavailable(f"the model's answer from {where} broke off: {detail}")
        return ModelUnavailable(
            f"the model's stream from {where} could not be read ({type(exc).__name__})"
        )

    def _redact(self, text: str) -> str:
        """Belt and braces: the endpoint's text must never echo our key back."""
        return text.replace(self._api_key, "[redacted]") if self._api_key else text
