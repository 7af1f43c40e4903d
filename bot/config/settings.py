"""``Settings``: the whole file, its sections in the order ``config check`` and the docs show
them, the environment's ``PERSONABOT_*`` overrides over it, and the checks across sections."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from bot.config.bots import BOT_URL_KEYS, BotSettings
from bot.config.initiatives import ScheduleSettings
from bot.config.limits import AccessSettings, LimitSettings, QueueSettings, ToolSettings
from bot.config.llm import DEFAULT_PROVIDER, LLMSettings, MediaConfig, TranscriptionConfig
from bot.config.mcp import McpServerSettings
from bot.config.memory import MemorySettings, RetentionSettings, SessionSettings
from bot.config.observability import (
    LoggingSettings,
    ObservabilitySettings,
    WebSettings,
    listen_address,
)
from bot.config.personas import DEFAULT_PERSONA, PersonaSettings
from bot.config.plugins import PluginName
from bot.config.references import reference_problems
from bot.config.secrets import MIN_SECRET
from bot.config.storage import StorageSettings
from bot.core.errors import ConfigError
from bot.core.redact import url_secrets

ENV_PREFIX: Final = "PERSONABOT_"


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
    personas: list[PersonaSettings] = Field(default_factory=lambda: [DEFAULT_PERSONA])
    bots: list[BotSettings] = Field(default_factory=list)
    # Plugins of every bot (and of `personabot chat`): docs/plugins.md.
    plugins: list[PluginName] = Field(default_factory=list)
    # Each plugin's own options, by the name it is loaded as (app.options in its setup).
    plugin_options: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # MCP servers whose tools the model may call: docs/tools.md.
    mcp_servers: list[McpServerSettings] = Field(default_factory=list)

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
        problems += self._priced_for_money_limits()
        problems += self._mcp_references()
        problems += self._provider_references()
        problems += self._scene_names()
        if problems:
            # Every reference problem at once, one per line (split again by
            # bot/config/problems.py validation_problems).
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

    def _scene_names(self) -> list[str]:
        """In a scene every name and alias belongs to one cast member: a name two share would
        address both (and a fact told to one be learned for the other, and one's line taken
        for the other's own label)."""
        personas = {p.id: p for p in self.personas}
        problems = []
        for i, bot in enumerate(self.bots):
            if bot.scene is None:
                continue
            owners: dict[str, tuple[str, str]] = {}  # folded name -> (persona id, as written)
            for pid in bot.personas:
                persona = personas.get(pid)
                if persona is None:
                    continue  # named by reference_problems
                for written in (persona.name, *persona.aliases):
                    name = written.strip().casefold()
                    if not name:
                        continue
                    other, first = owners.setdefault(name, (pid, written.strip()))
                    if other != pid:
                        problems.append(
                            f"bots[{i}].scene: the name {first!r} belongs to both {other} and "
                            f"{pid} (a name or alias addresses one cast member only)"
                        )
        return problems

    def _provider_references(self) -> list[str]:
        """Every provider a persona, a fallback or the memory tasks name is configured."""
        known = ", ".join(["default", *sorted(self.llm.providers)])
        found = [(f"personas[{i}].provider", p.provider) for i, p in enumerate(self.personas)]
        found += [
            (f"personas[{i}].fallback.provider", p.fallback.provider)
            for i, p in enumerate(self.personas)
            if p.fallback is not None
        ]
        found.append(("memory.provider", self.memory.provider))
        found += [
            (f"personas[{i}].memory.provider", p.memory.provider)
            for i, p in enumerate(self.personas)
            if p.memory is not None
        ]
        found += [
            (f"bots[{i}].scene.director_provider", b.scene.director_provider)
            for i, b in enumerate(self.bots)
            if b.scene is not None
        ]
        problems = [
            f"{where}: no provider {name!r} in [llm.providers] (known: {known})"
            for where, name in found
            if not self.llm.knows(name)
        ]
        for i, persona in enumerate(self.personas):
            routes = self.routes(persona)
            if routes.fallback == routes.reply:
                problems.append(
                    f"personas[{i}].fallback: the same model on the same provider as its "
                    "replies; a fallback answers when they are unavailable, so name another"
                )
        return problems

    def routes(self, persona: PersonaSettings) -> Routes:
        """Who answers this persona's replies, its fallback and its memory tasks."""
        memory = self.memory_for(persona)
        tasks_provider: str | None
        if memory.provider is not None:
            tasks_provider = memory.provider
        elif memory.summary_model is None:
            tasks_provider = persona.provider  # the persona's model: its provider too
        else:
            tasks_provider = None
        fallback = persona.fallback
        return Routes(
            reply=Route(_provider(persona.provider), persona.model),
            fallback=None
            if fallback is None
            else Route(_provider(fallback.provider or persona.provider), fallback.model),
            tasks=Route(_provider(tasks_provider), memory.summary_model or persona.model),
        )

    def _priced_for_money_limits(self) -> list[str]:
        """A money limit counts priced calls only: a model without a price would spend
        without limit (a careless operator's local model), so every model the personas and
        their memory tasks use needs one (0 for a free model)."""
        limits = self.limits
        if not (limits.bot_dollars_per_day or limits.user_dollars_per_day):
            return []
        models = {route.model for p in self.personas for route in self.routes(p).all}
        unpriced = sorted(models - self.llm.prices.keys())
        problems = [
            f"limits: a money limit is set, but model {model!r} has no price: add "
            f'[llm.prices."{model}"] with input and output dollars per million tokens '
            "(0 for a free local model)"
            for model in unpriced
        ]
        # Speech counts toward the same limits (docs/voices.md#cost).
        problems += [
            f"personas[{index}].voice.price_per_million_chars: a money limit is set, so the "
            "voice needs a price (0 for a free local server)"
            for index, p in enumerate(self.personas)
            if p.voice is not None and p.voice.price_per_million_chars is None
        ]
        return problems

    def _mcp_references(self) -> list[str]:
        """MCP servers named once each, offered to bots and personas that exist."""
        problems = []
        names = [s.name for s in self.mcp_servers]
        if len(set(names)) != len(names):
            problems.append("mcp_servers: two servers share a name; give each its own")
        bots = {b.key for b in self.bots}
        personas = {p.id for p in self.personas}
        for index, server in enumerate(self.mcp_servers):
            for field, listed, known in (
                ("bots", server.bots, bots),
                ("personas", server.personas, personas),
            ):
                problems += [
                    f"mcp_servers[{index}].{field}: no {field[:-1]} {name!r} "
                    f"(known: {', '.join(sorted(known)) or 'none'})"
                    for name in listed
                    if name not in known
                ]
        return problems

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
            if entry.scene is not None:  # Telegram persona accounts' tokens
                names += entry.scene.accounts.values()
            secret = getattr(entry, "secret_token_env", None)
            if secret:
                names.append(secret)
        if self.transcription.api_key_env:
            names.append(self.transcription.api_key_env)
        if self.llm.api_key_env:
            names.append(self.llm.api_key_env)
        names += [p.voice.api_key_env for p in self.personas if p.voice and p.voice.api_key_env]
        names.append(self.web.token_env)
        for server in self.mcp_servers:
            names += server.variables
        return names

    def credentials(self) -> list[str]:
        """Credentials written into configured URLs (user-info passwords, ``?password=``...),
        so that logs can redact them like the environment's secrets."""
        urls = [self.storage.url, self.llm.base_url, self.transcription.url]
        urls += [entry.base_url for entry in self.llm.providers.values()]
        urls += [server.url for server in self.mcp_servers]
        urls += [p.voice.url for p in self.personas if p.voice is not None]
        for entry in self.bots:
            urls += [getattr(entry, name, None) for name in BOT_URL_KEYS]
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


@dataclass(frozen=True, slots=True)
class Route:
    """A model on a named provider ("default": [llm]'s)."""

    provider: str
    model: str

    def __str__(self) -> str:
        return f"{self.model} on {self.provider}"


@dataclass(frozen=True, slots=True)
class Routes:
    """Who answers one persona: its replies, their fallback, its memory tasks."""

    reply: Route
    fallback: Route | None
    tasks: Route

    @property
    def all(self) -> tuple[Route, ...]:
        return (self.reply, self.tasks) + (() if self.fallback is None else (self.fallback,))


def _provider(name: str | None) -> str:
    return name or DEFAULT_PROVIDER
