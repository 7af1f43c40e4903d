"""MCP servers as tools (docs/tools.md#mcp-servers), on the official ``mcp`` SDK's client.

- ``spec``: ``ServerSpec``, what the composition root hands over (secrets already read);
- ``connection``: one server's session, kept up by a task of its own, restarted with backoff;
  the only module that imports the SDK;
- ``offered``: a listed tool as a ``Tool`` of the tool loop (the one place that decides how an
  effectful call is made), its result capped;
- ``servers``: ``McpServers``, every server of a runtime, the tools each bot and persona may use.
"""

from bot.mcp.connection import CallFailed, Connection, Listed, State
from bot.mcp.servers import McpServers
from bot.mcp.spec import Http, ServerSpec, Stdio

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
