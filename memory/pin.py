"""The persona pin: who the bot is, rendered for one session (docs/architecture.md#prompt).

The pinned system text is the persona's ``system`` framing (or, when a card left it empty,
personabot's default framing), then the card's description, personality, scenario and
example dialogue, then the opening the persona greeted this session with. It is the first
block of every request, so it must not change within a session: its random macros are
seeded by the session, and its ``{{user}}`` is the person of a private chat (a group's pin
says "everyone", so that it does not change with every speaker). ``post_history`` is not
pinned: it goes after the window, where it may change every turn (seeded by turn, its
``{{user}}`` the turn's speaker).

The opening is chosen from ``first_message`` and ``greetings`` (``group_greetings`` in a
group, when there are any) by the session key, so that the ``/start`` or ``/new`` answer
and the pin's "You opened this conversation with" agree without storing the choice.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from bot.core.events import SessionKey
from bot.core.llm import DEFAULT_PROVIDER, ModelRoute
from memory.lorebook import Lorebook
from memory.macros import MacroContext, expand

DEFAULT_FRAMING = (
    "You are {{char}}. Speak only as {{char}}: in {{char}}'s voice, with {{char}}'s "
    "knowledge, feelings and way of talking, as set out below. Stay in character for the "
    "whole conversation. This is a chat: write {{char}}'s own messages at a natural chat "
    "length, and never write the other person's words or actions for them. If someone "
    "sincerely asks whether they are talking to an AI, do not deny it."
)
#: ``{{user}}`` in the pinned text of a group chat.
GROUP_USER = "everyone"
OPENED = "\n\nYou opened this conversation with:\n"
POST_HISTORY_HEADER = "Instructions from the persona's author (not written by any participant):"


@dataclass(frozen=True, slots=True)
class PersonaPin:
    """The persona's pinned layer, its openings, and what goes after the window."""

    name: str
    system: str
    first_message: tuple[str, ...]
    model: str
    max_tokens: int = 1024
    temperature: float | None = None
    # Who answers (a configured provider's name) and who instead when it is unavailable.
    provider: str = DEFAULT_PROVIDER
    fallback: ModelRoute | None = None
    nickname: str | None = None
    description: str = ""
    personality: str = ""
    scenario: str = ""
    example_dialogue: str = ""
    post_history: str = ""
    greetings: tuple[str, ...] = ()
    group_greetings: tuple[str, ...] = ()
    lorebook: Lorebook | None = None

    @property
    def char(self) -> str:
        """What ``{{char}}`` stands for: the nickname when set, else the name."""
        return self.nickname or self.name

    def openings(self, group: bool = False) -> tuple[str, ...]:
        """The openings to choose from: the group ones in a group (when any), else the
        first message (its lines are one opening) and the alternate greetings."""
        if group and self.group_greetings:
            return self.group_greetings
        return ("\n".join(self.first_message), *self.greetings)

    def greeting(
        self, session: SessionKey | None, *, group: bool = False, user: str = "User"
    ) -> str:
        """The opening of this session, macros expanded (the first one without a session).
        In a group ``{{user}}`` is "everyone", as in the pin: the opening sent and the one the
        pin says was sent are the same text."""
        if group:
            user = GROUP_USER
        choices = self.openings(group)
        index = 0 if session is None else _pick(str(session), len(choices))
        return expand(choices[index], self._context(session, "opening", user))

    def text(
        self, session: SessionKey | None = None, *, group: bool = False, user: str = "User"
    ) -> str:
        """The pinned system text of this session (``user``: the private chat's person;
        ignored in a group, whose pin says "everyone")."""
        if group:
            user = GROUP_USER
        opening = self.greeting(session, group=group, user=user)
        return f"{self._framing(session, user)}{OPENED}{opening}"

    def character(self, session: SessionKey | None = None) -> str:
        """Who the persona is, without an opening (a scene's speaker: docs/scenes.md#prompt;
        ``{{user}}`` is everyone there)."""
        return self._framing(session, GROUP_USER)

    def longest_text(self) -> str:
        """The pinned text with its longest opening, unexpanded (to check budgets against)."""
        longest = max((*self.openings(False), *self.openings(True)), key=len)
        return f"{self._framing(None, 'User')}{OPENED}{longest}"

    def _framing(self, session: SessionKey | None, user: str) -> str:
        """Everything pinned before the opening, macros expanded."""
        parts = [self.system or DEFAULT_FRAMING]
        for title, body in (
            ("{{char}}'s description:\n", self.description),
            ("{{char}}'s personality: ", self.personality),
            ("Scenario: ", self.scenario),
        ):
            if body.strip():
                parts.append(f"{title}{body.strip()}")
        if self.example_dialogue.strip():
            parts.append(
                "Examples of how {{char}} talks (for style only; they are not part of this "
                f"conversation):\n<examples>\n{self.example_dialogue.strip()}\n</examples>"
            )
        return expand("\n\n".join(parts), self._context(session, "pin", user))

    def post_history_block(self, context: MacroContext) -> str | None:
        """The author's instructions after the window, or None."""
        if not self.post_history.strip():
            return None
        body = expand(self.post_history.strip(), context)
        return f"<persona_instructions>\n{POST_HISTORY_HEADER}\n{body}\n</persona_instructions>"

    def _context(self, session: SessionKey | None, part: str, user: str) -> MacroContext:
        return MacroContext(self.char, user, f"{session}:{part}")


def _pick(seed: str, count: int) -> int:
    """A stable choice among ``count`` by ``seed`` (the same in every process and run)."""
    return int.from_bytes(hashlib.sha256(seed.encode()).digest()[:8], "big") % count
