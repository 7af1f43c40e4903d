"""Settings: one TOML file plus environment overrides, validated before anything connects.

Secrets (``ANTHROPIC_API_KEY``, bot tokens) are never read from the TOML: the file names the
environment variable (``token_env``) and :class:`Secrets` reads it.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from bot.core.agenda import QuietHours, ZoneError, zone_name
from bot.core.errors import ConfigError
from bot.core.redact import looks_like_env_name, url_secrets
from bot.core.visible import has_visible_text

if TYPE_CHECKING:
    from memory.pin import PersonaPin

DEFAULT_CONFIG_PATH = Path("personabot.toml")
# Platform ids may be written as TOML integers (Telegram) or strings; both mean the same id.
PlatformId = Annotated[str, BeforeValidator(lambda v: str(v) if isinstance(v, int) else v)]
ENV_PREFIX = "PERSONABOT_"
#: A registry name (platform, model provider): letters, digits, ``_``, ``.`` and ``-``.
NAME_PATTERN: Final = r"^[A-Za-z0-9_.-]{1,64}$"
#: A plugin: a module path (``package.module``) or an entry point's name.
PluginName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")]


def _env_name(value: str) -> str:
    # The message never quotes the value: it may be the token itself, pasted by mistake.
    if not looks_like_env_name(value):
        raise ValueError(
            "must name an environment variable (letters, digits and _), and this value looks "
            "like a token: put the token in the environment and its variable's name here"
        )
    return value


#: The name of an environment variable that holds a secret (never the secret itself).
EnvName = Annotated[str, AfterValidator(_env_name)]


def _shown(text: str) -> str:
    """A message the bot sends: visible text, or "" for none (blank would be sent as is)."""
    if text and not has_visible_text(text):
        raise ValueError('only blank or invisible characters; write a message, or "" for none')
    return text


#: The token variable of a bot that names none, by built-in platform.
DEFAULT_TOKEN_VARIABLES: Final = {"telegram": "TELEGRAM_BOT_TOKEN", "discord": "DISCORD_BOT_TOKEN"}


#: Shorter secrets are not redacted as substrings (they would mangle every line).
MIN_SECRET: Final = 6


def listen_address(text: str) -> tuple[str, int]:
    """``host:port`` (an IPv6 host in brackets, ``[::1]:9464``) as (host, port); a ValueError
    that never quotes the text (a secret pasted into the wrong key, review 35a)."""
    host, _, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host or "[" in host or "]" in host or not port.isdigit() or int(port) > 65535:
        raise ValueError(
            "listen: expected host:port, e.g. 127.0.0.1:8080 (an IPv6 host in brackets: [::1]:8080)"
        )
    return host, int(port)


#: What the stores open (bot/app/build.py store()).
STORAGE_PREFIXES: Final = ("sqlite://", "postgresql://", "postgres://")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StorageSettings(_Section):
    """Where conversations are stored."""

    url: str = "sqlite:///personabot.sqlite3"
    busy_timeout_ms: int = Field(default=5000, ge=0)
    connect_timeout_seconds: float = Field(default=10.0, gt=0)
    min_pool_size: int = Field(default=1, ge=0)
    max_pool_size: int = Field(default=10, ge=1)

    @field_validator("url")
    @classmethod
    def _known_scheme(cls, url: str) -> str:
        # Checked with the file (config check), not when the store opens; the value is never
        # quoted: an API key pasted here was printed back in the summary (review 35a).
        if not url.startswith(STORAGE_PREFIXES) or url.rstrip("/") == "sqlite:":
            raise ValueError(
                "not a storage URL: use sqlite:///relative/path.sqlite3, sqlite:////absolute/path "
                "or postgresql://user@host:5432/dbname"
            )
        return url

    @model_validator(mode="after")
    def _pool_sizes(self) -> StorageSettings:
        if self.min_pool_size > self.max_pool_size:
            raise ValueError(
                f"min_pool_size ({self.min_pool_size}) must not exceed "
                f"max_pool_size ({self.max_pool_size})"
            )
        return self


class PriceSettings(_Section):
    """Dollars per million tokens of one model (cache write/read priced from input)."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)


DEFAULT_PRICES: dict[str, PriceSettings] = {
    "claude-opus-5-5": PriceSettings(input=5.0, output=25.0),
    "claude-sonnet-5-5": PriceSettings(input=3.0, output=15.0),
    "claude-haiku-5-5": PriceSettings(input=1.0, output=5.0),
}


class LLMSettings(_Section):
    """How the model is reached."""

    # A registered model provider: "anthropic", "offline" or one a plugin adds.
    provider: str = Field(default="anthropic", pattern=NAME_PATTERN)
    # Keys for a plugin's provider (it validates them); the built-in ones take none.
    options: dict[str, Any] = Field(default_factory=dict)
    base_url: str | None = None
    timeout_seconds: float = Field(default=60.0, gt=0)
    max_retries: int = Field(default=2, ge=0, le=10)
    retry_max_seconds: float = Field(default=60.0, gt=0)
    trouble_notice: str = "I'm having trouble thinking right now; I'll answer shortly."
    # Sent (and recorded) instead of a reply without text, e.g. stop_reason "refusal".
    refusal_message: str = Field(
        default="I'd rather not answer that. Shall we talk about something else?", min_length=1
    )
    # Sent when the model rejects a turn for good (e.g. "prompt is too long"); "" = silent.
    rejected_notice: str = (
        "Sorry, I couldn't answer your last message (it was refused as too long or "
        "malformed). It is kept; please write it again in shorter parts, or send /new to "
        "start over."
    )
    prices: dict[str, PriceSettings] = Field(default_factory=lambda: dict(DEFAULT_PRICES))

    @field_validator("trouble_notice", "rejected_notice", "refusal_message")
    @classmethod
    def _notices_shown(cls, text: str) -> str:
        return _shown(text)


