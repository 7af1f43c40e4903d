"""Scenes: several personas of one bot speaking in one conversation (docs/scenes.md).

The plain types a scene is made of (the cast, its rules) and the director's deterministic
rules, as pure functions: who a human message addresses, and who speaks next. Everything
else (generation, the final check before each line, caps kept in the store) is the runtime's
(bot/runtime/scenes.py); memory uses :func:`addressed` to learn a fact only for the persona
it was told to (memory/extraction.py).

Rules, in order (docs/scenes.md#director):
1. a reply to a persona's message addresses that persona;
2. a whole-word mention of a cast member's name or alias (``@`` allowed) addresses it;
3. the addressed speak first, in that order; the scene's strategy may add others:
   ``natural`` (each other member joins with its talkativeness as chance; when nobody was
   addressed and nobody joined, one member chosen by talkativeness speaks), ``pooled`` (one
   member who has not spoken since the last human message, when nobody was addressed),
   ``list`` (every member in cast order) or ``manual`` (only the addressed);
4. nobody speaks twice in a row unless addressed; nobody speaks twice in one plan;
5. at most ``room`` speakers (the scene's per-turn cap, its remaining autonomy and its
   hourly budget, whichever is smallest).
Chance is drawn from a generator seeded by the turn, so a retried turn plans the same.
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from bot.core.media import Quote

Strategy = Literal["natural", "pooled", "list", "manual"]


@dataclass(frozen=True, slots=True)
class CastMember:
    """One persona of a scene: its id, the names people call it by, how readily it joins."""

    id: str
    name: str
    aliases: tuple[str, ...] = ()
    # 0..1: the chance that it joins a conversation it was not addressed in (``natural``).
    talkativeness: float = 0.5

    @property
    def names(self) -> tuple[str, ...]:
        """Its name and aliases (blank ones left out)."""
        return tuple(n for n in (self.name, *self.aliases) if n.strip())


@dataclass(frozen=True, slots=True)
class SceneRules:
    """A scene's cast and the rules that end its loops (docs/scenes.md#loops)."""

    cast: tuple[CastMember, ...]
    strategy: Strategy = "natural"
    # Speakers per human turn at most (K).
    max_speakers: int = 2
    # Persona lines without a human in between: only when enabled, and then at most
    # ``max_autonomous_turns`` persona lines (every one counts) until a human writes.
    autonomous: bool = False
    max_autonomous_turns: int = 4
    # Seconds between two autonomous lines (a human may write in between).
    autonomous_delay: float = 5.0
    # Persona lines of one scene per rolling hour at most.
    max_lines_per_hour: int = 60
    # Caps hit within an hour before the scene is muted, and for how long.
    breaker_trips: int = 3
    mute_seconds: float = 1800.0
    # The model director's model and provider (None: the rules alone choose).
    director_model: str | None = None
    director_provider: str = "default"

    def member(self, persona: str | None) -> CastMember | None:
        """The cast member of this persona id (None: not in the cast)."""
        return next((m for m in self.cast if m.id == persona), None)

    def others(self, persona: str) -> tuple[CastMember, ...]:
        """Every cast member but ``persona``."""
        return tuple(m for m in self.cast if m.id != persona)


@dataclass(frozen=True, slots=True)
class SceneState:
    """A scene's state in one conversation (migration 21): when its mute ends (None: not
    muted), the times of the caps it hit, its last plan (JSON: who spoke and why)."""

    muted_until: float | None = None
    caps: tuple[float, ...] = ()
    last_plan: str | None = None

    def muted(self, now: float) -> bool:
        """Whether the scene is muted now."""
        return self.muted_until is not None and now < self.muted_until


@dataclass(frozen=True, slots=True)
class Pick:
    """One planned speaker and why the director chose it (the console shows the reason)."""

    persona: str
    reason: str


@functools.lru_cache(maxsize=256)
def _patterns(cast: tuple[CastMember, ...]) -> tuple[tuple[str, re.Pattern[str]], ...]:
    """Each member's whole-word name pattern (compiled once per cast)."""
    return tuple((m.id, _name_pattern(m.names)) for m in cast if m.names)


def _name_pattern(names: Sequence[str]) -> re.Pattern[str]:
    """Any of the names as a whole word, optionally after ``@`` (longest first, so that a
    name containing another one wins)."""
    spelled = "|".join(re.escape(n.strip()) for n in sorted(names, key=len, reverse=True))
    return re.compile(rf"(?<![\w@.])@?(?:{spelled})(?![\w@])", re.IGNORECASE)


#: What is not speech to anyone: code (fenced or inline) and web addresses, with or without a
#: scheme (``https://bob.example.com``, ``example.org/wiki/Bob``, ``www.bob.com``).
_NOT_SPEECH: Final = re.compile(
    r"```.*?```|`[^`\n]*`|\b[a-z][a-z0-9+.-]*://\S+|\bwww\.\S+|\b[\w-]+(?:\.[\w-]+)+/\S*",
    re.IGNORECASE | re.DOTALL,
)


