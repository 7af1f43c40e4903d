"""Personas that speak, through the App's runtime on both stores, a manual clock and a fake
speech server (docs/voices.md): a voice note is answered with a voice message whose text is
the transcript's; a synthesis that fails or is too slow sends the text; a generation that
newer input made stale is never synthesised; what speech costs counts toward the person's
limits; a plugin's synthesizer that raises loses nothing."""

from __future__ import annotations

import pytest

from bot.app import App
from bot.config import Secrets, VoiceSettings
from bot.core.clock import ManualClock
from bot.core.events import UserKey
from bot.core.speech import Speech, VoiceRequest
from bot.runtime.limits import LimitPolicy
from bot.store.base import BaseStore
from tests.backends import StoreFactory
from tests.fakes.llm import GatedLLM
from tests.fakes.speech_api import FakeSpeechAPI
from tests.harness import eventually, harness
from tests.voices.helpers import DM, VoiceRecordingOutlet, text, voice_note, voiced_persona


async def _transcript(store: BaseStore) -> list[tuple[str, str]]:
    session = await store.current_session(DM)
    assert session is not None
    return [(m.role, m.text) for m in await store.messages(session.key)]


async def test_a_voice_note_is_answered_with_a_voice_message_whose_text_is_recorded(
    store: BaseStore, clock: ManualClock
) -> None:
    llm = GatedLLM(answer=lambda r: "Of course, *smiles* see you at noon.")
    outlet = VoiceRecordingOutlet(clock)
    async with FakeSpeechAPI(api_key="sk-voice-test") as api:
        persona = voiced_persona(api.url, api_key_env="TTS_KEY", voice="nova", speed=1.25)
        environ = {"TTS_KEY": "sk-voice-test"}
        async with harness(store, clock, llm, outlet=outlet, persona=persona, environ=environ) as h:
            await voice_note(h)
            await h.advance(2)
            await eventually(lambda: bool(outlet.replies), "the reply")
            await h.advance(1)
            await text(h, "and a typed question?")
            await h.advance(2)
            await eventually(lambda: len(outlet.replies) == 2, "the second reply")
    (spoken,) = outlet.spoken()  # the typed message got text only
    assert spoken.text == "Of course, *smiles* see you at noon."
    voice = spoken.voice_message
    assert voice is not None and voice.audio.startswith(b"OggS")
    assert voice.media_type == "audio/ogg" and voice.with_text
    assert voice.duration == pytest.approx(len("Of course, smiles see you at noon.") * 0.06)
    ((_, plain),) = [r for r in outlet.replies if r[1].voice_message is None]
    assert plain.text == "Of course, *smiles* see you at noon."
    (call,) = api.calls
    assert call.authorization == "Bearer sk-voice-test"
    assert call.body == {
        "model": "gpt-4o-mini-tts",
        "voice": "nova",
        "input": "Of course, smiles see you at noon.",  # read aloud without Markdown marks
        "response_format": "opus",
        "speed": 1.25,
    }
    assert ("assistant", "Of course, *smiles* see you at noon.") in await _transcript(store)


async def test_a_failed_synthesis_sends_the_text_and_charges_nothing(
    store: BaseStore, clock: ManualClock
) -> None:
    llm = GatedLLM(answer=lambda r: "I heard you.")
    outlet = VoiceRecordingOutlet(clock)
    async with FakeSpeechAPI() as api:
        api.fail_next(status=500)
        api.not_audio_next()  # the next one answers 200 with JSON: no audio either
        persona = voiced_persona(api.url, price_per_million_chars=15.0)
        async with harness(store, clock, llm, outlet=outlet, persona=persona) as h:
            for n in (1, 2):
                await voice_note(h)
                await h.advance(2)
                await eventually(lambda n=n: len(outlet.replies) == n, "a reply")
                await h.advance(1)
    assert outlet.texts() == ["I heard you.", "I heard you."]
    assert outlet.spoken() == []
    assert len(api.calls) == 2
    stats = await store.usage_since(0.0)
    assert [row for row in stats.by_purpose if row[0] == "speech"] == []


async def test_a_synthesis_slower_than_the_timeout_sends_the_text(
    store: BaseStore, clock: ManualClock
) -> None:
    llm = GatedLLM(answer=lambda r: "Sorry, one moment.")
    outlet = VoiceRecordingOutlet(clock)
    async with FakeSpeechAPI() as api:
        api.hang_next()
        persona = voiced_persona(api.url, timeout_seconds=15)
        async with harness(store, clock, llm, outlet=outlet, persona=persona) as h:
            await voice_note(h)
            await h.advance(2)
            await eventually(api.arrived.is_set, "the synthesis to start")
            await h.advance(14)
            assert outlet.replies == []  # still waiting for the voice, within the timeout
            await h.advance(2)
            await eventually(lambda: bool(outlet.replies), "the text reply")
    assert outlet.texts() == ["Sorry, one moment."]
    assert outlet.spoken() == []


