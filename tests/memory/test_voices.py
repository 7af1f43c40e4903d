"""A persona's line in a scene speaks for nobody else (memory/voices.py): its stop sequences,
and the trim of what the model wrote, by example and by property."""

from __future__ import annotations

import re
import string
import time

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
    assert stop_sequences(["Bob", "Sasha"]) == (
        '\n"Bob" (',
        "\nBob:",
        "\n**Bob",
        '\n"Sasha" (',
        "\nSasha:",
        "\n**Sasha",
    )


def test_blank_and_repeated_names_add_nothing() -> None:
    assert stop_sequences(["Bob", "", "  ", "Bob", "\t"]) == ('\n"Bob" (', "\nBob:", "\n**Bob")
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
    ],
)
def test_a_leading_label_of_the_speaker_is_taken_off(written: str) -> None:
    assert clean_line(written, own=OWN, others=OTHERS) == "hi there"


def test_the_transcripts_header_on_its_own_line_goes_with_the_indentation() -> None:
    written = '"Alice" (character "alice"):\n  Hi!\n\n  Shall we go?\n    - the market'
    assert clean_line(written, own=OWN, others=OTHERS) == "Hi!\n\nShall we go?\n  - the market"


def test_a_body_the_model_did_not_indent_keeps_its_own_indentation() -> None:
    written = "Alice:\nHere is the plan:\n  - the market\n  - the sea"
    assert clean_line(written, own=OWN, others=OTHERS) == (
        "Here is the plan:\n  - the market\n  - the sea"
    )


def test_the_speakers_name_elsewhere_is_left_alone() -> None:
    for written in ("Alice said: hi", "Alicia: hi", "I am Alice: hi", "hi\nAlice: again"):
        assert clean_line(written, own=OWN, others=OTHERS) == written


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
    ],
)
def test_everything_from_anothers_line_on_is_cut(other_line: str) -> None:
    written = f"Sure, I'll come.\nSee you there.\n{other_line}\nAlice: and then me again"
    assert clean_line(written, own=OWN, others=OTHERS) == "Sure, I'll come.\nSee you there."


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
        "- Bob: not today.",
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


# ------------------------------------------------------------------------------ properties

_NAME_CHARS = string.ascii_letters + " .+?()[]{}|^$\\-'"
names = st.text(_NAME_CHARS, min_size=1, max_size=8).filter(
    lambda n: n[0].isalpha() and n[-1].isalpha()
)
name_lists = st.lists(names, max_size=3)
_FREE = st.text(string.printable, max_size=12)


def _label_lines(pool: list[str]) -> st.SearchStrategy[str]:
    """Lines that are labels of a name of ``pool``, or nearly (no colon, a word between,
    a name run on, an aside left open), in any case and dress."""
    return st.builds(
        lambda lead, name, case, close, aside, colon, tail: (
            f"{lead}{case(name)}{close}{aside}{colon}{tail}"
        ),
        st.sampled_from(["", " ", "  ", "**", "*", "_", "[", '"', "- "]),
        st.sampled_from(pool),
        st.sampled_from([str, str.upper, str.lower]),
        st.sampled_from(["", "**", "*", "_", "]", '"', " "]),
        st.sampled_from(["", " (aside)", ' (character "x)")', " (open", "(", "()"]),
        st.sampled_from([":", " :", ":**", "", " said:", "y:", "'s:"]),
        _FREE,
    )


def _texts(pool: list[str]) -> st.SearchStrategy[str]:
    """Lines, about half of them (near) labels of ``pool``, joined by any line break."""
    line = _label_lines(pool) | _FREE if pool else _FREE
    breaks = st.sampled_from(["\n", "\r\n", "\u2028", "\n\n", " "])
    parts = st.lists(st.tuples(line, breaks), max_size=6)
    return parts.map(lambda ps: "".join(text + end for text, end in ps))


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


def _same_letter(a: str, b: str) -> bool:
    """Equal but for case, as Python's ``re.IGNORECASE`` sees it (which also takes the long
    s for an s, and the Kelvin sign for a K)."""
    return re.fullmatch(re.escape(a), b, re.IGNORECASE) is not None


def _speaks_as(line: str, name: str) -> bool:
    """Whether ``line`` is a label of ``name`` (an oracle written apart from the module:
    decorations, name, decorations, an optional (...) part, decorations, colon)."""
    rest = line.lstrip().lstrip('*_["')
    if len(rest) < len(name) or not all(map(_same_letter, name, rest)):
        return False
    rest = rest[len(name) :].lstrip('*_]"')
    if rest.lstrip().startswith("("):
        after = _after_aside(rest.lstrip())
        if after is None:
            return False
        rest = after
    return rest.lstrip('*_]"').lstrip().startswith(":")


def _labelled(text: str, pool: tuple[str, ...]) -> bool:
    return any(_speaks_as(line, n) for line in text.splitlines() for n in pool if n.strip())


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
@example("\u017fam: hi", ["Sam"], [])  # the long s: a case of s to re.IGNORECASE
@example("hi\n\u212aim: hi", [], ["kim"])  # the Kelvin sign: a case of k
def test_without_an_own_label_the_result_is_a_start_of_the_text(
    text: str, own: list[str], others: list[str]
) -> None:
    """Any text at all (any Unicode, any line break): only cut, never rewritten."""
    assume(not _labelled(text, tuple(own)))
    cleaned = clean_line(text, own=own, others=others)
    assert text.startswith(cleaned) and cleaned == cleaned.rstrip()


@given(
    names,
    st.sampled_from(["{}:", "**{}:**", "**{}**:", "[{}]:", "*{}*:", '"{}" (character "x"):']),
    _texts(["Bob", "Alice"]),
    name_lists,
)
def test_an_inline_own_label_is_taken_off_and_nothing_else_changes(
    name: str, label: str, body: str, others: list[str]
) -> None:
    assume(body[:1] not in ("", "*", "_") and not body[0].isspace())
    written = f"{label.format(name)} {body}"
    assert clean_line(written, own=[name], others=others) == clean_line(body, own=[], others=others)


@given(names, st.text(string.printable + "\u2028"), name_lists)
def test_a_transcript_part_of_the_speaker_comes_back_as_its_text(
    name: str, body: str, others: list[str]
) -> None:
    """What the model wrote in the transcript's own form, header and indented text, is the
    text again (its line breaks as the transcript writes them)."""
    assume(not _labelled(body, tuple(others)))
    header = f"{data_json(name)} (character {data_json(name.lower())}):"
    written = f"{header}\n{indented(body)}"
    assert clean_line(written, own=[name], others=others) == "\n".join(body.splitlines()).rstrip()


@given(st.text(string.printable, max_size=40), names, name_lists)
def test_what_a_stop_sequence_stops_the_trim_cuts_too(
    said: str, other: str, more: list[str]
) -> None:
    """A model that ignored its stop sequences (or got only four) still loses the line."""
    assume(not _labelled(said, (other, *more)))
    header, script, bold = stop_sequences([other])
    rest = ('character "x"):\n  hi', " hi", ":** hi")
    for sequence, tail in zip((header, script, bold), rest, strict=True):
        written = f"{said}{sequence}{tail}"
        assert clean_line(written, own=[], others=[*more, other]) == said.rstrip()
