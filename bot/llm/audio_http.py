"""What the two OpenAI-compatible audio clients share (bot/llm/transcription.py for
``/audio/transcriptions``, bot/llm/speech.py for ``/audio/speech``): the endpoint built from an
operator's base URL, and a server's error message made safe to log and show."""

from __future__ import annotations

import json
from typing import Final

from yarl import URL

from bot.core.errors import ConfigError

#: A server's error message is cut to this many characters in our errors.
MAX_DETAIL: Final = 200
REDACTED: Final = "[redacted]"


def endpoint(base_url: str, *, key: str, path: str) -> URL:
    """``{base_url}/{path}``, with or without a trailing slash on ``base_url``; ConfigError
    naming the setting ``key`` for anything that is not a plain http(s) URL."""
    url = URL(base_url.strip())
    if url.scheme not in ("http", "https") or not url.host:
        raise ConfigError([f"{key}: {base_url!r} is not an http(s) URL"])
    if url.query_string or url.fragment:
        raise ConfigError([f"{key}: must not have a query or fragment"])
    return url.with_path(url.path.rstrip("/") + "/" + path)


def redacted(text: str, api_key: str | None) -> str:
    """``text`` without the key."""
    return text.replace(api_key, REDACTED) if api_key else text


def error_detail(text: str, api_key: str | None) -> str:
    """A server's error message on one line, without the key, at most ``MAX_DETAIL``
    characters. OpenAI: ``{"error": {"message"}}``; whisper.cpp and others: ``{"error":
    "..."}``; FastAPI: ``{"detail"}``; anything else as it came."""
    message = text
    try:
        data = json.loads(text)
    except ValueError:
        pass
    else:
        if isinstance(data, dict):
            found = data.get("error", data.get("detail", data.get("message")))
            if isinstance(found, dict):
                found = found.get("message", found)
            if found is not None:
                message = found if isinstance(found, str) else json.dumps(found)
    # Redacted before it is cut: a cut key would no longer match.
    one_line = " ".join(redacted(message, api_key).split())
    return one_line if len(one_line) <= MAX_DETAIL else one_line[: MAX_DETAIL - 1] + "…"
