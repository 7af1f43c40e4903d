"""What plugins add to a bot (docs/plugins.md): commands, middleware, turn hooks and tools.

The composition root (bot/app) collects registrations into one frozen ``Extensions`` per bot
and hands it to the Router, Commands and Pipeline by constructor; nothing here is global.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from bot.core.events import ConversationKey, Inbound, SessionKey, StoredMessage
from bot.runtime.commands import CommandSpec
from bot.runtime.tools import ToolRegistry

#: Passes an inbound event on (to the next middleware, then to the router).
CallNext = Callable[[Inbound], Awaitable[None]]
#: Runs on every inbound event before it is stored: may drop it (not calling ``call_next``),
#: replace it (``call_next(changed)``) or pass it on unchanged.
Middleware = Callable[[Inbound, CallNext], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class TurnContext:
    """What a turn hook sees about the turn about to run, or just answered."""

    conversation: ConversationKey
    session: SessionKey
    bot: str
    persona_id: str
    messages: tuple[StoredMessage, ...]
    now: float


#: Before the model request: the text of an extra prompt layer, or None for none.
BeforeModel = Callable[[TurnContext], Awaitable[str | None]]
#: After the reply was recorded (the final check passed): the reply's text.
AfterReply = Callable[[TurnContext, str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Extensions:
    """Everything plugins registered for one bot."""

    commands: tuple[CommandSpec, ...] = ()
    middleware: tuple[Middleware, ...] = ()
    before_model: tuple[BeforeModel, ...] = ()
    after_reply: tuple[AfterReply, ...] = ()
    tools: ToolRegistry = field(default_factory=ToolRegistry)
