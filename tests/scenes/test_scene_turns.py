"""docs/scenes.md: several personas of one bot in one group, through the wired runtime on a
manual clock (real store, queue, pipeline, router; the model is a test double whose answer
depends on which persona its prompt asks for). Every test runs on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence

from bot.config import PersonaSettings, TelegramBotSettings
from bot.config.scenes import SceneSettings
from bot.core.clock import ManualClock
from bot.core.events import ConversationKey, SessionKey, UserKey
from bot.core.llm import ModelRequest, TextBlock
from bot.core.media import Quote
from bot.llm.offline import OfflineLLM
from bot.runtime.access import AccessPolicy
from bot.runtime.director import DIRECTOR_SYSTEM
from bot.store.base import BaseStore
from tests.bot.test_outbound import DyingOutlet
from tests.fakes.llm import GatedLLM
from tests.fakes.outlet import RecordingOutlet
from tests.harness import BOT, Harness, harness

GROUP = ConversationKey("telegram", "-100", None, BOT)


def persona(pid: str, name: str, about: str, talk: float = 1.0, **kw: object) -> PersonaSettings:
    return PersonaSettings(
        id=pid,
        name=name,
        description=about,
        first_message=[f"Hi, I'm {name}."],
        model="test-model",
        talkativeness=talk,
        **kw,  # type: ignore[arg-type]
    )


ALICE = persona("alice", "Alice", "A cheerful baker.")
BOB = persona("bob", "Bob", "A grumpy blacksmith.", aliases=["Bobby"])
CAROL = persona("carol", "Carol", "A quiet poet.")
CAST = (ALICE, BOB, CAROL)
_SPEAKER = re.compile(r'Write the next line of "([^"]+)" only')


def scene_bot(**rules: object) -> TelegramBotSettings:
    return TelegramBotSettings(
        platform="telegram",
        id=BOT,
        personas=[p.id for p in CAST],
        scene=SceneSettings(**rules),  # type: ignore[arg-type]
    )


def speaker(request: ModelRequest) -> str:
    """The persona the request asks to speak (the last block of the scene prompt)."""
    last = request.messages[-1].blocks[-1]
    assert isinstance(last, TextBlock)
    found = _SPEAKER.search(last.text)
    assert found is not None, last.text
    return found.group(1)


def answering(text: str = "{name} here.") -> GatedLLM:
    return GatedLLM(answer=lambda r: text.format(name=speaker(r)))


def scene(store: BaseStore, clock: ManualClock, llm: GatedLLM, **rules: object) -> object:
    access = rules.pop("access", None)
    return harness(
        store,
        clock,
        llm,
        persona=ALICE,
        cast=CAST,
        bots=[scene_bot(**rules)],
        memory_llm=OfflineLLM(),
        access=access,  # type: ignore[arg-type]
    )


def lines(h: Harness) -> list[str]:
    return h.outlet.texts(GROUP)


def said_by(h: Harness) -> list[str]:
    """Who spoke each line sent into the group, by its header."""
    out = []
    for text in lines(h):
        found = re.match(r"\*\*([^*]+):\*\* ", text)
        assert found is not None, text
        out.append(found.group(1))
    return out


async def group(h: Harness, *texts: str, author: str = "u1", name: str = "Sasha") -> None:
    for text in texts:
        await h.say(GROUP, text, author=author, name=name, private=False)


async def test_a_burst_of_five_gets_at_most_k_lines_each_from_another_persona(
    store: BaseStore, clock: ManualClock
) -> None:
    llm = answering()
    async with scene(store, clock, llm, max_speakers=2) as h:  # type: ignore[attr-defined]
        await group(h, "hi all", "so", "I have news", "big news", "I'm moving to Lisbon")
        await h.advance(30, step=3)
        spoke = said_by(h)
        assert len(spoke) == 2 and len(set(spoke)) == 2
        assert llm.calls == 2  # one burst, one call per line
        first = llm.requests[0].messages[-1]
        assert "I'm moving to Lisbon" in first.text and "hi all" in first.text
        # The second speaker read the first one's line, attributed to it.
        assert f'"{spoke[0]}" (character' in llm.requests[1].messages[-1].text


async def test_a_name_makes_that_persona_speak_first_and_a_reply_addresses_its_speaker(
    store: BaseStore, clock: ManualClock
) -> None:
    llm = answering()
    async with scene(store, clock, llm, strategy="manual") as h:  # type: ignore[attr-defined]
        await h.say(GROUP, "@bobby what do you think?", private=False, triggers=False)
        await h.advance(30, step=3)
        assert said_by(h) == ["Bob"]
        quote = Quote("reply", "tavern_bot", "Alice: fresh bread today", from_bot=True)
        await h.say(GROUP, "really?", private=False, triggers=False, quote=quote)
        await h.advance(30, step=3)
        assert said_by(h) == ["Bob", "Alice"]
        # Chatter that names nobody asks nobody (manual): kept as context only.
        await h.say(GROUP, "nice weather", private=False, triggers=False)
        await h.advance(30, step=3)
        assert said_by(h) == ["Bob", "Alice"]


async def test_a_human_message_between_two_speakers_drops_the_second(
    store: BaseStore, clock: ManualClock
) -> None:
    llm = GatedLLM(clock=clock, generation=5.0, answer=lambda r: f"{speaker(r)} speaks.")
    async with scene(store, clock, llm, strategy="list", max_speakers=2) as h:  # type: ignore[attr-defined]
        await group(h, "hello everyone")
        await h.advance(1.5 + 5.0 + 1.0)  # the first line is out, the second is being written
        assert said_by(h) == ["Alice"]
        assert llm.calls == 2
        await group(h, "wait, Carol, one question")
        await h.advance(60, step=3)
        assert 1 in llm.cancelled  # Bob's line was cut when the person wrote
        spoke = said_by(h)
        assert spoke[0] == "Alice" and spoke[1] == "Carol"  # the new turn, Carol addressed
        texts = [m.text for m in await h.store.history(SessionKey(GROUP, 1), 50)]
        # Nothing written before the person's question came after it.
        assert texts.index("wait, Carol, one question") == 2


async def test_an_autonomous_chain_stops_at_exactly_the_cap_until_a_human_writes(
    store: BaseStore, clock: ManualClock
) -> None:
    llm = answering()
    async with scene(  # type: ignore[attr-defined]
        store,
        clock,
        llm,
        strategy="list",
        autonomous=True,
        max_autonomous_turns=4,
        autonomous_delay_seconds=2.0,
    ) as h:
        await group(h, "tell me a story, all of you")
        await h.advance(30, step=3)
        assert len(lines(h)) == 4
        assert all(a != b for a, b in zip(said_by(h), said_by(h)[1:], strict=False))
        await h.advance(3600, step=60)
        assert len(lines(h)) == 4  # silent until a human writes
        await group(h, "and then?")
        await h.advance(30, step=3)
        assert len(lines(h)) == 8


async def test_what_a_speaker_writes_for_others_never_goes_out(
    store: BaseStore, clock: ManualClock
) -> None:
    # A person's label first, then another persona's: each is cut on its own.
    ventriloquist = '{name}: Sure thing!\n"Sasha" (user "u1"):\n  I agree\nBob: No way.'
    llm = answering(ventriloquist)
    async with scene(store, clock, llm, strategy="manual") as h:  # type: ignore[attr-defined]
        await group(h, "Alice, can you bake a cake?")
        await h.advance(30, step=3)
        assert lines(h) == ["**Alice:** Sure thing!"]
        request = llm.requests[0]
        assert "\nBob:" in request.stop and '\n"Sasha" (' in request.stop
        for text in lines(h):
            for other in ("Bob", "Carol", "Sasha"):
                assert f"{other}:" not in text and f'"{other}" (' not in text


async def test_a_fact_told_to_alice_is_known_by_alice_only(
    store: BaseStore, clock: ManualClock
) -> None:
    llm = answering()
    async with scene(store, clock, llm, strategy="manual") as h:  # type: ignore[attr-defined]
        await group(h, "Alice, I'm afraid of spiders")
        await h.advance(30, step=3)
        assert await h.memory.extraction.extract(SessionKey(GROUP, 1), 0)
        record = await h.memory.user_memory(UserKey("telegram", "u1"))
        assert [(i.value, i.persona) for i in record.items] == [("spiders", "alice")]
        await group(h, "Bob, Alice: what do you know about me?")
        await h.advance(30, step=3)
        prompts = {speaker(r): r.messages[-1].blocks[-1] for r in llm.requests[1:]}
        assert set(prompts) == {"Bob", "Alice"}
        alice, bob = prompts["Alice"], prompts["Bob"]
        assert isinstance(alice, TextBlock) and isinstance(bob, TextBlock)
        assert "spiders" in alice.text and "spiders" not in bob.text


async def test_an_admin_stops_the_scene_and_caps_trip_the_breaker(
    store: BaseStore, clock: ManualClock
) -> None:
    llm = answering()
    admins = AccessPolicy(admins=frozenset({"boss"}))
    async with scene(  # type: ignore[attr-defined]
        store,
        clock,
        llm,
        strategy="manual",
        max_lines_per_hour=2,
        breaker_trips=2,
        mute_minutes=60,
        access=admins,
    ) as h:
        await group(h, "/stop")  # not an admin
        assert "admins" in lines(h)[-1]
        await group(h, "/stop", author="boss", name="Boss")
        assert "muted" in lines(h)[-1]
        before = llm.calls
        await group(h, "Alice?")
        await h.advance(30, step=3)
        assert llm.calls == before  # muted: no line, nothing asked
        await group(h, "/stop off", author="boss", name="Boss")
        await group(h, "Alice?", "Bob?")
        await h.advance(30, step=3)
        assert llm.calls == before + 2  # the hourly cap (2 lines) is now reached
        await group(h, "Carol?")
        await h.advance(30, step=3)
        await group(h, "Carol??")
        await h.advance(30, step=3)
        assert llm.calls == before + 2  # two caps hit: muted for an hour
        await h.advance(3700, step=60)
        await group(h, "Carol, are you there?")
        await h.advance(30, step=3)
        assert llm.calls == before + 3


def _texts(requests: Sequence[ModelRequest]) -> list[str]:
    return [r.messages[-1].text for r in requests]


def directed(choice: str) -> GatedLLM:
    """Answers the director's call with ``choice``, and each speaker as itself."""

    def answer(request: ModelRequest) -> str:
        if request.system and request.system[0].text == DIRECTOR_SYSTEM:
            return choice
        return f"{speaker(request)} here."

    return GatedLLM(answer=answer)


