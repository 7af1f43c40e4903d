"""A plugin's transcriber (app.transcriber): chosen by [transcription] provider, used for the
turn's voice notes, closed at exit; an unknown provider is a clear configuration error."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.app import App
from bot.config import Secrets, Settings, TranscriptionConfig
from bot.core.clock import ManualClock
from bot.core.errors import ConfigError
from bot.core.events import ConversationKey, Inbound
from bot.core.media import MediaRef
from bot.llm.offline import OfflineLLM
from tests.fakes.llm import GatedLLM
from tests.fakes.media_source import FakeFiles, MediaOutlet
from tests.harness import PERSONA, settle


class Echo:
    """Transcribes audio bytes as their text; remembers being closed."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.closed = False

    async def transcribe(self, audio: bytes, *, filename: str, media_type: str) -> str:
        return f"{self.prefix}{audio.decode()}"

    async def aclose(self) -> None:
        self.closed = True


def _settings(tmp_path: Path, provider: str) -> Settings:
    return Settings.model_validate(
        {
            "storage": {"url": f"sqlite:///{tmp_path / 'db.sqlite3'}"},
            "transcription": {"provider": provider, "options": {"prefix": "heard: "}},
            "queue": {"debounce_seconds": 0.5, "max_wait_seconds": 1.0},
        }
    )


async def test_a_plugins_transcriber_transcribes_the_voice_notes_and_is_closed(
    tmp_path: Path,
) -> None:
    made: list[Echo] = []

    def factory(config: TranscriptionConfig, secrets: Secrets) -> Echo:
        made.append(Echo(str(config.options["prefix"])))
        return made[-1]

    clock = ManualClock(1000.0)
    files = FakeFiles(clock)
    files.files["v1"] = b"see you at noon"
    llm = GatedLLM()
    app = App(_settings(tmp_path, "echo"), Secrets({}), clock=clock, llm=llm)
    app.transcriber("echo", factory)
    outlet = MediaOutlet(clock, files)
    chat = ConversationKey("telegram", "7", None, "default")
    async with app.running({"default": (PERSONA, outlet)}) as rt:
        voice = MediaRef("voice", "voice message", ref="v1", media_type="audio/ogg", duration=2)
        await rt.router(Inbound(chat, "7", "Ann", "", "p1", media=(voice,)))
        for _ in range(30):
            await clock.advance(0.1)
            await settle(rt.store)
    assert llm.last_input() == "[voice message, transcribed] heard: see you at noon"
    assert made and made[0].closed


def test_an_unknown_transcription_provider_is_named_with_the_known_ones(tmp_path: Path) -> None:
    app = App(_settings(tmp_path, "nope"), Secrets({}), llm=OfflineLLM())
    with pytest.raises(ConfigError) as caught:
        app.prepare()
    assert "transcription.provider" in str(caught.value) and "openai" in str(caught.value)