class ToolSettings(_Section):
    """Bounds of the tool loop of one turn, of turn hooks and of plugin commands
    (bot/runtime/tools.py, bot/runtime/commands.py)."""

    max_steps: int = Field(default=6, ge=1, le=100)
    max_calls: int = Field(default=12, ge=1, le=1000)
    max_seconds: float = Field(default=60.0, gt=0, le=3600)
    max_tokens: int = Field(default=100_000, ge=1, le=10**9)
    call_timeout_seconds: float = Field(default=15.0, gt=0, le=3600)
    max_result_chars: int = Field(default=16_000, ge=100, le=1_000_000)
    hook_timeout_seconds: float = Field(default=5.0, gt=0, le=600)
    command_timeout_seconds: float = Field(default=10.0, gt=0, le=600)


class MediaConfig(_Section):
    """Photos, stickers and voice notes (docs/architecture.md#media)."""

    # Images shown to the model per request at most, the newest (0 = never fetch or show any:
    # the model reads a text stand-in such as "[photo]" instead).
    max_images: int = Field(default=6, ge=0, le=100)
    # Larger files are not downloaded (Telegram lets bots download up to 20 MB).
    max_download_mb: float = Field(default=20.0, gt=0, le=500)
    fetch_timeout_seconds: float = Field(default=20.0, gt=0, le=600)


class TranscriptionConfig(_Section):
    """Who transcribes voice notes (docs/transcription.md): by default an OpenAI-compatible
    ``/audio/transcriptions`` server at ``url``; ``url = ""`` with the built-in provider (the
    default): nobody, and the persona is told it cannot listen to voice notes."""

    @property
    def enabled(self) -> bool:
        """Whether voice notes are transcribed at all."""
        return self.provider != "openai" or bool(self.url)

    # "openai": the built-in client of an OpenAI-compatible server; or one a plugin registers
    # with app.transcriber (its own keys in ``options``).
    provider: str = Field(default="openai", pattern=NAME_PATTERN)
    options: dict[str, Any] = Field(default_factory=dict)
    url: str = ""  # e.g. "http://127.0.0.1:8000/v1"
    model: str = Field(default="whisper-1", min_length=1)
    api_key_env: EnvName | None = None
    language: str | None = Field(default=None, pattern=r"^[a-z]{2,3}$")
    prompt: str | None = Field(default=None, max_length=1000)
    timeout_seconds: float = Field(default=60.0, gt=0, le=600)
    # Voice notes longer than this are not transcribed (bounds what transcription costs).
    max_seconds: float = Field(default=300.0, gt=0, le=7200)

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        if not url:
            return url
        if not url.startswith(("http://", "https://")):
            raise ValueError('must be an http:// or https:// URL, or "" for none')
        # What the client refuses at start (bot/llm/transcription.py), said here already.
        parts = urllib.parse.urlsplit(url)
        if not parts.hostname:
            raise ValueError("must name a host, e.g. http://127.0.0.1:8000/v1")
        if parts.query or parts.fragment:
            raise ValueError("must not have a query or fragment")
        return url


class QueueSettings(_Section):
    """Coalescing of rapid-fire messages into one turn (docs/architecture.md#queue)."""

    debounce_seconds: float = Field(default=1.5, ge=0)
    max_wait_seconds: float = Field(default=8.0, gt=0)
    lease_seconds: float = Field(default=30.0, gt=0)
    max_concurrent_turns: int = Field(default=16, ge=1)
    scan_interval_seconds: float = Field(default=1.0, gt=0)
    shutdown_grace_seconds: float = Field(default=10.0, ge=0)
    # One turn answers at most this many messages (the rest get the next turn) ...
    max_turn_messages: int = Field(default=50, ge=1, le=1000)
    # ... and this many tokens of them (longer messages are cut, with a visible marker).
    max_turn_tokens: int = Field(default=4000, ge=200)
    # /readyz answers 503 while a due turn has waited longer than this for a slot: the process
    # is overloaded (docs/scaling.md#overload). 0: never for that reason.
    max_backlog_age_seconds: float = Field(default=60.0, ge=0)

    @model_validator(mode="after")
    def _debounce_within_cap(self) -> QueueSettings:
        if self.debounce_seconds > self.max_wait_seconds:
            raise ValueError(
                f"debounce_seconds ({self.debounce_seconds}) must not exceed "
                f"max_wait_seconds ({self.max_wait_seconds})"
            )
        return self


class SessionSettings(_Section):
    """When a conversation's session ends by itself."""

    idle_timeout_minutes: float = Field(default=0, ge=0)
    daily_reset_hour: int | None = Field(default=None, ge=0, le=23)
    timezone_offset_hours: float = Field(default=0, ge=-14, le=14)


class MemorySettings(_Section):
    """What the model sees of the conversation (docs/architecture.md#prompt)."""

    window_messages: int = Field(default=24, ge=2, le=10_000)
    prompt_budget_tokens: int = Field(default=6000, ge=256)
    summary_budget_tokens: int = Field(default=800, ge=50)
    user_memory_budget_tokens: int = Field(default=600, ge=50)
    summary_model: str | None = None
    private_memory_in_groups: bool = False
    share_across_groups: bool = False
    extract_after_idle_minutes: float = Field(default=5.0, ge=0)
    sweep_interval_seconds: float = Field(default=30.0, gt=0)


