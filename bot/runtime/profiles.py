"""What a reply needs to know of its bot and persona, and how replies handle trouble: plain
frozen values handed to the ``Pipeline`` by the composition root (bot/app/build.py)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

from bot.core.events import QueuePolicy
from bot.core.ports import Outlet, StreamSettings
from bot.core.scenes import SceneRules
from bot.core.visible import has_visible_text
from bot.runtime.languages import Languages
from memory.assemble import PersonaPin
from memory.service import MemoryPolicy

log = logging.getLogger("personabot.pipeline")

NO_STREAM: Final = StreamSettings(mode="off")
DEFAULT_REFUSAL: Final = "I'd rather not answer that. Shall we talk about something else?"
DEFAULT_REJECTED: Final = (
    "Sorry, I couldn't answer your last message (it was refused as too long or malformed). "
    "It is kept; please write it again in shorter parts, or send /new to start over."
)


@dataclass(frozen=True, slots=True)
class GapPolicy:
    """What to do when turns of a session are missing (docs/architecture.md#retention rule 3);
    the messages may name ``{turns}`` (e.g. ``15-16, 39-40``) or ``{first}`` and ``{last}``."""

    policy: Literal["note", "tell_user", "refuse"] = "note"
    tell_user_message: str = "Some messages (turns {turns}) are no longer available."
    refuse_message: str = "Part of this conversation (turns {turns}) is unavailable."


@dataclass(frozen=True, slots=True)
class BotProfile:
    """What one bot entry needs per turn: persona pin, queue policy, budget, outlet."""

    key: str
    pin: PersonaPin
    queue: QueuePolicy
    memory: MemoryPolicy
    outlet: Outlet
    lease_seconds: float = 30.0
    max_turn_messages: int = 50
    refusal_message: str = DEFAULT_REFUSAL
    rejected_notice: str = DEFAULT_REJECTED
    persona_id: str = ""  # the persona's id, for turn hooks and tools ("" = the pin's name)
    # Replies shown while written, where the outlet can (docs/architecture.md#streaming).
    stream: StreamSettings = NO_STREAM
    # The bot's personas speak together (docs/scenes.md); None: one persona per session.
    scene: SceneRules | None = None

    @property
    def refusal(self) -> str:
        """The refusal line, never blank (an operator's blank one gives the default)."""
        if has_visible_text(self.refusal_message):
            return self.refusal_message.strip()
        return DEFAULT_REFUSAL


@dataclass(frozen=True, slots=True)
class Bots:
    """The bots this process hosts: each one's default profile, and its other personas by
    (bot, persona id); a session says which one answers (docs/personas.md#several-personas)."""

    defaults: Mapping[str, BotProfile]
    personas: Mapping[tuple[str, str], BotProfile] = field(default_factory=dict)

    @property
    def keys(self) -> tuple[str, ...]:
        """Keys of the bots hosted here."""
        return tuple(self.defaults)

    def outlet_for(self, bot: str) -> Outlet | None:
        """The bot's outlet, None when it is not hosted here."""
        profile = self.defaults.get(bot)
        return None if profile is None else profile.outlet

    def profile(self, bot: str, persona: str | None = None) -> BotProfile:
        """The profile of a hosted bot speaking as ``persona`` (an id; None: its default).
        A persona the configuration no longer has answers as the default, logged."""
        default = self.defaults[bot]
        if persona is None or persona == default.persona_id:
            return default
        found = self.personas.get((bot, persona))
        if found is None:
            log.warning("%s: persona %r is not configured; its default answers", bot, persona)
            return default
        return found

    @property
    def claim_ttl(self) -> float:
        """A claim takes the leases of several bots' turns at once: the longest lease of
        them (each turn's renewals then keep its own bot's)."""
        profiles = (*self.defaults.values(), *self.personas.values())
        return max((p.lease_seconds for p in profiles), default=30.0)


@dataclass(frozen=True, slots=True)
class ReplyPolicies:
    """How replies meet trouble: missing turns, a model outage (``trouble_notice`` once per
    outage, retries backed off up to ``retry_max_seconds``)."""

    gaps: GapPolicy = field(default_factory=GapPolicy)
    trouble_notice: str = ""
    retry_max_seconds: float = 60.0
    #: The language of the notices (docs/i18n.md): each is looked up in the catalog of the
    #: turn's persona, so a built-in text is translated and an operator's own is kept.
    languages: Languages = field(default_factory=Languages)


#: How one attempt at a reply ended (the metrics' label).
TurnOutcome = Literal[
    "sent",
    "discarded",
    "fenced",
    "busy",
    "idle",
    "failed",
    "retry",
    "limited",
    "closed",
    "stopped",
]
