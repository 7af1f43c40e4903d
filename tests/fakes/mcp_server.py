"""A small MCP server for the tests of bot/mcp, on the official SDK's server side.

Run as ``python -m tests.fakes.mcp_server --transport stdio`` (the client starts it) or
``--transport http`` (prints ``listening on PORT`` once it accepts connections; port 0 lets the
system choose). Its tools:

- ``lookup``: read-only, returns a fixed fact about a topic;
- ``add_note``: effectful, appends a line to the file ``--notes`` (or ``FAKE_MCP_NOTES``)
  names, so that a test counts the calls that really ran;
- ``hang``: never answers; ``crash``: the process exits; ``huge``: 10 MB of text;
- ``whoami``: the value of ``FAKE_MCP_SECRET`` as the server sees it (a test of the
  environment passed through checks it arrived, never how it is logged).

Over HTTP, with ``FAKE_MCP_TOKEN`` set, a request without ``Authorization: Bearer <token>``
is refused with 401.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
from pathlib import Path
from typing import Any, Final

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

FACT: Final = "The Eiffel Tower is 330 metres tall."
HUGE_CHARS: Final = 10 * 1024 * 1024


def server(notes: Path | None) -> MCPServer:
    """The server with its tools."""
    mcp = MCPServer("personabot-test-server", log_level="WARNING")

    @mcp.tool(annotations=ToolAnnotations(read_only_hint=True))
    def lookup(topic: str) -> str:
        """Look up a fact about a topic."""
        return f"{FACT} (topic: {topic})"

    @mcp.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
    def add_note(text: str) -> str:
        """Append a note to the notebook."""
        if notes is None:
            raise ValueError("no notebook configured")
        with notes.open("a", encoding="utf-8") as out:
            out.write(text + "\n")
        return "noted"

    @mcp.tool()
    async def hang() -> str:
        """Never answers."""
        await asyncio.Event().wait()
        return "never"

    @mcp.tool()
    def crash() -> str:
        """Exits the server process."""
        sys.stdout.flush()
        os._exit(3)

    @mcp.tool()
    def huge() -> str:
        """Returns 10 MB of text."""
        return "x" * HUGE_CHARS

    @mcp.tool()
    def whoami() -> str:
        """The secret this server was given."""
        return os.environ.get("FAKE_MCP_SECRET", "(none)")

    return mcp


def _bearer_only(app: Any, token: str) -> Any:
    """The ASGI app refusing HTTP requests without the bearer token."""
    expected = f"Bearer {token}".encode()

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != expected:
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b"unauthorized"})
            return
        await app(scope, receive, send)

    return guarded


async def _serve_http(mcp: MCPServer, port: int) -> None:
    import uvicorn

    app: Any = mcp.streamable_http_app(host="127.0.0.1")
    token = os.environ.get("FAKE_MCP_TOKEN")
    if token:
        app = _bearer_only(app, token)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    served = uvicorn.Server(config)
    task = asyncio.create_task(served.serve(sockets=[sock]))
    while not served.started:
        if task.done():
            await task
            return
        await asyncio.sleep(0.01)
    print(f"listening on {sock.getsockname()[1]}", flush=True)
    await task


def main(argv: list[str] | None = None) -> None:
    """Serve the test tools on stdio or streamable HTTP."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--notes", type=Path, default=None)
    args = parser.parse_args(argv)
    notes = args.notes or (
        Path(os.environ["FAKE_MCP_NOTES"]) if "FAKE_MCP_NOTES" in os.environ else None
    )
    mcp = server(notes)
    if args.transport == "stdio":
        mcp.run("stdio")
    else:
        asyncio.run(_serve_http(mcp, args.port))


if __name__ == "__main__":
    main()
