"""Health checks and metrics over HTTP: /healthz, /readyz and /metrics (Prometheus)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import ClassVar, Self

from aiohttp import web

from bot.core.errors import ListenError
from bot.metrics import Metrics

log = logging.getLogger("personabot.health")

Readiness = Callable[[], Awaitable[str | None]]  # None when ready, else the reason
Refresh = Callable[[], Awaitable[object]]  # gauges read from elsewhere, before a scrape
#: Lines /healthz shows under "ok": parts that may fail without the process failing (the MCP
#: servers: a server down takes its tools away, never the bot's answers).
Details = Callable[[], list[str]]


class Site:
    """An aiohttp application served on ``host:port`` while entered (port 0: the system picks
    one, read back into ``port``); the health server and the operator console are sites."""

    #: The setting a failure to listen names; what the log line calls the site.
    setting: ClassVar[str]
    what: ClassVar[str]
    log: ClassVar[logging.Logger]

    _host: str
    port: int
    _runner: web.AppRunner | None

    def application(self) -> web.Application:
        """The aiohttp application to serve."""
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        self._runner = web.AppRunner(self.application(), access_log=None)
        await self._runner.setup()
        await start_site(self._runner, self._host, self.port, self.setting)
        if self._runner.addresses:
            self.port = int(self._runner.addresses[0][1])
        self.log.info("%s on http://%s", self.what, address(self._host, self.port))
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


class HealthServer(Site):
    """A small aiohttp server owned by the runtime; started and stopped with it."""

    setting = "observability.listen"
    what = "health and metrics"
    log = log

    def __init__(
        self,
        *,
        host: str,
        port: int,
        metrics: Metrics,
        readiness: Readiness,
        refresh: Refresh | None = None,
        details: Details | None = None,
    ) -> None:
        self._host = host
        self._refresh = refresh
        self._details = details
        self.port = port
        self._metrics = metrics
        self._readiness = readiness
        self._runner = None

    def application(self) -> web.Application:
        """/healthz, /readyz and /metrics."""
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics_page)
        return app

    async def _healthz(self, request: web.Request) -> web.Response:
        lines = ["ok", *(self._details() if self._details is not None else [])]
        return web.Response(text="\n".join(lines) + "\n")

    async def _readyz(self, request: web.Request) -> web.Response:
        try:
            async with asyncio.timeout(5):
                reason = await self._readiness()
        except TimeoutError:
            reason = "readiness check timed out"
        if reason is None:
            return web.Response(text="ready\n")
        return web.Response(status=503, text=f"not ready: {reason}\n")

    async def _metrics_page(self, request: web.Request) -> web.Response:
        if self._refresh is not None:
            try:
                async with asyncio.timeout(5):
                    await self._refresh()
            except Exception as exc:  # a scrape still answers, with the last values
                log.warning("metrics refresh failed: %s", type(exc).__name__)
        body = self._metrics.exposition()
        return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4"})


async def start_site(runner: web.AppRunner, host: str, port: int, setting: str) -> None:
    """Bind ``runner`` on host:port, or a ListenError naming ``setting`` and the reason (the
    port taken by another process, a host not on this machine), with the runner cleaned up."""
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as exc:
        await runner.cleanup()
        raise ListenError(
            f"{setting}: cannot listen on {address(host, port)}: {exc.strerror or exc}"
        ) from None


def address(host: str, port: int) -> str:
    """``host:port`` as written in a URL (an IPv6 host in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