class RetentionSettings(_Section):
    """How long messages are kept and what the model is told about missing ones
    (docs/architecture.md#retention)."""

    mode: Literal["session", "message"] = "session"
    days: float = Field(default=30, ge=0)
    gap_policy: Literal["note", "tell_user", "refuse"] = "note"
    interval_minutes: float = Field(default=60, gt=0)
    batch_size: int = Field(default=500, ge=1, le=1_000_000)
    forget_deletes_messages: bool = False
    tell_user_message: str = (
        "Some messages of this conversation (turns {turns}) are no longer available to me. "
        "If something from them matters, please tell me again."
    )
    refuse_message: str = (
        "Part of this conversation (turns {turns}) is no longer available, so I can't "
        "continue it reliably. A human will take over; you can also send /new to start over."
    )

    @field_validator("tell_user_message", "refuse_message")
    @classmethod
    def _gap_placeholders(cls, text: str) -> str:
        try:
            text.format(turns="15-16", first=15, last=16)
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(
                f"bad placeholder ({exc}); use {{turns}}, {{first}} or {{last}} "
                "(double braces for a literal brace)"
            ) from None
        return text


class LoggingSettings(_Section):
    """Log output."""

    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    format: Literal["text", "json"] = "text"


class AccessSettings(_Section):
    """Who may use the bots (defaults for every bot entry)."""

    allow_users: list[PlatformId] = Field(default_factory=list)
    allow_chats: list[PlatformId] = Field(default_factory=list)
    admins: list[PlatformId] = Field(default_factory=list)
    denied_reply: str = ""

    @field_validator("denied_reply")
    @classmethod
    def _denied_shown(cls, text: str) -> str:
        return _shown(text)


MAX_TURN_LIMIT: Final = 1_000_000_000
MAX_TOKEN_LIMIT: Final = 10**15


class LimitSettings(_Section):
    """Spending limits, enforced in the store so that they hold across processes."""

    # Bounded so the store can count against them (a value past a 64-bit integer failed
    # every turn of everyone); 0 = unlimited.
    user_turns_per_hour: int = Field(default=0, ge=0, le=MAX_TURN_LIMIT)
    user_turns_per_day: int = Field(default=0, ge=0, le=MAX_TURN_LIMIT)
    bot_tokens_per_day: int = Field(default=0, ge=0, le=MAX_TOKEN_LIMIT)
    user_input_tokens_per_day: int = Field(default=0, ge=0, le=MAX_TOKEN_LIMIT)
    max_input_chars: int = Field(default=8000, ge=100)
    export_every_minutes: float = Field(default=10, ge=0)
    limit_message: str = (
        "You've reached the message limit for now. You can continue after {until} (UTC); "
        "your messages are kept."
    )

    @field_validator("limit_message")
    @classmethod
    def _limit_shown(cls, text: str) -> str:
        return _shown(text)


class ObservabilitySettings(_Section):
    """Health checks and Prometheus metrics."""

    listen: str = ""

    @model_validator(mode="after")
    def _host_port(self) -> ObservabilitySettings:
        if self.listen:
            listen_address(self.listen)
        return self


class WebSettings(_Section):
    """``[web]``: the operator console (docs/web.md)."""

    # host:port of the console inside ``personabot run`` ("" = off; ``personabot web`` serves
    # it alone and takes --listen).
    listen: str = ""
    # Environment variable holding the operator token (login, and the API's Bearer token).
    token_env: str = "PERSONABOT_WEB_TOKEN"
    # Rows per page of a list.
    page_size: int = Field(default=50, ge=1, le=500)
    # Failed logins per client address per minute before it must wait.
    login_attempts_per_minute: int = Field(default=5, ge=1, le=1000)
    # A login lasts this long.
    session_hours: float = Field(default=12.0, gt=0, le=24 * 30)

    @model_validator(mode="after")
    def _host_port(self) -> WebSettings:
        if self.listen:
            listen_address(self.listen)
        if not looks_like_env_name(self.token_env):
            raise ValueError("token_env: the name of an environment variable, not its value")
        return self


class InitiativeSettings(_Section):
    """``[personas.initiative]``: when the persona may write first after a silence
    (docs/initiatives.md)."""

    enabled: bool = False
    after_idle_hours: float = Field(default=24.0, gt=0, le=24 * 365)
    # Local time in the person's zone; "" for none.
    quiet_hours: str = "22:00-08:00"
    max_unanswered: int = Field(default=1, ge=1, le=10)
    min_interval_hours: float = Field(default=24.0, ge=0, le=24 * 365)
    groups: bool = False

    @field_validator("quiet_hours")
    @classmethod
    def _quiet(cls, text: str) -> str:
        if text.strip():
            QuietHours.parse(text)
        return text.strip()


class ScheduleSettings(_Section):
    """Time zones and reminders (docs/initiatives.md)."""

    # For people who set none (/timezone) and have none in memory.
    timezone: str = "UTC"
    # The remind_me tool and /reminders.
    reminders: bool = False
    max_reminders_per_person: int = Field(default=20, ge=1, le=1000)
    # Check-ins one bot may write in any 24 hours, over all its chats (0 = no cap); past it
    # a due check-in waits until the oldest of the day's leaves the window.
    max_checkins_per_day: int = Field(default=0, ge=0, le=1_000_000)
    scan_interval_seconds: float = Field(default=10.0, gt=0, le=3600)

    @field_validator("timezone")
    @classmethod
    def _zone(cls, text: str) -> str:
        try:
            return zone_name(text)
        except ZoneError as exc:
            raise ValueError(str(exc)) from None


class LoreEntrySettings(_Section):
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


class LorebookSettings(_Section):
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


