"""``[[bots]]``: one entry per bot account, by platform (Telegram, Discord, or one a plugin
registers), and the key each bot's chats are stored under (docs/architecture.md#keys)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, Discriminator, Field, Tag, model_validator

from bot.config.fields import EnvName, PlatformId, Section
from bot.config.plugins import NAME_PATTERN, PluginName
from bot.config.scenes import SceneSettings

#: The token variable of a bot that names none, by built-in platform.
DEFAULT_TOKEN_VARIABLES: Final = {"telegram": "TELEGRAM_BOT_TOKEN", "discord": "DISCORD_BOT_TOKEN"}


class _BotBase(Section):
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
    # Its personas speak together in each chat (docs/scenes.md): the cast is ``personas``.
    scene: SceneSettings | None = None

    @model_validator(mode="after")
    def _one_default(self) -> _BotBase:
        if not self.persona and not self.personas:
            raise ValueError("persona: required (or personas = [...])")
        if self.persona and self.personas and self.persona not in self.personas:
            raise ValueError(f"persona: {self.persona!r} is not one of personas")
        if len(set(self.personas)) != len(self.personas):
            raise ValueError("personas: a persona is listed twice")
        if self.scene is not None and len(self.personas) < 2:
            raise ValueError("scene: the cast is personas = [...], at least two of them")
        if self.scene is not None:
            strangers = sorted(set(self.scene.accounts) - set(self.personas))
            if strangers:
                raise ValueError(
                    f"scene.accounts: {', '.join(strangers)} not in this bot's personas"
                )
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
        """Stable name of this bot in conversation keys (``raw_key`` derives it the same way
        from an entry that does not validate)."""
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


class AppCommandSettings(Section):
    """``[bots.app_commands]``: the Discord bot's commands as application (slash) commands,
    synced at start (docs/discord.md#sync)."""

    # global: everywhere the bot is (and its DMs); guilds: only in the servers listed (or the
    # bot's own ``guilds``), registered at once: for development; off: none registered (the
    # commands this bot registered before are left as they are).
    sync: Literal["global", "guilds", "off"] = "global"
    guilds: list[int] = Field(default_factory=list)

    @model_validator(mode="after")
    def _guilds_with_guilds(self) -> AppCommandSettings:
        if self.guilds and self.sync != "guilds":
            raise ValueError(f"guilds: only with sync = 'guilds' (sync is {self.sync!r})")
        if any(g <= 0 for g in self.guilds):
            raise ValueError("guilds: server ids are positive numbers")
        return self


class DiscordBotSettings(_BotBase):
    """A Discord bot account (discord.py 2)."""

    platform: Literal["discord"]
    guilds: list[int] = Field(default_factory=list)
    app_commands: AppCommandSettings = Field(default_factory=AppCommandSettings)
    api_base: str | None = None
    gateway_url: str | None = None
    shard_id: int | None = Field(default=None, ge=0)
    shard_count: int | None = Field(default=None, ge=1)

    @property
    def token_variable(self) -> str:
        """Environment variable holding the bot token."""
        return self.token_env or DEFAULT_TOKEN_VARIABLES["discord"]

    @property
    def command_guilds(self) -> tuple[int, ...]:
        """The servers ``sync = "guilds"`` registers the commands in."""
        return tuple(self.app_commands.guilds or self.guilds)

    @model_validator(mode="after")
    def _no_drafts(self) -> DiscordBotSettings:
        if self.stream == "draft":
            raise ValueError(
                "stream: Discord has no drafts; use 'edit' (a message edited in place) or 'off'"
            )
        if self.scene is not None and self.scene.accounts:
            raise ValueError(
                "scene.accounts: Telegram only; on Discord each persona posts through a "
                "webhook of the channel (voices = 'auto')"
            )
        if self.app_commands.sync == "guilds" and not self.command_guilds:
            raise ValueError(
                "app_commands.guilds: list the servers to register the commands in (sync = "
                "'guilds'), or set the bot's guilds"
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


#: The keys of a bot entry that hold URLs (credentials written into them are redacted).
BOT_URL_KEYS: Final = ("api_server", "webhook_url", "api_base", "gateway_url")
#: Platforms whose keys this module knows; any other name is a plugin's (PluginBotSettings).
BUILTIN_PLATFORMS: Final = ("telegram", "discord")
#: The tag of ``BotSettings`` for every platform that is not built in.
PLUGIN_TAG: Final = "plugin platform"
#: The model of each tag of ``BotSettings`` (problems name a mistyped key by it).
PLATFORM_MODELS: Final[dict[str, type[BaseModel]]] = {
    "telegram": TelegramBotSettings,
    "discord": DiscordBotSettings,
    PLUGIN_TAG: PluginBotSettings,
}


def _platform_tag(value: Any) -> str | None:
    platform = (
        value.get("platform") if isinstance(value, dict) else getattr(value, "platform", None)
    )
    if platform is None:
        return None
    return platform if platform in BUILTIN_PLATFORMS else PLUGIN_TAG


BotSettings = Annotated[
    Annotated[TelegramBotSettings, Tag("telegram")]
    | Annotated[DiscordBotSettings, Tag("discord")]
    | Annotated[PluginBotSettings, Tag(PLUGIN_TAG)],
    Discriminator(_platform_tag),
]


def raw_key(index: int, entry: Mapping[str, Any]) -> str:
    """A raw ``[[bots]]`` entry's key as ``_BotBase.key`` derives it; ``bots[i]`` when that
    is no id (a token pasted into ``id`` has its own problem and is never quoted)."""
    listed = entry.get("personas")
    first = listed[0] if isinstance(listed, list) and listed else ""
    key = str(entry.get("id") or f"{entry.get('platform')}-{entry.get('persona') or first}")
    return key if re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", key) else f"bots[{index}]"