async def test_the_model_director_chooses_among_the_cast_or_the_rules_decide(
    store: BaseStore, clock: ManualClock
) -> None:
    llm = directed('["carol"]')
    async with scene(store, clock, llm, strategy="pooled", director="model") as h:  # type: ignore[attr-defined]
        await group(h, "what a day")
        await h.advance(30, step=3)
        assert said_by(h) == ["Carol"]
        asked = llm.requests[0]
        assert asked.system[0].text == DIRECTOR_SYSTEM and "what a day" in asked.messages[0].text
        stats = await h.store.usage_since(0)
        assert "director" in {purpose for purpose, *_ in stats.by_purpose}
        # Named: the rules decide, no director call.
        before = llm.calls
        await group(h, "Bob, and you?")
        await h.advance(30, step=3)
        assert said_by(h)[-1] == "Bob" and llm.calls == before + 1


async def test_a_director_answer_outside_the_cast_falls_back_and_an_empty_one_is_silence(
    store: BaseStore, clock: ManualClock
) -> None:
    llm = directed('["dave", "alice"]')
    async with scene(store, clock, llm, strategy="pooled", director="model") as h:  # type: ignore[attr-defined]
        await group(h, "hello?")
        await h.advance(30, step=3)
        assert len(said_by(h)) == 1  # pooled: one of the cast, never "dave"
    quiet = directed("[]")
    async with scene(store, clock, quiet, strategy="natural", director="model") as h:  # type: ignore[attr-defined]
        await group(h, "(the people talk among themselves)")
        await h.advance(30, step=3)
        assert lines(h) == [] and quiet.calls == 1


