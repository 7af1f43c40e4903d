"""Review 39: attacks on scenes (docs/scenes.md) as a hostile user, a careless operator and a
flaky network, by an independent reviewer. Every test here was a finding: it states what the
docs promise and failed against the code of that review (each is fixed now; the docstrings
keep the cause that was found). The in-process runtime on a manual clock
(tests/harness.py, as tests/scenes/test_scene_turns.py) on SQLite, and the real aiogram
adapter polling the fake Bot API (tests/scenes/test_scene_telegram.py) where the platform
matters."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import load_settings
from bot.core.clock import ManualClock
from bot.core.errors import ConfigError
from bot.core.llm import ModelRequest
from bot.core.media import Quote
from bot.runtime.access import AccessPolicy
from bot.store.base import BaseStore
from tests.adapters.test_telegram import TOKEN, api, running
from tests.backends import Backend
from tests.fakes.llm import GatedLLM
from tests.fakes.telegram_api import FakeTelegramAPI, TgChat, TgUser
from tests.scenes.test_scene_telegram import _scene
from tests.scenes.test_scene_turns import (
    GROUP,
    answering,
    group,
    lines,
    said_by,
    scene,
    speaker,
)

__all__ = ["api"]  # the fake Bot API fixture


@pytest.fixture
def backend() -> Backend:
    """SQLite only: these findings are not about the backend (2 shared cores)."""
    return Backend("sqlite")


# -- 1. loops that end: /stop ------------------------------------------------------------------


async def test_f1_a_non_admin_undoes_an_admins_stop_with_slash_new(
    store: BaseStore, clock: ManualClock
) -> None:
    """/stop is for admins; the mute is a note of the *session* (commands._stop, MUTED_KEY),
    so any member's /new opens a session without it and the scene speaks again."""
    llm = answering()
    admins = AccessPolicy(admins=frozenset({"boss"}))
    async with scene(store, clock, llm, strategy="manual", access=admins) as h:  # type: ignore[attr-defined]
        await group(h, "/stop", author="boss", name="Boss")
        assert "muted" in lines(h)[-1]
        await group(h, "/new", author="troll", name="Troll")  # not an admin
        before = llm.calls
        await group(h, "Alice, Bob, say something!", author="troll", name="Troll")
        await h.advance(30, step=3)
        assert llm.calls == before, "the admin's /stop was undone by a non-admin's /new"


async def test_f2_stop_during_the_autonomous_delay_does_not_stop_the_next_line(
    store: BaseStore, clock: ManualClock
) -> None:
    """docs/scenes.md#loops: "/stop ... a running chain stops before its next line". The mute
    is read before the autonomous delay (Scenes._talk_on), not after it: a /stop sent while the
    chain waits lets one more line out."""
    llm = answering()
    admins = AccessPolicy(admins=frozenset({"boss"}))
    async with scene(  # type: ignore[attr-defined]
        store,
        clock,
        llm,
        strategy="list",
        max_speakers=1,
        autonomous=True,
        max_autonomous_turns=6,
        autonomous_delay_seconds=20.0,
        access=admins,
    ) as h:
        await group(h, "tell us a story")
        await h.advance(5)  # the answer is out; the chain now waits 20 s for its next line
        assert len(said_by(h)) == 1
        await group(h, "/stop", author="boss", name="Boss")
        assert "muted" in lines(h)[-1]
        await h.advance(120)
        persona_lines = [t for t in lines(h) if t.startswith("**")]
        assert len(persona_lines) == 1, f"lines after /stop: {persona_lines[1:]}"


# -- 2. one turn, several speakers -------------------------------------------------------------


async def test_f3_a_later_speaker_cleaned_to_nothing_ends_the_plan_instead_of_being_skipped(
    store: BaseStore, clock: ManualClock
) -> None:
    """docs/scenes.md#turns: "A speaker whose line is empty once cleaned is skipped; the next
    one answers." Scenes.play only skips while no line was sent (``result == "closed" and
    first``); after the first line a cleaned-away line returns and the rest of the plan is
    dropped."""

    def answer(request: ModelRequest) -> str:
        who = speaker(request)
        return "Carol: I'll answer for Bob." if who == "Bob" else f"{who} here."

    llm = GatedLLM(answer=answer)
    async with scene(store, clock, llm, strategy="list", max_speakers=3) as h:  # type: ignore[attr-defined]
        await group(h, "hello everyone")
        await h.advance(60, step=3)
        assert llm.calls == 3, f"only {llm.calls} speaker(s) asked"
        assert said_by(h) == ["Alice", "Carol"]


