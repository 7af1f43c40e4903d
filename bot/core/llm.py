"""The model interface the pipeline talks to: one request in, text and usage out."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True, slots=True)
class TextBlock:
    """A block of text; ``cache`` marks a prompt-cache breakpoint after this block."""

    text: str
    cache: bool = False


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One message of the conversation sent to the model."""

    role: Literal["user", "assistant"]
    blocks: tuple[TextBlock, ...]

    @classmethod
    def of(cls, role: Literal["user", "assistant"], text: str) -> ChatMessage:
        """A message made of a single uncached text block."""
        return cls(role=role, blocks=(TextBlock(text),))

    @property
    def text(self) -> str:
        """All blocks joined."""
        return "\n\n".join(b.text for b in self.blocks)


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


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage of one call, as reported by the provider."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0


@dataclass(frozen=True, slots=True)
class ModelResult:
    """What the model answered."""

    text: str
    usage: Usage
    model: str
    stop_reason: str | None = None


class BaseLLM(abc.ABC):
    """A language model. Implementations translate their own errors into ModelError."""

    name: str = "model"

    @abc.abstractmethod
    async def complete(self, request: ModelRequest) -> ModelResult:
        """Run one request; raise ModelUnavailable/RateLimited/ModelRejected on failure."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook, default no-op
        """Release network resources."""
