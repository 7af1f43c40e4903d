"""Helpers shared by the benchmarks: plain-text tables, percentiles, environment, JSON."""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import json
import logging
import math
import os
import platform
import sqlite3
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

# The benchmarks' argparse types are the CLI's (re-exported: every bench imports them here).
from bot.app.argtypes import non_negative_float as non_negative_float
from bot.app.argtypes import positive_float as positive_float
from bot.app.argtypes import positive_int as positive_int


def _cell(value: object) -> str:
    """Render one table cell: floats with a fixed precision, everything else as ``str``."""
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def format_table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], title: str | None = None
) -> str:
    """A plain-text table: first column left-aligned, the others right-aligned."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, text in enumerate(row):
            widths[i] = max(widths[i], len(text))

    def line(values: Sequence[str]) -> str:
        parts = [v.ljust(widths[i]) if i == 0 else v.rjust(widths[i]) for i, v in enumerate(values)]
        return "  ".join(parts).rstrip()

    out = [] if title is None else [title]
    out.append(line(headers))
    out.append("  ".join("-" * w for w in widths))
    out.extend(line(row) for row in cells)
    return "\n".join(out)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) with linear interpolation; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def environment() -> dict[str, Any]:
    """Versions and machine facts that a benchmark figure depends on."""
    return {
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "sqlite": sqlite3.sqlite_version,
        "aiosqlite": _package_version("aiosqlite"),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "argv": sys.argv,
    }


def utc_timestamp() -> str:
    """The current UTC time as ISO 8601 with seconds."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _jsonable(value: Any) -> Any:
    """NaN and infinities become null (JSON has no literal for them)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def write_json(path: Path, payload: Mapping[str, Any]) -> None:
    """Write ``payload`` as indented JSON, creating the parent directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_jsonable(payload), indent=2) + "\n", encoding="utf-8")


def configure_logging(verbosity: int) -> None:
    """WARNING by default; -v INFO; -vv DEBUG (to stderr)."""
    level = logging.WARNING if verbosity <= 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