class PersonaSettings(_Section):
    """A persona: who the bot is. The fields after ``first_message`` are those of a
    Character Card (``personabot persona import``, docs/personas.md)."""

    id: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    name: str = Field(min_length=1)
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
    max_tokens: int = Field(default=1024, ge=1, le=64000)
    temperature: float | None = Field(default=None, ge=0, le=1)
    memory: MemorySettings | None = None
    queue: QueueSettings | None = None
    refusal_message: str | None = Field(default=None, min_length=1)
    initiative: InitiativeSettings = InitiativeSettings()

    @field_validator("refusal_message")
    @classmethod
    def _refusal_shown(cls, text: str | None) -> str | None:
        return None if text is None else _shown(text)

    def pin(self, *, lorebook: bool = True) -> PersonaPin:
        """The persona's pinned layer, as every prompt of it is built (memory/pin.py);
        without ``lorebook``, a pin without one (nothing compiled: to measure the pin)."""
        from memory.lorebook import Lorebook, LoreEntry
        from memory.pin import PersonaPin

        book = self.lorebook if lorebook else None
        return PersonaPin(
            name=self.name,
            system=self.system,
            first_message=tuple(self.first_message),
            model=self.model,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
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


class _BotBase(_Section):
    """Keys every bot entry has."""

    id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]+$")
    # The persona of new chats; with ``personas``, the first of them when not set.
    persona: str = ""
    # Personas a chat may switch to with /persona (docs/personas.md#several-personas).
    personas: list[str] = Field(default_factory=list)
    token_env: EnvName | None = None
    group_trigger: Literal["mention", "all"] = "mention"
    allow_users: list[PlatformId] | None = None
    allow_chats: list[PlatformId] | None = None
    admins: list[PlatformId] | None = None
    # Plugins of this bot only (their commands, middleware, hooks and tools): docs/plugins.md.
    plugins: list[PluginName] = Field(default_factory=list)
    # Options of plugins for this bot, by plugin name (over the top-level plugin_options).
    plugin_options: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # Replies shown while written (docs/architecture.md#streaming): auto = Telegram drafts in
    # private chats, nothing elsewhere; draft = the same (Telegram only); edit = drafts in
    # Telegram private chats, a message edited in place in groups and on Discord; off.
    stream: Literal["auto", "off", "draft", "edit"] = "auto"
    stream_interval_seconds: float = Field(default=1.0, ge=0.2, le=30)
    # A Telegram draft's stop button: keep (send what was shown), discard, off (no button).
    stop_button: Literal["keep", "discard", "off"] = "keep"

    @model_validator(mode="after")
    def _one_default(self) -> _BotBase:
        if not self.persona and not self.personas:
            raise ValueError("persona: required (or personas = [...])")
        if self.persona and self.personas and self.persona not in self.personas:
            raise ValueError(f"persona: {self.persona!r} is not one of personas")
        if len(set(self.personas)) != len(self.personas):
            raise ValueError("personas: a persona is listed twice")
        if len(self.personas) > 1 and self.id is None:
            # The key stores every chat; derived from the default persona it would change
            # with it, and every chat, check-in and reminder of the bot would be orphaned.
            platform = getattr(self, "platform", "bot")
            raise ValueError(
                "id: required on a bot with several personas (its chats are stored under "
                "it; without one it would change with the default persona). To keep the "
                f'chats this bot has, set id = "{platform}-{self.default_persona}"'
            )
        return self

    @property
    def default_persona(self) -> str:
        """The persona of a chat that chose none."""
        return self.persona or self.personas[0]

    @property
    def persona_ids(self) -> tuple[str, ...]:
        """Every persona this bot may speak as, the default first."""
        rest = [p for p in self.personas if p != self.default_persona]
        return (self.default_persona, *rest)

    @property
    def key(self) -> str:
        """Stable name of this bot in conversation keys."""
        platform: str = getattr(self, "platform", "bot")
        return self.id or f"{platform}-{self.default_persona}"


class TelegramBotSettings(_BotBase):
    """A Telegram bot account (aiogram 3)."""

    platform: Literal["telegram"]
    mode: Literal["polling", "webhook"] = "polling"
    api_server: str | None = None
    webhook_url: str | None = None
    listen_host: str = "127.0.0.1"
    listen_port: int = Field(default=8080, ge=0, le=65535)
    webhook_path: str = "/telegram/webhook"
    secret_token_env: EnvName | None = None
    non_text: Literal["placeholder", "ignore"] = "placeholder"

    @property
    def token_variable(self) -> str:
        """Environment variable holding the bot token."""
        return self.token_env or DEFAULT_TOKEN_VARIABLES["telegram"]

    @model_validator(mode="after")
    def _webhook_needs_url(self) -> TelegramBotSettings:
        if self.mode == "webhook" and not self.webhook_url:
            raise ValueError("webhook_url: required when mode = 'webhook'")
        return self


class DiscordBotSettings(_BotBase):
    """A Discord bot account (discord.py 2)."""

    platform: Literal["discord"]
    guilds: list[int] = Field(default_factory=list)
    api_base: str | None = None
    gateway_url: str | None = None
    shard_id: int | None = Field(default=None, ge=0)
    shard_count: int | None = Field(default=None, ge=1)

    @property
    def token_variable(self) -> str:
        """Environment variable holding the bot token."""
        return self.token_env or DEFAULT_TOKEN_VARIABLES["discord"]

    @model_validator(mode="after")
    def _no_drafts(self) -> DiscordBotSettings:
        if self.stream == "draft":
            raise ValueError(
                "stream: Discord has no drafts; use 'edit' (a message edited in place) or 'off'"
            )
        # Here, not when the adapter is built: config check names it (review 35a).
        if (self.shard_id is None) != (self.shard_count is None):
            raise ValueError("shard_id: set both shard_id and shard_count, or neither")
        if self.shard_count is not None and (self.shard_id or 0) >= self.shard_count:
            raise ValueError(f"shard_id: must be below shard_count ({self.shard_count})")
        return self


class PluginBotSettings(_BotBase):
    """A bot on a platform a plugin registers (``app.platform``); its keys go in ``options``."""

    platform: str = Field(pattern=NAME_PATTERN)
    # The platform's own keys; its factory validates them (docs/plugins.md#platforms).
    options: dict[str, Any] = Field(default_factory=dict)

    @property
    def token_variable(self) -> str:
        """Environment variable holding the bot token (default ``<PLATFORM>_BOT_TOKEN``)."""
        return self.token_env or re.sub(r"\W", "_", self.platform).upper() + "_BOT_TOKEN"


