"""The operator console (docs/web.md): pages and a JSON API over the store, served inside
``personabot run`` (``[web] listen``) or alone (``personabot web``)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from bot.app.web.playground import Playground
from bot.app.web.server import WebConsole, is_loopback
from bot.app.web.views import BotState, ConsoleData
from bot.config import (
    WEB_TOKEN_MIN,
    Secrets,
    Settings,
    listen_address,
    web_token_short,
)
from bot.core.clock import Clock
from bot.core.errors import ConfigError
from bot.metrics import Metrics
from bot.store.base import BaseStore
from memory.service import Memory

__all__ = ["BotState", "WebConsole", "console", "console_token"]


def console_token(settings: Settings, secrets: Secrets) -> str:
    """The operator token, or a ConfigError: the console never starts without one (on a
    loopback address either: anyone on the machine could otherwise read every chat)."""
    token = secrets.get(settings.web.token_env)
    if token is None:
        raise ConfigError(
            [
                f"web: set {settings.web.token_env} to the operator token; the console refuses to "
                "start without one"
            ]
        )
    if len(token) < WEB_TOKEN_MIN:
        raise ConfigError([web_token_short(settings.web.token_env)])
    return token


def console(
    settings: Settings,
    secrets: Secrets,
    *,
    store: BaseStore,
    memory: Memory,
    clock: Clock,
    listen: str,
    bot_state: Callable[[str], BotState] | None = None,
    playground: Playground | None = None,
    metrics: Metrics | None = None,
) -> WebConsole:
    """The console on ``listen`` (host:port) over this store."""
    token = console_token(settings, secrets)
    try:
        host, port = listen_address(listen)
    except ValueError as exc:
        raise ConfigError([f"web: {exc}"]) from None
    web = settings.web
    data = ConsoleData(
        settings=settings,
        store=store,
        memory=memory,
        clock=clock,
        page_size=web.page_size,
        adapters_state=bot_state,
        metrics=metrics,
    )
    if not is_loopback(host):
        # Allowed with a token; said, since a proxy with TLS in front is what keeps it safe.
        logging.getLogger("personabot.web").warning(
            "console on %s: not a loopback address; put it behind TLS (docs/web.md)", listen
        )
    return WebConsole(
        data,
        host=host,
        port=int(port),
        token=token,
        clock=clock,
        session_hours=web.session_hours,
        login_attempts_per_minute=web.login_attempts_per_minute,
        playground=playground,
    )
