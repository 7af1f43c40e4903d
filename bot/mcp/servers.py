"""The MCP servers of one runtime: each connected by a task of its own, their allowed tools
offered to the bots and personas that may use them (docs/tools.md#mcp-servers)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Self

from bot.core.clock import Clock
from bot.mcp.connection import Connection, Listed, State
from bot.mcp.offered import offered
from bot.mcp.spec import ServerSpec
from bot.metrics import Metrics
from bot.runtime.tools import Tool


class McpServers:
    """Connects every server in the background (none ever delays the start) and offers its
    tools: a ``ToolSource`` of the tool loop (bot/runtime/extensions.py)."""

    def __init__(
        self, specs: Sequence[ServerSpec], *, clock: Clock, metrics: Metrics | None = None
    ) -> None:
        self._clock = clock
        self._metrics = metrics
        self.connections = {
            s.name: Connection(s, clock=clock, on_change=self._changed) for s in specs
        }
        self._tasks: list[asyncio.Task[None]] = []
        # Per server: the listing its tools were made from, and those tools (made once per
        # listing, so that every turn's request holds the same definitions).
        self._made: dict[str, tuple[tuple[Listed, ...], tuple[Tool, ...]]] = {}

    async def __aenter__(self) -> Self:
        for name, connection in self.connections.items():
            self._tasks.append(asyncio.create_task(connection.run(), name=f"MCP server {name}"))
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop every connection (each stops its server's process or HTTP session)."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def tools_for(self, bot: str, persona: str) -> tuple[Tool, ...]:
        """The tools this bot speaking as this persona may call, sorted by name. A server
        that is down keeps offering what it last listed: a call then fails visibly to the
        model, and the request stays the same (the prompt cache holds)."""
        found: list[Tool] = []
        for name, connection in self.connections.items():
            if connection.spec.serves(bot, persona):
                found += self._tools_of(name, connection)
        return tuple(sorted(found, key=lambda t: t.name))

    def _tools_of(self, name: str, connection: Connection) -> tuple[Tool, ...]:
        listed = connection.listed
        made = self._made.get(name)
        if made is None or made[0] is not listed:
            allowed = connection.spec.tools
            tools = tuple(offered(t, connection, self._count) for t in listed if t.name in allowed)
            made = self._made[name] = (listed, tools)
        return made[1]

    def status(self) -> list[str]:
        """One line per server for the health page: up, starting, or down and why."""
        lines = []
        for name, c in self.connections.items():
            line = f"mcp server {name}: {c.state.value}"
            if c.state is State.DOWN and c.retry_at is not None:
                wait = max(0.0, c.retry_at - self._clock.now())
                line += f" ({c.problem}; restarting in {wait:.0f} s)"
            if c.restarts:
                line += f", restarted {c.restarts} time(s)"
            lines.append(line)
        return lines

    def _changed(self, connection: Connection) -> None:
        if self._metrics is not None:
            up = 1 if connection.state is State.UP else 0
            self._metrics.mcp_server_up.labels(connection.spec.name).set(up)

    def _count(self, server: str, tool: str, outcome: str) -> None:
        if self._metrics is not None:
            self._metrics.mcp_calls.labels(server, tool, outcome).inc()
