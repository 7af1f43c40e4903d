"""The life cycle the fake servers share: one aiohttp server on ``127.0.0.1`` and a free port.

A subclass builds its application (:meth:`FakeServer._build_app`: routes, middlewares, body
limit) and wakes what it holds in :meth:`FakeServer._before_cleanup`::

    class FakeThing(FakeServer):
        def _build_app(self) -> web.Application:
            app = web.Application()
            app.router.add_get("/thing", self._thing)
            return app

    async with FakeThing() as fake:
        ...point a client at fake.base_url...
"""

from __future__ import annotations

import json
from types import TracebackType
from typing import Any, Self

from aiohttp import web


class FakeServer:
    """Base of the fake servers; use a subclass as ``async with``."""

    def __init__(self, *, shutdown_timeout: float = 0.5) -> None:
        # How long cleanup waits for handlers still running: a fake never holds one longer,
        # as _before_cleanup has woken every request it was holding.
        self._shutdown_timeout = shutdown_timeout
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        #: Cancel a handler whose client went away (aiohttp's ``handler_cancellation``), so a
        #: fake can notice a request its client closed; set before :meth:`start`.
        self.handler_cancellation = False

    def _build_app(self) -> web.Application:
        """The application to serve, its routes added (called by every :meth:`start`)."""
        raise NotImplementedError

    async def _before_cleanup(self) -> None:
        """Wake every request the fake holds (long polls, hangs, sockets) before it stops.

        Runs before the runner's cleanup, which would otherwise wait ``shutdown_timeout``
        for each held handler and then cancel it.
        """

    @property
    def port(self) -> int:
        """The TCP port the server listens on."""
        if self._port is None:
            raise RuntimeError(f"{type(self).__name__} is not running; use `async with`")
        return self._port

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``, no trailing slash."""
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        """Listen on 127.0.0.1 and a free port."""
        self._runner = web.AppRunner(
            self._build_app(),
            access_log=None,
            shutdown_timeout=self._shutdown_timeout,
            handler_cancellation=self.handler_cancellation,
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self._port = int(self._runner.addresses[0][1])

    async def close(self) -> None:
        """Wake what the fake holds, then stop listening (twice is harmless)."""
        await self._before_cleanup()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
            self._port = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


async def json_body(request: web.Request) -> dict[str, Any]:
    """A request's JSON object as the fakes record it: not JSON kept as ``{"_raw": text}``,
    JSON that is not an object as ``{"_json": value}`` (so a fake's checks can refuse it)."""
    raw = await request.read()
    try:
        body = json.loads(raw) if raw else {}
    except ValueError:
        return {"_raw": raw.decode("utf-8", "replace")}
    return body if isinstance(body, dict) else {"_json": body}