def named(text: str, cast: Sequence[CastMember]) -> tuple[str, ...]:
    """Cast members whose name or alias the text mentions as a whole word, in order of
    first mention (``@Bob``, ``bob,`` and ``BOB`` name Bob; ``Bobby`` does not; nor does a
    name inside code or a web address)."""
    text = _NOT_SPEECH.sub(lambda m: " " * len(m.group()), text)
    found: list[tuple[int, str]] = []
    for persona, pattern in _patterns(tuple(cast)):
        match = pattern.search(text)
        if match is not None:
            found.append((match.start(), persona))
    return tuple(persona for _, persona in sorted(found))


def header_of(text: str, cast: Sequence[CastMember]) -> str | None:
    """The cast member whose name header starts a message we posted (``Alice: ...`` as
    Telegram renders ``**Alice:**``, ``**Alice:** ...`` as Discord shows it)."""
    head = text.lstrip().lstrip("*_ ").split("\n", 1)[0]
    for member in cast:
        for name in member.names:
            spelled = re.escape(name.strip())
            if re.match(rf"{spelled}[*_]*\s*:", head, re.IGNORECASE):
                return member.id
    return None


def replied_to(quote: Quote | None, cast: Sequence[CastMember]) -> str | None:
    """The cast member whose message ``quote`` replies to (or quotes part of): only our own
    message counts (a person named "Alice" is not the persona). Its author when the platform shows
    the persona as the author (a webhook, a persona's own bot account), else its header."""
    if quote is None or quote.origin not in ("reply", "quote") or not quote.from_bot:
        return None
    author = quote.author.strip().casefold()
    for member in cast:
        if author and author in (n.strip().casefold() for n in member.names):
            return member.id
    return header_of(quote.text, cast)


def addressed(text: str, quote: Quote | None, cast: Sequence[CastMember]) -> tuple[str, ...]:
    """Cast members a message addresses: the one it replies to first, then those it names."""
    first = replied_to(quote, cast)
    ordered = ((first,) if first else ()) + named(text, cast)
    return tuple(dict.fromkeys(ordered))


def plan(
    rules: SceneRules,
    *,
    addressed: Sequence[str],
    last_speaker: str | None,
    spoken_since_human: Collection[str],
    room: int,
    rng: random.Random,
    human_turn: bool,
    previous: str | None = None,
) -> tuple[Pick, ...]:
    """Who speaks, in order (rules 3-5 of the module docstring). ``last_speaker``: the
    persona of the transcript's last line (None: a person's); ``human_turn``: the plan
    answers human messages (else it continues a conversation between personas, where a
    strategy never forces a speaker: a chain ends when nobody takes it up); ``previous``:
    the persona that spoke last in the conversation (``list`` goes on after it, so that a
    cap below the cast's size still lets everyone speak in turn)."""
    picks: list[Pick] = []
    for persona in dict.fromkeys(addressed):
        if rules.member(persona) is not None:
            picks.append(Pick(persona, "addressed"))
    taken = {p.persona for p in picks}
    eligible = [m for m in rules.cast if m.id not in taken and m.id != last_speaker]
    picks += _fill(
        rules, _after(eligible, rules, previous), picks, spoken_since_human, rng, human_turn
    )
    return tuple(picks[: max(0, room)])


def _after(eligible: list[CastMember], rules: SceneRules, previous: str | None) -> list[CastMember]:
    """The eligible in cast order, starting after ``previous`` (round robin)."""
    member = rules.member(previous)
    if member is None:
        return eligible
    at = rules.cast.index(member)
    order = {m.id: (i - at - 1) % len(rules.cast) for i, m in enumerate(rules.cast)}
    return sorted(eligible, key=lambda m: order[m.id])


def _fill(
    rules: SceneRules,
    eligible: list[CastMember],
    picks: Sequence[Pick],
    spoken_since_human: Collection[str],
    rng: random.Random,
    human_turn: bool,
) -> list[Pick]:
    """The strategy's speakers after the addressed ones."""
    if not eligible or rules.strategy == "manual":
        return []
    if rules.strategy == "list":
        return [Pick(m.id, "list") for m in eligible]
    if rules.strategy == "pooled":
        if picks:
            return []
        fresh = [m for m in eligible if m.id not in spoken_since_human]
        if not fresh and not human_turn:
            return []  # everyone had their say since the human: the chain ends
        chosen = rng.choice(fresh or eligible)
        return [Pick(chosen.id, "pooled: has not spoken yet" if fresh else "pooled")]
    shuffled = list(eligible)
    rng.shuffle(shuffled)
    joined = [
        Pick(m.id, f"talkativeness {m.talkativeness:g}")
        for m in shuffled
        if rng.random() < m.talkativeness
    ]
    if joined or picks or not human_turn:
        return joined
    weights = [max(m.talkativeness, 0.01) for m in eligible]
    chosen = rng.choices(eligible, weights=weights)[0]
    return [Pick(chosen.id, "chosen by talkativeness")]


def seeded(*parts: object) -> random.Random:
    """A generator seeded by these parts (a turn's session and version): the same turn
    plans the same speakers when it is retried."""
    return random.Random(":".join(str(p) for p in parts))