_BOT_URL_KEYS: Final = ("api_server", "webhook_url", "api_base", "gateway_url")
#: Platforms whose keys this module knows; any other name is a plugin's (PluginBotSettings).
BUILTIN_PLATFORMS: Final = ("telegram", "discord")
_PLUGIN_TAG: Final = "plugin platform"


def _platform_tag(value: Any) -> str | None:
    platform = (
        value.get("platform") if isinstance(value, dict) else getattr(value, "platform", None)
    )
    if platform is None:
        return None
    return platform if platform in BUILTIN_PLATFORMS else _PLUGIN_TAG


BotSettings = Annotated[
    Annotated[TelegramBotSettings, Tag("telegram")]
    | Annotated[DiscordBotSettings, Tag("discord")]
    | Annotated[PluginBotSettings, Tag(_PLUGIN_TAG)],
    Discriminator(_platform_tag),
]


def reference_problems(
    ids: Sequence[str], bots: Sequence[tuple[str, Sequence[str], str]]
) -> list[str]:
    """Every persona id listed twice, every bot naming an unknown persona and every bot key
    used twice; ``bots`` as ``(persona, personas, key)``. Also run on the raw file when a
    key is wrong, so that a persona typo is not left for a second round (issue 35)."""
    problems = []
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        problems.append(f"personas: duplicate id {', '.join(map(repr, dupes))}")
    for index, (persona, personas, _) in enumerate(bots):
        for persona_id in dict.fromkeys([persona, *personas]):
            if persona_id and persona_id not in ids:
                field = "persona" if persona_id == persona else "personas"
                close = difflib.get_close_matches(persona_id, ids, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                problems.append(
                    f"bots[{index}].{field}: no persona with id {persona_id!r} "
                    f"(known: {', '.join(ids)}{hint})"
                )
    keys = [key for _, _, key in bots]
    if len(set(keys)) != len(keys):
        problems.append("bots: two entries share an id; give each an explicit id")
    return problems


def unknown_name(kind: str, key: str, name: str, installed: Iterable[str]) -> str:
    """The problem of a platform or provider nobody registered, listing what is installed."""
    known = sorted(installed)
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return (
        f"{key}: unknown {kind} {name!r} (installed: {', '.join(known) or 'none'}; "
        f"a plugin can add more{hint})"
    )


def _raw_problems(data: Mapping[str, Any]) -> list[str]:
    """What the model's after-validators and ``App.prepare`` would also say about a file
    whose keys are wrong: persona references and, when no plugin is named (none could
    register one), platform names. Best effort over the raw TOML; a malformed part is left
    to the key errors already reported."""
    personas = data.get("personas", [{"id": _DEFAULT_PERSONA.id}])
    raw_bots = data.get("bots", [])
    if not isinstance(personas, list) or not isinstance(raw_bots, list):
        return []
    ids = [p["id"] for p in personas if isinstance(p, dict) and isinstance(p.get("id"), str)]
    bots: list[tuple[str, Sequence[str], str]] = []
    problems: list[str] = []
    plugins = bool(data.get("plugins"))
    for index, entry in enumerate(raw_bots):
        if not isinstance(entry, dict):
            return []
        persona, listed = entry.get("persona", ""), entry.get("personas", [])
        if not isinstance(persona, str) or not isinstance(listed, list):
            return []
        platform = entry.get("platform")
        bots.append((persona, [p for p in listed if isinstance(p, str)], _raw_key(index, entry)))
        if (
            isinstance(platform, str)
            and platform not in BUILTIN_PLATFORMS
            and not plugins
            and not entry.get("plugins")
        ):
            problems.append(
                unknown_name("platform", f"bots[{index}].platform", platform, BUILTIN_PLATFORMS)
            )
    return reference_problems(ids, bots) + problems


def _raw_key(index: int, entry: Mapping[str, Any]) -> str:
    """A raw ``[[bots]]`` entry's key as ``_BotBase.key`` derives it; ``bots[i]`` when that
    is no id (a token pasted into ``id`` has its own problem and is never quoted)."""
    listed = entry.get("personas")
    first = listed[0] if isinstance(listed, list) and listed else ""
    key = str(entry.get("id") or f"{entry.get('platform')}-{entry.get('persona') or first}")
    return key if re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", key) else f"bots[{index}]"


_DEFAULT_PERSONA = PersonaSettings(
    id="companion",
    name="Mira",
    system=(
        "You are Mira, a warm, curious companion. You speak plainly, ask one question at a "
        "time, and remember what the person told you."
    ),
    first_message=["Hi, I'm Mira. What's on your mind today?"],
)


class Settings(BaseSettings):
    """All of personabot's configuration."""

    model_config = SettingsConfigDict(
        extra="forbid",
        frozen=True,
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        nested_model_default_partial_update=True,
    )

    storage: StorageSettings = StorageSettings()
    llm: LLMSettings = LLMSettings()
    tools: ToolSettings = ToolSettings()
    media: MediaConfig = MediaConfig()
    transcription: TranscriptionConfig = TranscriptionConfig()
    queue: QueueSettings = QueueSettings()
    sessions: SessionSettings = SessionSettings()
    memory: MemorySettings = MemorySettings()
    retention: RetentionSettings = RetentionSettings()
    access: AccessSettings = AccessSettings()
    limits: LimitSettings = LimitSettings()
    observability: ObservabilitySettings = ObservabilitySettings()
    web: WebSettings = WebSettings()
    logging: LoggingSettings = LoggingSettings()
    schedule: ScheduleSettings = ScheduleSettings()
    personas: list[PersonaSettings] = Field(default_factory=lambda: [_DEFAULT_PERSONA])
    bots: list[BotSettings] = Field(default_factory=list)
    # Plugins of every bot (and of `personabot chat`): docs/plugins.md.
    plugins: list[PluginName] = Field(default_factory=list)
    # Each plugin's own options, by the name it is loaded as (app.options in its setup).
    plugin_options: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Environment overrides the TOML file (passed as init values).
        return (env_settings, init_settings)

    @model_validator(mode="after")
    def _references(self) -> Settings:
        bots = [(b.persona, b.personas, b.key) for b in self.bots]
        problems = reference_problems([p.id for p in self.personas], bots)
        problems += self._shared_port()
        if problems:
            # Every reference problem at once, one per line (split again by _problems).
            raise ValueError("\n".join(problems))
        self._pins_fit()
        return self

    def _shared_port(self) -> list[str]:
        """The console and the health endpoints on one port: ``run`` died binding the second
        (review 35a). Any host: ``localhost`` and ``127.0.0.1`` are the same socket."""
        if not (self.web.listen and self.observability.listen):
            return []
        port = listen_address(self.web.listen)[1]
        if port == 0 or port != listen_address(self.observability.listen)[1]:
            return []
        return [f"web.listen: port {port} is observability.listen's too; give each its own"]

    def _pins_fit(self) -> None:
        """Every persona's pin leaves room for a turn in its prompt budget; otherwise every
        request would be sent over ``prompt_budget_tokens``."""
        from memory.assemble import least_prompt_tokens

        for index, persona in enumerate(self.personas):
            need = least_prompt_tokens(persona.pin(lorebook=False))
            budget = self.memory_for(persona).prompt_budget_tokens
            if need > budget:
                raise ValueError(
                    f"personas[{index}]: the pinned persona takes ~{need} tokens with the "
                    f"smallest turn, more than memory.prompt_budget_tokens ({budget}); shorten "
                    "them or raise prompt_budget_tokens"
                )

    def persona(self, persona_id: str | None = None) -> PersonaSettings:
        """The persona with this id, or the first one."""
        if persona_id is None:
            return self.personas[0]
        for persona in self.personas:
            if persona.id == persona_id:
                return persona
        known = ", ".join(p.id for p in self.personas)
        raise ConfigError([f"--persona: no persona with id {persona_id!r} (known: {known})"])

    def secret_names(self) -> list[str]:
        """Environment variables the configuration reads secrets from."""
        names: list[str] = []
        for entry in self.bots:
            names.append(entry.token_variable)
            secret = getattr(entry, "secret_token_env", None)
            if secret:
                names.append(secret)
        if self.transcription.api_key_env:
            names.append(self.transcription.api_key_env)
        names.append(self.web.token_env)
        return names

    def credentials(self) -> list[str]:
        """Credentials written into configured URLs (user-info passwords, ``?password=``...),
        so that logs can redact them like the environment's secrets."""
        urls = [self.storage.url, self.llm.base_url, self.transcription.url]
        for entry in self.bots:
            urls += [getattr(entry, name, None) for name in _BOT_URL_KEYS]
        # The same minimum as the environment's secrets: a one-letter password redacted as a
        # substring would mangle every line and give itself away (review 35a); URLs are shown
        # through redact_url, which hides it whatever its length.
        found = {s for url in urls if url for s in url_secrets(url) if len(s) >= MIN_SECRET}
        return sorted(found, key=len, reverse=True)

    def queue_for(self, persona: PersonaSettings) -> QueueSettings:
        """Queue settings with the persona's override applied."""
        return persona.queue or self.queue

    def memory_for(self, persona: PersonaSettings) -> MemorySettings:
        """Memory settings with the persona's override applied."""
        return persona.memory or self.memory


class Secrets:
    """Reads secrets from the environment only; never stores them in settings or logs."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ = os.environ if environ is None else environ
        # Every name asked for is a secret, whatever it is called (a plugin's MY_LLM_KEY):
        # values() includes them, so logs and error lines redact them too.
        self._asked: set[str] = set()
        self._values: tuple[tuple[tuple[str, ...], int], tuple[str, ...]] | None = None

    @property
    def anthropic_api_key(self) -> str | None:
        """The Anthropic API key, or None when unset or blank."""
        return self.get("ANTHROPIC_API_KEY")

    def get(self, name: str) -> str | None:
        """A secret by environment variable name, or None when unset or blank."""
        self._asked.add(name)
        return self._value(name)

    def _value(self, name: str) -> str | None:
        value = self._environ.get(name, "").strip()
        return value or None

    def values(self, extra_names: Iterable[str] = ()) -> list[str]:
        """Every secret currently set (for log redaction), including the variables that the
        configuration names (``token_env``, ``secret_token_env``) and every one read so far."""
        # Asked at every log record: the environment is scanned again only when a new name was
        # read or other names are asked for, not per record.
        key = (tuple(extra_names), len(self._asked))
        if self._values is not None and self._values[0] == key:
            return list(self._values[1])
        names = ["ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "PGPASSWORD", *key[0]]
        names += sorted(self._asked)
        names += [n for n in self._environ if n.endswith(("_TOKEN", "_SECRET", "_API_KEY"))]
        found = [v for v in (self._value(n) for n in names) if v and len(v) >= MIN_SECRET]
        self._values = (key, tuple(found))
        return found


@dataclass(frozen=True)
class RunNeeds:
    """What ``personabot run`` reads from the environment before connecting, as the settings
    (or, when they do not validate, the raw file) say: so that an unset token is named in
    the same round as a typo (issue 35)."""

    bots: tuple[tuple[int, str, str, str], ...]  # index, bot key, platform, token variable
    provider: str
    web_token_env: str | None  # when [web] listen is set

    @classmethod
    def of(cls, settings: Settings) -> RunNeeds:
        bots = tuple((i, b.key, b.platform, b.token_variable) for i, b in enumerate(settings.bots))
        web = settings.web.token_env if settings.web.listen else None
        return cls(bots, settings.llm.provider, web)

    @classmethod
    def of_raw(cls, data: Mapping[str, Any]) -> RunNeeds | None:
        """The same from a file that did not validate; None when its shape is too broken."""
        llm, web, raw_bots = data.get("llm", {}), data.get("web", {}), data.get("bots", [])
        if not (isinstance(llm, dict) and isinstance(web, dict) and isinstance(raw_bots, list)):
            return None
        bots = []
        for index, entry in enumerate(raw_bots):
            if not isinstance(entry, dict):
                return None
            platform, token = entry.get("platform"), entry.get("token_env")
            if token is not None and not (isinstance(token, str) and looks_like_env_name(token)):
                continue  # perhaps the token itself pasted in: its own problem, never shown
            if platform in DEFAULT_TOKEN_VARIABLES:
                token = token or DEFAULT_TOKEN_VARIABLES[platform]
                bots.append((index, _raw_key(index, entry), str(platform), str(token)))
        provider = str(llm.get("provider", LLMSettings().provider))
        listen, token_env = web.get("listen"), web.get("token_env", WebSettings().token_env)
        if not (isinstance(token_env, str) and looks_like_env_name(token_env)):
            token_env = None  # its own problem, never shown
        return cls(tuple(bots), provider, token_env if listen else None)

    def problems(self, secrets: Secrets, *, empty_ok: bool = False) -> list[str]:
        """What ``run`` would refuse to start without, never quoting a value: ``[[bots]]``,
        each built-in bot's token, the Anthropic key, the console's token."""
        problems: list[str] = []
        if not self.bots and not empty_ok:
            problems.append(
                "bots: no [[bots]] entries, so `personabot run` has nothing to host (add one, "
                "see config.example.toml; `personabot chat` needs none: config check --file-only)"
            )
        for index, key, platform, variable in self.bots:
            if platform in DEFAULT_TOKEN_VARIABLES and secrets.get(variable) is None:
                problems.append(f"bots[{index}] ({key}): {variable} is not set in the environment")
        if self.provider == "anthropic" and secrets.anthropic_api_key is None:
            problems.append(
                'ANTHROPIC_API_KEY: not set in the environment (llm.provider = "anthropic"; '
                "`run` refuses to start without it, `chat` falls back to the offline model)"
            )
        if self.web_token_env:
            token = secrets.get(self.web_token_env)
            if token is None:
                problems.append(
                    f"web: {self.web_token_env} is not set in the environment ([web] listen is "
                    "set; the console refuses to start without its token)"
                )
            elif len(token) < WEB_TOKEN_MIN:
                problems.append(web_token_short(self.web_token_env))
        return problems


#: The operator console's token is at least this long (docs/web.md#security).
WEB_TOKEN_MIN: Final = 16


def web_token_short(variable: str) -> str:
    """The problem of a console token shorter than WEB_TOKEN_MIN."""
    return f"web: {variable} is too short ({WEB_TOKEN_MIN} characters at least)"


def bundled_example_path() -> Path:
    """The example configuration shipped with personabot (its values are the defaults)."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "config.example.toml", here.parent / "config.example.toml"):
        if candidate.is_file():
            return candidate
    raise ConfigError(["config.example.toml is missing from this installation"])


def load_settings(path: Path | None = None, *, needs: Secrets | None = None) -> Settings:
    """Load and validate settings (TOML, then ``PERSONABOT_*`` environment overrides).

    ``path`` None means ``./personabot.toml`` when it exists, else the bundled example.
    Raises ConfigError naming each bad key; with ``needs`` (the secrets ``run`` will read),
    also what the environment lacks, in the same round (issue 35).
    """
    if path is None:
        path = DEFAULT_CONFIG_PATH if DEFAULT_CONFIG_PATH.is_file() else bundled_example_path()
    data = _read_toml(path)
    try:
        settings = Settings(**data)
    except ValidationError as exc:
        problems = _problems(exc)
        problems += [p for p in _raw_problems(data) if p not in problems]
        sources = env_sources(problems, os.environ) or [None] * len(problems)
        lost = _unknown_sections(os.environ)
        problems += lost
        sources += [""] * len(lost)
        raw = RunNeeds.of_raw(data) if needs is not None else None
        if raw is not None and needs is not None:
            missing = raw.problems(needs, empty_ok=True)
            problems += missing
            sources += [""] * len(missing)  # each names its variable
        raise ConfigError(problems, source=str(path), sources=sources) from None
    except SettingsError as exc:
        # A PERSONABOT_* override of a table or list that is not JSON; the value may hold a
        # credential, so only the variable is named.
        raise ConfigError([_env_problem(exc)]) from None
    if lost := _unknown_sections(os.environ):
        raise ConfigError(lost, sources=[""] * len(lost))
    return settings


def _unknown_sections(environ: Mapping[str, str]) -> list[str]:
    """``PERSONABOT_QUEU__DEBOUNCE_SECONDS``: an override whose section is no section of the
    settings is ignored by the environment source, its value silently lost (review 35a).
    Only names with the nested delimiter are judged: ``PERSONABOT_WEB_TOKEN`` and other
    variables of the prefix that are not settings have none."""
    sections = list(Settings.model_fields)
    problems = []
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or "__" not in upper:
            continue
        section = upper.removeprefix(ENV_PREFIX).split("__", 1)[0].lower()
        if section not in sections:
            close = difflib.get_close_matches(section, sections, n=1)
            hint = f" (did you mean {ENV_PREFIX}{close[0].upper()}__...?)" if close else ""
            problems.append(f"{name} (environment): no settings section {section!r}{hint}")
    return problems


def env_sources(problems: Sequence[str], environ: Mapping[str, str]) -> list[str | None] | None:
    """For each ``key.path: problem``, the ``PERSONABOT_...`` variable that set its key or a
    table or list holding it (``PERSONABOT_QUEUE='{...}'``, ``PERSONABOT_BOTS='[...]'``); None
    where the file did, and None in all when no variable did (a typo'd variable was blamed on
    the TOML file, issue 35)."""
    variables = {name.upper() for name in environ if name.upper().startswith(ENV_PREFIX)}
    sources: list[str | None] = []
    for problem in problems:
        dotted = re.split(r"[\[ :]", problem, maxsplit=1)[0].split(".")
        names = [ENV_PREFIX + "__".join(dotted[:n]).upper() for n in range(len(dotted), 0, -1)]
        found = next((n for n in names if n in variables), None)
        sources.append(f"{found} (environment)" if found else None)
    return sources if any(sources) else None


def _env_problem(exc: SettingsError) -> str:
    """Which environment override could not be parsed (never its value)."""
    match = re.search(r'field "(\w+)"', str(exc))
    field = match.group(1).upper() if match else "..."
    return (
        f"{ENV_PREFIX}{field}: not valid JSON (a table or list given in the environment must "
        f"be JSON; or set one key with {ENV_PREFIX}{field}__KEY)"
    )


#: A configuration file larger than this is refused unread (``--config /dev/zero`` took
#: gigabytes, review 35a); lorebooks, the largest part, are bounded far below it.
MAX_CONFIG_BYTES: Final = 32 * 1024 * 1024


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError([f"file not found: {path}"]) from None
    except OSError as exc:
        raise ConfigError([f"cannot read {path}: {exc.strerror}"]) from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(
            [f"larger than {MAX_CONFIG_BYTES // (1024 * 1024)} MiB: not a configuration file"],
            source=str(path),
        )
    try:
        # utf-8-sig: a byte-order mark, which some Windows editors write, is skipped
        # (tomllib refused it as "Invalid statement (at line 1, column 1)", review 35b).
        return tomllib.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise ConfigError(["not a TOML file (not UTF-8 text)"], source=str(path)) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"not valid TOML: {exc}"], source=str(path)) from None


