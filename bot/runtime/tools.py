"""Tools the model may call (Claude tool use): typed functions, and the bounded loop that runs them.

A tool is registered by a plugin (``@app.tool``, docs/plugins.md). Its signature is the input
schema: every parameter needs a type annotation; the docstring's first line is the description
unless one is given. A parameter annotated ``TurnContext`` is not shown to the model: it gets
the turn's context (who wrote, which conversation).

The loop (:class:`ToolLoop`) runs inside the turn's lease, before the final check: model ->
tool calls -> results -> model ... until a text answer. The model's arguments are validated
against the signature; unknown tools, bad arguments, a raising tool (a :class:`ToolError`'s
message is shown to the model, any other exception only by its type) and a tool that runs out
of time all become ``is_error`` results the model sees, never a failed turn. It is bounded by
:class:`ToolPolicy`: once a bound is reached no further tool runs and the model is asked once
more, with tools forbidden, to answer from what it has; that answer is the reply.

Side effects (the rule): a tool with ``side_effects=True`` never runs inside the loop. Its
arguments are validated and the model is told the action will be carried out once its reply is
sent; the call is kept as an :class:`Effect` and run by :func:`apply` only after the final
check recorded the reply (docs/architecture.md#queue). A turn discarded by the final check
(newer input arrived) or fenced (the lease was lost), or one whose model call failed, drops its
effects: the next attempt decides again. Effects run at most once: a crash between the
recorded reply and the effect loses the effect, never doubles it. A tool whose result the model
must see therefore cannot have side effects: split it into a read-only lookup and an action.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import inspect
import json
import logging
import traceback
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, Protocol, get_type_hints

import pydantic
import pydantic_core

from bot.core.clock import Clock
from bot.core.errors import ConfigError, PersonabotError, StoreError
from bot.core.events import ToolCallRecord
from bot.core.llm import (
    MAX_BREAKPOINTS,
    BaseLLM,
    ChatMessage,
    ModelRequest,
    ModelResult,
    TextBlock,
    ToolResult,
    ToolSpec,
    ToolUse,
    Usage,
    breakpoints,
)
from bot.core.tasks import within
from bot.runtime.turn_context import TurnContext

log = logging.getLogger("personabot.tools")

ToolFunction = Callable[..., Awaitable[Any]]
#: Receives each piece of text of a streamed loop with the 0-based index of the model call it
#: belongs to (docs/architecture.md#streaming): a new index starts a new answer, and the last
#: call's text is the reply.
StepTextSink = Callable[[int, str], None]
#: Counts one call by (tool name, outcome kind), e.g. for metrics.
CountCall = Callable[[str, str], None]
#: The tool label of calls of a name nobody registered (the model's invention).
UNKNOWN: Final = "(unknown)"

_NAME = pydantic.TypeAdapter(pydantic.constr(pattern=r"^[a-zA-Z0-9_-]{1,64}$"))


def _made_before(tool: str, record: ToolCallRecord) -> str:
    """What the model reads for a call whose tool an earlier attempt of the turn made."""
    outcome = {"started": "its outcome is unknown", "done": "it was done", "failed": "it failed"}
    shown = f" (its result: {record.result})" if record.result else ""
    return (
        f"Not done: {tool} was already called in an earlier attempt of this turn, before an "
        f"interruption, and {outcome[record.status]}{shown}. Do not call it again: tell the "
        "person what was done; if they want another, they can ask again."
    )


UNKNOWN_OUTCOME: Final = (
    "This action was started in an earlier attempt of this turn that was interrupted: "
    "whether it took effect is unknown. Do not repeat it; tell the person so."
)

DEFERRED: Final = (
    "Accepted. This action is carried out right after your reply is sent (and not at all if "
    "your reply is not sent): do not say it is already done, and do not invent its result."
)


class ToolError(PersonabotError):
    """Raised by a tool for the model to read: the message is the result it sees."""


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool: its name, what it does, its input schema and the function that runs it."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    side_effects: bool
    run: ToolFunction
    arguments: type[pydantic.BaseModel] = field(repr=False, compare=False)
    # The parameter that receives the turn's context (hidden from the model), if any.
    context_parameter: str | None = None
    # A tool with side effects may check its arguments in the loop (same parameters as
    # ``run``): its text is shown to the model with the deferral note, a ToolError as an
    # error, and only a call that passed its check becomes an effect.
    check: ToolFunction | None = field(default=None, compare=False)
    # An effectful outside tool (an MCP server's declared effectful): its result is needed in
    # the turn, so it runs there, under the turn's ledger (CallLedger): a fresh check first,
    # recorded before it is made, never made twice, and the turn committed once it is.
    commits: bool = False

    @classmethod
    def from_function(
        cls,
        fn: ToolFunction,
        *,
        name: str | None = None,
        description: str | None = None,
        side_effects: bool = False,
    ) -> Tool:
        """A tool from an ``async def`` with annotated parameters; ConfigError when unusable."""
        tool_name = name or fn.__name__
        try:
            _NAME.validate_python(tool_name)
        except pydantic.ValidationError:
            raise ConfigError(
                [f"tool {tool_name!r}: a name is 1-64 letters, digits, '_' or '-'"]
            ) from None
        if not inspect.iscoroutinefunction(fn):
            raise ConfigError([f"tool {tool_name!r}: must be an async function"])
        try:
            hints = get_type_hints(fn)
        except (NameError, TypeError) as exc:
            raise ConfigError([f"tool {tool_name!r}: unreadable annotation ({exc})"]) from None
        fields: dict[str, Any] = {}
        context: str | None = None
        for param in inspect.signature(fn).parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise ConfigError([f"tool {tool_name!r}: *args and **kwargs cannot be typed"])
            if param.kind is param.POSITIONAL_ONLY:
                raise ConfigError(
                    [f"tool {tool_name!r}: positional-only parameters cannot be named"]
                )
            if param.name not in hints:
                raise ConfigError(
                    [f"tool {tool_name!r}: parameter {param.name!r} needs a type annotation"]
                )
            if hints[param.name] is TurnContext:
                context = param.name
                continue
            default = ... if param.default is param.empty else param.default
            fields[param.name] = (hints[param.name], default)
        try:
            # Unknown arguments are refused, not ignored: the model learns the real schema.
            model = pydantic.create_model(
                f"{tool_name}_arguments",
                __config__=pydantic.ConfigDict(extra="forbid"),
                **fields,
            )
            schema = model.model_json_schema()
        except (pydantic.PydanticUserError, pydantic.PydanticSchemaGenerationError) as exc:
            raise ConfigError(
                [f"tool {tool_name!r}: no JSON schema for its parameters ({exc})"]
            ) from None
        schema.pop("title", None)
        text = description or (inspect.getdoc(fn) or "").split("\n\n")[0].strip()
        if not text:
            raise ConfigError([f"tool {tool_name!r}: give a description (or a docstring)"])
        return cls(tool_name, text, schema, side_effects, fn, model, context)

    @property
    def spec(self) -> ToolSpec:
        """What the model is shown of this tool."""
        return ToolSpec(self.name, self.description, self.input_schema)


@dataclass(frozen=True, slots=True)
class ToolRegistry:
    """The tools a bot's model may call, by name."""

    tools: tuple[Tool, ...] = ()

    def get(self, name: str) -> Tool | None:
        """The tool of this name, if registered."""
        return next((t for t in self.tools if t.name == name), None)

    def with_tool(self, tool: Tool) -> ToolRegistry:
        """A registry with ``tool`` added; ConfigError when the name is taken."""
        if self.get(tool.name) is not None:
            raise ConfigError([f"tool {tool.name!r}: registered twice"])
        return ToolRegistry((*self.tools, tool))

    def schemas(self) -> tuple[ToolSpec, ...]:
        """Every tool as the model is shown it, sorted by name: plugin and MCP tools alike,
        so that the definitions (the first part of a prompt-cache prefix) are the same bytes
        whatever order plugins registered them or servers listed them in."""
        return tuple(t.spec for t in sorted(self.tools, key=lambda t: t.name))

    def __bool__(self) -> bool:
        return bool(self.tools)


