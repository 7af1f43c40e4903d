"""The model interface the pipeline talks to: one request in, text (or tool calls) and usage out.

A request may offer tools (``ModelRequest.tools``); the model then answers either with text or
with ``ToolUse`` blocks (``ModelResult.tool_uses``, stop reason ``"tool_use"``), and the next
request carries the assistant's ``ToolUse`` blocks and a user message of ``ToolResult`` blocks
(bot/runtime/tools.py runs the loop). A provider without tool support ignores ``tools`` and
answers text: a request without tools is exactly the text-only request it always was.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

#: How long a prompt-cache entry lives unused: Anthropic's 5 minutes (writes 1.25x the input
#: price) or 1 hour (writes 2x); reads cost 0.1x either way (docs/architecture.md#prompt).
CacheTTL = Literal["5m", "1h"]


@dataclass(frozen=True, slots=True)
class TextBlock:
    """A block of text; ``cache`` marks a prompt-cache breakpoint after this block, ``ttl``
    how long its entry lives (a provider that cannot choose ignores it; Anthropic requires
    every 1h breakpoint to come before every 5m one: bot/llm/anthropic.py sees to it)."""

    text: str
    cache: bool = False
    ttl: CacheTTL = "5m"


@dataclass(frozen=True, slots=True)
class ImageBlock:
    """An image the model sees (user messages only): prepared bytes, within the API's limits
    (bot/runtime/images.py); ``cache`` marks a prompt-cache breakpoint after it."""

    media_type: str  # image/jpeg, image/png, image/gif or image/webp
    data: bytes = field(repr=False)
    cache: bool = False


@dataclass(frozen=True, slots=True)
class ToolUse:
    """The model asks for a tool call (an assistant block); ``input`` is unvalidated JSON."""

    id: str
    name: str
    input: Mapping[str, Any]
    cache: bool = False


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool call gave (a user block answering the ``ToolUse`` of ``tool_use_id``)."""

    tool_use_id: str
    content: str
    is_error: bool = False
    cache: bool = False


#: A block of a chat message.
ContentBlock = TextBlock | ImageBlock | ToolUse | ToolResult

#: Prompt-cache breakpoints one request may carry (Anthropic's limit; docs/architecture.md
#: #prompt says who spends them).
MAX_BREAKPOINTS: Final = 4


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool offered to the model: its name, description and JSON schema of its input."""

    name: str
    description: str
    input_schema: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One message of the conversation sent to the model."""

    role: Literal["user", "assistant"]
    blocks: tuple[ContentBlock, ...]

    @classmethod
    def of(cls, role: Literal["user", "assistant"], text: str) -> ChatMessage:
        """A message made of a single uncached text block."""
        return cls(role=role, blocks=(TextBlock(text),))

    @property
    def text(self) -> str:
        """All text blocks joined (image and tool blocks left out)."""
        return "\n\n".join(b.text for b in self.blocks if isinstance(b, TextBlock))


#: The provider of ``[llm]`` itself (requests name it unless a persona or task names another).
DEFAULT_PROVIDER: Final = "default"


@dataclass(frozen=True, slots=True)
class ModelRoute:
    """A model on a named provider (``[llm.providers]``; "default": ``[llm]``'s)."""

    provider: str
    model: str


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """Everything a model needs for one call.

    ``layers`` names the prompt layers present (for the offline model and for logs); it is
    never sent to a provider.
    """

    model: str
    system: tuple[TextBlock, ...]
    messages: tuple[ChatMessage, ...]
    max_tokens: int = 1024
    temperature: float | None = None
    layers: tuple[str, ...] = field(default=())
    # What the call is for: the offline model answers each kind in its own way.
    purpose: Literal["reply", "summary", "extract"] = "reply"
    # Tools the model may call; "none" forbids calls (the tools stay defined because earlier
    # messages of the request may hold tool blocks, which the API accepts only then).
    tools: tuple[ToolSpec, ...] = ()
    # "any": the model must call one of the tools (a structured choice: docs/initiatives.md).
    tool_choice: Literal["auto", "none", "any"] = "auto"
    # Which configured provider answers (bot/llm/router.py; never sent), and who answers
    # instead when it is unavailable (overloaded, 5xx, timeout; never when it rejected).
    provider: str = DEFAULT_PROVIDER
    fallback: ModelRoute | None = None
    # Sequences at which the model stops writing; the text returned never contains the
    # sequence. In a scene they are the other speakers' line starts (memory/voices.py). An
    # OpenAI-compatible endpoint gets the first 4 only (docs/providers.md).
    stop: tuple[str, ...] = ()


