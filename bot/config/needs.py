"""``RunNeeds``: what ``personabot run`` reads from the environment before it connects (bot
tokens, the model's key, the console's token), so that ``config check`` and ``run`` name an
unset one in the same round as a typo in the file (issue 35)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bot.config.bots import DEFAULT_TOKEN_VARIABLES, BotSettings, raw_key
from bot.config.llm import LLMSettings
from bot.config.observability import WEB_TOKEN_MIN, WebSettings, web_token_short
from bot.config.secrets import Secrets
from bot.config.settings import Settings
from bot.core.redact import looks_like_env_name


@dataclass(frozen=True)
class RunNeeds:
    """What ``personabot run`` reads from the environment before connecting, as the settings
    (or, when they do not validate, the raw file) say: so that an unset token is named in
    the same round as a typo (issue 35)."""

    bots: tuple[tuple[int, str, str, str], ...]  # index, bot key, platform, token variable
    provider: str
    web_token_env: str | None  # when [web] listen is set
    llm_key_env: str | None = None  # llm.api_key_env (read by the "openai" provider)
    # index, server name, variable: the secrets of [[mcp_servers]] env and headers
    mcp: tuple[tuple[int, str, str], ...] = ()
    # name, provider, key variable: each of [llm.providers]
    named: tuple[tuple[str, str, str | None], ...] = ()
    # index, bot key, persona, variable: the tokens of Telegram scenes' persona accounts
    accounts: tuple[tuple[int, str, str, str], ...] = ()

    @classmethod
    def of(cls, settings: Settings) -> RunNeeds:
        bots = tuple((i, b.key, b.platform, b.token_variable) for i, b in enumerate(settings.bots))
        web = settings.web.token_env if settings.web.listen else None
        mcp = tuple(
            (i, server.name, variable)
            for i, server in enumerate(settings.mcp_servers)
            for variable in server.variables
        )
        named = tuple(
            (name, entry.provider, entry.api_key_env)
            for name, entry in settings.llm.providers.items()
        )
        accounts = tuple(
            (i, b.key, persona, variable)
            for i, b in enumerate(settings.bots)
            for persona, variable in scene_accounts(b)
        )
        return cls(bots, settings.llm.provider, web, settings.llm.api_key_env, mcp, named, accounts)

    @classmethod
    def of_raw(cls, data: Mapping[str, Any]) -> RunNeeds | None:
        """The same from a file that did not validate; None when its shape is too broken."""
        llm, web, raw_bots = data.get("llm", {}), data.get("web", {}), data.get("bots", [])
        if not (isinstance(llm, dict) and isinstance(web, dict) and isinstance(raw_bots, list)):
            return None
        bots, accounts = [], []
        for index, entry in enumerate(raw_bots):
            if not isinstance(entry, dict):
                return None
            accounts += [(index, raw_key(index, entry), p, v) for p, v in _raw_accounts(entry)]
            platform, token = entry.get("platform"), entry.get("token_env")
            if token is not None and not (isinstance(token, str) and looks_like_env_name(token)):
                continue  # perhaps the token itself pasted in: its own problem, never shown
            if platform in DEFAULT_TOKEN_VARIABLES:
                token = token or DEFAULT_TOKEN_VARIABLES[platform]
                bots.append((index, raw_key(index, entry), str(platform), str(token)))
        provider = str(llm.get("provider", LLMSettings().provider))
        listen, token_env = web.get("listen"), web.get("token_env", WebSettings().token_env)
        if not (isinstance(token_env, str) and looks_like_env_name(token_env)):
            token_env = None  # its own problem, never shown
        key_env = llm.get("api_key_env")
        if not (isinstance(key_env, str) and looks_like_env_name(key_env)):
            key_env = None  # unset, or its own problem, never shown
        listened = token_env if listen else None
        named = _raw_providers(llm.get("providers"))
        return cls(tuple(bots), provider, listened, key_env, _raw_mcp(data), named, tuple(accounts))

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
        problems += [
            f"bots[{index}] ({key}): {variable} is not set in the environment (the token of "
            f"persona {persona}'s own account, scene.accounts)"
            for index, key, persona, variable in self.accounts
            if secrets.get(variable) is None
        ]
        problems += self.model_key_problems(secrets)
        if self.web_token_env:
            token = secrets.get(self.web_token_env)
            if token is None:
                problems.append(
                    f"web: {self.web_token_env} is not set in the environment ([web] listen is "
                    "set; the console refuses to start without its token)"
                )
            elif len(token) < WEB_TOKEN_MIN:
                problems.append(web_token_short(self.web_token_env))
        problems += [
            f"mcp_servers[{index}] ({name}): {variable} is not set in the environment"
            for index, name, variable in self.mcp
            if secrets.get(variable) is None
        ]
        return problems

    def model_key_problems(self, secrets: Secrets) -> list[str]:
        """The built-in model providers' keys ([llm] and [llm.providers]), when one needs a
        key and the environment lacks it."""
        problems = []
        uses = [("llm", self.provider, self.llm_key_env)]
        uses += [(f"llm.providers.{n}", kind, key) for n, kind, key in self.named]
        if any(kind == "anthropic" for _, kind, _ in uses) and secrets.anthropic_api_key is None:
            where = next(w for w, kind, _ in uses if kind == "anthropic")
            problems.append(
                f'ANTHROPIC_API_KEY: not set in the environment ({where}.provider = "anthropic";'
                " `run` refuses to start without it, `chat` falls back to the offline model)"
            )
        for where, kind, key in uses:
            if kind == "openai" and key and not secrets.get(key):
                problems.append(openai_key_missing(key, where))
        return problems


def scene_accounts(entry: BotSettings) -> tuple[tuple[str, str], ...]:
    """(persona, variable) of the persona accounts a Telegram scene reads at start: with
    ``voices = "auto"`` only (with "header" every line is the bot's own)."""
    scene = entry.scene
    if entry.platform != "telegram" or scene is None or scene.voices != "auto":
        return ()
    return tuple(scene.accounts.items())


def _raw_accounts(entry: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The same from a bot entry that did not validate (best effort: a value that is no
    variable's name has its own problem and is never shown)."""
    scene = entry.get("scene")
    if entry.get("platform") != "telegram" or not isinstance(scene, dict):
        return []
    accounts = scene.get("accounts")
    if scene.get("voices", "auto") != "auto" or not isinstance(accounts, dict):
        return []
    return [
        (str(p), v) for p, v in accounts.items() if isinstance(v, str) and looks_like_env_name(v)
    ]


def openai_key_missing(variable: str, where: str = "llm") -> str:
    """The problem of an unset key variable of an "openai" provider (needs and the factory)."""
    return (
        f"{where}.api_key_env: {variable} is not set in the environment ({where}.provider = "
        f'"openai"; unset {where}.api_key_env for an endpoint that takes no key)'
    )


def _raw_providers(table: object) -> tuple[tuple[str, str, str | None], ...]:
    """The [llm.providers] of a file that did not validate (best effort)."""
    found: list[tuple[str, str, str | None]] = []
    for name, entry in (table if isinstance(table, dict) else {}).items():
        if not (isinstance(name, str) and isinstance(entry, dict)):
            continue
        kind, key = entry.get("provider"), entry.get("api_key_env")
        if not (isinstance(key, str) and looks_like_env_name(key)):
            key = None
        if isinstance(kind, str):
            found.append((name, kind, key))
    return tuple(found)


def _raw_mcp(data: Mapping[str, Any]) -> tuple[tuple[int, str, str], ...]:
    """The variables ``[[mcp_servers]]`` names in a file that did not validate (best effort:
    a value that is no variable's name has its own problem and is never shown)."""
    servers = data.get("mcp_servers", [])
    found: list[tuple[int, str, str]] = []
    for index, server in enumerate(servers if isinstance(servers, list) else []):
        if not isinstance(server, dict):
            continue
        name = server.get("name")
        plain = isinstance(name, str) and re.fullmatch(r"[A-Za-z0-9-]{1,32}", name)
        shown = str(name) if plain else f"#{index}"
        for table in (server.get("env"), server.get("headers")):
            if isinstance(table, dict):
                found += [
                    (index, shown, v)
                    for v in table.values()
                    if isinstance(v, str) and looks_like_env_name(v)
                ]
    return tuple(found)
