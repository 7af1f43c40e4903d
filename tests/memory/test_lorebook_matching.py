"""Lorebook keys compiled once (memory/lorematch.py): the same entries fire as with a search
per key, and one prompt's matching, every key kind, ends by its time budget, the entries it
left undecided reported as such (issue 34)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.app.build import pin_for
from bot.config import LorebookSettings, LoreEntrySettings, PersonaSettings
from memory.lorebook import MATCH_SECONDS, Lorebook, LoreEntry, LoreSelection, select


def outcome(selection: LoreSelection) -> dict[str, tuple[str, str]]:
    """Each entry's label -> (fired or the skip reason, why or the skip detail)."""
    return {f.label: ("fired", f.why) for f in selection.fired} | {
        s.label: (s.reason, s.detail) for s in selection.skipped
    }


class SteppingClock:
    """A monotonic clock that moves ``step`` seconds each time it is read."""

    def __init__(self, step: float) -> None:
        self.now = 0.0
        self.step = step
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        self.now += self.step
        return self.now


def jumping_clock(after: int) -> Iterator[float]:
    """Reads 0 ``after`` times, then a time long past any budget."""
    for _ in range(after):
        yield 0.0
    while True:
        yield 1e9


# -- the budget ---------------------------------------------------------------------------


def test_when_the_time_runs_out_the_undecided_entries_say_so() -> None:
    """The clock jumps past the budget before the scan: no keyed entry was decided, so each is
    reported as left out for time (never "no key match"); constant and disabled entries need
    no matching and are what they are."""
    book = Lorebook(
        (
            LoreEntry("Eldham is a port.", keys=("Eldham",), name="plain"),
            LoreEntry("Kings.", keys=("Kell",), case_sensitive=True, name="sensitive"),
            LoreEntry("Dragons.", keys=(r"drag(on|ons)\b",), regex=True, name="pattern"),
            LoreEntry("Sky.", constant=True, name="sky"),
            LoreEntry("Off.", keys=("Eldham",), enabled=False, name="off"),
        )
    )
    ticks = jumping_clock(after=1)
    selection = select(book, ["Eldham, Kell and the dragons"], clock=lambda: next(ticks))
    budget = ("time budget", f"the {MATCH_SECONDS}s for matching this prompt ran out")
    assert outcome(selection) == {
        "plain": budget,
        "sensitive": budget,
        "pattern": budget,
        "sky": ("fired", "constant"),
        "off": ("disabled", ""),
    }
    # With time to spare, the same prompt fires all three.
    fired = {f.label for f in select(book, ["Eldham, Kell and the dragons"]).fired}
    assert fired == {"plain", "sensitive", "pattern", "sky"}


def test_overlapping_keys_stop_the_scan_once_all_are_found() -> None:
    """'a', 'aa', ... 200 keys against 20,000 'a': each position reports up to 200 matches (4
    million in all), but every key is found within the first 200 characters and the scan
    stops there, well within the budget."""
    book = Lorebook(tuple(LoreEntry(f"c{n}", keys=("a" * n,), name=f"a{n}") for n in range(1, 201)))
    clock = SteppingClock(step=0.001)  # 250 readings use up the budget
    selection = select(book, ["a" * 20_000], clock=clock)
    assert len(selection.fired) + len(selection.dropped) == 200
    assert clock.reads < 250


def test_a_scan_that_cannot_finish_ends_at_the_deadline() -> None:
    """With one key more that never occurs, the 4 million matches cannot all be read: the
    scan ends at the deadline. What it found fires; the entry it could not decide is reported
    for time, not as "no key match"."""
    overlapping = tuple(LoreEntry(f"c{n}", keys=("a" * n,), name=f"a{n}") for n in range(1, 201))
    book = Lorebook((*overlapping, LoreEntry("never", keys=("b",), name="b")), token_budget=9999)
    clock = SteppingClock(step=0.001)
    selection = select(book, ["a" * 20_000], clock=clock)
    assert {f.label for f in selection.fired} == {f"a{n}" for n in range(1, 201)}
    assert [(s.label, s.reason) for s in selection.skipped] == [("b", "time budget")]
    assert clock.now < MATCH_SECONDS + 0.01


def test_what_was_found_before_the_deadline_fires() -> None:
    """The clock jumps after the scan has read some matches: the entries found by then fire,
    those after are undecided, and nothing is reported as not matching."""
    entries = tuple(LoreEntry(f"lore {i}", keys=(f"<{i}>",), name=f"e{i}") for i in range(2000))
    book = Lorebook(entries, token_budget=100_000)
    text = " ".join(f"<{i}>" for i in range(2000))
    ticks = jumping_clock(after=3)  # the deadline, the scan's start, its first reading
    selection = select(book, [text], clock=lambda: next(ticks))
    fired = sorted(int(f.label[1:]) for f in selection.fired)
    undecided = sorted(int(s.label[1:]) for s in selection.skipped)
    assert fired and undecided and {s.reason for s in selection.skipped} == {"time budget"}
    # In the order of the text: a prefix fired, the rest did not.
    assert fired == list(range(len(fired))) and undecided == list(range(len(fired), 2000))


