"""A personabot process for multi-process tests: the real runtime behind an HTTP test adapter.

::

    python -m tests.fakes.worker --config personabot.toml --port 0 --replies replies.jsonl

Builds what ``personabot run`` builds (``App.running`` with the store from ``[storage]``
and the real Claude client from ``[llm]``, so ``ANTHROPIC_API_KEY`` must be set), but instead
of Telegram or Discord it hosts one :class:`HttpTestAdapter` for the first persona:

* ``POST /inbound`` with JSON ``{chat_id, author_id, text, message_id}`` hands one message to
  the router and answers once it is ingested (stored, version bumped, timer armed);
* every reply the pipeline sends is appended as one JSON line to ``--replies`` (flushed at
  once, so a SIGKILLed worker's file holds exactly what it delivered) and listed by
  ``GET /replies``;
* once listening it prints ``READY <port> <pid> <holder>`` on stdout (``--port 0`` picks a
  free port; ``holder`` is the name its leases carry).

SIGTERM or SIGINT stops it gracefully.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from aiohttp import web

from adapters.base import BaseAdapter
from bot.app import App
from bot.app.logs import setup_logging
from bot.config import Secrets, load_settings
from bot.core.events import ConversationKey, Inbound, Reply
from bot.core.ports import InboundHandler

PLATFORM = "test"


class HttpTestAdapter(BaseAdapter):
    """A platform whose updates arrive over local HTTP and whose replies go to a file."""

    def __init__(self, *, bot_key: str, host: str, port: int, replies: Path) -> None:
        super().__init__(bot_key=bot_key)
        self._host = host
        self._port = port
        self._replies_path = replies
        self._replies: list[dict[str, Any]] = []
        self._handler: InboundHandler | None = None
        self.bound_port: int | None = None
        self.listening = asyncio.Event()

    def conversation(self, chat_id: str) -> ConversationKey:
        """The key of a chat of this adapter."""
        return ConversationKey(PLATFORM, chat_id, None, self.bot_key)

    async def run(self, handler: InboundHandler) -> None:
        """Serve ``/inbound`` and ``/replies`` until cancelled."""
        self._handler = handler
        app = web.Application()
        app.router.add_post("/inbound", self._inbound)
        app.router.add_get("/replies", self._list_replies)
        runner = web.AppRunner(app, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self._host, self._port)
        await site.start()
        server = site._server
        assert server is not None
        self.bound_port = int(server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
        self.listening.set()
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    async def _inbound(self, request: web.Request) -> web.Response:
        body = await request.json()
        assert self._handler is not None
        await self._handler(
            Inbound(
                conversation=self.conversation(str(body["chat_id"])),
                author_id=str(body["author_id"]),
                display_name=str(body.get("display_name", body["author_id"])),
                text=str(body["text"]),
                platform_message_id=str(body["message_id"]),
            )
        )
        return web.json_response({"ok": True})

    async def _list_replies(self, request: web.Request) -> web.Response:
        return web.json_response(self._replies)

    async def send(self, reply: Reply) -> None:
        """Record the reply (file first: what is in the file was delivered)."""
        line = {
            "chat_id": reply.conversation.chat_id,
            "text": reply.text,
            "outbox_id": reply.outbox_id,
            "pid": os.getpid(),
            "at": time.time(),
        }
        with self._replies_path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")
            out.flush()
            os.fsync(out.fileno())
        self._replies.append(line)

    @contextlib.asynccontextmanager
    async def typing(self, conversation: ConversationKey) -> AsyncIterator[None]:
        """No typing indicator."""
        yield


async def serve(config: Path, host: str, port: int, replies: Path) -> int:
    """Run the worker until SIGTERM/SIGINT."""
    settings = load_settings(config)
    secrets = Secrets()
    setup_logging(settings.logging.level, secrets.values())
    persona = settings.persona()
    adapter = HttpTestAdapter(bot_key=f"test-{persona.id}", host=host, port=port, replies=replies)
    app = App(settings, secrets)
    llm = app.build_llm(offline_fallback=False)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with app.running({adapter.bot_key: (persona, adapter)}, llm=llm) as rt:
        serving = asyncio.create_task(adapter.run(rt.router), name="http adapter")
        listening = asyncio.create_task(adapter.listening.wait())
        await asyncio.wait({serving, listening}, return_when=asyncio.FIRST_COMPLETED)
        if serving.done():
            listening.cancel()
            await serving  # raises why it could not listen
        if rt.mcp is not None:  # ready means its MCP servers' tools are offered too
            from bot.mcp import State

            for connection in rt.mcp.connections.values():
                await asyncio.wait_for(connection.wait_for(State.UP), 30)
        print(f"READY {adapter.bound_port} {os.getpid()} {rt.pipeline.holder}", flush=True)
        await stop.wait()
        serving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await serving
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m tests.fakes.worker``."""
    parser = argparse.ArgumentParser(prog="python -m tests.fakes.worker")
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--replies", type=Path, required=True)
    args = parser.parse_args(argv)
    return asyncio.run(serve(args.config, args.host, args.port, args.replies))


if __name__ == "__main__":
    sys.exit(main())
