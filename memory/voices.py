"""Each voice its own: a persona's line in a scene never speaks for anyone else.

In a scene several personas share a group chat, and each line is one model call that reads
the transcript (docs/architecture.md#prompt): every part a header naming its speaker
(``"Sasha" (user "11"):``, ``"Bob" (character "bob"):``) and the text indented below it. A
model continuing such a transcript readily writes the next header too and goes on as another
character or as a person ("ventriloquism"). Two defences, both pure:

* :func:`stop_sequences`, given to the model (``ModelRequest.stop``): it stops where another
  speaker's line would begin, so that text is never written (nor paid for, nor streamed).
* :func:`clean_line`, applied to what came back: the speaker's own header taken off, and
  everything from another speaker's line on cut. Stop sequences alone are not enough: an
  OpenAI-compatible endpoint takes only four, some models take none, and a model may start
  its answer with the other's header, where no newline precedes it.

Names match whole and case-insensitively (``BOB:`` is Bob speaking, ``Bobby:`` and
``Bob said:`` are not), with the markdown and quoting models dress a speaker label in.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Final

from memory.quoting import INDENT, data_json

__all__ = ["clean_line", "stop_sequences"]

#: Every line boundary of ``str.splitlines`` (as ``quoting.indented`` splits), so a line that
#: any reader shows as new is checked as one.
_BREAKS: Final = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_BREAK: Final = rf"(?:\r\n|[{_BREAKS}])"
_LINE_START: Final = rf"(?:\A|(?<=[{_BREAKS}]))"
_SPACE: Final = rf"[^\S{_BREAKS}]"  # whitespace within a line
_OPEN: Final = r'[*_\["]*'  # **Bob, _Bob, [Bob, "Bob
_CLOSE: Final = r'[*_\]"]*'  # Bob**, Bob_, Bob], Bob"
# The transcript's (character "bob") / (user "11"), or a model's own (whispering), and what
# closes after it (**Bob (aside)**:). The transcript's ids are JSON strings, which may hold
# parentheses: a quoted string is skipped.
_QUOTED: Final = rf'"(?:[^"\\{_BREAKS}]|\\[^{_BREAKS}])*"'
_ASIDE: Final = rf'(?:{_SPACE}*\((?:{_QUOTED}|[^()"{_BREAKS}])*\){_CLOSE})?'


def stop_sequences(others: Sequence[str]) -> tuple[str, ...]:
    """What the model would write on starting a line as one of ``others`` (cast members'
    names and aliases first, then the people's display names): for each name, in order, the
    transcript's header, a script's ``Name:`` and a bold ``**Name``.

    The order matters: an OpenAI-compatible endpoint gets only the first four
    (docs/providers.md), so the caller lists the likeliest next speakers first. The header
    is spelled as the transcript spells it (JSON-quoted, as ``memory/turn.py`` writes it), the
    other two as a model would write the bare name.
    """
    out: dict[str, None] = {}  # ordered and deduplicated
    for name in others:
        bare = name.strip()
        if not bare:
            continue
        for sequence in (f"\n{data_json(name)} (", f"\n{bare}:", f"\n**{bare}"):
            out.setdefault(sequence)
    return tuple(out)


def clean_line(text: str, *, own: Sequence[str], others: Sequence[str]) -> str:
    """The line the speaker (``own``: its names) wrote in ``text``, with nobody else's in it.

    A leading label of its own (``Alice: hi``, ``**Alice:** hi``, ``[Alice]: hi``, the
    transcript's ``"Alice" (character "alice"):`` with the text indented below it, the
    indentation removed too) is taken off. Then everything from the first line that starts
    with a label of one of ``others`` (name, optional decorations, optional ``(...)``, colon)
    is cut off: a text that begins with one comes back empty, and the caller drops it.
    Trailing whitespace is stripped; nothing else changes.
    """
    rest, block = _without_own_label(text, own)
    kept = _before_others(rest, others)
    # The cut comes first: it does not depend on indentation, and the dedent then looks
    # only at the lines that stay.
    return (_dedented(kept) if block else kept).rstrip()


def _label(names: Iterable[str]) -> str | None:
    """A pattern of a speaker label of any of ``names`` up to its colon, from the first
    non-space character of its line; None for no names."""
    spellings = _spellings(names)
    if not spellings:
        return None
    name = "|".join(re.escape(s) for s in spellings)
    # No two runs that can match the same characters sit side by side (the second closing
    # run belongs to the aside), so a failed match backtracks in linear time: a model stuck
    # writing 60,000 asterisks is read in milliseconds, not minutes (tests/memory).
    return f"{_OPEN}(?:{name}){_CLOSE}{_ASIDE}{_SPACE}*:"


def _spellings(names: Iterable[str]) -> list[str]:
    """How each name may appear in a label: as written, and inside the transcript's JSON
    quotes (``Sa\\"sha`` for ``Sa"sha``); longest first, blank names left out."""
    found: set[str] = set()
    for name in names:
        if not name.strip():
            continue
        for spelling in (name.strip(), data_json(name)[1:-1], data_json(name.strip())[1:-1]):
            if not any(c in _BREAKS for c in spelling):  # a label never spans lines
                found.add(spelling)
    return sorted(found, key=lambda s: (-len(s), s))


def _without_own_label(text: str, own: Sequence[str]) -> tuple[str, bool]:
    """``text`` without its leading own label, and whether that label stood on its own line
    (the transcript's form, whose text below it is indented)."""
    label = _label(own)
    if label is None:
        return text, False
    found = re.match(f"\\s*{label}[*_]*{_SPACE}*", text, re.IGNORECASE)
    if found is None:
        return text, False
    rest = text[found.end() :]
    below = re.match(_BREAK, rest)
    if below is None:
        return rest, False
    return rest[below.end() :], True


def _before_others(text: str, others: Sequence[str]) -> str:
    """``text`` up to the first line that starts with another speaker's label."""
    label = _label(others)
    if label is None:
        return text
    found = re.search(f"{_LINE_START}{_SPACE}*{label}", text, re.IGNORECASE)
    return text if found is None else text[: found.start()]


def _dedented(body: str) -> str:
    """The transcript's indentation taken off ``body`` when every line that has text carries
    it (a body the model did not indent is left as it is)."""
    lines = body.splitlines(keepends=True)
    if not all(line.startswith(INDENT) for line in lines if line.strip()):
        return body
    return "".join(line.removeprefix(INDENT) for line in lines)