class ToolSource(Protocol):
    """Tools known only at run time (an MCP server's, bot/mcp), asked for at each turn."""

    def tools_for(self, bot: str, persona: str) -> Sequence[Tool]:
        """The tools this bot speaking as this persona may call now, in a stable order."""
        ...


class CallLedger(Protocol):
    """A turn's record of its effectful outside calls (bot/runtime/ledger.py): the fresh
    check before each, the record that keeps it from being made twice, and whether one was
    made (the turn is then committed: newer input never discards it, nor cuts it)."""

    committed: bool

    async def fresh(self) -> str | None:
        """None when a call may be made now; else why not (newer input, the lease lost)."""
        ...

    async def begin(self, tool: str, key: str) -> tuple[bool, ToolCallRecord]:
        """Record the call before it is made: (True, a new record), or (False, the record of
        the same call made in an earlier attempt of this turn: never make it again)."""
        ...

    async def finish(self, record: ToolCallRecord, ok: bool, result: str) -> None:
        """Close the record with what the model is shown."""
        ...

    def made_before(self, tool: str, key: str) -> ToolCallRecord | None:
        """An earlier attempt of this turn's call of ``tool`` under other arguments."""
        ...


@dataclass(frozen=True, slots=True)
class ToolPolicy:
    """Bounds of one turn's tool loop (``[tools]`` in the TOML) and of turn hooks."""

    max_steps: int = 6  # model answers that call tools, per turn
    max_calls: int = 12  # tool calls per turn, over all steps
    max_seconds: float = 60.0  # no new step starts after this, from the first model call
    max_tokens: int = 100_000  # tokens of all the turn's model calls, before the final one
    call_timeout_seconds: float = 15.0  # one tool call (and one side effect)
    max_result_chars: int = 16_000  # a longer tool result is cut, visibly
    hook_timeout_seconds: float = 5.0  # one before_model / after_reply hook
    command_timeout_seconds: float = 10.0  # one plugin chat command (bot.runtime.commands)


