"""What a model provider's HTTP headers say about waiting: ``retry-after-ms`` and ``retry-after``
(seconds or an HTTP date), read the same way for every provider."""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds from ``retry-after-ms`` or ``retry-after`` (seconds or HTTP date), else None."""
    try:
        return max(0.0, float(headers["retry-after-ms"]) / 1000)
    except (KeyError, ValueError):
        pass
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        parsed = email.utils.parsedate_tz(raw)
        return None if parsed is None else max(0.0, email.utils.mktime_tz(parsed) - time.time())
