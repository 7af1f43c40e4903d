"""A persona's line in a scene speaks for nobody else (memory/voices.py): its stop sequences,
and the trim of what the model wrote, by example and by property."""

from __future__ import annotations

import string
import time
import unicodedata
from collections.abc import Callable, Iterator

import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from memory.quoting import data_json, indented
from memory.voices import clean_line, stop_sequences

OWN = ("Alice", "Ally")
#: A text the model wrote, the speaker's names, and everyone else's.
Scene = tuple[str, tuple[str, ...], tuple[str, ...]]
OTHERS = ("Bob", "Sasha")

# ------------------------------------------------------------------------- stop sequences


def test_each_other_name_gets_its_header_script_and_bold_line_starts_in_order() -> None:
    """Then, after every name's usual three, each name's script line with a fullwidth colon."""
    assert stop_sequences(["Bob", "Sasha"]) == (
        '\n"Bob" (',
        "\nBob:",
        "\n**Bob",
        '\n"Sasha" (',
        "\nSasha:",
        "\n**Sasha",
        "\nBob\uff1a",
        "\nSasha\uff1a",
    )


def test_blank_and_repeated_names_add_nothing() -> None:
    assert stop_sequences(["Bob", "", "  ", "Bob", "\t"]) == (
        '\n"Bob" (',
        "\nBob:",
        "\n**Bob",
        "\nBob\uff1a",
    )
    assert stop_sequences([]) == ()


def test_the_header_is_spelled_as_the_transcript_quotes_the_name() -> None:
    """A display name with a quote or a tag character appears JSON-escaped in the header."""
    header = stop_sequences(['Sa"sha <3'])[0]
    assert header == '\n"Sa\\"sha \\u003c3" ('
    assert header.startswith("\n" + data_json('Sa"sha <3'))


def test_the_first_four_cover_the_first_speakers_every_way_but_bold() -> None:
    """An OpenAI endpoint gets four: the first listed speaker whole, then the next's header."""
    assert stop_sequences(["Bob", "Sasha", "Cleo"])[:4] == (
        '\n"Bob" (',
        "\nBob:",
        "\n**Bob",
        '\n"Sasha" (',
    )


# -------------------------------------------------------------------- the speaker's label


@pytest.mark.parametrize(
    "written",
    [
        "Alice: hi there",
        "alice: hi there",
        "ALICE:hi there",
        "**Alice:** hi there",
        "**Alice**: hi there",
        "*Alice*: hi there",
        "_Alice_: hi there",
        "[Alice]: hi there",
        '"Alice" (character "alice"): hi there',
        "Alice (smiling): hi there",
        "**Ally:** hi there",
        "\n  Alice: hi there",
        # tests/scenes/test_review39.py f8: forms that were left under the speaker's header.
        "Alice\uff1a hi there",
        "Alice: Alice: hi there",
        "\u200bAlice: hi there",
        "> Alice: hi there",
        # The same dress and spellings as another's label (below).
        "**Alice\uff1a** hi there",
        "- **Alice:** hi there",
        "1. Alice: hi there",
        "### Alice: hi there",
        "`Alice`: hi there",
        "~~Alice~~: hi there",
        "'Alice': hi there",
        "[Alice] hi there",
        "<Ally> hi there",
        "\uff21\uff4c\uff49\uff43\uff45: hi there",
        "\u0410lice: hi there",
        "Al\u200bice: hi there",
        "\ufeff\u202aAlice\u202c: hi there",
        "Alice:\u200b hi there",
        "Alice:\n\nAlly: **Alice:** hi there",
    ],
)
def test_a_leading_label_of_the_speaker_is_taken_off(written: str) -> None:
    assert clean_line(written, own=OWN, others=OTHERS) == "hi there"


def test_the_text_after_the_speakers_label_keeps_its_own_characters() -> None:
    """Only the label goes: what follows is not folded (fullwidth stays fullwidth)."""
    written = (
        "\uff21\uff4c\uff49\uff43\uff45\uff1a \uff28\uff49\u200b\uff01 \u0412\u0435\u0440\u0430"
    )
    assert clean_line(written, own=OWN, others=OTHERS) == (
        "\uff28\uff49\u200b\uff01 \u0412\u0435\u0440\u0430"
    )


