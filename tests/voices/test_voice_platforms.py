"""Spoken replies on the platforms, end to end: real aiogram against the fake Bot API and real
discord.py against the fake Discord, the wired runtime and the fake speech server
(docs/voices.md#platforms). A voice note is answered with ``sendVoice`` (Ogg Opus, its
duration, the text as the caption) or an ``.ogg`` attachment under the text; a chat that
refuses voice messages gets the text; the text is the transcript's either way."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from adapters.telegram.adapter import TelegramAdapter
from bot.app.build import runtime
from bot.app.build.voices import voice_policy
from bot.config import PersonaSettings, VoiceSettings
from bot.core.llm import ModelRequest
from bot.llm.speech import OpenAISpeech
from bot.runtime.voice import PersonaVoice
from tests.adapters.test_discord import TOKEN as DISCORD_TOKEN
from tests.adapters.test_discord import _adapter as discord_adapter
from tests.adapters.test_discord import _endpoints_released
from tests.adapters.test_telegram import ANN, BOT, PERSONA, TOKEN, USERNAME, Rig, _settings
from tests.fakes.discord_api import FakeDiscord
from tests.fakes.llm import GatedLLM
from tests.fakes.speech_api import FakeSpeechAPI
from tests.fakes.telegram_api import FakeTelegramAPI, TgChat

__all__ = ["_endpoints_released"]  # Discord's autouse fixture applies here too

PRIVATE = TgChat.private(ANN)
ANSWER = "I *love* that song too. Shall we sing it tomorrow?"
pytestmark = pytest.mark.timeout(60)


def _voices(persona: PersonaSettings, speech: OpenAISpeech) -> dict[str, PersonaVoice]:
    assert persona.voice is not None
    return {persona.id: PersonaVoice(voice_policy(persona.voice), speech)}


def _answer(request: ModelRequest) -> str:
    return ANSWER


def _actions(api: FakeTelegramAPI) -> list[str]:
    return [str(c.params.get("action")) for c in api.chat_actions(TOKEN)]


@contextlib.asynccontextmanager
async def telegram(tmp_path: Path, api: FakeTelegramAPI, tts: FakeSpeechAPI) -> AsyncIterator[Rig]:
    """The adapter polling the fake Bot API on the wired runtime, its persona with a voice."""
    persona = PERSONA.model_copy(
        update={"voice": VoiceSettings(url=tts.url, voice="shimmer", price_per_million_chars=15)}
    )
    settings = _settings(tmp_path, debounce=0.3, max_wait=2.0)
    adapter = TelegramAdapter(bot_key=BOT, token=TOKEN, api_server=api.base_url)
    llm = GatedLLM(answer=_answer)
    async with (
        OpenAISpeech(tts.url, api_key=None) as speech,
        runtime(
            settings,
            llm=llm,
            adapters={BOT: (persona, adapter)},
            voices=_voices(persona, speech),
        ) as rt,
    ):
        task = asyncio.create_task(adapter.run(rt.router))
        try:
            await api.wait_for(lambda: task.done() or api.polls_started(TOKEN), what="polling")
            yield Rig(api, adapter, rt, llm)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await adapter.aclose()


@pytest.fixture
async def api() -> AsyncIterator[FakeTelegramAPI]:
    async with FakeTelegramAPI() as server:
        server.add_bot(TOKEN, USERNAME, "Mira")
        yield server


async def test_telegram_answers_a_voice_note_with_a_voice_message(
    tmp_path: Path, api: FakeTelegramAPI
) -> None:
    async with FakeSpeechAPI() as tts, telegram(tmp_path, api, tts) as rig:
        tts.gate = asyncio.Event()
        api.push_message(TOKEN, PRIVATE, ANN, None, extra={"voice": api.voice(duration=4)})
        # While the voice is made, Ann sees "recording a voice message".
        await api.wait_for(lambda: "record_voice" in _actions(api), what="record_voice")
        tts.gate.set()
        await api.wait_for(lambda: api.sent_voices(TOKEN), what="the voice message")
        await rig.quiet(rig.key(PRIVATE))
        stored = await rig.stored_texts(rig.key(PRIVATE))
        rig.say(PRIVATE, ANN, "typed, this time")
        await api.wait_for(rig.replies, what="the typed message's text reply")
    (call,) = api.sent_voices(TOKEN)
    upload = call.params["voice"]
    assert upload.filename == "voice.ogg" and upload.data.startswith(b"OggS")
    assert call.params["caption"] == "I <i>love</i> that song too. Shall we sing it tomorrow?"
    assert int(call.params["duration"]) == 3  # 48 characters at 0.06 s, rounded up
    assert tts.inputs() == ["I love that song too. Shall we sing it tomorrow?"]
    assert stored[-1] == ANSWER
    assert rig.replies() == ["I love that song too. Shall we sing it tomorrow?"]


async def test_telegram_sends_the_text_where_voice_messages_are_refused(
    tmp_path: Path, api: FakeTelegramAPI
) -> None:
    api.voice_forbidden.add(ANN.id)
    async with FakeSpeechAPI() as tts, telegram(tmp_path, api, tts) as rig:
        api.push_message(TOKEN, PRIVATE, ANN, None, extra={"voice": api.voice()})
        await api.wait_for(rig.replies, what="the text instead")
        await rig.quiet(rig.key(PRIVATE))
    assert [c.status for c in api.calls_of("sendVoice", TOKEN)] == [400]
    assert rig.replies() == ["I love that song too. Shall we sing it tomorrow?"]


async def test_discord_answers_a_voice_message_with_an_ogg_attachment(tmp_path: Path) -> None:
    persona = PersonaSettings(
        id="mira",
        name="Mira",
        system="You are Mira.",
        first_message=["Hi."],
        voice=VoiceSettings(url="http://127.0.0.1:1/v1", voice="alloy"),  # replaced below
    )
    async with (
        FakeDiscord(token=DISCORD_TOKEN) as fake,
        FakeSpeechAPI() as tts,
        OpenAISpeech(tts.url, api_key=None) as speech,
    ):
        ada = fake.add_user("Ada")
        fake.add_guild("Cafe")
        settings = _settings(tmp_path, debounce=0.2, max_wait=2.0).model_copy(
            update={"personas": [persona]}
        )
        adapter = discord_adapter(fake)
        try:
            async with runtime(
                settings,
                llm=GatedLLM(answer=_answer),
                adapters={"mira": (persona, adapter)},
                voices=_voices(persona, speech),
            ) as rt:
                before = fake.sessions
                task = asyncio.create_task(adapter.run(rt.router))
                try:
                    await fake.wait_identified(after=before)
                    dm = fake.dm(ada)
                    await fake.voice(dm, ada, b"OggS hello there")
                    (message,) = await fake.wait_for_bot_messages(dm, 1)
                finally:
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
        finally:
            await adapter.aclose()
    assert message["content"] == ANSWER
    (attachment,) = message["attachments"]
    assert attachment["filename"] == "voice.ogg"
    (post,) = [p for p in fake.posts if p.channel_id == dm]
    ((name, data),) = post.files
    assert name == "voice.ogg" and data.startswith(b"OggS")
    assert FakeDiscord.pings(post.body) == set()
    assert tts.inputs() == ["I love that song too. Shall we sing it tomorrow?"]