# -- the same semantics -----------------------------------------------------------------


def test_overlapping_case_and_casefold() -> None:
    """Keys inside other keys all match; case-insensitive keys compare casefolded ('ß' is
    'ss'); a case-sensitive key and a case-insensitive one of the same word are different
    keys; blank keys never match."""
    book = Lorebook(
        (
            LoreEntry("k", keys=("kingdom",), name="kingdom"),
            LoreEntry("k", keys=("king",), name="king"),
            LoreEntry("k", keys=("dom",), name="dom"),
            LoreEntry("s", keys=("STRASSE",), name="street"),
            LoreEntry("s", keys=("ß",), case_sensitive=True, name="eszett exact"),
            LoreEntry("e", keys=("Eldham",), case_sensitive=True, name="Eldham exact"),
            LoreEntry("e", keys=("Eldham",), name="eldham any"),
            LoreEntry("b", keys=("  ", ""), name="blank"),
        )
    )
    result = outcome(select(book, ["the KINGDOM of eldham, Hauptstraße"]))
    assert result == {
        "kingdom": ("fired", "key 'kingdom'"),
        "king": ("fired", "key 'king'"),
        "dom": ("fired", "key 'dom'"),
        "street": ("fired", "key 'STRASSE'"),
        "eszett exact": ("fired", "key 'ß'"),
        "Eldham exact": ("no key match", ""),
        "eldham any": ("fired", "key 'Eldham'"),
        "blank": ("no key match", ""),
    }
    assert outcome(select(book, ["HAUPTSTRASSE"]))["eszett exact"] == ("no key match", "")


def test_the_first_key_of_the_entry_is_named_whatever_comes_first_in_the_text() -> None:
    entry = LoreEntry(
        "h",
        keys=("dragon", "wyrm"),
        secondary_keys=("gold", "hoard"),
        selective=True,
        name="hoard",
    )
    book = Lorebook((entry,))
    assert outcome(select(book, ["a wyrm on its hoard of gold; a dragon"])) == {
        "hoard": ("fired", "key 'dragon' and 'gold'")
    }
    assert outcome(select(book, ["a wyrm"])) == {
        "hoard": ("no key match", "key 'wyrm', no secondary key")
    }


def test_the_book_is_compiled_once_and_never_used_for_other_entries() -> None:
    """The per-prompt copy with another budget (memory/assemble.py) keeps the compiled keys;
    a copy with other entries gets its own, so it never fires the old book's entries."""
    book = Lorebook((LoreEntry("d", keys=("dragon",), name="dragon"),))
    assert replace(book, token_budget=10).compiled is book.compiled
    other = replace(book, entries=(LoreEntry("c", keys=("city",), name="city"),))
    assert other.compiled is not book.compiled
    assert [f.label for f in select(other, ["the city and the dragon"]).fired] == ["city"]