async def test_f4_the_autonomy_left_does_not_bound_the_lines_answering_a_human(
    store: BaseStore, clock: ManualClock
) -> None:
    """docs/scenes.md#director rule 5: at most K speakers "and no more than ... the autonomy
    left allow"; #loops: at most max_autonomous_turns persona lines between two human
    messages, counting the ones answering the human. Scenes.play bounds the room by K and
    the hourly budget only."""
    llm = answering()
    async with scene(  # type: ignore[attr-defined]
        store,
        clock,
        llm,
        strategy="list",
        max_speakers=3,
        autonomous=True,
        max_autonomous_turns=1,
        autonomous_delay_seconds=1.0,
    ) as h:
        await group(h, "hello everyone")
        await h.advance(60, step=3)
        assert len(said_by(h)) == 1, said_by(h)


async def test_f5_a_person_writing_during_the_autonomous_delay_waits_the_whole_delay(
    store: BaseStore, clock: ManualClock
) -> None:
    """The chain sleeps its autonomous delay holding the conversation's one lease
    (Scenes._talk_on: ``renewing(...)`` around ``clock.sleep``), and only then looks for
    newer input. A person who writes meanwhile is answered after the whole delay, far past
    the queue's hard cap (max_wait 8 s here): with a 10-minute delay, 10 minutes."""
    llm = answering()
    async with scene(  # type: ignore[attr-defined]
        store,
        clock,
        llm,
        strategy="manual",
        autonomous=True,
        max_autonomous_turns=4,
        autonomous_delay_seconds=600.0,
    ) as h:
        await group(h, "Alice, hi")
        await h.advance(5)
        assert said_by(h) == ["Alice"]
        asked_at = clock.now()
        await group(h, "Bob, quick question!")
        await h.advance(30)  # Bob's turn (debounce, at most the hard cap) comes well within
        await h.advance(670, step=10)  # the rest of the delay and the chain's next line
        answered = [t for t, r in h.outlet.replies if r.text.startswith("**Bob:**")]
        assert answered, "never answered"
        assert answered[0] - asked_at <= 8.0 + 1.5, (
            f"Bob answered {answered[0] - asked_at:g} s later"
        )


async def test_f6_slash_new_between_two_speakers_lets_the_old_sessions_line_out(
    store: BaseStore, clock: ManualClock
) -> None:
    """docs/scenes.md#turns: nothing stale is sent. /new between two speakers starts a new
    conversation ("earlier messages are no longer part of the conversation"), yet the second
    speaker's line of the old session is still recorded and sent after the "New session"
    answer (finish_line only looks for newer input in the old session)."""
    llm = GatedLLM(clock=clock, generation=5.0, answer=lambda r: f"{speaker(r)} speaks.")
    async with scene(store, clock, llm, strategy="list", max_speakers=2) as h:  # type: ignore[attr-defined]
        await group(h, "hello everyone")
        await h.advance(1.5 + 5.0 + 1.0)  # Alice's line is out, Bob's is being written
        assert said_by(h) == ["Alice"]
        await group(h, "/new")
        assert "New session" in lines(h)[-1]
        await h.advance(60, step=3)
        after = lines(h)[lines(h).index(next(t for t in lines(h) if "New session" in t)) + 1 :]
        assert after == [], f"sent after /new: {after}"


# -- 3. no ventriloquism -----------------------------------------------------------------------

_FORMS = {
    "fullwidth colon": "Bob\uff1a No way.",
    "markdown quote": "> Bob: No way.",
    "list item": "- **Bob:** No way.",
    "chat log brackets": "[Bob] No way.",
    "irc": "<Bob> No way.",
    "cyrillic B": "\u0412ob: No way.",
    "fullwidth letters": "\uff22\uff4f\uff42: No way.",
    "zero-width space": "B\u200bob: No way.",
    "code span": "`Bob`: No way.",
    "strikethrough": "~~Bob~~: No way.",
    "heading": "### Bob: No way.",
    "single quotes": "'Bob': No way.",
}


@pytest.mark.parametrize("form", list(_FORMS), ids=list(_FORMS))
async def test_f7_another_cast_members_label_in_a_common_format_goes_out(
    store: BaseStore, clock: ManualClock, form: str
) -> None:
    """docs/scenes.md#voices: no outgoing line contains another cast member's speaker label.
    memory/voices.py's label pattern knows ``* _ [ "`` around a name and an ASCII colon only:
    the model's next line as Bob in any other dress (markdown quote, list, fullwidth colon,
    a homoglyph, a zero-width space...) is sent under Alice's header."""
    llm = GatedLLM(answer=lambda r: f"Sure thing!\n{_FORMS[form]}")
    async with scene(store, clock, llm, strategy="manual") as h:  # type: ignore[attr-defined]
        await group(h, "Alice, can you bake a cake?")
        await h.advance(30, step=3)
        assert lines(h), "nothing sent"
        assert "No way" not in lines(h)[0], lines(h)[0]