@pytest.mark.parametrize("cut_stale", [True, False], ids=["cut", "final-check"])
async def test_a_generation_made_stale_by_newer_input_is_never_synthesised(
    store: BaseStore, clock: ManualClock, cut_stale: bool
) -> None:
    llm = GatedLLM(clock=clock, generation=3.0, answer=lambda r: f"answer {len(r.messages)}")
    outlet = VoiceRecordingOutlet(clock)
    async with FakeSpeechAPI() as api:
        persona = voiced_persona(api.url)
        async with harness(
            store, clock, llm, outlet=outlet, persona=persona, cut_stale=cut_stale
        ) as h:
            await voice_note(h)
            await h.advance(2.5)  # the turn started: the model writes for 3 s
            assert llm.calls == 1
            await text(h, "wait, one more thing")
            await h.advance(10)
            await eventually(lambda: bool(outlet.replies), "the reply")
            await h.advance(5)
    assert llm.calls == 2
    (reply,) = outlet.replies
    assert reply[1].voice_message is not None  # the turn still holds the voice note
    # One synthesis: of the reply that was recorded, never of the stale generation's answer.
    assert api.inputs() == [reply[1].text]


async def test_speech_counts_toward_the_persons_money_limit(
    store: BaseStore, clock: ManualClock
) -> None:
    """A cent per character: the spoken reply spends the day's 20 cents, the model's tokens
    (a few thousandths of a cent) would not; the person's next message gets the notice."""
    answer = "Here is a long, thoughtful spoken answer."  # 41 characters: $0.41
    llm = GatedLLM(answer=lambda r: answer)
    outlet = VoiceRecordingOutlet(clock)
    limits = LimitPolicy(user_dollars_per_day=0.20, message="limit reached until {until}")
    async with FakeSpeechAPI() as api:
        persona = voiced_persona(api.url, price_per_million_chars=10_000.0)
        async with harness(store, clock, llm, outlet=outlet, persona=persona, limits=limits) as h:
            await voice_note(h)
            await h.advance(2)
            await eventually(lambda: bool(outlet.replies), "the spoken reply")
            await h.advance(1)
            await text(h, "and now?")
            await h.advance(2)
            await eventually(lambda: len(outlet.replies) == 2, "the second answer")
    assert outlet.spoken()[0].text == answer
    assert outlet.texts()[1].startswith("limit reached until")
    assert llm.calls == 1
    spent = await store.cost_since(UserKey("telegram", "42"), 0.0)
    assert spent == pytest.approx(0.41, abs=0.01)


class _Broken:
    """A plugin's synthesizer with a bug."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def synthesize(self, text: str, voice: VoiceRequest) -> Speech:
        self.asked.append(text)
        raise KeyError("a bug")


async def test_a_plugin_synthesizer_that_raises_loses_nothing(
    store: BaseStore, clock: ManualClock
) -> None:
    broken = _Broken()
    made: list[VoiceSettings] = []

    def register(app: App) -> None:
        def factory(config: VoiceSettings, secrets: Secrets) -> _Broken:
            made.append(config)
            return broken

        app.synthesizer("mytts", factory)

    llm = GatedLLM(answer=lambda r: "still here")
    outlet = VoiceRecordingOutlet(clock)
    persona = voiced_persona("", provider="mytts", when="always", options={"room": "studio"})
    async with harness(store, clock, llm, outlet=outlet, persona=persona, extend=register) as h:
        await text(h, "hello")
        await h.advance(2)
        await eventually(lambda: bool(outlet.replies), "the reply")
    assert broken.asked == ["still here"]  # "always": a typed message is spoken too
    assert outlet.texts() == ["still here"] and outlet.spoken() == []
    assert made[0].options == {"room": "studio"}


async def test_a_reply_longer_than_max_chars_goes_as_text_unsynthesised(
    store: BaseStore, clock: ManualClock
) -> None:
    llm = GatedLLM(answer=lambda r: "A reply far longer than twenty characters.")
    outlet = VoiceRecordingOutlet(clock)
    async with FakeSpeechAPI() as api:
        persona = voiced_persona(api.url, max_chars=20, price_per_million_chars=15.0)
        async with harness(store, clock, llm, outlet=outlet, persona=persona) as h:
            await voice_note(h)
            await h.advance(2)
            await eventually(lambda: bool(outlet.replies), "the reply")
    assert outlet.texts() == ["A reply far longer than twenty characters."]
    assert outlet.spoken() == [] and api.calls == []


async def test_a_crash_while_speaking_leaves_the_reply_to_recovery_as_text(
    stores: StoreFactory, clock: ManualClock
) -> None:
    """The reply is recorded, its voice still being made when the process "dies": another
    process's recovery finds the row never claimed and sends its text; the first process's
    late send finds the row claimed and sends nothing. One reply, the text, one synthesis."""
    llm = GatedLLM(answer=lambda r: "I was about to say this out loud.")
    first, second = VoiceRecordingOutlet(clock), VoiceRecordingOutlet(clock)
    async with FakeSpeechAPI() as api, stores.new() as a, stores.new() as b:
        api.hang_next()
        persona = voiced_persona(api.url, timeout_seconds=15)
        async with harness(a, clock, llm, outlet=first, persona=persona, holder="dying") as h:
            await voice_note(h)
            await h.advance(2)
            await eventually(api.arrived.is_set, "the synthesis to start")
            async with harness(
                b, clock, llm, outlet=second, persona=persona, holder="restarted"
            ) as other:
                assert await other.pipeline.recover_outbox(older_than=clock.now() + 1) == 1
            await h.advance(16)
    assert second.texts() == ["I was about to say this out loud."]
    assert second.spoken() == [] and first.replies == []
    assert len(api.calls) == 1
