"""What plugins add to a bot (docs/plugins.md): commands, middleware, turn hooks and tools.

The composition root (bot/app) collects registrations into one frozen ``Extensions`` and
hands it to the Router, Commands and Pipeline by constructor; nothing here is global. A
plugin named in one ``[[bots]]`` entry applies to that bot only: its registrations sit in
``per_bot`` and a consumer asks ``extensions.for_bot(key)`` for what applies to a bot.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace

from bot.core.choices import Answer
from bot.core.events import Inbound
from bot.runtime.tools import ToolRegistry, ToolSource
from bot.runtime.turn_context import TurnContext

__all__ = [
    "AfterReply",
    "BeforeModel",
    "CallNext",
    "Command",
    "CommandSpec",
    "Extensions",
    "Handler",
    "Middleware",
    "TurnContext",
]


@dataclass(frozen=True, slots=True)
class Command:
    """A parsed chat command: ``/name[@bot] args``."""

    name: str
    args: str
    addressed_to: str | None = None


#: A command's answer in the chat it came from (an Answer: with choices, shown as buttons
#: where the platform has them); None when it answers later by itself.
Handler = Callable[[Inbound, Command], Awaitable[str | Answer | None]]


@dataclass(frozen=True, slots=True)
class CommandSpec:
    """A registered command: name, one-line description, handler."""

    name: str
    description: str
    handler: Handler
    admin: bool = False


#: Passes an inbound event on (to the next middleware, then to the router).
CallNext = Callable[[Inbound], Awaitable[None]]
#: Runs on every inbound event before it is stored: may drop it (not calling ``call_next``),
#: replace it (``call_next(changed)``) or pass it on unchanged.
Middleware = Callable[[Inbound, CallNext], Awaitable[None]]


#: Before the model request: the text of an extra prompt layer, or None for none.
BeforeModel = Callable[[TurnContext], Awaitable[str | None]]
#: After the reply was recorded (the final check passed): the reply's text.
AfterReply = Callable[[TurnContext, str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Extensions:
    """Everything plugins registered: for every bot, plus ``per_bot`` for one bot each."""

    commands: tuple[CommandSpec, ...] = ()
    middleware: tuple[Middleware, ...] = ()
    before_model: tuple[BeforeModel, ...] = ()
    after_reply: tuple[AfterReply, ...] = ()
    tools: ToolRegistry = field(default_factory=ToolRegistry)
    per_bot: Mapping[str, Extensions] = field(default_factory=dict)
    #: Tools known only at run time (MCP servers), for every bot; each says to whom.
    sources: tuple[ToolSource, ...] = ()

    def tools_for(self, bot: str, persona: str) -> ToolRegistry:
        """The tools of a turn of ``bot`` speaking as ``persona``: the registered ones (this
        extensions' are already ``for_bot``) and each source's that this bot and persona may
        use. The request gets them sorted by name (``ToolRegistry.schemas``)."""
        tools = self.tools
        for source in self.sources:
            for tool in source.tools_for(bot, persona):
                if tools.get(tool.name) is None:  # a registered tool of that name wins
                    tools = tools.with_tool(tool)
        return tools

    def with_source(self, source: ToolSource) -> Extensions:
        """These extensions with one more source of tools."""
        return replace(self, sources=(*self.sources, source))

    def for_bot(self, bot: str) -> Extensions:
        """What applies to ``bot``: everything global, then that bot's own (no ``per_bot``)."""
        own = self.per_bot.get(bot)
        if own is None:
            return self if not self.per_bot else _without_per_bot(self)
        tools = self.tools
        for tool in own.tools.tools:
            tools = tools.with_tool(tool)
        return Extensions(
            commands=(*self.commands, *own.commands),
            middleware=(*self.middleware, *own.middleware),
            before_model=(*self.before_model, *own.before_model),
            after_reply=(*self.after_reply, *own.after_reply),
            tools=tools,
            sources=(*self.sources, *own.sources),
        )


def _without_per_bot(ext: Extensions) -> Extensions:
    return replace(ext, per_bot={})