def _loc(parts: Sequence[int | str]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


_PLATFORM_MODELS: dict[str, type[BaseModel]] = {
    "telegram": TelegramBotSettings,
    "discord": DiscordBotSettings,
    _PLUGIN_TAG: PluginBotSettings,
}


def _problems(exc: ValidationError) -> list[str]:
    """One ``key.path: problem`` line per error; input values are quoted only when harmless."""
    problems = []
    for err in exc.errors(include_url=False):
        # Drop pydantic's validator names and the tagged-union tag ("bots.0.telegram.mode").
        raw = [p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-"))]
        loc = [
            p
            for i, p in enumerate(raw)
            if not (i and isinstance(raw[i - 1], int) and p in _PLATFORM_MODELS)
        ]
        tag = next((p for p in raw if isinstance(p, str) and p in _PLATFORM_MODELS), None)
        where, kind = _loc(loc), err["type"]
        known = " or ".join(map(repr, BUILTIN_PLATFORMS)) + " or a plugin's platform"
        if kind == "extra_forbidden":
            problems.append(f"{where}: unknown key{_suggest(loc, tag)}")
        elif kind == "missing":
            problems.append(f"{where}: field required")
        elif kind == "union_tag_not_found":
            problems.append(f"{where}.platform: field required ({known})")
        elif kind == "union_tag_invalid":
            problems.append(
                f"{where}.platform: must be {known}{_got(['platform'], err['ctx']['tag'])}"
            )
        elif kind == "value_error":
            msg = str(err["msg"]).removeprefix("Value error, ")
            if not loc:
                problems += msg.split("\n")
            elif re.match(r"^[\w\[\].]+: ", msg):
                problems.append(f"{where}.{msg}")
            else:
                problems.append(f"{where}: {msg}")
        else:
            problems.append(f"{where}: {err['msg']}{_got(loc, err.get('input'))}")
    return problems or ["invalid configuration"]


# Keys whose values may be, or may contain, credentials: their input is never quoted.
_SECRET_KEY_PARTS: Final = ("token", "secret", "password", "key", "url", "dsn", "api", "env")
_HARMLESS_TEXT: Final = re.compile(r"^[\w .,+-]{0,32}$")
# A run of letters and digits such as `openssl rand -hex 16` writes: a token, not a word.
_RANDOM_LOOKING: Final = re.compile(r"(?=[A-Za-z_-]*\d)[A-Za-z0-9_-]{12,}")


def _got(loc: Sequence[int | str], value: object) -> str:
    """`` (got 5)`` for a harmless input; nothing for text that might be a secret or a table.

    A wrong value may be a credential pasted into the wrong key, and a table (``[[bots]]``)
    may hold a token: so tables, lists, long or URL-like text and values of credential-like
    keys are never echoed. Numbers, booleans and short plain words are.
    """
    name = next((str(p).lower() for p in reversed(loc) if isinstance(p, str)), "")
    if isinstance(value, bool | int | float):
        return f" (got {value!r})"
    if (
        isinstance(value, str)
        and _HARMLESS_TEXT.match(value)
        and not _RANDOM_LOOKING.search(value)
        and not any(part in name for part in _SECRET_KEY_PARTS)
    ):
        return f" (got {value!r})"
    return ""


def _suggest(loc: Sequence[int | str], tag: str | None) -> str:
    name = loc[-1] if loc else ""
    model: type[BaseModel] = Settings
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part)
        inner = _PLATFORM_MODELS.get(tag or "") if part == "bots" else None
        inner = inner or (_model_of(field.annotation) if field else None)
        if inner is None:
            return ""
        model = inner
    close = difflib.get_close_matches(str(name), list(model.model_fields), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_of(arg)
        if found is not None:
            return found
    return None
