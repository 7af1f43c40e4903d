"""Personas that speak (docs/voices.md): whether a reply is spoken, and its synthesis.

The turn kernel asks for the voice message of a recorded reply only (bot/runtime/turn.py
``_spoken``), so the final check holds as for text: a generation discarded or cut for newer
input, or fenced, is never synthesised, let alone sent. Synthesis runs before the send is
claimed: a crash meanwhile leaves the outbox row unsent, and recovery sends its text.

Nothing here may lose a reply: a synthesis that fails, raises (a plugin's bug), takes longer
than ``timeout_seconds`` (on the injected clock) or answers something that is not the audio
asked for gives None, and the reply goes out as text. A reply longer than ``max_chars`` is not
synthesised at all. What a synthesis cost is charged like a model call (purpose ``speech``,
the characters spoken as its output count, priced per million characters) to the people the
reply answers, in proportion to what they wrote (bot/core/shares.py), toward their limits.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from bot.core.clock import Clock
from bot.core.errors import SpeechFailed, StoreError
from bot.core.events import ConversationKey, StoredMessage, VoiceMessage
from bot.core.llm import Price, Usage
from bot.core.ports import Outlet
from bot.core.shares import split
from bot.core.speech import (
    Synthesizer,
    VoiceOutlet,
    VoiceRequest,
    audio_problem,
    ogg_opus_duration,
)
from bot.core.tasks import within
from bot.metrics import Metrics
from bot.store.contracts import UsageStore

log = logging.getLogger("personabot.voice")

#: The usage purpose of a synthesis (``/stats``, ``model_usage.purpose``).
PURPOSE: Final = "speech"
_LINK = re.compile(r"\[([^\[\]\n]+)\]\([^\s()]+\)")
_MARKS = re.compile(r"```[\w+#.-]*|[*`~]+|^\s{0,3}(?:#{1,6}|>)\s*", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class VoicePolicy:
    """When and how one persona speaks (``[personas.voice]``, read by the composition root)."""

    request: VoiceRequest
    when: Literal["voice-notes", "always"] = "voice-notes"
    timeout_seconds: float = 20.0
    max_chars: int = 1000
    show_text: bool = True
    #: Dollars per million characters (None: the cost is unknown, recorded without one).
    price_per_million_chars: float | None = None


@dataclass(frozen=True, slots=True)
class PersonaVoice:
    """A persona's voice: its policy and the synthesizer that speaks it."""

    policy: VoicePolicy
    synthesizer: Synthesizer


def speakable(text: str) -> str:
    """The reply as it is read aloud: Markdown marks dropped (a link reads as its label)."""
    return _MARKS.sub("", _LINK.sub(r"\1", text)).strip()


class Voices:
    """The voices of this process's personas, by persona id."""

    def __init__(
        self,
        *,
        voices: Mapping[str, PersonaVoice],
        store: UsageStore,
        clock: Clock,
        metrics: Metrics,
    ) -> None:
        self._voices = dict(voices)
        self._store = store
        self._clock = clock
        self._metrics = metrics

    def speaks(
        self,
        persona: str,
        messages: Sequence[StoredMessage],
        outlet: Outlet,
        conversation: ConversationKey,
    ) -> bool:
        """Whether the reply to ``messages`` is to be spoken: the persona has a voice, the
        outlet sends voice messages into this chat, and a message of the turn was a voice or
        video note (or the voice speaks ``always``). Known before the model is asked, so the
        turn shows no text preview (docs/voices.md#streaming)."""
        voice = self._voices.get(persona)
        if voice is None or not isinstance(outlet, VoiceOutlet):
            return False
        if not outlet.sends_voice(conversation):
            return False
        return voice.policy.when == "always" or any(m.was_voice for m in messages)

    async def speak(
        self, persona: str, text: str, conversation: ConversationKey, by: Mapping[str, int]
    ) -> VoiceMessage | None:
        """The recorded reply ``text`` spoken, or None: the reply goes out as text (too long,
        failed, too slow, not audio). Charged to ``by`` (author id -> weight) when the server
        produced it (a timeout included: the server may have spoken it all the same)."""
        voice = self._voices.get(persona)
        if voice is None:
            return None
        policy = voice.policy
        said = speakable(text)
        if not said or len(said) > policy.max_chars:
            log.info(
                "%s: reply of %d characters not spoken (max_chars %d); sent as text",
                conversation,
                len(said),
                policy.max_chars,
            )
            self._count(conversation, "too_long")
            return None
        try:
            speech = await within(
                self._clock,
                policy.timeout_seconds,
                voice.synthesizer.synthesize(said, policy.request),
            )
        except TimeoutError:
            log.warning(
                "%s: speech took longer than %g s; the reply goes as text",
                conversation,
                policy.timeout_seconds,
            )
            self._count(conversation, "timeout")
            await self._charge(conversation, policy, len(said), by)
            return None
        except SpeechFailed as exc:
            log.warning("%s: speech failed (%s); the reply goes as text", conversation, exc)
            self._count(conversation, "failed")
            return None
        except Exception:
            # A plugin's synthesizer with a bug: never the reply's loss.
            log.exception("%s: the synthesizer raised; the reply goes as text", conversation)
            self._count(conversation, "failed")
            return None
        await self._charge(conversation, policy, len(said), by)
        problem = audio_problem(speech.data, policy.request.format)
        if problem is not None:
            log.warning("%s: %s; the reply goes as text", conversation, problem)
            self._count(conversation, "failed")
            return None
        duration = speech.duration
        if duration is None and policy.request.format == "opus":
            duration = ogg_opus_duration(speech.data)
        self._count(conversation, "spoken")
        return VoiceMessage(speech.data, speech.media_type, duration, policy.show_text)

    async def _charge(
        self,
        conversation: ConversationKey,
        policy: VoicePolicy,
        characters: int,
        by: Mapping[str, int],
    ) -> None:
        """One synthesis as a call of purpose ``speech``: the characters are its output,
        priced per million; a store fault is logged, never the reply's loss."""
        per_million = policy.price_per_million_chars
        price = None if per_million is None else Price(input=0.0, output=per_million)
        usage = Usage(output_tokens=characters)
        labels = self._metrics.labels(conversation)
        self._metrics.model_calls.labels(*labels, PURPOSE).inc()
        if price is not None:
            self._metrics.cost.labels(*labels).inc(price.cost(usage))
        try:
            await self._store.record_usage(
                conversation,
                PURPOSE,
                policy.request.model,
                split(usage, by),
                self._clock.now(),
                price=price,
            )
        except StoreError as exc:
            log.error("%s: the cost of speech was not recorded: %s", conversation, exc)

    def _count(self, conversation: ConversationKey, outcome: str) -> None:
        self._metrics.speech.labels(*self._metrics.labels(conversation), outcome).inc()
