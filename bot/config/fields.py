"""What every settings section shares: the frozen base model and the field types that check a
value (platform ids, environment variable names, messages the bot sends)."""

from __future__ import annotations

import urllib.parse
from typing import Annotated

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict

from bot.core.redact import looks_like_env_name
from bot.core.visible import has_visible_text


class Section(BaseModel):
    """A table of the TOML file: an unknown key is an error, and settings never change."""

    model_config = ConfigDict(extra="forbid", frozen=True)


# Platform ids may be written as TOML integers (Telegram) or strings; both mean the same id.
PlatformId = Annotated[str, BeforeValidator(lambda v: str(v) if isinstance(v, int) else v)]


def _env_name(value: str) -> str:
    # The message never quotes the value: it may be the token itself, pasted by mistake.
    if not looks_like_env_name(value):
        raise ValueError(
            "must name an environment variable (letters, digits and _), and this value looks "
            "like a token: put the token in the environment and its variable's name here"
        )
    return value


#: The name of an environment variable that holds a secret (never the secret itself).
EnvName = Annotated[str, AfterValidator(_env_name)]


def shown(text: str) -> str:
    """A message the bot sends: visible text, or "" for none (blank would be sent as is)."""
    if text and not has_visible_text(text):
        raise ValueError('only blank or invisible characters; write a message, or "" for none')
    return text


def base_url(url: str, *, example: str, none: str = "") -> str:
    """An OpenAI-compatible server's base URL ("" for none), as the audio clients build on
    it (bot/llm/audio_http.py): http(s), a host, no query or fragment. ``example`` shows a
    good one; ``none`` ends the scheme message (e.g. ', or "" for none')."""
    if not url:
        return url
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"must be an http:// or https:// URL{none}")
    parts = urllib.parse.urlsplit(url)
    if not parts.hostname:
        raise ValueError(f"must name a host, e.g. {example}")
    if parts.query or parts.fragment:
        raise ValueError("must not have a query or fragment")
    return url
