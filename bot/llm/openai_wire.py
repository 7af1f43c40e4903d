"""The Chat Completions wire format, pure: our ModelRequest as the API's messages, tools and
tool choice, and its answer (whole, or streamed chunk by chunk) as our ModelResult. The client
and its errors are bot/llm/openai.py; what the format cannot say is decided there (module doc).
"""

from __future__ import annotations

import base64
import json
import logging
from dataclasses import dataclass, field
from typing import Any, Final, TypedDict

import openai
from openai.types import CompletionUsage
from openai.types.chat import (
    ChatCompletionAssistantMessageParam,
    ChatCompletionChunk,
    ChatCompletionContentPartParam,
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageFunctionToolCallParam,
    ChatCompletionMessageParam,
    ChatCompletionToolChoiceOptionParam,
    ChatCompletionToolMessageParam,
    ChatCompletionUserMessageParam,
)

from bot.core.llm import (
    ChatMessage,
    ContentBlock,
    ImageBlock,
    ModelRequest,
    ModelResult,
    TextBlock,
    ToolResult,
    ToolUse,
    Usage,
)
from bot.core.tokens import MAX_IMAGE_TOKENS, estimate_tokens

__all__ = [
    "MAX_STOP",
    "Assembly",
    "Call",
    "arguments_of",
    "choice_of",
    "messages_of",
    "result_of",
    "stop_of",
    "tools_of",
]

log = logging.getLogger("personabot.llm")

_MAX_ARGUMENTS: Final = 500
_UNREADABLE: Final = "_unreadable_arguments"
#: Our stop reasons (those of bot/llm/anthropic.py) for the API's ``finish_reason``; another
#: value (a local server's own) is passed on as it is.
_STOP_REASONS: Final = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}
#: Stop sequences OpenAI's API accepts in one request (it answers 400 to a fifth).
MAX_STOP: Final = 4


class Call(TypedDict):
    """What ``chat.completions.create`` is called with, plain or streamed (the same request)."""

    model: str
    messages: list[ChatCompletionMessageParam]
    max_tokens: int | openai.Omit
    max_completion_tokens: int | openai.Omit
    temperature: float | openai.Omit
    tools: list[ChatCompletionFunctionToolParam] | openai.Omit
    tool_choice: ChatCompletionToolChoiceOptionParam | openai.Omit
    stop: list[str] | openai.Omit


# ------------------------------------------------------------------------------- the request


def _data_url(block: ImageBlock) -> str:
    # The media type is sent as given (bot/runtime/images.py makes jpeg, png, gif or webp);
    # an endpoint that cannot read it answers 400, which becomes RequestRejected.
    return f"data:{block.media_type};base64,{base64.b64encode(block.data).decode('ascii')}"


def _user(message: ChatMessage) -> list[ChatCompletionMessageParam]:
    """Tool results first (each a ``tool`` message right after the calls they answer), then
    the rest of the message as one user message: a string, or parts when it holds images."""
    out: list[ChatCompletionMessageParam] = []
    rest: list[TextBlock | ImageBlock] = []
    for block in message.blocks:
        if isinstance(block, ToolResult):
            # The API has no error flag on a tool message: the model reads it in the text.
            content = f"Error: {block.content}" if block.is_error else block.content
            out.append(
                ChatCompletionToolMessageParam(
                    role="tool", tool_call_id=block.tool_use_id, content=content
                )
            )
        elif isinstance(block, TextBlock | ImageBlock):
            rest.append(block)
    if not rest:
        return out
    if not any(isinstance(b, ImageBlock) for b in rest):
        # A plain string: the one form every local server reads.
        text = "\n\n".join(b.text for b in rest if isinstance(b, TextBlock))
        out.append(ChatCompletionUserMessageParam(role="user", content=text))
        return out
    parts: list[ChatCompletionContentPartParam] = []
    for block in rest:
        if isinstance(block, TextBlock):
            parts.append({"type": "text", "text": block.text})
        else:
            parts.append({"type": "image_url", "image_url": {"url": _data_url(block)}})
    out.append(ChatCompletionUserMessageParam(role="user", content=parts))
    return out


def _assistant(message: ChatMessage) -> ChatCompletionAssistantMessageParam:
    if any(isinstance(b, ImageBlock | ToolResult) for b in message.blocks):
        # Only people send images and tool results; an answer holding one is a prompt bug.
        raise ValueError("an image or tool result in an assistant message (user content)")
    text = "\n\n".join(b.text for b in message.blocks if isinstance(b, TextBlock))
    calls: list[ChatCompletionMessageFunctionToolCallParam] = [
        {
            "id": b.id,
            "type": "function",
            "function": {"name": b.name, "arguments": json.dumps(dict(b.input))},
        }
        for b in message.blocks
        if isinstance(b, ToolUse)
    ]
    if not calls:
        return ChatCompletionAssistantMessageParam(role="assistant", content=text)
    # What the API itself answers for calls without text: content null, not "".
    return ChatCompletionAssistantMessageParam(
        role="assistant", content=text or None, tool_calls=calls
    )


def messages_of(request: ModelRequest) -> list[ChatCompletionMessageParam]:
    out: list[ChatCompletionMessageParam] = []
    if request.system:
        system = "\n\n".join(b.text for b in request.system)
        out.append({"role": "system", "content": system})
    for message in request.messages:
        if message.role == "user":
            out.extend(_user(message))
        else:
            out.append(_assistant(message))
    return out


def tools_of(request: ModelRequest) -> list[ChatCompletionFunctionToolParam]:
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": dict(t.input_schema),
            },
        }
        for t in request.tools
    ]


