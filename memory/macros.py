"""The macros of Character Cards, expanded when a prompt or greeting is assembled.

Card authors write ``{{char}}`` and ``{{user}}`` instead of names, and a few random macros
(docs/personas.md#macros). Supported, case-insensitive:

- ``{{char}}`` (and legacy ``<BOT>``): the persona's nickname when set, else its name;
- ``{{user}}`` (and legacy ``<USER>``): the person spoken to, as :class:`MacroContext` says;
- ``{{random:a,b,c}}`` and ``{{random::a::b::c}}``: one of the choices;
- ``{{pick:...}}`` / ``{{pick::...}}``: the same (SillyTavern's "stable" random);
- ``{{roll:N}}``, ``{{roll:dN}}``, ``{{roll:KdN}}`` (``{{roll N}}`` too): dice, the sum;
- ``{{newline}}``, ``{{trim}}`` (removed with the blank space around it), ``{{noop}}`` and
  comments ``{{// ...}}`` (removed).

Anything else in braces is left as written. Randomness is seeded, never global: the caller
gives a seed string, and the same seed gives byte-identical text. Pinned text is seeded by
session (stable for the whole session, so the provider's prompt cache keeps working), the
layers after the last cache breakpoint by turn. A substituted name can never bring a macro
of its own (expansion is one pass over the template, never over what it inserted).
"""

from __future__ import annotations

import hashlib
import random
import re
import unicodedata
from dataclasses import dataclass
from typing import Final

#: A display name in a macro is at most this long (the rest is cut).
NAME_CHARS: Final = 64
#: Dice beyond these bounds are left as written: a card cannot make us loop.
MAX_DICE: Final = 100
MAX_SIDES: Final = 1_000_000

# A macro's body never holds "{{" or "}}": each "{{" is searched only up to the next one, so
# expansion is linear. A lazy ``(.*?)`` scanned from every "{{" to the end of a text with no
# "}}" after it: 40,000 characters of "{{" took seconds, a 1 MB lorebook entry hours.
_MACRO: Final = re.compile(r"\{\{((?:(?!\{\{|\}\}).)*)\}\}|<(BOT|USER)>", re.DOTALL | re.IGNORECASE)
# At most 9 digits each, so a longer number is left as written like one out of bounds: int()
# refuses over 4300 digits, a ValueError that failed every prompt and greeting with the macro.
_ROLL: Final = re.compile(r"^roll[: ]\s*(?:(\d{0,9})\s*d\s*(\d{1,9})|(\d{1,9}))\s*$", re.IGNORECASE)
_TRIM_MARK: Final = "\x00trim\x00"


@dataclass(frozen=True, slots=True)
class MacroContext:
    """What the macros of one text expand to: the names, and the seed of its randomness."""

    char: str
    user: str
    seed: str


def speaker_name(display_name: str, fallback: str = "User") -> str:
    """A display name as a macro inserts it: one line, no control or format characters, no
    ``<``/``>``/``&`` (a name can never spell a block tag), at most ``NAME_CHARS``; the
    ``fallback`` when nothing is left."""
    kept = "".join(
        " " if ch.isspace() else ch
        for ch in display_name
        if ch.isspace() or unicodedata.category(ch)[0] != "C"
    )
    name = " ".join(kept.replace("<", "").replace(">", "").replace("&", "").split())
    return name[:NAME_CHARS].strip() or fallback


def expand(text: str, context: MacroContext) -> str:
    """``text`` with its macros expanded (see the module docstring)."""
    if "{{" not in text and "<" not in text:
        return text
    rng = random.Random(hashlib.sha256(context.seed.encode()).digest())

    def one(match: re.Match[str]) -> str:
        legacy = match.group(2)
        if legacy is not None:
            return context.char if legacy.upper() == "BOT" else context.user
        return _macro(match.group(1), match.group(0), context, rng)

    out = _MACRO.sub(one, text)
    if _TRIM_MARK in out:
        # The blank space on both sides of each mark goes. By hand, not ``\s*MARK\s*``: that
        # pattern retries from every blank of a long run before a mark (quadratic).
        parts = out.split(_TRIM_MARK)
        last = len(parts) - 1
        out = "".join(
            part.rstrip() if i == 0 else part.lstrip() if i == last else part.strip()
            for i, part in enumerate(parts)
        )
    return out


def _macro(body: str, whole: str, context: MacroContext, rng: random.Random) -> str:
    name = body.strip()
    lowered = name.lower()
    if lowered == "char":
        return context.char
    if lowered == "user":
        return context.user
    if lowered == "newline":
        return "\n"
    if lowered == "trim":
        return _TRIM_MARK
    if lowered == "noop" or name.startswith("//"):
        return ""
    head = lowered.split(":", 1)[0].strip()
    if head in ("random", "pick") and ":" in name:
        rest = name.split(":", 1)[1]
        choices = rest[1:].split("::") if rest.startswith(":") else rest.split(",")
        return rng.choice(choices).strip() if choices else ""
    roll = _ROLL.match(name)
    if roll:
        count_text, sides_text, bare = roll.groups()
        count = int(count_text) if count_text else 1
        sides = int(sides_text if sides_text is not None else bare)
        if not (1 <= count <= MAX_DICE and 1 <= sides <= MAX_SIDES):
            return whole
        return str(sum(rng.randint(1, sides) for _ in range(count)))
    return whole