@dataclass(frozen=True, slots=True)
class Effect:
    """A side-effecting call with validated arguments, to run once the reply is recorded."""

    tool: Tool
    kwargs: Mapping[str, Any] = field(repr=False)  # may hold personal data: never logged


@dataclass(frozen=True, slots=True)
class LoopResult:
    """How a turn's tool loop ended."""

    result: ModelResult  # the last answer: its text is the reply
    usage: Usage  # of every model call of the loop
    steps: int  # model answers that called tools
    calls: int  # tool calls run or deferred
    effects: tuple[Effect, ...]
    bound: str | None = None  # "steps", "calls", "seconds" or "tokens" when one was reached


_NOT_RUN: Final = {
    "steps": "this turn's limit of tool steps",
    "calls": "this turn's limit of tool calls",
    "seconds": "this turn's time for tools",
    "tokens": "this turn's token budget for tools",
}


class ToolLoop:
    """Runs one turn's model calls and tool calls until a text answer, within bounds."""

    def __init__(
        self,
        *,
        llm: BaseLLM,
        clock: Clock,
        registry: ToolRegistry,
        policy: ToolPolicy,
        context: TurnContext,
        charge: Callable[[ModelResult], Awaitable[None]],
        count: CountCall | None = None,
        ledger: CallLedger | None = None,
    ) -> None:
        self._llm = llm
        self._ledger = ledger
        # Effectful outside calls one at a time, in the model's order (each after its own
        # fresh check, each recorded before it is made).
        self._committing = asyncio.Lock()
        self._clock = clock
        self._registry = registry
        self._policy = policy
        self._context = context
        self._charge = charge  # every call is charged as soon as it answered
        self._count = count or _uncounted
        # The checks of side-effect calls run one at a time, in the model's order, each seeing
        # the calls of its tool accepted before it (TurnContext.earlier_calls): calls of one
        # step run concurrently, and a cap counted by two checks at once would let both pass.
        self._checking = asyncio.Lock()
        self._accepted: list[Effect] = []
        #: The index of the model call running now (None: none is; tools run, or done): a
        #: loop cancelled midway (bot/queue/cutoff.py) charges that call, which never answered.
        self.asking: int | None = None
        #: The request of the model call ``asking`` names (for a cut's estimate of its input).
        self.asked: ModelRequest | None = None
        self._charging: asyncio.Future[None] | None = None

    async def run(self, request: ModelRequest, *, stream: StepTextSink | None = None) -> LoopResult:
        """The final answer; ModelError from the provider propagates (no effect survives).

        With ``stream`` every model call streams (``llm.stream``) and its pieces go to
        ``stream(i, piece)``, ``i`` counting this loop's model calls from 0; without it the
        calls are plain ``llm.complete``.
        """
        if self._registry:
            request = replace(request, tools=self._registry.schemas(), tool_choice="auto")
        started = self._clock.now()
        usage = Usage()
        steps = calls = asked = 0
        effects: list[Effect] = []
        bound: str | None = None
        while True:
            self.asking = asked
            self.asked = request  # a later step's request holds the tool results before it
            if stream is None:
                result = await self._llm.complete(request)
            else:
                result = await self._llm.stream(request, functools.partial(stream, asked))
            asked += 1
            usage += result.usage
            # Answered: from here the call is charged by its own usage, never again by a cut's
            # estimate (``asking``), and a cut landing while the charge is written does not
            # stop it halfway (shielded; held here so that it is not collected).
            self.asking = None
            self._charging = asyncio.ensure_future(self._charge(result))
            await asyncio.shield(self._charging)
            uses = result.tool_uses
            if not uses or request.tool_choice == "none" or not self._registry:
                # A provider may ignore "none": its text is the answer all the same.
                return LoopResult(result, usage, steps, calls, tuple(effects), bound)
            bound = self._over(started, usage)
            room = 0 if bound else max(0, self._policy.max_calls - calls)
            outcomes = await asyncio.gather(*(self._call(u, steps + 1) for u in uses[:room]))
            results = [r for r, _ in outcomes]
            effects.extend(e for _, e in outcomes if e is not None)
            calls += len(outcomes)
            if len(uses) > room:
                bound = bound or "calls"
                results += [self._not_run(u, bound) for u in uses[room:]]
            if outcomes:
                steps += 1
            if bound is None and steps >= self._policy.max_steps:
                bound = "steps"
            bound = bound or self._over(started, usage)
            if bound is not None:
                log.info(
                    "%s: tool loop bound reached (%s) after %d step(s), %d call(s); "
                    "asking for an answer without tools",
                    self._context.session,
                    bound,
                    steps,
                    calls,
                )
            request = replace(
                request,
                messages=_cached_step(request, result.content, results),
                tool_choice="none" if bound else "auto",
            )

    def _over(self, started: float, usage: Usage) -> str | None:
        if self._clock.now() - started >= self._policy.max_seconds:
            return "seconds"
        if usage.total >= self._policy.max_tokens:
            return "tokens"
        return None

    def _not_run(self, use: ToolUse, bound: str) -> ToolResult:
        log.info("tool %s (%s): not run, %s reached", use.name, self._context.session, bound)
        self._count(use.name if self._registry.get(use.name) else UNKNOWN, "not_run")
        return ToolResult(
            use.id,
            f"Not run: {_NOT_RUN[bound]} is reached. Answer now with what you have.",
            is_error=True,
        )

    async def _call(self, use: ToolUse, step: int) -> tuple[ToolResult, Effect | None]:
        """One call's result for the model, and the effect to apply later, if deferred."""
        start = self._clock.now()
        tool = self._registry.get(use.name)

        def done(kind: str, content: str, *, error: bool = False, why: str = "") -> ToolResult:
            # Never the arguments or the result at INFO: they may hold personal data.
            self._count(UNKNOWN if tool is None else tool.name, kind)
            log.info(
                "tool %s (%s, step %d): %s%s in %.3fs",
                use.name,
                self._context.session,
                step,
                kind,
                why,
                self._clock.now() - start,
            )
            return ToolResult(use.id, self._shown(content), is_error=error)

        if tool is None:
            known = ", ".join(s.name for s in self._registry.schemas())
            return done(
                "unknown_tool", f"No tool named {use.name!r}; tools: {known}.", error=True
            ), None
        try:
            kwargs = self._arguments(tool, use.input)
        except pydantic.ValidationError as exc:
            return done("bad_arguments", f"Invalid arguments: {_problems(exc)}", error=True), None
        if tool.commits:
            async with self._committing:
                # Shielded: a cut or a shutdown never stops a recorded call halfway (its
                # record is closed even when the turn no longer waits for it).
                return await asyncio.shield(self._committed(tool, use, kwargs, done)), None
        if tool.side_effects and tool.check is None:
            return done("deferred", DEFERRED, why=" until the reply is recorded"), Effect(
                tool, kwargs
            )
        if tool.side_effects:
            async with self._checking:
                result, effect = await self._checked(tool, use, kwargs, done)
                if effect is not None:
                    self._accepted.append(effect)
                return result, effect
        return await self._ran(tool, use, kwargs, done)

    async def _committed(
        self,
        tool: Tool,
        use: ToolUse,
        kwargs: dict[str, Any],
        done: Callable[..., ToolResult],
    ) -> ToolResult:
        """An effectful outside call, made at most once (docs/tools.md#effectful-tools)."""
        ledger = self._ledger
        if ledger is None:
            return done("not_run", "This action cannot be taken here.", error=True)
        key = call_key(tool, kwargs)
        before = ledger.made_before(tool.name, key)
        if before is not None:
            # The same action worded anew after an interruption: never a second time.
            return done("not_run", _made_before(tool.name, before), error=True)
        try:
            reason = await ledger.fresh()
            if reason is not None:
                return done("not_run", f"Not done: {reason}. Do not say it was done.", error=True)
            # From here the turn is committed: newer input is the next turn's (the cut-off and
            # the final check read this), so the reply that reports the call is never lost.
            ledger.committed = True
            new, record = await ledger.begin(tool.name, key)
        except StoreError as exc:
            # Not recorded (the store, or the message it answers deleted meanwhile): not made.
            ledger.committed = False
            log.warning(
                "tool %s (%s): not recorded, not made: %s", use.name, self._context.session, exc
            )
            text = "Not done: it could not be recorded first. Do not say it was done."
            return done("not_run", text, error=True)
        if not new:
            if record.status == "started":
                return done("recorded", UNKNOWN_OUTCOME, error=True, why=" (interrupted before)")
            text = record.result or "(no result)"
            return done("recorded", text, error=record.status == "failed", why=" (made before)")
        result, _ = await self._ran(tool, use, kwargs, done)
        await ledger.finish(record, not result.is_error, result.content)
        return result

    async def _checked(
        self,
        tool: Tool,
        use: ToolUse,
        kwargs: dict[str, Any],
        done: Callable[..., ToolResult],
    ) -> tuple[ToolResult, Effect | None]:
        """A side-effect call's check, seeing this tool's calls accepted earlier in the turn."""
        name = tool.context_parameter
        earlier = tuple(
            {k: v for k, v in e.kwargs.items() if k != name}
            for e in self._accepted
            if e.tool.name == tool.name
        )
        seen = dict(kwargs)
        if name is not None and earlier:
            seen[name] = replace(self._context, earlier_calls=earlier)
        result, ok = await self._ran(tool, use, seen, done)
        return result, Effect(tool, kwargs) if ok is not None else None

    async def _ran(
        self,
        tool: Tool,
        use: ToolUse,
        kwargs: dict[str, Any],
        done: Callable[..., ToolResult],
    ) -> tuple[ToolResult, Effect | None]:
        run = tool.check if tool.side_effects and tool.check is not None else tool.run
        try:
            limit = self._policy.call_timeout_seconds
            value: object = await within(self._clock, limit, run(**kwargs))
        except TimeoutError:
            text = f"The tool did not finish within {limit:g} s."
            return done("timeout", text, error=True), None
        except ToolError as exc:
            return done(
                "error", str(exc) or "The tool failed.", error=True, why=" (ToolError)"
            ), None
        except Exception as exc:  # a plugin's bug must not fail the turn
            kind = type(exc).__name__
            log.warning("tool %s raised %s at %s", use.name, kind, raised_at(exc))
            return done("error", f"The tool failed ({kind}).", error=True, why=f" ({kind})"), None
        if tool.side_effects:
            shown = f"{_text(value)}\n{DEFERRED}"
            return done("deferred", shown, why=" (checked) until the reply is recorded"), Effect(
                tool, kwargs
            )
        return done("ok", _text(value)), None

    def _arguments(self, tool: Tool, raw: Mapping[str, Any]) -> dict[str, Any]:
        """The validated keyword arguments (pydantic values, not their JSON dumps)."""
        parsed = tool.arguments.model_validate(dict(raw))
        kwargs = {name: getattr(parsed, name) for name in type(parsed).model_fields}
        # A model that allows extra keys passes them through (an MCP tool: its server
        # validates the arguments against its own schema).
        kwargs.update(parsed.model_extra or {})
        if tool.context_parameter is not None:
            kwargs[tool.context_parameter] = self._context
        return kwargs

    def _shown(self, content: str) -> str:
        limit = self._policy.max_result_chars
        if len(content) <= limit:
            return content
        return f"{content[:limit]} [... cut: {len(content) - limit} more characters not shown]"


