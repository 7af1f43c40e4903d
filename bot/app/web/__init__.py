"""The operator console (docs/web.md): pages and a JSON API over the store, served inside
``personabot run`` (``[web] listen``) or alone (``personabot web``)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from bot.app.build import build_retention
from bot.app.preview import preview_prompt
from bot.app.web.playground import Playground
from bot.app.web.server import WebConsole, is_loopback
from bot.app.web.views import BotState, ConsoleData
from bot.config import (
    WEB_TOKEN_MIN,
    PersonaSettings,
    Secrets,
    Settings,
    listen_address,
    web_token_short,
)
from bot.core.clock import Clock
from bot.core.errors import ConfigError
from bot.core.events import ConversationKey
from bot.metrics import Metrics
from bot.store.base import BaseStore
from memory.assemble import Assembled
from memory.service import Memory

__all__ = ["BotState", "WebConsole", "console", "console_data", "console_token"]


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


def console_data(
    *,
    settings: Settings,
    store: BaseStore,
    memory: Memory,
    clock: Clock,
    page_size: int,
    adapters_state: Callable[[str], BotState] | None = None,
    metrics: Metrics | None = None,
) -> ConsoleData:
    """The console's pages over this store. ``ConsoleData`` reads only its contracts
    (``ConsoleReads``); the prompt preview and the retention worker take the whole store, so
    they are built here, where the store is whole."""

    async def preview(
        conversation: ConversationKey, persona: PersonaSettings, now: float
    ) -> tuple[str, Assembled] | None:
        return await preview_prompt(settings, store, memory, conversation, persona, now)

    return ConsoleData(
        settings=settings,
        store=store,
        memory=memory,
        clock=clock,
        page_size=page_size,
        preview=preview,
        retention=lambda: build_retention(settings, store, memory, clock),
        adapters_state=adapters_state,
        metrics=metrics,
    )


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
    data = console_data(
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
