"""Settings: one TOML file plus environment overrides, validated before anything connects.

Secrets (``ANTHROPIC_API_KEY``, bot tokens) are never read from the TOML: the file names the
environment variable (``token_env``) and :class:`Secrets` reads it.

One module per concern (docs/architecture.md#map), each importing only the ones listed after
it (an import-linter contract in pyproject.toml):

- ``loading``: ``load_settings``, reading the TOML file, one ``ConfigError`` per round
- ``problems``: pydantic's errors as ``key.path: problem`` lines, values quoted when harmless
- ``environment``: the ``PERSONABOT_*`` overrides a problem came from, unknown sections
- ``needs``: ``RunNeeds``, what ``run`` reads from the environment before connecting
- ``settings``: ``Settings``, the whole file, and the checks across its sections
- ``references``: bots naming personas, bot keys used twice, unknown platforms (also raw)
- ``personas``: ``[[personas]]`` and lorebooks; ``bots``: ``[[bots]]`` by platform, bot keys
- ``mcp``: ``[[mcp_servers]]``, MCP servers whose tools the model may call
- ``llm``, ``memory``, ``limits``, ``initiatives``, ``observability``, ``storage``: sections
- ``fields``, ``plugins``, ``secrets``: shared field types, plugin names, ``Secrets``

Everything importers use is re-exported here: ``from bot.config import Settings``.
"""

from bot.config.bots import (
    BUILTIN_PLATFORMS,
    DEFAULT_TOKEN_VARIABLES,
    AppCommandSettings,
    BotSettings,
    DiscordBotSettings,
    PluginBotSettings,
    TelegramBotSettings,
)
from bot.config.environment import env_sources
from bot.config.fields import EnvName, PlatformId
from bot.config.initiatives import InitiativeSettings, ScheduleSettings
from bot.config.limits import (
    MAX_TOKEN_LIMIT,
    MAX_TURN_LIMIT,
    AccessSettings,
    LimitSettings,
    QueueSettings,
    ToolSettings,
)
from bot.config.llm import (
    DEFAULT_PRICES,
    LLMSettings,
    MediaConfig,
    PriceSettings,
    TranscriptionConfig,
)
from bot.config.loading import (
    DEFAULT_CONFIG_PATH,
    MAX_CONFIG_BYTES,
    bundled_example_path,
    load_settings,
)
from bot.config.mcp import McpServerSettings
from bot.config.memory import MemorySettings, RetentionSettings, SessionSettings
from bot.config.needs import RunNeeds, openai_key_missing, scene_accounts
from bot.config.observability import (
    WEB_TOKEN_MIN,
    LoggingSettings,
    ObservabilitySettings,
    WebSettings,
    listen_address,
    web_token_short,
)
from bot.config.personas import LorebookSettings, LoreEntrySettings, PersonaSettings
from bot.config.plugins import NAME_PATTERN, PluginName, unknown_name
from bot.config.references import reference_problems
from bot.config.secrets import MIN_SECRET, Secrets
from bot.config.settings import ENV_PREFIX, Settings
from bot.config.storage import STORAGE_PREFIXES, StorageSettings
from bot.config.voices import VoiceSettings

__all__ = [
    "BUILTIN_PLATFORMS",
    "DEFAULT_CONFIG_PATH",
    "DEFAULT_PRICES",
    "DEFAULT_TOKEN_VARIABLES",
    "ENV_PREFIX",
    "MAX_CONFIG_BYTES",
    "MAX_TOKEN_LIMIT",
    "MAX_TURN_LIMIT",
    "MIN_SECRET",
    "NAME_PATTERN",
    "STORAGE_PREFIXES",
    "WEB_TOKEN_MIN",
    "AccessSettings",
    "AppCommandSettings",
    "BotSettings",
    "DiscordBotSettings",
    "EnvName",
    "InitiativeSettings",
    "LLMSettings",
    "LimitSettings",
    "LoggingSettings",
    "LoreEntrySettings",
    "LorebookSettings",
    "McpServerSettings",
    "MediaConfig",
    "MemorySettings",
    "ObservabilitySettings",
    "PersonaSettings",
    "PlatformId",
    "PluginBotSettings",
    "PluginName",
    "PriceSettings",
    "QueueSettings",
    "RetentionSettings",
    "RunNeeds",
    "ScheduleSettings",
    "Secrets",
    "SessionSettings",
    "Settings",
    "StorageSettings",
    "TelegramBotSettings",
    "ToolSettings",
    "TranscriptionConfig",
    "VoiceSettings",
    "WebSettings",
    "bundled_example_path",
    "env_sources",
    "listen_address",
    "load_settings",
    "openai_key_missing",
    "reference_problems",
    "scene_accounts",
    "unknown_name",
    "web_token_short",
]
