"""docs/scenes.md#director: who a message addresses and who speaks, the deterministic rules."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bot.core.media import Quote
from bot.core.scenes import CastMember, SceneRules, addressed, header_of, plan, seeded

ALICE = CastMember("alice", "Alice", ("Ally",), talkativeness=0.0)
BOB = CastMember("bob", "Bob", talkativeness=0.0)
CAROL = CastMember("carol", "Carol Ann", talkativeness=0.0)
CAST = (ALICE, BOB, CAROL)


def rules(**kw: object) -> SceneRules:
    return SceneRules(cast=CAST, **kw)  # type: ignore[arg-type]


def test_names_are_whole_words_in_order_of_mention() -> None:
    assert addressed("@Bob what do you think, ally?", None, CAST) == ("bob", "alice")
    assert addressed("bobby and alicea are people", None, CAST) == ()
    assert addressed("BOB! and carol ann", None, CAST) == ("bob", "carol")
    assert addressed("email bob@example.com", None, CAST) == ()


def test_a_reply_to_a_persona_line_addresses_it_first() -> None:
    quote = Quote("reply", "Tavern bot", "Carol Ann: the soup is cold", from_bot=True)
    assert addressed("really? ask Bob", quote, CAST) == ("carol", "bob")
    discord = Quote("reply", "Tavern", "**Alice:** hello there", from_bot=True)
    assert addressed("hi", discord, CAST) == ("alice",)
    webhook = Quote("reply", "Bob", "hello there", from_bot=True)
    assert addressed("hi", webhook, CAST) == ("bob",)


def test_a_reply_to_a_person_named_like_a_persona_is_not_addressing_it() -> None:
    quote = Quote("reply", "Alice", "Bob: I said so", from_bot=False)
    assert addressed("right", quote, CAST) == ()
    assert header_of("Bob said: no", CAST) is None


def test_addressed_speak_first_then_nobody_else_in_manual_or_when_quiet() -> None:
    picks = plan(
        rules(strategy="manual"),
        addressed=("bob",),
        last_speaker=None,
        spoken_since_human=(),
        room=2,
        rng=seeded("t"),
        human_turn=True,
    )
    assert [p.persona for p in picks] == ["bob"]
    nobody = plan(
        rules(strategy="manual"),
        addressed=(),
        last_speaker=None,
        spoken_since_human=(),
        room=2,
        rng=seeded("t"),
        human_turn=True,
    )
    assert nobody == ()


def test_natural_always_answers_a_human_but_lets_a_chain_end() -> None:
    human = plan(
        rules(),
        addressed=(),
        last_speaker=None,
        spoken_since_human=(),
        room=2,
        rng=seeded("t"),
        human_turn=True,
    )
    assert len(human) == 1  # nobody is talkative: one is chosen all the same
    chain = plan(
        rules(),
        addressed=(),
        last_speaker="alice",
        spoken_since_human=("alice",),
        room=2,
        rng=seeded("t"),
        human_turn=False,
    )
    assert chain == ()


def test_list_goes_in_cast_order_and_never_repeats_the_last_speaker() -> None:
    picks = plan(
        rules(strategy="list"),
        addressed=(),
        last_speaker="alice",
        spoken_since_human=("alice",),
        room=5,
        rng=seeded("t"),
        human_turn=False,
    )
    assert [p.persona for p in picks] == ["bob", "carol"]


def test_pooled_prefers_who_has_not_spoken_since_the_human() -> None:
    for seed in range(20):
        picks = plan(
            rules(strategy="pooled"),
            addressed=(),
            last_speaker="bob",
            spoken_since_human=("alice", "bob"),
            room=2,
            rng=seeded(seed),
            human_turn=False,
        )
        assert [p.persona for p in picks] == ["carol"]
    done = plan(
        rules(strategy="pooled"),
        addressed=(),
        last_speaker="carol",
        spoken_since_human=("alice", "bob", "carol"),
        room=2,
        rng=seeded("t"),
        human_turn=False,
    )
    assert done == ()


@given(
    strategy=st.sampled_from(["natural", "pooled", "list", "manual"]),
    talk=st.lists(st.floats(0, 1), min_size=3, max_size=3),
    named=st.lists(st.sampled_from(["alice", "bob", "carol", "dave"]), max_size=4),
    last=st.sampled_from([None, "alice", "bob", "carol"]),
    room=st.integers(0, 4),
    seed=st.integers(),
    human=st.booleans(),
)
def test_plans_are_bounded_distinct_and_the_last_speaker_waits_unless_addressed(
    strategy: str,
    talk: list[float],
    named: list[str],
    last: str | None,
    room: int,
    seed: int,
    human: bool,
) -> None:
    cast = tuple(CastMember(m.id, m.name, m.aliases, t) for m, t in zip(CAST, talk, strict=True))
    scene = SceneRules(cast=cast, strategy=strategy)  # type: ignore[arg-type]
    picks = plan(
        scene,
        addressed=named,
        last_speaker=last,
        spoken_since_human=(),
        room=room,
        rng=seeded(seed),
        human_turn=human,
    )
    personas = [p.persona for p in picks]
    assert len(personas) <= room
    assert len(set(personas)) == len(personas)
    assert all(scene.member(p) is not None for p in personas)  # "dave" is no cast member
    if last in personas:
        assert last in named
    known = [n for n in dict.fromkeys(named) if n != "dave"]
    assert personas[: len(known)] == known[: len(personas)]  # the addressed first, in order
    again = plan(
        scene,
        addressed=named,
        last_speaker=last,
        spoken_since_human=(),
        room=room,
        rng=seeded(seed),
        human_turn=human,
    )
    assert again == picks  # a retried turn plans the same


def test_list_goes_round_the_cast_after_who_spoke_last() -> None:
    """With a cap below the cast's size, everyone still gets a turn."""
    spoken = []
    previous = None
    for _ in range(3):
        picks = plan(
            rules(strategy="list"),
            addressed=(),
            last_speaker=None,
            spoken_since_human=(),
            room=2,
            rng=seeded("t"),
            human_turn=True,
            previous=previous,
        )
        spoken += [p.persona for p in picks]
        previous = picks[-1].persona
    assert spoken == ["alice", "bob", "carol", "alice", "bob", "carol"]