def test_the_transcripts_header_on_its_own_line_goes_with_the_indentation() -> None:
    written = '"Alice" (character "alice"):\n  Hi!\n\n  Shall we go?\n    - the market'
    assert clean_line(written, own=OWN, others=OTHERS) == "Hi!\n\nShall we go?\n  - the market"


def test_a_body_the_model_did_not_indent_keeps_its_own_indentation() -> None:
    written = "Alice:\nHere is the plan:\n  - the market\n  - the sea"
    assert clean_line(written, own=OWN, others=OTHERS) == (
        "Here is the plan:\n  - the market\n  - the sea"
    )


def test_the_speakers_name_elsewhere_is_left_alone() -> None:
    for written in (
        "Alice said: hi",
        "Alicia: hi",
        "I am Alice: hi",
        "hi\nAlice: again",
        "Alice\u0430\uff1a hi",  # Alicea
        "\uff21licia\uff1a hi",
        "[Alice](https://example.com) hi",
        "[Alice]: [Alice](x) hi",  # one label, then a link
    ):
        expected = written.removeprefix("[Alice]: ")
        assert clean_line(written, own=OWN, others=OTHERS) == expected


# -------------------------------------------------------------------- another's line


@pytest.mark.parametrize(
    "other_line",
    [
        "Bob: no way",
        "bob: no way",
        "BOB : no way",
        "**Bob:** no way",
        "**Bob**: no way",
        "*Bob*: no way",
        "_Bob_: no way",
        "[Bob]: no way",
        '"Bob" (character "bob"):\n  no way',
        '  "Sasha" (user "123"):\n  no way',
        "Bob (grinning): no way",
        "**Bob (grinning):** no way",
        "Sasha: no way",
        # tests/scenes/test_review39.py f7: the forms that went out under Alice's header.
        "Bob\uff1a no way",
        "> Bob: no way",
        "- **Bob:** no way",
        "[Bob] no way",
        "<Bob> no way",
        "\u0412ob: no way",  # Cyrillic capital Ve
        "\uff22\uff4f\uff42: no way",  # fullwidth letters
        "B\u200bob: no way",
        "`Bob`: no way",
        "~~Bob~~: no way",
        "### Bob: no way",
        "'Bob': no way",
        # More of the same kinds.
        "- Bob: no way",
        "* Bob: no way",
        "+ Bob: no way",
        "1. Bob: no way",
        "12) **Bob**: no way",
        "> > _Bob_: no way",
        "(Bob): no way",
        "<Sasha>",
        "[Bob]\n  no way",
        '"Bob" (character "bob")\uff1a\n  no way',
        "\u0392\u03bf\u0392: no way",  # Greek capital beta, small omicron
        "\u0412\u041e\u0412: no way",  # all Cyrillic capitals
        "\u0405\u0430\u0455\u04bb\u0430: no way",  # Cyrillic Ѕаѕһа
        "\U0001d401\U0001d428\U0001d41b: no way",  # mathematical bold
        "\u24b7ob: no way",  # circled B
        "Bob\u2236 no way",  # ratio sign for a colon
        "B\u00adob\u2060\ufe0f: no way",  # soft hyphen, word joiner, variation selector
        "\u202eBob: no way",  # a bidi override before it
        "\u3000Bob: no way",  # an ideographic space
        "SASHA (\uff47\uff52\uff49\uff4e\uff53)\uff1a no way",
    ],
)
def test_everything_from_anothers_line_on_is_cut(other_line: str) -> None:
    written = f"Sure, I'll come.\nSee you there.\n{other_line}\nAlice: and then me again"
    assert clean_line(written, own=OWN, others=OTHERS) == "Sure, I'll come.\nSee you there."
    # From the start, in any line break, after the speaker's own label.
    assert clean_line(other_line, own=OWN, others=OTHERS) == ""
    assert clean_line(f"Sure.\u2028{other_line}", own=OWN, others=OTHERS) == "Sure."
    assert clean_line(f"**Alice\uff1a** {other_line}", own=OWN, others=OTHERS) == ""


