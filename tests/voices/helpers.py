"""What the voice tests share: a persona with a voice, an outlet that sends voice messages,
and a person's voice note arriving through the router."""

from __future__ import annotations

import itertools
from contextlib import AbstractAsyncContextManager
from typing import Any

from bot.config import VoiceSettings
from bot.core.events import ConversationKey, Inbound, Reply
from bot.core.media import MediaRef
from tests.fakes.outlet import RecordingOutlet
from tests.harness import BOT, PERSONA, Harness, settle

DM = ConversationKey("telegram", "42", None, BOT)
_IDS = itertools.count(50_000)


class VoiceRecordingOutlet(RecordingOutlet):
    """A recording outlet whose platform takes voice messages (bot.core.speech.VoiceOutlet)."""

    def sends_voice(self, conversation: ConversationKey) -> bool:
        return True

    def recording(self, conversation: ConversationKey) -> AbstractAsyncContextManager[None]:
        return self.typing(conversation)

    def spoken(self) -> list[Reply]:
        """Replies that went out as voice messages."""
        return [r for _, r in self.replies if r.voice_message is not None]


def voiced_persona(url: str, **voice: Any) -> Any:
    """The harness persona with ``[personas.voice]`` (validated, as the TOML would be)."""
    settings = VoiceSettings.model_validate({"url": url, "voice": "alloy", **voice})
    return PERSONA.model_copy(update={"voice": settings})


async def voice_note(h: Harness, *, author: str = "42", seconds: float = 3.0) -> None:
    """A voice note from ``author`` in the DM (no transcriber: the persona is told so)."""
    note = MediaRef("voice", "voice message", ref="v1", media_type="audio/ogg", duration=seconds)
    await h.router(
        Inbound(DM, author, "Ann", "", platform_message_id=f"p{next(_IDS)}", media=(note,))
    )
    await settle(h.store)


async def text(h: Harness, words: str, *, author: str = "42") -> None:
    """A typed message from ``author`` in the DM."""
    await h.router(Inbound(DM, author, "Ann", words, platform_message_id=f"p{next(_IDS)}"))
    await settle(h.store)
