"""A scene speaker's prompt: a pure function from the scene, what is remembered and the
transcript to one request (docs/scenes.md#prompt). No I/O.

Layout, stable first, so that every speaker of a scene and every turn after it reads the same
prefix from the provider's cache:

1. the scene: each cast member's short card and the rules of the scene -- breakpoint;
2. the rolling summary of the session -- breakpoint;
3. the transcript (history and the new human messages alike), one block per message, every
   line under its author's header (a person's ``"Sasha" (user "11"):``, a persona's
   ``"Bob" (character "bob"):``), the text indented, so nothing inside a message can pass
   for a header -- breakpoint on its last block: the next speaker's request only appends
   the line just written, and reads everything before it cached;
4. the speaker: its own pin (who it is), what it knows of the people here (long-term memory
   as this persona may see it), the gap notice, and "write X's next line, as X only".

Other personas' lines reach the speaker as attributed transcript, never as its own assistant
turns; its own earlier lines are attributed the same way, so the transcript is the same text
for every speaker.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

from bot.core.events import SessionKey, StoredMessage
from bot.core.llm import ChatMessage, ContentBlock, ModelRequest, TextBlock
from bot.core.scenes import CastMember, replied_to
from memory.assemble import (
    DATA_NOTE,
    Assembled,
    Budget,
    Participant,
    PersonaPin,
    memory_block,
    summary_block,
)
from memory.quoting import data_json, indented, tag_safe
from memory.records import Summary
from memory.tokens import estimate_tokens
from memory.turn import ShownImage, attributed, cut
from memory.voices import stop_sequences

SCENE_RULES: Final = (
    "Rules of the scene: each reply you write is one line of one character, the one named at "
    "the end. Never write lines, actions or words for another character or for a person, "
    "never start with a name or a speaker label, and stop when it would be someone else's "
    "turn to speak."
)


@dataclass(frozen=True, slots=True)
class ScenePrompt:
    """A speaker's request, and the names of the people in its transcript (the answer is
    trimmed at their labels too: memory/voices.py)."""

    assembled: Assembled
    people: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Card:
    """A cast member as the scene block shows it."""

    member: CastMember
    text: str


def card_of(member: CastMember, pin: PersonaPin, session: SessionKey | None = None) -> Card:
    """A member's card: who it is, its whole pinned framing (the same text for every speaker
    of the session, so it is read from the cache; bench/scenes.py measured a pin repeated
    uncached at the end of every request at 1.52x a single persona's cost per reply)."""
    return Card(member, pin.character(session))


def scene_block(cards: Sequence[Card]) -> str:
    """The scene layer: who is in the scene, then its rules (the same for every speaker)."""
    lines = [
        "This is a group chat where several characters and people talk together. The characters:"
    ]
    for card in cards:
        head = data_json({"name": card.member.name, "id": card.member.id})
        lines.append(f"<character>\n{head}\n{card.text}\n</character>" if card.text else head)
    return "<scene>\n" + "\n".join(lines) + f"\n{SCENE_RULES}\n</scene>"


def line_text(message: StoredMessage, names: Mapping[str, str], limit: int) -> str:
    """One transcript entry: a persona's line under its character header, a person's message
    under theirs (memory/turn.py)."""
    if message.role == "assistant":
        persona = message.persona or ""
        name = names.get(persona, persona or "narrator")
        header = f"{data_json(name)} (character {data_json(persona)}):"
        return f"{header}\n{indented(cut(message.text, limit))}"
    return attributed(_quoting_the_speaker(message, names), limit)


def _quoting_the_speaker(message: StoredMessage, names: Mapping[str, str]) -> StoredMessage:
    """A reply to a persona's line names that persona: on the bot's one account it is "your
    own message" (memory/content.py), which in a scene would tell every speaker it wrote the
    line it is asked about."""
    quote = message.quote
    if quote is None or not quote.from_bot:
        return message
    persona = replied_to(quote, [CastMember(pid, name) for pid, name in names.items()])
    if persona is None:
        return message
    named = replace(quote, author=names[persona], author_id=None, from_bot=False)
    return replace(message, quote=named)


def speaker_block(
    speaker: CastMember,
    memory_text: str | None,
    gap_notice: str | None,
    post: str | None = None,
) -> str:
    """The last block: who speaks now (its character above), what it knows of the people
    here, its after-history instructions, what to write."""
    name = data_json(speaker.name)
    parts = [f"You are {name}, the character {data_json(speaker.id)} described above."]
    if memory_text:
        parts.append(f"{DATA_NOTE}\n{memory_text}")
    if gap_notice:
        parts.append(f"<gap_notice>\n{tag_safe(gap_notice)}\n</gap_notice>")
    if post:
        parts.append(post)
    parts.append(
        f"Write the next line of {name} only, as {name} would say it now: no name prefix, "
        "nothing said by anyone else."
    )
    return "\n\n".join(parts)