def choice_of(request: ModelRequest) -> ChatCompletionToolChoiceOptionParam | openai.Omit:
    # Only a request offering tools names a choice; "auto" is the API's default.
    if not request.tools or request.tool_choice == "auto":
        return openai.omit
    return "required" if request.tool_choice == "any" else "none"


def stop_of(request: ModelRequest) -> list[str] | openai.Omit:
    """The request's first :data:`MAX_STOP` stop sequences (callers order them most likely
    first); the model may write past the others, which its caller trims (memory/voices.py)."""
    return list(request.stop[:MAX_STOP]) if request.stop else openai.omit


# ------------------------------------------------------------------------------- the answer


def arguments_of(raw: str | None) -> dict[str, Any]:
    """A tool call's arguments as an object; unreadable ones marked (see the module doc)."""
    if raw is None or not raw.strip():
        return {}
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        return parsed
    return {_UNREADABLE: raw[:_MAX_ARGUMENTS]}


def _block_tokens(block: ContentBlock) -> int:
    if isinstance(block, TextBlock):
        return estimate_tokens(block.text)
    if isinstance(block, ImageBlock):
        return MAX_IMAGE_TOKENS  # the size is unknown here: the most one image costs
    if isinstance(block, ToolResult):
        return estimate_tokens(block.content)
    return estimate_tokens(block.name + json.dumps(dict(block.input)))


def _estimate(request: ModelRequest, content: tuple[TextBlock | ToolUse, ...]) -> Usage:
    """Usage by the local estimate, for an endpoint that reported none."""
    prompt = sum(estimate_tokens(b.text) for b in request.system)
    prompt += sum(_block_tokens(b) for m in request.messages for b in m.blocks)
    return Usage(input_tokens=prompt, output_tokens=sum(_block_tokens(b) for b in content))


def _usage(
    raw: CompletionUsage | None,
    request: ModelRequest,
    content: tuple[TextBlock | ToolUse, ...],
) -> tuple[Usage, bool]:
    """The call's usage, and whether it is the local estimate."""
    prompt = (raw.prompt_tokens or 0) if raw is not None else 0
    completion = (raw.completion_tokens or 0) if raw is not None else 0
    if raw is None or (prompt == 0 and completion == 0 and content):
        return _estimate(request, content), True
    details = raw.prompt_tokens_details
    # prompt_tokens counts every prompt token, cached ones included.
    cached = min(prompt, (details.cached_tokens or 0) if details is not None else 0)
    return (
        Usage(
            input_tokens=prompt - cached,
            output_tokens=completion,
            cache_read_input_tokens=cached,
        ),
        False,
    )


def _stop_reason(finish: str | None, *, calls: bool, refused: bool) -> str | None:
    reason = _STOP_REASONS.get(finish, finish) if finish is not None else None
    if calls and reason in (None, "end_turn"):
        return "tool_use"  # some servers say "stop" for an answer that calls tools
    if refused and not calls:
        return "refusal"
    return reason


def result_of(
    request: ModelRequest,
    *,
    text: str,
    calls: tuple[ToolUse, ...],
    finish: str | None,
    refused: bool,
    model: str,
    usage: CompletionUsage | None,
    how: str,
) -> ModelResult:
    """Our result of a whole answer (of ``create``, or an assembled stream)."""
    content: tuple[TextBlock | ToolUse, ...] = ()
    if calls:  # a text answer is its text alone, as with Claude
        content = ((TextBlock(text),) if text else ()) + calls
    counted, estimated = _usage(usage, request, content or (TextBlock(text),))
    stop = _stop_reason(finish, calls=bool(calls), refused=refused)
    log.debug(
        "openai %s: model=%s stop=%s tool_uses=%d in=%d out=%d cache_read=%d%s",
        how,
        model,
        stop,
        len(calls),
        counted.input_tokens,
        counted.output_tokens,
        counted.cache_read_input_tokens,
        " (estimated: no usage reported)" if estimated else "",
    )
    return ModelResult(text=text, usage=counted, model=model, stop_reason=stop, content=content)


@dataclass(slots=True)
class _PartialCall:
    """A tool call being streamed: its id and name arrive first, its arguments in pieces."""

    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Assembly:
    """A streamed answer put together chunk by chunk (choice 0 only: we ask for one)."""

    model: str
    text: list[str] = field(default_factory=list)
    calls: dict[int, _PartialCall] = field(default_factory=dict)
    refused: bool = False
    finish: str | None = None
    usage: CompletionUsage | None = None

    def add(self, chunk: ChatCompletionChunk) -> str:
        """Take in one chunk; the text it adds ("" for none)."""
        self.model = chunk.model or self.model
        if chunk.usage is not None:  # the final chunk (or every chunk, on some servers)
            self.usage = chunk.usage
        piece = ""
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            delta = choice.delta
            piece += delta.content or ""
            self.refused = self.refused or bool(delta.refusal)
            for call in delta.tool_calls or ():
                partial = self.calls.setdefault(call.index, _PartialCall())
                partial.id = call.id or partial.id
                if call.function is not None:
                    partial.name = call.function.name or partial.name
                    partial.arguments.append(call.function.arguments or "")
            self.finish = choice.finish_reason or self.finish
        if piece:
            self.text.append(piece)
        return piece

    def tool_uses(self) -> tuple[ToolUse, ...]:
        return tuple(
            ToolUse(c.id or f"call_{i}", c.name, arguments_of("".join(c.arguments)))
            for i, c in sorted(self.calls.items())
        )
