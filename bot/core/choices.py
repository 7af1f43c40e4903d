"""An answer that asks a choice: its text and the choices, each a typed command
(docs/telegram.md#buttons).

A command handler may return an :class:`Answer` instead of plain text. Each :class:`Choice`
stands for a command a person could type (``/forget confirm``), so a platform without
buttons shows the text with those commands (:func:`typed`), and a button press on
Telegram runs that very command through the router, with the same access checks as typed.
The outbox keeps a message's choices with it (:class:`Choices`, migration 23), so a message
sent again by recovery after a crash still has its buttons.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from bot.core.i18n import N_

#: How long a message's buttons may be pressed after it was sent: an older press is refused
#: (send the command again). The router remembers a press for longer (``PRESS_MEMORY``), so
#: no button still accepted can run its command a second time.
BUTTON_LIFETIME: Final = 2 * 86400.0
#: How long the router remembers that a button of a message was pressed (across processes).
PRESS_MEMORY: Final = BUTTON_LIFETIME + 86400.0

#: What became of a press handed to the router: its command ran (and answered), it was
#: pressed before (nothing ran), the access lists refused it, or a middleware dropped it.
PressOutcome = Literal["ran", "done", "refused", "dropped", "pending"]

#: A choice as a typed command where no buttons show (translated by ``Commands.handle``,
#: which keeps the result in ``Choice.line``: docs/i18n.md).
TYPED_LINE: Final = N_("{command} - {label}")


@dataclass(frozen=True, slots=True)
class Choice:
    """One choice: the button's label and the command it stands for (``/forget confirm``).

    ``closes``: pressing it settles the question (every button of the message goes);
    False: only this button goes (one of several reminders cancelled).
    """

    label: str
    command: str
    closes: bool = True
    #: The choice as a typed-command line in the answer's language, ready to show (RTL
    #: marks included); empty: ``TYPED_LINE`` in English.
    line: str = ""

    def typed(self) -> str:
        """The line that stands for this choice where no buttons show."""
        return self.line or TYPED_LINE.format(command=self.command, label=self.label)


@dataclass(frozen=True, slots=True)
class Answer:
    """A command's answer with choices; plain ``str`` answers stay as they are."""

    text: str
    choices: tuple[Choice, ...] = ()


def typed(text: str, choices: Sequence[Choice]) -> str:
    """``text`` followed by one ``/command - label`` line per choice."""
    if not choices:
        return text
    lines = "\n".join(c.typed() for c in choices)
    return f"{text}\n\n{lines}"


@dataclass(frozen=True, slots=True)
class Choices:
    """A message's choices as its outbox row keeps them: for whom (``asker``, the person
    whose command asked: only they may press) and which."""

    asker: str
    items: tuple[Choice, ...]

    def dumps(self) -> str:
        """The stored JSON."""
        # The line only when it is not the English default (rows stay as they were).
        items = [[c.label, c.command, c.closes, *([c.line] if c.line else [])] for c in self.items]
        return json.dumps({"asker": self.asker, "items": items}, ensure_ascii=False)

    @classmethod
    def loads(cls, raw: str | None) -> Choices | None:
        """Choices from stored JSON; None for none or anything unreadable (the message then
        goes out with its text alone)."""
        if not raw:
            return None
        try:
            data = json.loads(raw)
            items = tuple(
                Choice(str(label), str(command), bool(closes), str(line[0]) if line else "")
                for label, command, closes, *line in data["items"]
            )
            asker = str(data["asker"])
        except (ValueError, TypeError, KeyError):
            return None
        return cls(asker, items) if items else None
