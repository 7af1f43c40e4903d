"""The optional model director of a scene (docs/scenes.md#director): one small model call
that chooses who speaks when the rules leave it open.

It is asked only when nobody was addressed and the strategy is one that chooses (natural,
pooled), and only by a scene that opts in (``director = "model"``). Its answer is a JSON list
of persona ids taken from the candidates it was given; an empty list (nobody should answer:
the people talk among themselves) is allowed. Anything else (an id it was not offered, a
failed call, text that is no JSON list) falls back to the rules: the director can narrow the
choice, never widen it, and never stall a turn. The call is charged like every other
(purpose ``director``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from bot.core.errors import ModelError
from bot.core.events import ConversationKey, StoredMessage
from bot.core.llm import BaseLLM, ChatMessage, ModelRequest, TextBlock
from bot.core.scenes import CastMember, Pick
from bot.runtime.usage import Accounting
from memory.quoting import data_json
from memory.scene import line_text

log = logging.getLogger("personabot.scenes")

#: Transcript lines the director reads (the newest).
DIRECTOR_LINES: Final = 12

DIRECTOR_SYSTEM: Final = (
    "You direct a group chat scene with several characters and people. Read the end of the "
    "conversation and decide which characters, if any, should say something next, most "
    "fitting first. Answer with a JSON list of character ids chosen only from the "
    'candidates, e.g. ["bob"]; answer [] when the people are talking among themselves and '
    "no character should speak. Answer with the JSON list only."
)


@dataclass(frozen=True, slots=True)
class DirectorModel:
    """Which model directs (a configured provider's name and the model)."""

    model: str
    provider: str


class Director:
    """Asks the model who speaks; None when it cannot say (the rules decide then)."""

    def __init__(self, *, llm: BaseLLM, accounting: Accounting) -> None:
        self._llm = llm
        self._accounting = accounting

    async def choose(
        self,
        conversation: ConversationKey,
        route: DirectorModel,
        candidates: Sequence[CastMember],
        transcript: Sequence[StoredMessage],
        room: int,
        by: Mapping[str, int],
    ) -> tuple[Pick, ...] | None:
        """Up to ``room`` speakers chosen by the model among ``candidates``, or None."""
        if not candidates or room <= 0:
            return ()
        request = director_request(route, candidates, transcript)
        try:
            result = await self._llm.complete(request)
        except ModelError as exc:
            log.warning("%s: the director's call failed (%s); the rules decide", conversation, exc)
            return None
        await self._accounting.charge(conversation, "director", result, by, route.model)
        chosen = parse_choice(result.text, [c.id for c in candidates])
        if chosen is None:
            log.warning(
                "%s: the director answered no list of candidates (%r); the rules decide",
                conversation,
                result.text[:200],
            )
            return None
        return tuple(Pick(persona, "the director chose") for persona in chosen[:room])


def director_request(
    route: DirectorModel, candidates: Sequence[CastMember], transcript: Sequence[StoredMessage]
) -> ModelRequest:
    """The director's one small request: the transcript's end and the candidates."""
    names = {c.id: c.name for c in candidates}
    tail = transcript[-DIRECTOR_LINES:]
    lines = "\n".join(line_text(m, names, 500) for m in tail)
    offered = "\n".join(data_json({"id": c.id, "name": c.name}) for c in candidates)
    text = (
        f"<transcript>\n{lines}\n</transcript>\n<candidates>\n{offered}\n</candidates>\n"
        "Who speaks next? A JSON list of ids."
    )
    return ModelRequest(
        model=route.model,
        provider=route.provider,
        system=(TextBlock(DIRECTOR_SYSTEM),),
        messages=(ChatMessage.of("user", text),),
        max_tokens=60,
        temperature=0.0,
    )


def parse_choice(text: str, offered: Sequence[str]) -> list[str] | None:
    """The ids of a JSON list answer, in order, without repeats; None when the answer is no
    JSON list, or names anyone who was not offered."""
    start, end = text.find("["), text.rfind("]")
    if start < 0 or end < start:
        return None
    try:
        value = json.loads(text[start : end + 1])
    except ValueError:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return None
    if any(v not in offered for v in value):
        return None
    return list(dict.fromkeys(value))
