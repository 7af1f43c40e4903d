"""The operator's side of a running process: ``[web]`` (the console, docs/web.md),
``[observability]`` (health checks and metrics) and ``[logging]``."""

from __future__ import annotations

from typing import Final, Literal

from pydantic import Field, model_validator

from bot.config.fields import Section
from bot.core.redact import looks_like_env_name

#: The operator console's token is at least this long (docs/web.md#security).
WEB_TOKEN_MIN: Final = 16


def web_token_short(variable: str) -> str:
    """The problem of a console token shorter than WEB_TOKEN_MIN."""
    return f"web: {variable} is too short ({WEB_TOKEN_MIN} characters at least)"


def listen_address(text: str) -> tuple[str, int]:
    """``host:port`` (an IPv6 host in brackets, ``[::1]:9464``) as (host, port); a ValueError
    that never quotes the text (a secret pasted into the wrong key, review 35a)."""
    host, _, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host or "[" in host or "]" in host or not port.isdigit() or int(port) > 65535:
        raise ValueError(
            "listen: expected host:port, e.g. 127.0.0.1:8080 (an IPv6 host in brackets: [::1]:8080)"
        )
    return host, int(port)


class LoggingSettings(Section):
    """Log output."""

    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    format: Literal["text", "json"] = "text"


class ObservabilitySettings(Section):
    """Health checks and Prometheus metrics."""

    listen: str = ""

    @model_validator(mode="after")
    def _host_port(self) -> ObservabilitySettings:
        if self.listen:
            listen_address(self.listen)
        return self


class WebSettings(Section):
    """``[web]``: the operator console (docs/web.md)."""

    # host:port of the console inside ``personabot run`` ("" = off; ``personabot web`` serves
    # it alone and takes --listen).
    listen: str = ""
    # Environment variable holding the operator token (login, and the API's Bearer token).
    token_env: str = "PERSONABOT_WEB_TOKEN"
    # Rows per page of a list.
    page_size: int = Field(default=50, ge=1, le=500)
    # Failed logins per client address per minute before it must wait.
    login_attempts_per_minute: int = Field(default=5, ge=1, le=1000)
    # A login lasts this long.
    session_hours: float = Field(default=12.0, gt=0, le=24 * 30)

    @model_validator(mode="after")
    def _host_port(self) -> WebSettings:
        if self.listen:
            listen_address(self.listen)
        if not looks_like_env_name(self.token_env):
            raise ValueError("token_env: the name of an environment variable, not its value")
        return self
