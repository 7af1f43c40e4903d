"""Logging setup: named loggers under ``personabot``, with secrets redacted from every record."""

from __future__ import annotations

import errno
import json
import logging
import os
import stat
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


def open_log_file(path: Path) -> TextIO:
    """``path`` opened for appending log records, readable by its owner only (records name
    people and chats): an existing file is made so. Raises OSError saying why it cannot be
    (then the logs stay on stderr): a symbolic link is never followed (one planted in a shared
    directory would send the records into the file it names), and a file that is not regular
    or is someone else's is refused."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(exc.errno, f"{path} is a symbolic link (not followed)") from exc
        raise OSError(exc.errno, f"cannot open {path}: {exc.strerror}") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, f"{path} is not a regular file")
        if info.st_uid != os.getuid():
            raise OSError(errno.EPERM, f"{path} belongs to another user")
        if info.st_mode & 0o077:
            os.fchmod(fd, 0o600)  # left readable by others: records must not be
        os.set_blocking(fd, True)
    except OSError:
        os.close(fd)
        raise
    return os.fdopen(fd, "a", encoding="utf-8")
