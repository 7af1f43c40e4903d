"""One runtime process of bench/load.py: ``personabot run``, its SQLite statements counted.

``python -m bench._load_runtime CONFIG COUNTS`` runs the command line's own ``run`` (``bot.app
.cli.main``: settings, logging, the App, ``run_bots`` with its signal handling and election)
until SIGTERM. The one difference: the store ``build_store`` makes for a SQLite URL gets the
store's optional trace callback (``SQLiteStore.trace``), which records each statement with the
0.1 s bucket of wall-clock time it ran in. When the process stops, the statements are
normalized (literals as ``?``) and written to ``COUNTS`` as JSON: ``{"buckets": {bucket:
{statement: count}}}``, so the benchmark can count any window of the run. A PostgreSQL
store is left alone: the benchmark reads ``pg_stat_statements`` on the server instead.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from bot.app import cli
from bot.app.build import stores
from bot.config import Settings
from bot.store.base import BaseStore
from bot.store.sqlite import SQLiteStore

#: Statements kept for the breakdown; past this many only the totals per bucket grow.
MAX_KEPT: Final = 3_000_000
BUCKETS_PER_SECOND: Final = 10

# String and blob literals, numbers and NULL: what a parameter becomes in SQLite's expanded SQL.
_LITERAL: Final = re.compile(
    r"'(?:[^']|'')*'|\bX'[0-9A-Fa-f]*'|(?<![\w.])-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?\b|\bNULL\b"
)


def normalize(sql: str) -> str:
    """``sql`` with its literals as ``?`` and its whitespace collapsed (one line)."""
    return " ".join(_LITERAL.sub("?", sql).split())


class StatementLog:
    """The trace callback: each statement's text and time bucket, appended (the callback runs
    in the connection's worker thread for every statement: it only appends)."""

    def __init__(self) -> None:
        self.buckets: list[int] = []
        self.texts: list[str] = []
        self.dropped: Counter[int] = Counter()

    def __call__(self, sql: str) -> None:
        bucket = int(time.time() * BUCKETS_PER_SECOND)
        if len(self.texts) < MAX_KEPT:
            self.buckets.append(bucket)
            self.texts.append(sql)
        else:
            self.dropped[bucket] += 1

    def counts(self) -> dict[int, Counter[str]]:
        """Normalized statement counts per bucket."""
        out: defaultdict[int, Counter[str]] = defaultdict(Counter)
        cache: dict[str, str] = {}
        for bucket, sql in zip(self.buckets, self.texts, strict=True):
            key = cache.get(sql)
            if key is None:
                key = cache[sql] = normalize(sql)
            out[bucket][key] += 1
        for bucket, n in self.dropped.items():
            out[bucket]["(not kept)"] += n
        return dict(out)

    def write(self, path: Path) -> None:
        """The counts as JSON (bucket keys as strings)."""
        payload = {
            "buckets_per_second": BUCKETS_PER_SECOND,
            "buckets": {str(b): dict(c) for b, c in sorted(self.counts().items())},
        }
        path.write_text(json.dumps(payload), encoding="utf-8")


def traced_build_store(log: StatementLog) -> None:
    """Make ``build_store`` hand out SQLite stores with ``log`` as their trace callback."""
    original = stores.build_store

    def build_store(settings: Settings) -> BaseStore:
        store = original(settings)
        if isinstance(store, SQLiteStore):
            store.trace = log
        return store

    stores.build_store = build_store


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: ``CONFIG COUNTS``; the exit code of ``personabot run``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        print("usage: python -m bench._load_runtime CONFIG COUNTS", file=sys.stderr)
        return 2
    config, counts = args
    log = StatementLog()
    traced_build_store(log)
    try:
        return cli.main(["run", "--config", config])
    finally:
        log.write(Path(counts))


if __name__ == "__main__":
    sys.exit(main())