def _cached_step(
    request: ModelRequest,
    answer: tuple[TextBlock | ToolUse, ...],
    results: Sequence[ToolResult],
) -> tuple[ChatMessage, ...]:
    """The conversation with one more step, its last result a cache breakpoint.

    The next call then reads the whole loop so far from the cache instead of paying for it
    again. The assembled prompt's own breakpoints stay where they are (docs/architecture.md
    #prompt); the loop keeps one of its own, moved to the newest step, within the limit. The
    provider's breakpoint on the tool definitions gives way to it (bot/llm/anthropic.py).
    """
    previous = tuple(_uncached(m) for m in request.messages)
    used = breakpoints(replace(request, messages=previous))
    last = results[-1]
    if used < MAX_BREAKPOINTS:
        last = replace(last, cache=True)
    return (
        *previous,
        ChatMessage("assistant", answer),
        ChatMessage("user", (*results[:-1], last)),
    )


def _uncached(message: ChatMessage) -> ChatMessage:
    """The message without the loop's breakpoint of an earlier step (on a tool result)."""
    if not any(isinstance(b, ToolResult) and b.cache for b in message.blocks):
        return message
    blocks = tuple(
        replace(b, cache=False) if isinstance(b, ToolResult) else b for b in message.blocks
    )
    return ChatMessage(message.role, blocks)


