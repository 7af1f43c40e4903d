"""``personabot eval memory``: the LoCoMo / LongMemEval memory benchmark (docs/memory-eval.md).

Only the command line lives here; the harness is bench/longmem/ in a checkout (it reuses the
benchmarks' cost model, bench/memory.py), imported when the command runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bot.app.argtypes import non_negative_float, positive_float, positive_int

WAYS = ("personabot", "full_history", "window_only", "no_memory")


def _ways(text: str) -> tuple[str, ...]:
    ways = tuple(w.strip() for w in text.split(",") if w.strip())
    bad = [w for w in ways if w not in WAYS]
    if bad or not ways:
        raise argparse.ArgumentTypeError(f"ways are a comma list of {', '.join(WAYS)}")
    return ways


def add_parser(sub: Any) -> None:
    """The ``eval`` command and its ``memory`` action, on the CLI's subparsers."""
    ev = sub.add_parser("eval", help="benchmarks against a model (docs/memory-eval.md)")
    actions = ev.add_subparsers(dest="eval_command", required=True)
    p = actions.add_parser(
        "memory", help="LoCoMo / LongMemEval through personabot's memory and three baselines"
    )
    p.add_argument("dataset", type=Path, help="locomo10.json, longmemeval_s.json or _oracle.json")
    p.add_argument("--config", type=Path, default=None, help="TOML file ([llm], [memory], ...)")
    p.add_argument("--provider", default=None, help="anthropic, openai or offline (default [llm])")
    p.add_argument("--base-url", default=None, help="endpoint (openai: required)")
    p.add_argument("--api-key-env", default=None, help="variable holding the endpoint's key")
    p.add_argument("--model", default=None, help="model under test (default: the persona's)")
    p.add_argument(
        "--memory-model", default=None, help="summaries and extraction (default [memory])"
    )
    p.add_argument(
        "--offline-memory",
        action="store_true",
        help="summaries and extraction by the offline model (no cost; weaker memory)",
    )
    p.add_argument("--judge-model", default=None, help="the judge (default: --model)")
    p.add_argument("--judge-provider", default=None, help="the judge's provider")
    p.add_argument("--judge-base-url", default=None, help="the judge's endpoint")
    p.add_argument("--no-judge", action="store_true", help="dataset metric only")
    p.add_argument("--ways", type=_ways, default=WAYS, help="comma list (default: all four)")
    p.add_argument("--limit", type=positive_int, default=None, help="questions in all")
    p.add_argument("--conversations", type=positive_int, default=None, help="conversations")
    p.add_argument("--resume", action="store_true", help="skip questions already in --results")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="start over, deleting an earlier run's --results (refused without it)",
    )
    p.add_argument(
        "--results", type=Path, default=None, help="JSONL per question (default OUT.jsonl)"
    )
    p.add_argument(
        "--out", type=Path, default=Path("bench/results/longmem.json"), help="JSON result file"
    )
    p.add_argument(
        "--context-tokens", type=positive_int, default=120_000, help="full history's limit"
    )
    p.add_argument(
        "--session-idle-minutes",
        type=non_negative_float,
        default=None,
        help="a pause this long ends a chat session (default: [sessions], else 60; 0: never)",
    )
    p.add_argument(
        "--retry-pause",
        type=positive_float,
        default=2.0,
        help="seconds before retrying a call the endpoint could not serve (doubled each time)",
    )
    p.add_argument("-v", "--verbose", action="count", default=0, help="-v INFO, -vv DEBUG")


def run(args: argparse.Namespace) -> int:
    """Run an ``eval`` action (the harness of a checkout)."""
    try:
        from bench.longmem.command import run_memory_eval
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] != "bench":
            raise  # a real import error inside the harness: its traceback, not "no checkout"
        print(
            f"personabot eval: needs a checkout of personabot (bench/ is not installed: {exc})",
            flush=True,
        )
        return 2
    return run_memory_eval(args)