@pytest.mark.parametrize(
    "answer",
    [
        "Alice\uff1a Of course.",
        "Alice: Alice: Of course.",
        "\u200bAlice: Of course.",
        "> Alice: Of course.",
    ],
)
async def test_f8_own_label_in_a_common_format_is_left_under_the_header(
    store: BaseStore, clock: ManualClock, answer: str
) -> None:
    """docs/scenes.md#voices: a leading own label is removed. In these forms it stays, and the
    line goes out as ``**Alice:** Alice: Of course.`` (memory/voices._without_own_label)."""
    llm = GatedLLM(answer=lambda r: answer)
    async with scene(store, clock, llm, strategy="manual") as h:  # type: ignore[attr-defined]
        await group(h, "Alice, can you bake a cake?")
        await h.advance(30, step=3)
        assert lines(h) == ["**Alice:** Of course."]


# -- 4. who speaks -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "chatter",
    [
        "check https://bob.example.com/menu for prices",
        "the wiki page is example.org/wiki/Bob",
        "my script prints `bob` in a loop",
    ],
)
async def test_f9_a_name_inside_a_url_or_code_addresses_the_persona(
    store: BaseStore, clock: ManualClock, chatter: str
) -> None:
    """A group's chatter that does not mention the bot asks for an answer only when it
    addresses a cast member (router._to_cast). bot/core/scenes._name_pattern excludes
    ``bob@example.com`` but not a name inside a URL's host or path, or a code span: the
    manual scene answers people who were talking among themselves, and what they said is
    learned for Bob only."""
    llm = answering()
    async with scene(store, clock, llm, strategy="manual") as h:  # type: ignore[attr-defined]
        await h.say(GROUP, chatter, private=False, triggers=False)
        await h.advance(30, step=3)
        assert lines(h) == []


async def test_f10_a_reply_quoting_part_of_a_personas_line_does_not_address_it(
    store: BaseStore, clock: ManualClock
) -> None:
    """Telegram's "reply with quote" (the person selects part of Bob's line) arrives as
    ``Quote("quote", ...)``; bot/core/scenes.replied_to counts ``origin == "reply"`` only, so
    the reply is for nobody: a manual scene stays silent, another strategy picks anyone."""
    llm = answering()
    async with scene(store, clock, llm, strategy="manual") as h:  # type: ignore[attr-defined]
        quote = Quote("quote", "tavern_bot", "Bob: the forge is hot", from_bot=True)
        await h.say(GROUP, "why?", private=False, triggers=True, quote=quote)
        await h.advance(30, step=3)
        assert said_by(h) == ["Bob"]


# -- 5. on Telegram ----------------------------------------------------------------------------

ANN = TgUser(1001, "Ann")
TAVERN = TgChat.supergroup(-1001000000039, "Tavern")


async def test_f11_a_reply_to_the_second_part_of_a_long_line_is_for_nobody(
    tmp_path: Path, api: FakeTelegramAPI
) -> None:
    """A line longer than 4096 characters goes out in several messages; only the first one
    carries the ``Bob:`` header. bot/core/scenes.replied_to finds the persona by that header
    (header_of), so a reply to any later part addresses nobody: in a manual scene Bob never
    answers it."""

    def answer(request: ModelRequest) -> str:
        who = speaker(request)
        if who == "Bob" and len([m for m in request.messages[-1].text.split("\n") if m]) < 8:
            return "Hmph. " + "The forge is hot today. " * 300
        return f"{who} again."

    llm = GatedLLM(answer=answer)
    async with running(tmp_path, api, llm, settings=_scene(tmp_path)) as rig:  # type: ignore[arg-type]
        rig.say(TAVERN, ANN, "Bob, tell me about your forge")
        await api.wait_for(lambda: len(rig.replies(TAVERN)) >= 2, what="Bob's long line")
        await rig.quiet(rig.key(TAVERN))
        parts = api.sent_messages(TOKEN, TAVERN.id)
        # Every part carries the header, so a reply to any of them is for Bob.
        assert all(p.visible_text.startswith("Bob: ") for p in parts)
        before = len(parts)
        rig.say(TAVERN, ANN, "really?", reply_to_message_id=parts[1].message_id)
        await api.wait_for(
            lambda: len(rig.replies(TAVERN)) > before, within=10, what="Bob answering the reply"
        )


# -- 6. the operator's surface and loops -------------------------------------------------------

_CAST_TOML = """
[[personas]]
id = "alice"
name = "Alice"
description = "A cheerful baker."
first_message = ["Morning!"]

[[personas]]
id = "bob"
name = "Bob"
aliases = [{bob_alias}]
description = "A grumpy blacksmith."
first_message = ["Hmph."]

[[bots]]
id = "tavern"
platform = "telegram"
personas = ["alice", "bob"]

[bots.scene]
{scene}
"""