def _text(value: object) -> str:
    """A tool's return value as the text the model reads (never empty: the API refuses it)."""
    if value is None:
        return "(done; no output)"
    text = value if isinstance(value, str) else pydantic_core.to_json(value, fallback=str).decode()
    return text if text.strip() else "(empty)"


def _uncounted(tool: str, kind: str) -> None:
    return None


def raised_at(exc: BaseException) -> str:
    """Where an exception was raised (file:line of the innermost frame), without its message:
    a plugin's exception text may hold personal data, its place does not."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "?"
    last = frames[-1]
    return f"{last.filename}:{last.lineno} in {last.name}"


def _problems(exc: pydantic.ValidationError) -> str:
    """What was wrong, by argument, without echoing the values."""
    lines = []
    for err in exc.errors(include_url=False, include_input=False, include_context=False):
        where = ".".join(str(p) for p in err["loc"]) or "(arguments)"
        lines.append(f"{where}: {err['msg']}")
    return "; ".join(lines)


async def apply(
    effects: Sequence[Effect],
    *,
    clock: Clock,
    policy: ToolPolicy,
    context: TurnContext,
    count: CountCall | None = None,
) -> None:
    """Run a recorded turn's side effects, in the order the model asked for them.

    Each is bounded by ``call_timeout_seconds``; a failure is logged and the next one still
    runs (the reply is sent: nothing can be taken back).
    """
    for effect in effects:
        start = clock.now()
        try:
            await within(clock, policy.call_timeout_seconds, effect.tool.run(**effect.kwargs))
            kind, outcome = "effect_ok", "ok"
        except TimeoutError:
            kind, outcome = "effect_timeout", "timed out"
        except Exception as exc:  # a plugin's bug must not fail the turn
            kind, outcome = "effect_error", f"raised {type(exc).__name__} at {raised_at(exc)}"
        (count or _uncounted)(effect.tool.name, kind)
        log.info(
            "tool %s (%s, effect after the reply): %s in %.3fs",
            effect.tool.name,
            context.session,
            outcome,
            clock.now() - start,
        )


def call_key(tool: Tool, kwargs: Mapping[str, Any]) -> str:
    """The identity of a call across attempts of a turn: its tool and a digest of its
    arguments (canonical JSON; the turn's context left out), never the arguments themselves
    (they may hold personal data)."""
    shown = {k: v for k, v in kwargs.items() if k != tool.context_parameter}
    body = json.dumps(shown, sort_keys=True, default=str, ensure_ascii=False)
    return f"{tool.name}:{hashlib.sha256(body.encode()).hexdigest()}"
