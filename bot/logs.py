"""Logging setup: named loggers under ``personabot``, with secrets redacted from every record."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable
from typing import TextIO

REDACTED = "[redacted]"


class RedactSecrets(logging.Filter):
    """Replaces any known secret value in a record's final message (and its traceback)."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self._secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def filter(self, record: logging.LogRecord) -> bool:
        """Render the message once with secrets replaced."""
        if not self._secrets:
            return True
        message = record.getMessage()
        for secret in self._secrets:
            message = message.replace(secret, REDACTED)
        record.msg, record.args = message, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            for secret in self._secrets:
                record.exc_text = record.exc_text.replace(secret, REDACTED)
        return True


def setup_logging(level: str, secrets: Iterable[str], stream: TextIO | None = None) -> None:
    """Log ``personabot.*`` (and library warnings) to stderr, redacting secrets."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RedactSecrets(secrets))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.getLogger("personabot").setLevel(level)