def test_the_real_process_reproduction_loses_both_of_bobs_lines() -> None:
    """tests/scenes/test_review39.py f14: the answer Alice's model gave, word for word."""
    written = "Fresh bread!\nBob\uff1a Stale, like you.\n> Bob: And burnt."
    assert clean_line(written, own=OWN, others=OTHERS) == "Fresh bread!"


def test_what_is_kept_is_the_text_as_written() -> None:
    """The cut is found in the folded line, and made in the text: nothing kept is folded."""
    kept = "\uff28\uff49\uff01 \u0412\u0435\u0440\u0430 \u0432\u0441\u0435\u0433\u0434\u0430"
    kept += "\u200b here.\n  \u00bd \ufb01"
    for other_line in ("\u200bBob: x", "\ufeff> \u0412ob\uff1a x", "[\uff22ob] x"):
        written = f"{kept}\n{other_line}"
        assert clean_line(written, own=OWN, others=OTHERS) == kept


def test_a_name_in_another_script_matches_in_either_case_and_in_fullwidth() -> None:
    others = ("\u0412\u0435\u0440\u0430", "\u039d\u03af\u03ba\u03bf\u03c2")  # Вера, Νίκος
    for line in (
        "\u0412\u0415\u0420\u0410: x",
        "\u0432\u0435\u0440\u0430: x",
        "Bepa: x",
        "\u039d\u038a\u039a\u039f\u03a3: x",  # ΝΊΚΟΣ
        "\u03bd\u03af\u03ba\u03bf\u03c2: x",
        "**\u039d\u03af\u03ba\u03bf\u03c2**\uff1a x",
    ):
        assert clean_line(f"ok\n{line}", own=(), others=others) == "ok", line


def test_a_line_that_starts_as_another_is_empty() -> None:
    assert clean_line('"Bob" (character "bob"):\n  hi', own=OWN, others=OTHERS) == ""
    assert clean_line("**Sasha:** hi", own=OWN, others=OTHERS) == ""
    # Its own label first, then straight into another's line: nothing of its own is left.
    assert clean_line("Alice:\n  Bob: hi", own=OWN, others=OTHERS) == ""


def test_own_label_and_anothers_line_together() -> None:
    written = '"Alice" (character "alice"):\n  Coming!\n"Bob" (character "bob"):\n  Me too.'
    assert clean_line(written, own=OWN, others=OTHERS) == "Coming!"


@pytest.mark.parametrize(
    "written",
    [
        "I told Bob: not today.",
        "Bob said: not today.",
        "Bobby: not today.",
        "Bob's answer: not today.",
        "Bob, listen: not today.",
        "Bob\uff0c listen\uff1a not today.",
        "Bobby\uff1a not today.",
        "\u0412obby: not today.",
        "B\u200bob said: not today.",
        "[Bob](https://example.com/bob) said so.",
        "[Bob]'s idea: not today.",
        "<Bob>'s idea: not today.",
        "[Bob's] idea: not today.",
        "Bob \u2014 not today.",
        "x Bob: not today.",
        "1 Bob: not today.",
        "| Bob | not today.",
        "\u00e9Bob: not today.",
        "Bo\u0301b: not today.",  # a combining accent makes another letter
    ],
)
def test_a_name_that_is_not_a_whole_label_at_a_line_start_stays(written: str) -> None:
    text = f"Well.\n{written}"
    assert clean_line(text, own=OWN, others=OTHERS) == text


def test_names_are_text_not_patterns() -> None:
    others = ("B.b", "Dr. (X)", "a+", "*", "[x]")
    assert clean_line("hi\nBob: yes", own=(), others=others) == "hi\nBob: yes"
    assert clean_line("hi\nDr. (X): yes", own=(), others=others) == "hi"
    assert clean_line("hi\naaa: yes", own=(), others=others) == "hi\naaa: yes"
    assert clean_line("hi\na+: yes", own=(), others=others) == "hi"
    assert clean_line("A+ (x): hi", own=("a+",), others=()) == "hi"


