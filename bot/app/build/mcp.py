"""``[[mcp_servers]]`` read into the MCP client's plain specs, their secrets taken from the
environment here and nowhere else (bot/mcp, docs/tools.md#mcp-servers)."""

from __future__ import annotations

from bot.config import McpServerSettings, Secrets, Settings
from bot.core.errors import ConfigError
from bot.mcp import Http, ServerSpec, Stdio


def mcp_specs(settings: Settings, secrets: Secrets) -> list[ServerSpec]:
    """Every configured server; ConfigError naming each variable that is not set (never a
    value: ``config check`` names them first, RunNeeds)."""
    problems: list[str] = []
    specs = []
    for index, server in enumerate(settings.mcp_servers):
        missing = [v for v in server.variables if secrets.get(v) is None]
        problems += [
            f"mcp_servers[{index}] ({server.name}): {v} is not set in the environment"
            for v in missing
        ]
        if not missing:
            specs.append(_spec(server, secrets))
    if problems:
        raise ConfigError(problems)
    return specs


def _spec(server: McpServerSettings, secrets: Secrets) -> ServerSpec:
    def read(table: dict[str, str]) -> dict[str, str]:
        return {name: secrets.get(variable) or "" for name, variable in table.items()}

    transport: Stdio | Http
    if server.command is not None:
        transport = Stdio(server.command, tuple(server.args), read(server.env), server.cwd)
    else:
        assert server.url is not None  # the settings hold one of the two
        transport = Http(server.url, read(server.headers))
    return ServerSpec(
        name=server.name,
        transport=transport,
        tools={tool: server.effects_of(tool) for tool in server.tools},
        bots=frozenset(server.bots),
        personas=frozenset(server.personas),
        call_timeout_seconds=server.call_timeout_seconds,
        start_timeout_seconds=server.start_timeout_seconds,
        max_result_chars=server.max_result_chars,
    )
