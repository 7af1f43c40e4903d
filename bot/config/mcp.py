"""``[[mcp_servers]]``: MCP servers whose tools the model may call (docs/tools.md).

A server is started as a process (``command`` + ``args``, spoken to over stdio) or reached at
``url`` (streamable HTTP). Secrets never sit in the file: ``env`` and ``headers`` map a name
the server sees (a variable of its environment, an HTTP header) to the name of a variable of
personabot's environment that holds the value. Only the tools listed in ``tools`` are offered,
and the operator says whether each is read-only or has effects (``effects``, ``tool_effects``).
"""

from __future__ import annotations

import re
from typing import Final, Literal

from pydantic import Field, field_validator, model_validator

from bot.config.fields import EnvName, Section

#: A tool name the model may see: the provider's limit.
MAX_TOOL_NAME: Final = 64
#: Between the server's name and its tool's in the name the model sees.
SEPARATOR: Final = "__"
_SERVER_NAME: Final = r"^[A-Za-z0-9][A-Za-z0-9-]{0,31}$"
_TOOL_NAME: Final = re.compile(r"^[A-Za-z0-9_-]+$")
_HEADER_NAME: Final = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

Effects = Literal["read_only", "effectful"]


class McpServerSettings(Section):
    """One MCP server: how to reach it, which of its tools are offered, and to whom."""

    # The prefix of its tools' names (``<name>__<tool>``): letters, digits and '-'.
    name: str = Field(pattern=_SERVER_NAME)
    # stdio: the program to start, its arguments, and its environment (variable the server
    # sees -> variable of personabot's environment holding the value).
    command: str | None = Field(default=None, min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, EnvName] = Field(default_factory=dict)
    cwd: str | None = None  # its working directory (default: personabot's)
    # streamable HTTP: the endpoint and its headers (header -> variable holding its value).
    url: str | None = Field(default=None, pattern=r"^https?://")
    headers: dict[str, EnvName] = Field(default_factory=dict)
    # The server's tools the model may call; a tool not listed is never offered.
    tools: list[str] = Field(min_length=1)
    # Whether its tools change anything; the operator decides, never the server.
    effects: Effects
    # Per tool, over ``effects``.
    tool_effects: dict[str, Effects] = Field(default_factory=dict)
    # Bots (keys) and personas (ids) whose model may call these tools; empty: every one.
    bots: list[str] = Field(default_factory=list)
    personas: list[str] = Field(default_factory=list)
    call_timeout_seconds: float = Field(default=15.0, gt=0, le=600)
    start_timeout_seconds: float = Field(default=30.0, gt=0, le=600)
    # A longer result is cut, and the model told so.
    max_result_chars: int = Field(default=16_000, ge=100, le=1_000_000)

    @field_validator("tools")
    @classmethod
    def _tool_names(cls, tools: list[str]) -> list[str]:
        for tool in tools:
            if not _TOOL_NAME.match(tool):
                raise ValueError(f"{tool!r}: a tool offered is named with letters, digits, _, -")
        if len(set(tools)) != len(tools):
            raise ValueError("a tool is listed twice")
        return tools

    @field_validator("env")
    @classmethod
    def _env_names(cls, env: dict[str, str]) -> dict[str, str]:
        for name in env:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ValueError(f"{name!r} is not an environment variable's name")
        return env

    @field_validator("headers")
    @classmethod
    def _header_names(cls, headers: dict[str, str]) -> dict[str, str]:
        for name in headers:
            if not _HEADER_NAME.match(name):
                raise ValueError(f"{name!r} is not an HTTP header's name")
        return headers

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerSettings:
        if (self.command is None) == (self.url is None):
            raise ValueError("command: give command (stdio) or url (streamable HTTP), not both")
        if self.url is not None and (self.args or self.env or self.cwd):
            raise ValueError("args: args, env and cwd are for a server started by command")
        if self.command is not None and self.headers:
            raise ValueError("headers: headers are for a server reached by url")
        unknown = sorted(set(self.tool_effects) - set(self.tools))
        if unknown:
            raise ValueError(f"tool_effects: {', '.join(unknown)} not in tools")
        longest = max(self.tools, key=len)
        if len(self.offered_name(longest)) > MAX_TOOL_NAME:
            raise ValueError(
                f"tools: {self.offered_name(longest)!r} is longer than {MAX_TOOL_NAME} "
                "characters (the name the model sees); shorten the server's name"
            )
        return self

    def offered_name(self, tool: str) -> str:
        """The name the model sees of one of this server's tools."""
        return f"{self.name}{SEPARATOR}{tool}"

    def effects_of(self, tool: str) -> Effects:
        """Whether this tool is read-only or has effects, as the operator said."""
        return self.tool_effects.get(tool, self.effects)

    @property
    def variables(self) -> list[str]:
        """The variables of personabot's environment this server reads secrets from."""
        return [*self.env.values(), *self.headers.values()]
