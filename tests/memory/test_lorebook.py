"""Lorebook selection: which entries fire on the recent messages, within the token budget."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from memory.lorebook import Lorebook, LoreEntry, select
from memory.tokens import estimate_tokens

DRAGON = LoreEntry("Vermithrax sleeps under the mountain.", keys=("dragon",), name="dragon")
CITY = LoreEntry("Eldham is a port city.", keys=("Eldham",), name="city")


def fired(book: Lorebook, *texts: str) -> list[str]:
    return [f.label for f in select(book, texts).fired]


def reasons(book: Lorebook, *texts: str) -> dict[str, str]:
    return {s.label: s.reason for s in select(book, texts).skipped}


def test_a_key_in_the_recent_messages_fires_its_entry() -> None:
    book = Lorebook((DRAGON, CITY))
    selection = select(book, ["hello", "Tell me about the DRAGON!"])
    assert selection.contents == (DRAGON.content,)
    assert [(f.label, f.why) for f in selection.fired] == [("dragon", "key 'dragon'")]
    assert {s.label: s.reason for s in selection.skipped} == {"city": "no key match"}


def test_scan_depth_counts_the_newest_messages_only() -> None:
    book = Lorebook((DRAGON,), scan_depth=2)
    assert fired(book, "the dragon", "hi", "there") == []
    assert fired(book, "the dragon", "hi") == ["dragon"]


def test_case_sensitive_keys() -> None:
    book = Lorebook((LoreEntry("x", keys=("Eldham",), case_sensitive=True, name="c"),))
    assert fired(book, "eldham") == [] and fired(book, "in Eldham") == ["c"]


def test_selective_entries_need_a_secondary_key_too() -> None:
    entry = LoreEntry(
        "The dragon's hoard.", keys=("dragon",), secondary_keys=("gold", "hoard"), selective=True
    )
    book = Lorebook((entry,))
    assert fired(book, "a dragon") == []
    assert select(book, ["a dragon"]).skipped[0].detail == "key 'dragon', no secondary key"
    assert fired(book, "a dragon and its gold") == ["dragon"]
    # Not selective: the secondary keys are not required.
    loose = Lorebook((LoreEntry("h", keys=("dragon",), secondary_keys=("gold",)),))
    assert fired(loose, "a dragon") == ["dragon"]


def test_regex_keys_in_both_forms() -> None:
    bare = LoreEntry("b", keys=(r"drag(on|ons)\b",), regex=True, name="bare")
    slashed = LoreEntry("s", keys=("/^The KING/i",), regex=True, name="slashed")
    strict = LoreEntry("t", keys=("/^The KING/",), regex=True, name="strict")
    book = Lorebook((bare, slashed, strict))
    assert fired(book, "the king is dead. Dragons!") == ["bare", "slashed"]


def test_a_bad_or_runaway_pattern_skips_its_entry_and_nothing_else() -> None:
    broken = LoreEntry("b", keys=("(unclosed",), regex=True, name="broken")
    runaway = LoreEntry("r", keys=(r"^(\w+\s?)*$",), regex=True, name="runaway")
    book = Lorebook((broken, runaway, DRAGON))
    hostile = "a" * 5000 + "!"  # what a user can paste to make backtracking explode
    selection = select(book, [hostile, "and the dragon"])
    assert [f.label for f in selection.fired] == ["dragon"]
    skipped = {s.label: s for s in selection.skipped}
    assert skipped["broken"].reason == "bad regex" and "(unclosed" in skipped["broken"].detail
    assert skipped["runaway"].reason == "regex timeout"


def test_constant_and_disabled_entries() -> None:
    always = LoreEntry("The sky is green here.", constant=True, name="sky")
    off = LoreEntry("never", keys=("dragon",), enabled=False, name="off")
    book = Lorebook((off, always))
    assert fired(book, "the dragon") == ["sky"]
    assert reasons(book, "the dragon") == {"off": "disabled"}


def test_over_budget_the_lowest_priority_goes_first_and_is_reported() -> None:
    big = "x" * 300  # ~104 tokens each
    low = LoreEntry(big, keys=("a",), priority=1, insertion_order=1, name="low")
    high = LoreEntry(big, keys=("a",), priority=50, insertion_order=3, name="high")
    mid = LoreEntry(big, keys=("a",), priority=10, insertion_order=2, name="mid")
    tie = LoreEntry(big, keys=("a",), priority=10, insertion_order=9, name="tie")
    book = Lorebook((low, high, mid, tie), token_budget=2 * estimate_tokens(big))
    selection = select(book, ["a"])
    # Kept: the highest priorities, in insertion order; dropped: the tie's later one, then low.
    assert [f.label for f in selection.fired] == ["mid", "high"]
    assert [(d.label, d.reason) for d in selection.dropped] == [
        ("tie", "budget"),
        ("low", "budget"),
    ]
    assert "0 of 208 left" in selection.dropped[0].detail


def test_contents_are_rendered_before_they_are_counted() -> None:
    entry = LoreEntry("{{char}} knows this.", keys=("a",))
    selection = select(Lorebook((entry,)), ["a"], lambda t: t.replace("{{char}}", "Mira"))
    assert selection.contents == ("Mira knows this.",)
    assert selection.fired[0].tokens == estimate_tokens("Mira knows this.")


entries = st.builds(
    LoreEntry,
    content=st.text(min_size=1, max_size=120).filter(str.strip),
    keys=st.lists(st.sampled_from(["a", "b", "c", "dragon"]), max_size=2).map(tuple),
    constant=st.booleans(),
    enabled=st.booleans(),
    insertion_order=st.integers(0, 5),
    priority=st.integers(0, 5),
)


@given(st.lists(entries, max_size=8), st.integers(1, 200), st.text(max_size=40))
def test_every_entry_is_accounted_for_and_the_budget_holds(
    drawn: list[LoreEntry], budget: int, said: str
) -> None:
    book_entries = [replace(e, name=f"e{i}") for i, e in enumerate(drawn)]
    book = Lorebook(tuple(book_entries), token_budget=budget)
    selection = select(book, [said])
    by_name = {e.name: (i, e) for i, e in enumerate(book_entries)}
    assert sum(f.tokens for f in selection.fired) <= budget
    outcome = {f.label: "fired" for f in selection.fired} | {
        s.label: s.reason for s in selection.skipped
    }
    assert len(outcome) == len(book_entries)  # each entry once, fired or skipped
    for name, (_, entry) in by_name.items():
        matched = entry.constant or any(k.casefold() in said.casefold() for k in entry.keys)
        if not entry.enabled:
            assert outcome[name] == "disabled"
        elif matched and estimate_tokens(entry.content) > budget:
            assert outcome[name] == "too large"  # never sent, whatever fires with it
        elif matched:
            assert outcome[name] in ("fired", "budget")
        else:
            assert outcome[name] == "no key match"
    # Fired entries come in insertion order.
    orders = [by_name[f.label][1].insertion_order for f in selection.fired]
    assert orders == sorted(orders)

    # A dropped entry did not fit beside the entries ranked above it that were kept.
    def rank(name: str) -> tuple[int, int, int]:
        index, entry = by_name[name]
        return (-entry.priority, entry.insertion_order, index)

    tokens = {f.label: f.tokens for f in selection.fired}
    for dropped in selection.dropped:
        own = estimate_tokens(by_name[dropped.label][1].content)
        above = sum(t for name, t in tokens.items() if rank(name) < rank(dropped.label))
        assert above + own > budget


def test_a_report_counts_the_entries_that_did_not_come_up_once_they_are_many() -> None:
    """``personabot prompt`` and the console list every skip with a reason worth reading;
    past 20, the entries whose keys simply did not come up are counted instead of listed."""
    few = Lorebook((DRAGON, CITY, replace(CITY, enabled=False, name="off")))
    listed, counted = select(few, ["hi"]).listed()
    assert [(s.label, s.reason) for s in listed] == [
        ("dragon", "no key match"),
        ("city", "no key match"),
        ("off", "disabled"),
    ] and counted == 0
    many = Lorebook(
        (
            *(replace(CITY, name=f"c{i}") for i in range(30)),
            replace(CITY, enabled=False, name="off"),
        )
    )
    listed, counted = select(many, ["hi"]).listed()
    assert [(s.label, s.reason) for s in listed] == [("off", "disabled")] and counted == 30