def test_a_quoted_display_name_is_caught_in_the_transcripts_spelling() -> None:
    name = 'Sa"sha <3'
    header = f"{data_json(name)} (user {data_json('123')}):"
    assert clean_line(f"ok\n{header}\n  hi", own=OWN, others=(name,)) == "ok"
    assert clean_line(f"{header}\n  hi", own=(name,), others=()) == "hi"


def test_blank_names_and_no_names_change_nothing_but_trailing_space() -> None:
    assert clean_line("  hi\n: there \n\n", own=("", " "), others=("\t",)) == "  hi\n: there"
    assert clean_line(":\nhi", own=(), others=()) == ":\nhi"


@pytest.mark.parametrize("run", ["*", '"', "_", " ", "]", "* ", "\n "])
def test_a_long_run_of_decoration_costs_linear_time(run: str) -> None:
    """A model stuck writing ***** for its whole answer must not stall the turn: a pattern
    that backtracks quadratically takes many seconds over 60,000 characters."""
    junk = run * (60_000 // len(run))
    started = time.perf_counter()
    for text in (f"hi\nBob{junk}x", f"Alice{junk}x", f"{junk}Bob: x", f"hi\nBob ({junk}"):
        clean_line(text, own=OWN, others=OTHERS)
    assert time.perf_counter() - started < 2.0


@pytest.mark.parametrize(
    "run",
    [
        *(">", "-", "#", "~", "`", "'", "[", "(", "<", "|", "+", "1.", "1", "1)", "> ", "- **"),
        *("[Bob", "<Bob", "(Bob) ", "Bob:", "Alice: ", "Alice:\n", "\u200b", "\uff0a", "\u3000"),
        *("\u0412", "\uff22", "\u0412\u200b", "\uff1a", "\ufb01"),
    ],
)
def test_a_long_run_of_the_new_markers_and_spellings_costs_linear_time(run: str) -> None:
    """The markers a label may now start with, the chat-log brackets, a label repeated
    thousands of times, and text that must be folded character by character."""
    junk = run * (60_000 // len(run))
    started = time.perf_counter()
    for text in (
        f"hi\nBob{junk}x",
        f"Alice{junk}x",
        f"{junk}Bob: x",
        f"{junk}Alice: x",
        f"hi\n{junk}Bob x",
        f"hi\n[Bob{junk}x",
        f"hi\n<Bob{junk}",
        f"hi\nBob ({junk}",
        f"Alice: {junk}",
    ):
        clean_line(text, own=OWN, others=OTHERS)
    assert time.perf_counter() - started < 2.0


def test_a_label_repeated_thousands_of_times_is_taken_off_in_one_pass() -> None:
    started = time.perf_counter()
    assert clean_line("Alice: " * 10_000 + "hi", own=OWN, others=OTHERS) == "hi"
    assert clean_line("Alice:\n" * 10_000 + "  hi", own=OWN, others=OTHERS) == "hi"
    assert clean_line("> Alice\uff1a " * 10_000, own=OWN, others=OTHERS) == ""
    assert time.perf_counter() - started < 2.0


# ------------------------------------------------------------------------------ lookalikes

#: Letters of Cyrillic and Greek drawn as a Latin one, and characters drawn as a colon, each
#: followed by what it looks like: this file's own list, which the module's table must cover
#: (test_every_lookalike_is_read_as_the_letter_it_looks_like) and which the oracle below
#: folds with.
_LOOKALIKE_PAIRS = (
    "\N{CYRILLIC CAPITAL LETTER A}A",
    "\N{CYRILLIC CAPITAL LETTER VE}B",
    "\N{CYRILLIC CAPITAL LETTER IE}E",
    "\N{CYRILLIC CAPITAL LETTER KA}K",
    "\N{CYRILLIC CAPITAL LETTER EM}M",
    "\N{CYRILLIC CAPITAL LETTER EN}H",
    "\N{CYRILLIC CAPITAL LETTER O}O",
    "\N{CYRILLIC CAPITAL LETTER ER}P",
    "\N{CYRILLIC CAPITAL LETTER ES}C",
    "\N{CYRILLIC CAPITAL LETTER TE}T",
    "\N{CYRILLIC CAPITAL LETTER U}Y",
    "\N{CYRILLIC CAPITAL LETTER HA}X",
    "\N{CYRILLIC CAPITAL LETTER DZE}S",
    "\N{CYRILLIC CAPITAL LETTER BYELORUSSIAN-UKRAINIAN I}I",
    "\N{CYRILLIC CAPITAL LETTER JE}J",
    "\N{CYRILLIC CAPITAL LETTER SHHA}H",
    "\N{CYRILLIC CAPITAL LETTER KOMI DE}D",
    "\N{CYRILLIC CAPITAL LETTER QA}Q",
    "\N{CYRILLIC CAPITAL LETTER WE}W",
    "\N{CYRILLIC CAPITAL LETTER STRAIGHT U}Y",
    "\N{CYRILLIC SMALL LETTER A}a",
    "\N{CYRILLIC SMALL LETTER IE}e",
    "\N{CYRILLIC SMALL LETTER O}o",
    "\N{CYRILLIC SMALL LETTER ER}p",
    "\N{CYRILLIC SMALL LETTER ES}c",
    "\N{CYRILLIC SMALL LETTER U}y",
    "\N{CYRILLIC SMALL LETTER HA}x",
    "\N{CYRILLIC SMALL LETTER DZE}s",
    "\N{CYRILLIC SMALL LETTER BYELORUSSIAN-UKRAINIAN I}i",
    "\N{CYRILLIC SMALL LETTER JE}j",
    "\N{CYRILLIC SMALL LETTER SHHA}h",
    "\N{CYRILLIC SMALL LETTER KOMI DE}d",
    "\N{CYRILLIC SMALL LETTER QA}q",
    "\N{CYRILLIC SMALL LETTER WE}w",
    "\N{CYRILLIC SMALL LETTER STRAIGHT U}y",
    "\N{GREEK CAPITAL LETTER ALPHA}A",
    "\N{GREEK CAPITAL LETTER BETA}B",
    "\N{GREEK CAPITAL LETTER EPSILON}E",
    "\N{GREEK CAPITAL LETTER ZETA}Z",
    "\N{GREEK CAPITAL LETTER ETA}H",
    "\N{GREEK CAPITAL LETTER IOTA}I",
    "\N{GREEK CAPITAL LETTER KAPPA}K",
    "\N{GREEK CAPITAL LETTER MU}M",
    "\N{GREEK CAPITAL LETTER NU}N",
    "\N{GREEK CAPITAL LETTER OMICRON}O",
    "\N{GREEK CAPITAL LETTER RHO}P",
    "\N{GREEK CAPITAL LETTER TAU}T",
    "\N{GREEK CAPITAL LETTER UPSILON}Y",
    "\N{GREEK CAPITAL LETTER CHI}X",
    "\N{GREEK SMALL LETTER OMICRON}o",
    "\N{GREEK LUNATE SIGMA SYMBOL}c",
    "\N{GREEK CAPITAL LUNATE SIGMA SYMBOL}C",
    "\N{GREEK LETTER YOT}j",
    "\N{GREEK CAPITAL LETTER YOT}J",
    "\N{LATIN SMALL LETTER DOTLESS I}i",
    "\N{RATIO}:",
    "\N{MODIFIER LETTER COLON}:",
    "\N{MODIFIER LETTER RAISED COLON}:",
    "\N{ARMENIAN FULL STOP}:",
    "\N{HEBREW PUNCTUATION SOF PASUQ}:",
)
_LOOKS_LIKE = str.maketrans({pair[0].casefold(): pair[1].casefold() for pair in _LOOKALIKE_PAIRS})
#: Drawn as nothing, yet not of category Cf.
_NOT_DRAWN = (
    {"\u034f", "\u115f", "\u1160", "\u17b4", "\u17b5", "\u3164", "\uffa0"}
    | {chr(c) for c in range(0x180B, 0x1810)}
    | {chr(c) for c in range(0xFE00, 0xFE10)}
    | {chr(c) for c in range(0xE0100, 0xE01F0)}
)


@pytest.mark.parametrize("pair", _LOOKALIKE_PAIRS)
def test_every_lookalike_is_read_as_the_letter_it_looks_like(pair: str) -> None:
    look, latin = pair
    if latin == ":":
        assert clean_line(f"ok\nBob{look} x", own=(), others=("Bob",)) == "ok"
        assert clean_line(f"Bob{look} x", own=("Bob",), others=()) == "x"
        return
    # In the text, in the name, in either case.
    for text_letter, name_letter in ((look, latin), (latin, look), (look.upper(), latin.lower())):
        other = f"Q{name_letter}q"
        assert clean_line(f"ok\nQ{text_letter}q: x", own=(), others=(other,)) == "ok", pair
        assert clean_line(f"Q{text_letter}q: x", own=(other,), others=()) == "x", pair


# ------------------------------------------------------------------------------ properties

_NAME_CHARS = string.ascii_letters + " .+?()[]{}|^$\\-'"
names = st.text(_NAME_CHARS, min_size=1, max_size=8).filter(
    lambda n: n[0].isalpha() and n[-1].isalpha()
)
name_lists = st.lists(names, max_size=3)
_FREE = st.text(string.printable, max_size=12)


def _fullwidth(text: str) -> str:
    """``text`` in fullwidth forms (as typed with a CJK input method)."""
    return "".join(
        "\u3000" if c == " " else chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text
    )


def _lookalike(text: str) -> str:
    """``text`` with every Latin letter that has a Cyrillic or Greek twin spelled as it."""
    twins = {latin: look for look, latin in reversed(_LOOKALIKE_PAIRS)}
    return "".join(twins.get(c, c) for c in text)


def _zero_width(text: str) -> str:
    """``text`` with a zero-width space after its first character and a BOM before it."""
    return f"\ufeff{text[:1]}\u200b{text[1:]}"


#: How a model spells a name in a label.
_SPELLINGS: tuple[Callable[[str], str], ...] = (
    str,
    str.upper,
    str.lower,
    _fullwidth,
    _lookalike,
    _zero_width,
    lambda n: _lookalike(n.upper()),
    lambda n: _fullwidth(_zero_width(n.lower())),
)


def _label_lines(pool: list[str]) -> st.SearchStrategy[str]:
    """Lines that are labels of a name of ``pool``, or nearly (no colon, a word between,
    a name run on, an aside left open, a bracket without its space), in any case, spelling
    and dress."""
    return st.builds(
        lambda lead, wrap, name, spell, close, aside, colon, tail: (
            f"{lead}{wrap.format(spell(name))}{close}{aside}{colon}{tail}"
        ),
        st.sampled_from(
            [
                *("", " ", "  ", "**", "*", "_", "[", '"', "- ", "> ", "- **", "1. ", "2) "),
                *("### ", "`", "~~", "'", "(", "| ", "> > ", "\u200b", "\u3000", "\uff0a\uff0a"),
                "x ",
            ]
        ),
        st.sampled_from(["{}", "{}", "[{}]", "<{}>"]),
        st.sampled_from(pool),
        st.sampled_from(_SPELLINGS),
        st.sampled_from(["", "**", "*", "_", "]", '"', " ", "`", "~~", "'", ">", ")", "\u200b"]),
        st.sampled_from(
            ["", " (aside)", ' (character "x)")', " (open", "(", "()", "\uff08x\uff09"]
        ),
        st.sampled_from(
            [":", " :", ":**", "", " said:", "y:", "'s:", "\uff1a", " \uff1a", "\u2236", ","]
        ),
        _FREE,
    )


def _texts(pool: list[str]) -> st.SearchStrategy[str]:
    """Lines, about half of them (near) labels of ``pool``, joined by any line break."""
    line = _label_lines(pool) | _FREE if pool else _FREE
    breaks = st.sampled_from(["\n", "\r\n", "\u2028", "\n\n", " "])
    parts = st.lists(st.tuples(line, breaks), max_size=6)
    return parts.map(lambda ps: "".join(text + end for text, end in ps))


# The oracle: whether a line is a label, written apart from the module (string operations on
# a line folded as a whole, with NFKC, where the module folds character by character with
# NFKD and matches a regular expression).

_OPENERS = set(">-*+#~_`\"'[(<|")
_CLOSERS = "*_~`\"'])>|"


def _skeleton(text: str) -> str:
    """``text`` as a reader sees it, compared without case: compatibility forms as the plain
    character, nothing for what is not drawn, lookalikes as their Latin twin."""
    text = unicodedata.normalize("NFKC", text.casefold().translate(_LOOKS_LIKE))
    text = "".join(c for c in text if unicodedata.category(c) != "Cf" and c not in _NOT_DRAWN)
    return unicodedata.normalize("NFKC", text.casefold()).translate(_LOOKS_LIKE)


def _starts(line: str) -> Iterator[int]:
    """Where a label may start in ``line``: after any part of its leading dress (spaces,
    quote/list/heading markers, emphasis and brackets, list numbers with ``.`` or ``)``)."""
    i = 0
    yield i
    while i < len(line):
        if line[i].isspace() or line[i] in _OPENERS:
            i += 1
        else:
            digits = i
            while digits < len(line) and line[digits].isdecimal():
                digits += 1
            if digits == i or line[digits : digits + 1] not in (".", ")"):
                return
            i = digits + 1
        yield i


def _after_aside(text: str) -> str | None:
    """What follows the ``(...)`` that ``text`` starts with (a quoted string inside may hold
    parentheses and escaped quotes); None when it is not closed."""
    quoted = escaped = False
    for i, char in enumerate(text[1:], start=1):
        if escaped:
            escaped = False
        elif quoted:
            escaped, quoted = char == "\\", char != '"'
        elif char == '"':
            quoted = True
        elif char in "()":
            return text[i + 1 :] if char == ")" else None
    return None


def _label_at(rest: str, name: str) -> bool:
    """Whether ``rest`` (folded) starts with ``name``'s label: name, closing dress, an
    optional (...) part, colon; or ``[name]`` / ``<name>`` and a space or nothing."""
    if rest[:1] in ("[", "<") and rest[1:].startswith(name):
        after = rest[1 + len(name) :]
        if after[:1] == ("]" if rest[0] == "[" else ">"):
            after = after[1:].lstrip(_CLOSERS)
            if not after or after[0].isspace():
                return True
    if not rest.startswith(name):
        return False
    rest = rest[len(name) :].lstrip(_CLOSERS)
    if rest.lstrip().startswith("("):
        after_aside = _after_aside(rest.lstrip())
        if after_aside is None:
            return False
        rest = after_aside.lstrip(_CLOSERS)
    return rest.lstrip().startswith(":")


def _speaks_as(line: str, name: str) -> bool:
    """Whether ``line`` is a label of ``name``, both read as a reader sees them."""
    line, name = _skeleton(line), _skeleton(name.strip())
    return any(_label_at(line[start:], name) for start in _starts(line))


def _labelled(text: str, pool: tuple[str, ...]) -> bool:
    return any(_speaks_as(line, n) for line in text.splitlines() for n in pool if n.strip())


def test_the_oracle_reads_the_reviewers_forms_as_labels() -> None:
    """The oracle is no weaker than the examples above (else the properties prove little)."""
    for form in (
        "Bob\uff1a",
        "> Bob:",
        "- **Bob:**",
        "[Bob] x",
        "<Bob>",
        "\u0412ob:",
        "B\u200bob:",
    ):
        assert _speaks_as(form, "Bob"), form
    for form in ("\uff22\uff4f\uff42:", "`Bob`:", "~~Bob~~:", "### Bob:", "'Bob':", "1. Bob (x):"):
        assert _speaks_as(form, "Bob"), form
    for form in ("Bobby:", "Bob said:", "[Bob](x)", "x Bob:", "1 Bob:", "Bob's:", "<Bob>'s"):
        assert not _speaks_as(form, "Bob"), form


@st.composite
def scenes(draw: st.DrawFn) -> Scene:
    own, others = draw(name_lists), draw(name_lists)
    return draw(_texts(own + others)), tuple(own), tuple(others)


@given(scenes())
def test_no_line_of_the_result_is_anothers(scene: Scene) -> None:
    text, own, others = scene
    assert not _labelled(clean_line(text, own=own, others=others), others)


@given(scenes())
def test_a_text_without_labels_comes_back_unchanged_but_for_trailing_space(
    scene: Scene,
) -> None:
    text, own, others = scene
    assume(not _labelled(text, own + others))
    assert clean_line(text, own=own, others=others) == text.rstrip()


@given(st.text(), name_lists, name_lists)
@example("\u017fam: hi", ["Sam"], [])  # the long s: folded to s
@example("hi\n\u212aim: hi", [], ["kim"])  # the Kelvin sign: folded to k
@example("\u200b\u0412ob\uff1a hi", ["Bob"], [])  # the oracle reads it as a label
@example("\uff28i\u200b\nx\n\uff3bBob\uff3d\u3000hi", [], ["bob"])
def test_without_an_own_label_the_result_is_a_start_of_the_text(
    text: str, own: list[str], others: list[str]
) -> None:
    """Any text at all (any Unicode, any line break): only cut, never rewritten."""
    assume(not _labelled(text, tuple(own)))
    cleaned = clean_line(text, own=own, others=others)
    assert text.startswith(cleaned) and cleaned == cleaned.rstrip()


@given(
    names,
    st.sampled_from(
        [
            *("{}:", "**{}:**", "**{}**:", "[{}]:", "*{}*:", '"{}" (character "x"):', "{}\uff1a"),
            *("> {}:", "- **{}:**", "1. {}:", "### {}:", "`{}`:", "~~{}~~:", "'{}':", "[{}]"),
            *("<{}>", "**{}\uff1a**", "{}: {}:"),
        ]
    ),
    st.sampled_from(_SPELLINGS),
    _texts(["Bob", "Alice"]),
    name_lists,
)
def test_an_inline_own_label_is_taken_off_and_nothing_else_changes(
    name: str, label: str, spell: Callable[[str], str], body: str, others: list[str]
) -> None:
    """Whatever the dress and spelling of the label, what is left is the body, cleaned as
    it would be on its own (a label of the speaker's that starts it goes too)."""
    assume(body[:1] not in ("", "*", "_", "~", "`", "(", ":") and not body[0].isspace())
    assume(_skeleton(body[0]) != "")  # what is not drawn after a label goes with it
    written = f"{label.format(spell(name), spell(name))} {body}"
    assert clean_line(written, own=[name], others=others) == clean_line(
        body, own=[name], others=others
    )


@given(names, st.text(string.printable + "\u2028"), name_lists)
def test_a_transcript_part_of_the_speaker_comes_back_as_its_text(
    name: str, body: str, others: list[str]
) -> None:
    """What the model wrote in the transcript's own form, header and indented text, is the
    text again (its line breaks as the transcript writes them)."""
    assume(not _labelled(body, (name, *others)))
    header = f"{data_json(name)} (character {data_json(name.lower())}):"
    written = f"{header}\n{indented(body)}"
    assert clean_line(written, own=[name], others=others) == "\n".join(body.splitlines()).rstrip()


@given(st.text(string.printable, max_size=40), names, name_lists)
def test_what_a_stop_sequence_stops_the_trim_cuts_too(
    said: str, other: str, more: list[str]
) -> None:
    """A model that ignored its stop sequences (or got only four) still loses the line."""
    assume(not _labelled(said, (other, *more)))
    header, script, bold, fullwidth = stop_sequences([other])
    rest = ('character "x"):\n  hi', " hi", ":** hi", " hi")
    for sequence, tail in zip((header, script, bold, fullwidth), rest, strict=True):
        written = f"{said}{sequence}{tail}"
        assert clean_line(written, own=[], others=[*more, other]) == said.rstrip()
