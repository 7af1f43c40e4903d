"""``[[personas]]``: who a bot is, with its lorebook (docs/personas.md), and the persona of a
file that names none."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from pydantic import Field, field_validator, model_validator

from bot.config.fields import Section, shown
from bot.config.initiatives import InitiativeSettings
from bot.config.limits import QueueSettings
from bot.config.llm import ModelChoice
from bot.config.memory import MemorySettings
from bot.config.voices import VoiceSettings

if TYPE_CHECKING:
    from memory.pin import PersonaPin


class LoreEntrySettings(Section):
    """``[[personas.lorebook.entries]]``: world info injected when its keys appear in the
    recent messages (docs/personas.md#lorebooks; Character Card V2/V3 ``character_book``)."""

    content: str
    keys: list[str] = Field(default_factory=list)
    secondary_keys: list[str] = Field(default_factory=list)
    # With secondary keys: one of them must match too (the cards' "selective").
    selective: bool = False
    # Keys are regular expressions (V3 ``use_regex``).
    regex: bool = False
    case_sensitive: bool = False
    # Always injected, keys or not.
    constant: bool = False
    enabled: bool = True
    # Order in the layer: lower first.
    insertion_order: int = 100
    # Over the budget, the lowest priority is dropped first.
    priority: int = 10
    name: str = ""
    # The card's entry id and fields personabot does not use: kept for export.
    id: int | str | None = None
    extensions: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _within_limits(self) -> LoreEntrySettings:
        from memory.lorebook import entry_problems

        # The first problem only: pydantic takes one error per validator (the others show
        # once it is fixed); each entry over a limit gets its own line.
        if problems := entry_problems(self):
            raise ValueError(problems[0])
        return self


class LorebookSettings(Section):
    """``[personas.lorebook]``: a persona's world info (docs/personas.md#lorebooks)."""

    # How many recent messages (the new turn included) are scanned for keys.
    scan_depth: int = Field(default=4, ge=1, le=200)
    # The injected layer at most; entries over it are dropped by priority, and logged.
    token_budget: int = Field(default=500, ge=1, le=100_000)
    name: str = ""
    entries: list[LoreEntrySettings] = Field(default_factory=list)
    extensions: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _not_too_many(cls, data: Any) -> Any:
        from memory.lorebook import too_many_entries

        # Counted before the entries are validated one by one: 200,000 of them are refused
        # at once, not after building 200,000 models.
        entries = data.get("entries") if isinstance(data, dict) else None
        if isinstance(entries, list) and (problem := too_many_entries(len(entries))):
            raise ValueError(problem)
        return data

    @model_validator(mode="after")
    def _within_limits(self) -> LorebookSettings:
        from memory.lorebook import book_problems

        if problems := book_problems(self.entries):
            raise ValueError(problems[0])
        return self


class PersonaSettings(Section):
    """A persona: who the bot is. The fields after ``first_message`` are those of a
    Character Card (``personabot persona import``, docs/personas.md)."""

    id: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    name: str = Field(min_length=1)
    # Other names people call it by in a scene ("@Al", "Ally"): docs/scenes.md#director.
    aliases: list[str] = Field(default_factory=list)
    # In a scene: the chance (0..1) that it joins a conversation it was not addressed in.
    talkativeness: float = Field(default=0.5, ge=0, le=1)
    # In a scene on Discord: the picture its lines are posted with (an https URL).
    avatar_url: str | None = Field(default=None, pattern=r"^https://\S+$")
    # The framing instructions ("" = personabot's default framing, built from the fields
    # below: a card's empty system_prompt).
    system: str = ""
    first_message: list[str] = Field(min_length=1)
    # {{char}} when set (V3 nickname); else name.
    nickname: str | None = None
    description: str = ""
    personality: str = ""
    scenario: str = ""
    # Example dialogue (a card's mes_example), pinned with the persona.
    example_dialogue: str = ""
    # Instructions after the conversation window (post_history_instructions).
    post_history: str = ""
    # Other openings to choose from at session start (alternate_greetings), and openings
    # for group chats only (group_only_greetings).
    greetings: list[str] = Field(default_factory=list)
    group_greetings: list[str] = Field(default_factory=list)
    lorebook: LorebookSettings | None = None
    # The imported card (JSON, relative to the config file): what personabot does not map
    # (extensions, creator notes, tags, ...) is kept there for ``persona export``.
    card: str | None = None
    model: str = "claude-sonnet-5-5"
    # Who answers: a name of [llm.providers] ("default" or unset: [llm]'s provider).
    provider: str | None = None
    # Answers when the model is unavailable (overloaded, 5xx, timeout), never when it
    # rejected the request: {model = "...", provider = "..."}.
    fallback: ModelChoice | None = None
    max_tokens: int = Field(default=1024, ge=1, le=64000)
    temperature: float | None = Field(default=None, ge=0, le=1)
    memory: MemorySettings | None = None
    queue: QueueSettings | None = None
    refusal_message: str | None = Field(default=None, min_length=1)
    initiative: InitiativeSettings = InitiativeSettings()
    # Replies spoken as voice messages (docs/voices.md); None: text only.
    voice: VoiceSettings | None = None
    # The language of personabot's own texts (command answers, notices, menus): a shipped
    # catalog, or "auto" (the person's platform language, else English): docs/i18n.md.
    language: str = "en"

    @field_validator("language")
    @classmethod
    def _shipped_language(cls, value: str) -> str:
        from bot.core.i18n import AUTO, SHIPPED, catalog_language

        if value.strip().lower() == AUTO:
            return AUTO
        language = catalog_language(value)
        if language is None:
            raise ValueError(
                f"{value!r}: no catalog for this language; use one of {', '.join(SHIPPED)} "
                f'or "{AUTO}" (docs/i18n.md says how to add one)'
            )
        return language

    @field_validator("refusal_message")
    @classmethod
    def _refusal_shown(cls, text: str | None) -> str | None:
        return None if text is None else shown(text)

    def pin(self, *, lorebook: bool = True) -> PersonaPin:
        """The persona's pinned layer, as every prompt of it is built (memory/pin.py);
        without ``lorebook``, a pin without one (nothing compiled: to measure the pin)."""
        from bot.core.llm import DEFAULT_PROVIDER, ModelRoute
        from memory.lorebook import Lorebook, LoreEntry
        from memory.pin import PersonaPin

        # Field by field on purpose: memory gets frozen plain types, never settings
        # (docs/architecture.md#layers), so PersonaPin and LoreEntry repeat these fields.
        book = self.lorebook if lorebook else None
        return PersonaPin(
            name=self.name,
            system=self.system,
            first_message=tuple(self.first_message),
            model=self.model,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            provider=self.provider or DEFAULT_PROVIDER,
            fallback=None
            if self.fallback is None
            else ModelRoute(
                self.fallback.provider or self.provider or DEFAULT_PROVIDER, self.fallback.model
            ),
            nickname=self.nickname,
            description=self.description,
            personality=self.personality,
            scenario=self.scenario,
            example_dialogue=self.example_dialogue,
            post_history=self.post_history,
            greetings=tuple(self.greetings),
            group_greetings=tuple(self.group_greetings),
            lorebook=None
            if book is None or not book.entries
            else Lorebook(
                entries=tuple(
                    LoreEntry(
                        content=e.content,
                        keys=tuple(e.keys),
                        secondary_keys=tuple(e.secondary_keys),
                        selective=e.selective,
                        regex=e.regex,
                        case_sensitive=e.case_sensitive,
                        constant=e.constant,
                        enabled=e.enabled,
                        insertion_order=e.insertion_order,
                        priority=e.priority,
                        name=e.name,
                    )
                    for e in book.entries
                ),
                scan_depth=book.scan_depth,
                token_budget=book.token_budget,
            ),
        )

    @model_validator(mode="after")
    def _has_framing(self) -> PersonaSettings:
        if not (self.system.strip() or self.description.strip() or self.personality.strip()):
            raise ValueError("system: required when description and personality are empty")
        return self


#: The persona of a file without ``[[personas]]``.
DEFAULT_PERSONA: Final = PersonaSettings(
    id="companion",
    name="Mira",
    system=(
        "You are Mira, a warm, curious companion. You speak plainly, ask one question at a "
        "time, and remember what the person told you."
    ),
    first_message=["Hi, I'm Mira. What's on your mind today?"],
)
