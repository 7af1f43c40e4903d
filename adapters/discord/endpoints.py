"""Where discord.py connects: the REST base URL and the gateway URL, shared by the process.

discord.py 2 has no per-client setting for either. The REST base is the class attribute
``discord.http.Route.BASE`` (every request builds its URL from it) and the first gateway
connection uses the class attribute ``discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY`` (resumes
use the ``resume_gateway_url`` the gateway sends in READY). Setting them is the library's
class-level configuration, with a **process-wide** effect: every discord.py client of the
process talks to the same endpoints. So every Discord bot entry of one process must name the same
``api_base`` and ``gateway_url`` (or none); a conflict is a configuration error raised before
anything connects, and the defaults come back when the last adapter using them closes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Final
from urllib.parse import SplitResult, urlsplit

import yarl
from discord.gateway import DiscordWebSocket
from discord.http import Route

from bot.core.errors import ConfigError
from bot.core.redact import redact_url

API_PATH: Final = "/api/v10"


@dataclass(frozen=True, slots=True)
class Endpoints:
    """A REST base URL (with its ``/api/v10`` path) and a gateway websocket URL."""

    api_base: str
    gateway_url: str


#: discord.py's own values, captured before anything changes them.
DISCORD_ENDPOINTS: Final = Endpoints(Route.BASE, str(DiscordWebSocket.DEFAULT_GATEWAY))


def endpoints_for(api_base: str | None, gateway_url: str | None, *, where: str) -> Endpoints:
    """Validate the configured URLs; unset means Discord's. ``where`` names the config entry."""
    problems: list[str] = []
    base = DISCORD_ENDPOINTS.api_base
    if api_base is not None:
        parts = _checked(api_base, "http", f"{where}.api_base", problems)
        # A bare proxy address gets Discord's API path, as proxies expect /api/v10/... paths.
        path = parts.path.rstrip("/") or API_PATH
        base = f"{parts.scheme}://{parts.netloc}{path}"
    gateway = DISCORD_ENDPOINTS.gateway_url
    if gateway_url is not None:
        _checked(gateway_url, "ws", f"{where}.gateway_url", problems)
        gateway = gateway_url.strip()
    if problems:
        raise ConfigError(problems)
    return Endpoints(base, gateway)


def _checked(url: str, scheme: str, what: str, problems: list[str]) -> SplitResult:
    """``url`` split; a problem noted unless it has a host and its scheme is ``scheme`` or
    its secure kind (``http`` or ``https``, ``ws`` or ``wss``)."""
    parts = urlsplit(url.strip())
    if parts.scheme not in {scheme, f"{scheme}s"} or not parts.netloc:
        article = "an" if scheme == "http" else "a"
        shown = redact_url(url)
        problems.append(f"{what}: must be {article} {scheme}(s) URL (got {shown!r})")
    return parts


class SharedEndpoints:
    """The one pair of endpoints discord.py uses in this process, held by Discord adapters.

    Class-level state on purpose: it mirrors discord.py's own class attributes, which are
    process-wide whatever we do. ``acquire`` on adapter creation, ``release`` on close.
    """

    _current: ClassVar[Endpoints | None] = None
    _holders: ClassVar[int] = 0

    @classmethod
    def acquire(cls, wanted: Endpoints, *, where: str) -> None:
        """Point discord.py at ``wanted``; ConfigError if live adapters use other endpoints."""
        if cls._holders and cls._current != wanted:
            raise ConfigError(
                [
                    f"{where}: api_base/gateway_url differ from another Discord bot of this "
                    "process; discord.py uses one REST base and one gateway URL per process, so "
                    "run bots with different endpoints as separate processes"
                ]
            )
        Route.BASE = wanted.api_base
        DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(wanted.gateway_url)
        cls._current = wanted
        cls._holders += 1

    @classmethod
    def holders(cls) -> int:
        """How many live adapters hold the endpoints now."""
        return cls._holders

    @classmethod
    def release(cls) -> None:
        """Give back one hold; the last one restores discord.py's defaults."""
        cls._holders = max(0, cls._holders - 1)
        if cls._holders == 0:
            Route.BASE = DISCORD_ENDPOINTS.api_base
            DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(DISCORD_ENDPOINTS.gateway_url)
            cls._current = None
