"""What a turn hook or a tool's check sees about one turn (docs/plugins.md). Its own module:
tools (``bot.runtime.tools``) and the extensions that hold them both need it, and it needs
neither (issue 36: the extensions <-> tools import cycle). Plugins import it from
``bot.runtime.extensions`` as before."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bot.core.events import ConversationKey, SessionKey, StoredMessage


@dataclass(frozen=True, slots=True)
class TurnContext:
    """What a turn hook sees about the turn about to run, or just answered."""

    conversation: ConversationKey
    session: SessionKey
    bot: str
    persona_id: str
    messages: tuple[StoredMessage, ...]
    now: float
    # In a tool's check only: the arguments of the calls of the same tool that already passed
    # their check in this turn. They are applied together with the reply, so a check that
    # enforces a cap (remind_me: reminders per person) counts them (docs/plugins.md).
    earlier_calls: tuple[Mapping[str, Any], ...] = ()
