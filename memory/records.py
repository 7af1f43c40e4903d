"""What is remembered: the rolling summary (session scope) and user memory (user scope).

Plain frozen records with JSON round-trips and the pure merge and trim rules:
- a new single-valued fact replaces the old one (a new job replaces the old job);
- list facts merge without duplicates (case-insensitive);
- every item keeps the ids of the messages it came from and its scope: the private chat, or
  the group it was said in; prompts show an item only in its scope (see ``visible``);
- records stay under a token budget: oldest episodic events go first.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, Literal

from memory.quoting import data_json
from memory.tokens import estimate_tokens

Section = Literal["semantic", "emotional", "episodic"]
SECTIONS: Final[tuple[Section, ...]] = ("semantic", "emotional", "episodic")
# Fields that hold one value: a new value replaces the old one.
SINGLE_VALUED: Final = frozenset(
    {"name", "age", "occupation", "location", "pronouns", "communication_style", "relationship"}
)


#: ``UserMemory.visible(persona=EVERY_PERSONA)``: what every persona was told (a person's own
#: view of their record: /memory). Persona ids never contain it (bot/config/personas.py).
EVERY_PERSONA: Final = "*"


class RecordError(ValueError):
    """A stored or model-produced record could not be read."""


@dataclass(frozen=True, slots=True)
class MemoryItem:
    """One remembered fact about a person."""

    section: Section
    field: str
    value: str
    sources: tuple[int, ...] = ()
    private: bool = True
    mentioned_at: float = 0.0
    # The group chat (platform chat id) it was said in; None for a private chat. Items
    # stored before scopes existed are read as private: they never leak into a group.
    scope: str | None = None
    # The persona it was told to in a scene (docs/scenes.md#memory): only that persona is
    # shown it. None: learned outside a scene, or said to the whole scene.
    persona: str | None = None

    def known_by(self, persona: str | None) -> bool:
        """Whether the persona writing (None: the bot's, outside any scene) may know it."""
        return self.persona is None or persona in (self.persona, EVERY_PERSONA)

    def shown_in(self, chat: str | None, *, private_in_groups: bool, across_groups: bool) -> bool:
        """Whether the item may appear in this chat (``chat`` None: a private chat)."""
        if self.private or self.scope is None:
            return chat is None or private_in_groups
        return across_groups or chat == self.scope

    def same_as(self, other: MemoryItem) -> bool:
        """Duplicate check: same section, field and value (case and spacing ignored)."""
        return (
            self.section == other.section
            and self.field == other.field
            and self.persona == other.persona
            and _norm(self.value) == _norm(other.value)
        )


@dataclass(frozen=True, slots=True)
class UserMemory:
    """A person's long-term memory record."""

    items: tuple[MemoryItem, ...] = ()
    forgotten_at: float | None = None  # messages before this are never learned from again

    def section(self, name: Section) -> tuple[MemoryItem, ...]:
        """Items of one section in stored order."""
        return tuple(i for i in self.items if i.section == name)

    def visible(
        self,
        *,
        chat: str | None,
        private_in_groups: bool = False,
        across_groups: bool = False,
        persona: str | None = None,
    ) -> UserMemory:
        """Only the items that may be shown in this chat: ``chat`` is the group's chat id, or
        None for a private chat. Private facts appear in private chats (and in groups only
        with ``private_in_groups``); a group's facts only in that group (in every chat with
        ``across_groups``). What a persona was told in a scene only that ``persona`` sees.
        """
        return replace(
            self,
            items=tuple(
                i
                for i in self.items
                if i.known_by(persona)
                and i.shown_in(
                    chat, private_in_groups=private_in_groups, across_groups=across_groups
                )
            ),
        )

    def to_json(self) -> str:
        """Stable JSON for the store."""
        return json.dumps(
            {
                "forgotten_at": self.forgotten_at,
                "items": [
                    {
                        "section": i.section,
                        "field": i.field,
                        "value": i.value,
                        "sources": list(i.sources),
                        "private": i.private,
                        "mentioned_at": i.mentioned_at,
                        "scope": i.scope,
                        **({"persona": i.persona} if i.persona is not None else {}),
                    }
                    for i in self.items
                ],
            },
            ensure_ascii=False,
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> UserMemory:
        """Parse a stored record."""
        try:
            data = json.loads(text)
            items = tuple(
                MemoryItem(
                    section=_section(raw["section"]),
                    field=str(raw["field"]),
                    value=str(raw["value"]),
                    sources=tuple(int(s) for s in raw.get("sources", ())),
                    # Without a scope (older records) an item counts as private.
                    private=bool(raw.get("private", True)) or raw.get("scope") is None,
                    mentioned_at=float(raw.get("mentioned_at", 0.0)),
                    scope=None if raw.get("scope") is None else str(raw["scope"]),
                    persona=None if raw.get("persona") is None else str(raw["persona"]),
                )
                for raw in data.get("items", ())
            )
            forgotten = data.get("forgotten_at")
            return cls(items=items, forgotten_at=None if forgotten is None else float(forgotten))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise RecordError(f"unreadable user memory record: {exc}") from exc

    def prompt_line(self, user_id: str, display_name: str) -> str:
        """The record as one JSON line of the ``<user_memory>`` block (see memory/quoting.py).

        Facts are grouped by field in stored order; recent events keep only their values.
        """
        person: dict[str, object] = {"name": display_name, "user_id": user_id}
        for name in SECTIONS:
            items = self.section(name)
            if not items:
                continue
            if name == "episodic":
                person["recent_events"] = [i.value for i in items]
                continue
            fields: dict[str, list[str]] = {}
            for i in items:
                fields.setdefault(i.field, []).append(i.value)
            person[name] = fields
        return data_json(person)

    def render(self, display_name: str) -> str:
        """The record as text for the person themself (``/memory``, ``memory show``)."""
        lines = [f"About {display_name}:"]
        for name in SECTIONS:
            items = self.section(name)
            if not items:
                continue
            if name == "episodic":
                lines.append("  recent events: " + "; ".join(_told(i) for i in items))
            else:
                lines.append(f"  {name}: " + "; ".join(f"{i.field}: {_told(i)}" for i in items))
        return "\n".join(lines)


def _told(item: MemoryItem) -> str:
    """An item's value, with the persona it was told to in a scene (only that one knows it)."""
    return item.value if item.persona is None else f"{item.value} (told to {item.persona})"


def merge_memory(old: UserMemory, new_items: Iterable[MemoryItem]) -> UserMemory:
    """Merge extracted items: single-valued fields replace, lists merge without duplicates."""
    items = list(old.items)
    for item in new_items:
        if any(existing.same_as(item) for existing in items):
            items = [
                replace(e, sources=tuple(dict.fromkeys(e.sources + item.sources)))
                if e.same_as(item)
                else e
                for e in items
            ]
            continue
        if item.field in SINGLE_VALUED and item.section != "episodic":
            items = [
                e
                for e in items
                if not (
                    e.section == item.section
                    and e.field == item.field
                    and e.persona == item.persona
                )
            ]
        items.append(item)
    return replace(old, items=tuple(items))


def trim_memory(record: UserMemory, budget_tokens: int, display_name: str = "user") -> UserMemory:
    """Drop the oldest episodic events, then the oldest other items, until under budget."""
    items = list(record.items)

    def size() -> int:
        return estimate_tokens(replace(record, items=tuple(items)).prompt_line("", display_name))

    while items and size() > budget_tokens:
        episodic = [i for i in items if i.section == "episodic"]
        pool = episodic or items
        oldest = min(pool, key=lambda i: i.mentioned_at)
        items.remove(oldest)
    return replace(record, items=tuple(items))


def forget_sources(record: UserMemory, message_ids: Sequence[int]) -> UserMemory:
    """Remove items learned only from these (deleted) messages."""
    gone = set(message_ids)
    kept = []
    for item in record.items:
        remaining = tuple(s for s in item.sources if s not in gone)
        if item.sources and not remaining:
            continue
        kept.append(replace(item, sources=remaining))
    return replace(record, items=tuple(kept))


# -- the rolling summary ----------------------------------------------------------------------

SUMMARY_FIELDS: Final = ("topics", "user_said", "open_threads", "preferences")


@dataclass(frozen=True, slots=True)
class Summary:
    """Structured summary of the messages that left the window, with the turns it covers."""

    first_turn: int
    last_turn: int
    topics: tuple[str, ...] = ()
    user_said: tuple[str, ...] = ()
    open_threads: tuple[str, ...] = ()
    preferences: tuple[str, ...] = ()

    def to_json(self) -> str:
        """Stable JSON for the store."""
        return json.dumps(
            {name: list(getattr(self, name)) for name in SUMMARY_FIELDS}, ensure_ascii=False
        )

    @classmethod
    def from_json(cls, text: str, first_turn: int, last_turn: int) -> Summary:
        """Parse a stored (or model-produced) summary body."""
        data = _object(text)
        return cls(first_turn, last_turn, **{n: _strings(data.get(n, ())) for n in SUMMARY_FIELDS})

    def render(self) -> str:
        """Prompt text of the summary: a header line, then the entries as one JSON line.

        Only non-empty fields are written, under keys that say what they hold; entries are
        JSON strings (see memory/quoting.py).
        """
        body = {
            key: list(getattr(self, name))
            for name, key in SUMMARY_PROMPT_KEYS.items()
            if getattr(self, name)
        }
        header = (
            f"Summary of turns {self.first_turn}-{self.last_turn} of this conversation, as JSON:"
        )
        return f"{header}\n{data_json(body)}"


# The summary's fields as the prompt names them (the stored names are short).
SUMMARY_PROMPT_KEYS: Final = {
    "topics": "topics",
    "user_said": "what_the_user_said_that_matters",
    "open_threads": "open_threads_and_promises",
    "preferences": "user_preferences_this_session",
}


def merge_summary(
    old: Summary | None,
    update: Mapping[str, Any],
    first_turn: int,
    last_turn: int,
    budget_tokens: int,
) -> Summary:
    """Carry earlier values forward verbatim, add new ones, drop only what ``remove`` names.

    The model proposes additions and removals; earlier key facts never drift because they
    are copied from the old record, not re-written by the model.
    """
    removed = {_norm(v) for v in _strings(update.get("remove", ()))}
    fields: dict[str, list[str]] = {}
    for name in SUMMARY_FIELDS:
        previous = [] if old is None else list(getattr(old, name))
        kept = [v for v in previous if _norm(v) not in removed]
        seen = {_norm(v) for v in kept}
        for value in _strings(update.get(name, ())):
            if _norm(value) not in seen and _norm(value) not in removed:
                kept.append(value)
                seen.add(_norm(value))
        fields[name] = kept
    start = first_turn if old is None else min(old.first_turn, first_turn)
    summary = Summary(start, last_turn, **{n: tuple(v) for n, v in fields.items()})
    return trim_summary(summary, budget_tokens)


def trim_summary(summary: Summary, budget_tokens: int) -> Summary:
    """Cut oldest topics, then threads, then preferences; what the user said goes last."""
    current = summary
    for name in ("topics", "open_threads", "preferences", "user_said"):
        while getattr(current, name) and estimate_tokens(current.render()) > budget_tokens:
            current = replace(current, **{name: getattr(current, name)[1:]})
    return current


def _object(text: str) -> dict[str, Any]:
    """The first JSON object in a text (models sometimes wrap JSON in prose or fences)."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        raise RecordError("no JSON object in the model's answer")
    try:
        data = json.loads(text[start : end + 1])
    except json.JSONDecodeError as exc:
        raise RecordError(f"malformed JSON: {exc.msg}") from exc
    if not isinstance(data, dict):
        raise RecordError("the JSON is not an object")
    return data


def parse_object(text: str) -> dict[str, Any]:
    """Public form of the tolerant JSON-object reader."""
    return _object(text)


def _strings(raw: Any) -> tuple[str, ...]:
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list | tuple):
        raise RecordError(f"expected a list of strings, got {type(raw).__name__}")
    return tuple(str(v).strip() for v in raw if str(v).strip())


def _section(raw: Any) -> Section:
    if raw not in SECTIONS:
        raise RecordError(f"unknown section {raw!r}")
    section: Section = raw
    return section


def _norm(value: str) -> str:
    return " ".join(value.lower().split())
