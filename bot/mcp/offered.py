"""An MCP server's tool as a :class:`~bot.runtime.tools.Tool` of the tool loop: its name
prefixed by the server's, its description and input schema as the server lists them, and a
call whose failure the model reads as the tool's error (``is_error``), never a failed turn."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import pydantic

from bot.mcp.connection import CallFailed, Connection, Listed
from bot.runtime.tools import Tool, ToolError

#: The server validates the arguments against its own schema; the loop passes them through.
_ANY_ARGUMENTS: Final = pydantic.create_model(
    "mcp_arguments", __config__=pydantic.ConfigDict(extra="allow")
)
#: Counts one call by (server, tool, outcome): ok, error, timeout, failed, unavailable.
CountMcpCall = Callable[[str, str, str], None]


def offered(listed: Listed, connection: Connection, count: CountMcpCall) -> Tool:
    """The tool the model is shown for ``listed``.

    The one place that decides how an effectful call is made: inside the turn, whose model
    needs its result, under the turn's ledger (``commits``: a fresh check that no newer input
    arrived and the lease is held, a record written before the call so that it is never made
    twice, and the turn committed once it is: bot/runtime/ledger.py, docs/tools.md).
    """
    spec = connection.spec
    server, tool = spec.name, listed.name
    limit = spec.max_result_chars

    async def run(**arguments: Any) -> str:
        try:
            text = await connection.call(tool, arguments)
        except CallFailed as exc:
            count(server, tool, exc.outcome)
            raise ToolError(f"The tool failed: {exc.reason}") from None
        count(server, tool, "ok")
        return capped(text, limit)

    return Tool(
        name=spec.offered_name(tool),
        description=listed.description,
        input_schema=listed.input_schema,
        side_effects=False,
        commits=spec.tools[tool] == "effectful",
        run=run,
        arguments=_ANY_ARGUMENTS,
    )


def capped(text: str, limit: int) -> str:
    """``text`` cut at ``limit`` characters, saying how much was left out."""
    if len(text) <= limit:
        return text if text.strip() else "(empty)"
    return (
        f"{text[:limit]}\n[... the result was cut: {len(text) - limit} more characters "
        "were not shown]"
    )