def breakpoints(request: ModelRequest) -> int:
    """The cache breakpoints of the request's system blocks and messages (a provider that
    caches its tool definitions may add one more, within ``MAX_BREAKPOINTS``)."""
    return sum(b.cache for b in request.system) + sum(
        b.cache for m in request.messages for b in m.blocks
    )


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage of one call, as reported by the provider."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    # The part of cache_creation_input_tokens written to 1-hour entries (priced 2x, not
    # 1.25x); the stored token counts keep the total only, the charge prices the split.
    cache_creation_1h_input_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        """The usage of both calls."""
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_creation_input_tokens + other.cache_creation_input_tokens,
            self.cache_read_input_tokens + other.cache_read_input_tokens,
            self.cache_creation_1h_input_tokens + other.cache_creation_1h_input_tokens,
        )

    @property
    def total(self) -> int:
        """Every token of the call, cached or not."""
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_creation_input_tokens
            + self.cache_read_input_tokens
        )


@dataclass(frozen=True, slots=True)
class Price:
    """Dollars per million tokens of one model: uncached input, output, cache writes (5-minute
    and 1-hour entries) and cache reads (``[llm.prices]``; they default to 1.25x, 2x and 0.1x
    of input, Anthropic's prices)."""

    input: float
    output: float
    cache_write: float | None = None
    cache_read: float | None = None
    cache_write_1h: float | None = None

    def cost(self, usage: Usage) -> float:
        """Dollars of ``usage`` (its 1-hour cache writes at the 1-hour price)."""
        write = self.input * 1.25 if self.cache_write is None else self.cache_write
        write_1h = self.input * 2.0 if self.cache_write_1h is None else self.cache_write_1h
        read = self.input * 0.1 if self.cache_read is None else self.cache_read
        long = min(usage.cache_creation_1h_input_tokens, usage.cache_creation_input_tokens)
        return (
            usage.input_tokens * self.input
            + usage.output_tokens * self.output
            + (usage.cache_creation_input_tokens - long) * write
            + long * write_1h
            + usage.cache_read_input_tokens * read
        ) / 1_000_000


@dataclass(frozen=True, slots=True)
class ModelResult:
    """What the model answered."""

    text: str
    usage: Usage
    model: str
    stop_reason: str | None = None
    # An answer that calls tools: its blocks in order (non-empty text and tool calls), sent
    # back as the assistant message of the tool loop's next request; () for a text answer.
    content: tuple[TextBlock | ToolUse, ...] = ()

    @property
    def tool_uses(self) -> tuple[ToolUse, ...]:
        """The tool calls the model asked for (empty for a text answer)."""
        return tuple(b for b in self.content if isinstance(b, ToolUse))


#: Receives each piece of an answer's text as the model writes it (docs/architecture.md#streaming).
TextSink = Callable[[str], None]


class BaseLLM(abc.ABC):
    """A language model. Implementations translate their own errors into ModelError."""

    name: str = "model"

    @abc.abstractmethod
    async def complete(self, request: ModelRequest) -> ModelResult:
        """Run one request; raise ModelUnavailable/RateLimited/ModelRejected on failure."""

    async def stream(self, request: ModelRequest, on_text: TextSink) -> ModelResult:
        """Like :meth:`complete`, calling ``on_text`` with each piece of text as it arrives.

        The joined pieces equal the result's ``text``. A stream that fails midway raises
        ModelUnavailable (never a partial result): the caller treats it as a failed attempt.
        The default answers in one piece: providers that cannot stream still work.
        """
        result = await self.complete(request)
        if result.text:
            on_text(result.text)
        return result

    async def aclose(self) -> None:  # noqa: B027 - optional hook, default no-op
        """Release network resources."""
