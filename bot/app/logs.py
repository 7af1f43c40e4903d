"""Logging setup: named loggers under ``personabot``, with secrets redacted from every record."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TextIO

REDACTED = "[redacted]"


def redact_text(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every known secret value replaced (for lines printed outside logging)."""
    return _replace(text, _longest_first(secrets))


def _replace(text: str, longest_first: list[str]) -> str:
    for secret in longest_first:
        text = text.replace(secret, REDACTED)
    return text


class RedactSecrets(logging.Filter):
    """Replaces any known secret value in a record's final message (and its traceback)."""

    def __init__(self, secrets: Iterable[str] | Callable[[], Iterable[str]]) -> None:
        super().__init__()
        # A callable is asked at every record: secrets read later (a plugin's factory) count.
        self._source = secrets if callable(secrets) else None
        self._fixed = [] if callable(secrets) else _longest_first(secrets)

    def filter(self, record: logging.LogRecord) -> bool:
        """Render the message once with secrets replaced."""
        secrets = self._fixed if self._source is None else _longest_first(self._source())
        if not secrets:
            return True
        record.msg, record.args = _replace(record.getMessage(), secrets), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = _replace(record.exc_text, secrets)
        return True


def _longest_first(secrets: Iterable[str]) -> list[str]:
    return sorted({s for s in secrets if s}, key=len, reverse=True)


class JsonFormatter(logging.Formatter):
    """One JSON object per line, for log collectors."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as JSON (time, level, logger, message, exception)."""
        data = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_text or record.exc_info:
            data["exception"] = record.exc_text or self.formatException(record.exc_info)  # type: ignore[arg-type]
        return json.dumps(data, ensure_ascii=False)


def setup_logging(
    level: str,
    secrets: Iterable[str] | Callable[[], Iterable[str]],
    stream: TextIO | None = None,
    fmt: str = "text",
) -> None:
    """Log ``personabot.*`` (and library warnings) to stderr, redacting secrets."""
    handler = logging.StreamHandler(stream or sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RedactSecrets(secrets))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.getLogger("personabot").setLevel(level)


def open_log_file(path: Path) -> TextIO | None:
    """``path`` opened for appending log records (only its owner may read it: records name
    people and chats), or None when it cannot be (then the logs stay on stderr)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except OSError:
        return None
    return os.fdopen(fd, "a", encoding="utf-8")