async def test_a_line_cut_off_mid_send_by_a_crash_is_never_sent_blind_again(
    store: BaseStore, clock: ManualClock
) -> None:
    """A line may have gone out through a webhook or a persona's own account, which take no
    idempotency key: after a crash mid-send it is given up, even on a platform whose bot
    account would accept it again (Discord's nonce)."""
    dying = DyingOutlet(clock, idempotent_send=True)
    llm = answering()
    async with harness(
        store,
        clock,
        llm,
        persona=ALICE,
        cast=CAST,
        bots=[scene_bot(strategy="manual")],
        outlet=dying,
    ) as h:
        talking = asyncio.create_task(group(h, "Bob?"))
        await talking
        stepping = asyncio.create_task(h.advance(30))
        await asyncio.wait_for(dying.entered.wait(), 5)
        stepping.cancel()  # the process is gone
        await asyncio.gather(stepping, return_exceptions=True)
    restarted = RecordingOutlet(clock, idempotent_send=True)
    async with harness(
        store,
        clock,
        llm,
        persona=ALICE,
        cast=CAST,
        bots=[scene_bot(strategy="manual")],
        outlet=restarted,
    ) as h:
        assert await h.pipeline.recover_outbox(older_than=clock.now()) == 0
    assert restarted.replies == []