def assemble_scene(
    *,
    cards: Sequence[Card],
    speaker: CastMember,
    pin: PersonaPin,
    transcript: Sequence[StoredMessage],
    budget: Budget,
    participants: Sequence[Participant] = (),
    summary: Summary | None = None,
    gap_notice: str | None = None,
    images: Mapping[int, ShownImage] | None = None,
    stop: tuple[str, ...] = (),
) -> Assembled:
    """The request of one speaker's line, under the token budget: the transcript's oldest
    messages go first, then the summary and the memory are cut; the scene, the speaker's pin
    and the newest message always stay."""
    images = images or {}
    names = {c.member.id: c.member.name for c in cards}
    scene = scene_block(cards)
    memory_text = memory_block(participants, budget.memory_tokens)
    summary_text = summary_block(summary, budget.summary_tokens)
    fixed = _cost(scene) + _cost(speaker_block(speaker, None, gap_notice))
    room = budget.prompt_tokens - fixed - _cost(memory_text) - _cost(summary_text)
    window = _fit(transcript, names, budget, room)
    used = sum(_cost(line_text(m, names, budget.max_input_chars)) for m in window)
    left = budget.prompt_tokens - fixed - used
    if summary_text and _cost(summary_text) + _cost(memory_text) > left:
        summary_text = summary_block(summary, max(0, left - _cost(memory_text)))
        if _cost(summary_text) + _cost(memory_text) > left:
            summary_text = None
    if memory_text and _cost(summary_text) + _cost(memory_text) > left:
        memory_text = None
    last = speaker_block(speaker, memory_text, gap_notice)
    system = [TextBlock(scene, cache=True)]
    if summary_text:
        system.append(TextBlock(f"{DATA_NOTE}\n{summary_text}", cache=True))
    blocks = _transcript_blocks(window, names, images, budget.max_input_chars)
    request = ModelRequest(
        model=pin.model,
        provider=pin.provider,
        fallback=pin.fallback,
        system=tuple(system),
        messages=(ChatMessage("user", (*blocks, TextBlock(last))),),
        max_tokens=pin.max_tokens,
        temperature=pin.temperature,
        layers=tuple(
            name
            for name, present in (
                ("scene", True),
                ("summary", summary_text is not None),
                (f"transcript({len(window)})", bool(window)),
                ("speaker", True),
                ("memory", memory_text is not None),
                ("gap", bool(gap_notice)),
            )
            if present
        ),
        stop=stop,
    )
    breakdown = (
        ("scene", _cost(scene)),
        ("summary", _cost(summary_text)),
        ("transcript", used),
        ("speaker", _cost(last) - _cost(memory_text)),
        ("memory", _cost(memory_text)),
    )
    return Assembled(request=request, breakdown=breakdown)


#: The transcript's oldest line moves by this many turns at a time: between two moves every
#: request starts the transcript with the same line, so its prefix is read from the cache
#: (moving it by one line a turn, as a budget-bound window does, rewrites it every time).
CHUNK_TURNS: Final = 8


def _fit(
    transcript: Sequence[StoredMessage], names: Mapping[str, str], budget: Budget, room: int
) -> list[StoredMessage]:
    """The newest messages that fit ``room`` (at most ``fold_at`` messages), starting at a turn
    that is a multiple of ``CHUNK_TURNS`` (the cache); the newest message always."""
    limit = budget.fold_at
    window = list(transcript)
    if not window or not limit:
        return window[-1:] if window and limit else []
    costs = [_cost(line_text(m, names, budget.max_input_chars)) for m in window]
    start, total = 0, sum(costs)
    while start < len(window) - 1 and (total > room or len(window) - start > limit):
        total -= costs[start]
        start += 1
    first = window[start].turn
    aligned = -(-first // CHUNK_TURNS) * CHUNK_TURNS if start else first
    while start < len(window) - 1 and window[start].turn < aligned:
        start += 1
    return window[start:]


def _transcript_blocks(
    window: Sequence[StoredMessage],
    names: Mapping[str, str],
    images: Mapping[int, ShownImage],
    limit: int,
) -> list[ContentBlock]:
    """One text block per message (its images in front), the last one a cache breakpoint."""
    out: list[ContentBlock] = []
    for message in window:
        out.extend(images[m.id].block for m in message.media if m.id in images)
        out.append(TextBlock(line_text(message, names, limit)))
    for i in range(len(out) - 1, -1, -1):
        block = out[i]
        if isinstance(block, TextBlock):
            out[i] = TextBlock(block.text, cache=True)
            break
    return out


def speaker_stops(
    cast: Sequence[CastMember], speaker: CastMember, people: Sequence[str]
) -> tuple[str, ...]:
    """The stop sequences of a speaker's request: the other cast members' and the people's
    name prefixes (memory/voices.py), cast members first."""
    others = [n for m in cast if m.id != speaker.id for n in m.names]
    return stop_sequences([*others, *people])


def people_in(transcript: Sequence[StoredMessage], limit: int = 8) -> list[tuple[str, str]]:
    """The people of the transcript, newest speaker first (id, name as last seen)."""
    seen: dict[str, str] = {}
    for message in reversed(transcript):
        if message.role == "user" and message.author_id not in seen:
            seen[message.author_id] = message.display_name
        if len(seen) >= limit:
            break
    return list(seen.items())


def _cost(text: str | None) -> int:
    return estimate_tokens(text) if text else 0