@pytest.mark.parametrize(
    ("bob_alias", "scene", "needle"),
    [
        ('"Alice"', "", "Alice"),  # Bob answers to Alice's name
        ('"ALICE"', "", "Alice"),
        ('"Bob"', 'director_model = "claude-haiku-4-5"', "director"),  # ignored: rules
    ],
    ids=["alias-is-another-name", "alias-is-another-name-upper", "director-model-ignored"],
)
def test_f12_config_check_passes_a_cast_that_cannot_work(
    tmp_path: Path, bob_alias: str, scene: str, needle: str
) -> None:
    """docs: "config check shows scenes and names every mistake on one line". A cast where
    Bob's alias is Alice's name: every "Alice" would address both, a fact told to Alice be
    learned for Bob too, and Bob's line "Alice: ..." be taken for his own label. A
    director_model under director = "rules" would be ignored without a word. (The loader
    ``config check`` runs; tests/scenes/test_scene_config.py runs the command itself.)"""
    (tmp_path / "bots.toml").write_text(
        _CAST_TOML.format(bob_alias=bob_alias, scene=scene), encoding="utf-8"
    )
    with pytest.raises(ConfigError) as raised:
        load_settings(tmp_path / "bots.toml")
    assert any(needle in line for line in raised.value.problems), raised.value.problems


async def test_f13_ordinary_autonomous_chains_trip_the_breaker_and_mute_the_scene(
    store: BaseStore, clock: ManualClock
) -> None:
    """With autonomous = true every chain that runs to max_autonomous_turns (its normal end)
    is a "cap hit" (Scenes._talk_on -> _capped), and breaker_trips of them within an hour mute
    the scene (default 3 and 30 minutes): the fourth person to say hello in an hour gets
    silence, with no notice, though no runaway loop ever happened (the caps did their job)."""
    llm = answering()
    async with scene(  # type: ignore[attr-defined]
        store,
        clock,
        llm,
        strategy="list",
        max_speakers=1,
        autonomous=True,
        max_autonomous_turns=2,
        autonomous_delay_seconds=2.0,
    ) as h:
        for i in range(3):
            await group(h, f"hello #{i}", author=f"u{i}", name=f"Person {i}")
            await h.advance(30, step=3)
        assert len(said_by(h)) == 6
        await group(h, "Alice? anyone?", author="u9", name="Newcomer")
        await h.advance(60, step=3)
        assert len(said_by(h)) > 6, "the scene went silent: muted by its own autonomy cap"


# -- 7. the real process -----------------------------------------------------------------------


@pytest.mark.timeout(120)
async def test_f14_real_process_sends_bobs_line_inside_alices(tmp_path: Path) -> None:
    """``python -m bot run`` on the fake Bot API and the fake Messages API: the model writing
    Alice's line goes on as Bob with a fullwidth colon (as models do in CJK chats) and as a
    markdown quote; both go out in Alice's message on Telegram."""
    from tests.adapters.test_telegram_e2e import _env, personabot_run
    from tests.fakes.messages_api import CannedReply, FakeMessagesAPI
    from tests.scenes.test_scene_sigkill import TOKEN as KILL_TOKEN
    from tests.scenes.test_scene_sigkill import _asks, _config

    chat = TgChat.supergroup(-1001000000391, "Tavern")
    async with FakeTelegramAPI() as telegram, FakeMessagesAPI(reply_text="Mm.") as claude:
        telegram.add_bot(KILL_TOKEN, "tavern_bot")
        claude.answer_when(
            lambda r: _asks("Alice", r),
            CannedReply("Fresh bread!\nBob\uff1a Stale, like you.\n> Bob: And burnt."),
        )
        claude.answer_when(lambda r: _asks("Bob", r), CannedReply("Hmph."))
        url = f"sqlite:///{tmp_path / 'bots.sqlite3'}"
        config = _config(tmp_path, telegram.base_url, claude.base_url, url)
        env = _env(TG_TOKEN=KILL_TOKEN, ANTHROPIC_API_KEY="sk-test-e2e")

        def lines() -> list[str]:
            return [c.visible_text for c in telegram.sent_messages(KILL_TOKEN, chat.id)]

        async with personabot_run(tmp_path, config, env):
            await telegram.wait_for(lambda: telegram.polls_started(KILL_TOKEN), within=40)
            telegram.push_message(KILL_TOKEN, chat, ANN, "good morning, Alice and Bob")
            await telegram.wait_for(lambda: len(lines()) >= 2, within=30, what="two lines")
    alice = lines()[0]
    assert alice.startswith("Alice: ")
    assert "Stale" not in alice and "burnt" not in alice, alice