def test_a_bad_pattern_is_compiled_once_and_logged_once_at_load(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A pattern that does not compile is known when the persona loads: logged then (once),
    still reported as the entry's skip reason on each prompt, and not logged again."""
    book = LorebookSettings(
        entries=[
            LoreEntrySettings(content="b", keys=["(unclosed"], regex=True, name="broken"),
            LoreEntrySettings(content="d", keys=["dragon"], name="dragon"),
        ]
    )
    caplog.set_level(logging.WARNING)
    mira = PersonaSettings(id="mira", name="Mira", system="You are Mira.", first_message=["Hi."])
    pin = pin_for(mira.model_copy(update={"lorebook": book}))
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == 1 and "'broken': bad regex" in logged[0] and "(unclosed" in logged[0]
    assert pin.lorebook is not None
    caplog.clear()
    selection = select(pin.lorebook, ["the dragon"])
    assert outcome(selection)["broken"][0] == "bad regex"
    assert caplog.records == []


# -- against the search per key it replaced -------------------------------------------------


def per_key(book: Lorebook, said: str) -> dict[str, tuple[str, str]]:
    """The verdicts of the loop before issue 34 (plain keys): a search per key per entry."""
    folded = said.casefold()
    out: dict[str, tuple[str, str]] = {}
    for index, entry in enumerate(book.entries):

        def first(keys: tuple[str, ...], entry: LoreEntry = entry) -> str | None:
            for key in keys:
                if key.strip() and (
                    key in said if entry.case_sensitive else key.casefold() in folded
                ):
                    return key
            return None

        label = entry.label(index)
        if not entry.enabled or not entry.content.strip():
            out[label] = ("disabled", "")
        elif entry.constant:
            out[label] = ("fired", "constant")
        elif (primary := first(entry.keys)) is None:
            out[label] = ("no key match", "")
        elif not (entry.selective and entry.secondary_keys):
            out[label] = ("fired", f"key {primary!r}")
        elif (secondary := first(entry.secondary_keys)) is None:
            out[label] = ("no key match", f"key {primary!r}, no secondary key")
        else:
            out[label] = ("fired", f"key {primary!r} and {secondary!r}")
    return out


# Few letters, in both cases and with 'ß', so that keys overlap, repeat and casefold.
_letters = st.sampled_from(["a", "b", "A", "B", "ß", "s", "S", " "])
_keys = st.lists(st.text(_letters, max_size=4), max_size=3).map(tuple)
_entries = st.builds(
    LoreEntry,
    content=st.just("lore"),
    keys=_keys,
    secondary_keys=_keys,
    selective=st.booleans(),
    case_sensitive=st.booleans(),
    constant=st.booleans(),
    enabled=st.booleans(),
)


@given(st.lists(_entries, max_size=8), st.text(_letters, max_size=30))
def test_the_compiled_keys_decide_as_the_search_per_key_did(
    drawn: list[LoreEntry], said: str
) -> None:
    book = Lorebook(
        tuple(replace(e, name=f"e{i}") for i, e in enumerate(drawn)), token_budget=100_000
    )
    assert outcome(select(book, [said])) == per_key(book, said)


@pytest.mark.parametrize(
    ("pattern", "copies"),
    [
        ("(?:(?:(?:a{200}){200}){200})", 8_000_000),  # review 34: 7.4 s, 2.25 GB to compile
        ("a{10000}", 10_000),
        ("(?:a|b{50}){300}", 15_000),
        ("([a-z]{3}){4}", 12),
        ("(?:a{,200}){,200}", 40_000),  # {,n}: up to n
        ("x{5,}", 5),  # beyond the lower bound it loops, it does not copy
        ("a*b+c?", 1),
        (r"\{5}", 1),  # an escaped brace is no count
        ("[{]{5}", 5),  # nor one inside a set; the set is what repeats
        (r"\p{L}{20}", 20),  # a property's braces are its own
        ("(ab){3}{e<=2}", 3),  # the regex library's fuzzy constraint counts nothing
    ],
)
def test_counted_repeats_are_counted_without_compiling(pattern: str, copies: int) -> None:
    from memory.lorematch import repeat_copies

    assert repeat_copies(pattern) == copies


def test_a_pattern_over_the_copies_limit_is_a_bad_key_never_compiled() -> None:
    """Defence in depth (config load and card import refuse it already): a book built some
    other way skips the entry as a bad regex instead of compiling it for seconds."""
    bomb = LoreEntry("x", keys=("(?:(?:(?:a{200}){200}){200})",), regex=True, name="bomb")
    selection = select(Lorebook((bomb,)), ["aaaa"])
    assert outcome(selection)["bomb"][0] == "bad regex"
    assert "8,000,000" in outcome(selection)["bomb"][1]


def test_many_entries_left_out_are_one_warning_per_prompt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Review 34: 5,000 constant entries over a 1-token budget logged 5,000 warnings on every
    prompt (30 MB with long names). One line: how many, why, the first few. (Here each entry
    fits the budget alone, 6 or 7 tokens of 7, but only the first fits beside the others: an
    entry larger than the whole budget is said once, when the persona loads.)"""
    from bot.core.events import ConversationKey, SessionKey, StoredMessage, Turn
    from memory.assemble import Budget, PersonaPin, assemble
    from memory.prompting import log_lore_drops

    book = Lorebook(
        tuple(LoreEntry(f"lore {i}", constant=True, name=f"e{i}") for i in range(500)),
        token_budget=7,
    )
    pin = PersonaPin("Mira", "You are Mira.", ("Hi.",), "m", lorebook=book)
    session = SessionKey(ConversationKey("telegram", "1"), 1)
    said = StoredMessage(1, session, 1, "user", "7", "Ana", "hello", 0.0)
    assembled = assemble(pin, Turn(session, 1, (said,), 0.0), Budget())
    caplog.set_level(logging.WARNING, "personabot.memory")
    log_lore_drops(assembled, session)
    (record,) = caplog.records
    assert "499 entries left out" in record.getMessage() and "(budget: 499)" in record.getMessage()
