"""MCP servers as tools (docs/tools.md#mcp-servers), on the official ``mcp`` SDK's client.

- ``spec``: ``ServerSpec``, what the composition root hands over (secrets already read);
- ``connection``: one server's session, kept up by a task of its own, restarted with backoff;
  the only module that imports the SDK;
- ``offered``: a listed tool as a ``Tool`` of the tool loop (the one place that decides how an
  effectful call is made), its result capped;
- ``servers``: ``McpServers``, every server of a runtime, the tools each bot and persona may use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from bot.mcp.spec import Http, ServerSpec, Stdio

if TYPE_CHECKING:
    from bot.mcp.connection import CallFailed, Connection, Listed, State
    from bot.mcp.servers import McpServers

# The SDK is imported only when a server is configured (its connections, McpServers): every
# process that starts personabot would otherwise pay for importing it (a second, cold).
_LAZY = {
    "CallFailed": "bot.mcp.connection",
    "Connection": "bot.mcp.connection",
    "Listed": "bot.mcp.connection",
    "State": "bot.mcp.connection",
    "McpServers": "bot.mcp.servers",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'bot.mcp' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "CallFailed",
    "Connection",
    "Http",
    "Listed",
    "McpServers",
    "ServerSpec",
    "State",
    "Stdio",
]
