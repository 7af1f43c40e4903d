"""Smoke test of bench/load.py: a tiny run of the real runtime (``personabot run`` in its own
process, Telegram long polling against the fake Bot API, the anthropic SDK against the fake
Messages API) on SQLite, and with two runtime processes on PostgreSQL: the guard passes and
every figure is present and plausible."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from bench import load
from bench._load_runtime import normalize
from tests import pg_cluster
from tests.processes import spawn

TINY = ["--quick", "--people", "8", "--seconds", "1", "--idle-seconds", "2", "--latency", "0.2"]
TINY += ["--debounce", "0.5"]  # shorter than the product default: a shorter run


def _plausible(run: dict[str, Any], *, processes: int) -> None:
    assert run["guard"] == {"passed": True, "failures": []}
    assert run["processes"] == processes
    assert run["burst_messages"] == 8 * 4
    assert run["accepted_messages_per_second"] > 0
    assert run["ack_lag"]["samples"] == 32 and run["ack_lag"]["p99_s"] < 30
    # Eight bursts and the quiet person's turns, each answered after the debounce.
    assert run["turns"] >= 8 and run["turns_per_second"] > 0
    assert 0.2 < run["drain_seconds"] < 60
    for probe in ("quiet_idle", "quiet_load"):
        figures = run[probe]
        assert figures["samples"] >= 1, probe
        assert 0.2 < figures["p50_s"] <= figures["p99_s"] < 60, probe
    assert run["model_calls"] >= run["turns"]
    assert run["telegram_calls"]["sendMessage"] >= run["turns"]
    assert len(run["cpu"]["runtimes_s"]) == processes
    assert all(c > 0 for c in run["cpu"]["runtimes_s"])


def _counted(run: dict[str, Any]) -> None:
    """Statement figures: every inbound message costs a few statements in transactions."""
    s = run["statements"]
    assert s["available"], s["why_not"]
    assert s["inbound_messages"] >= 32 and s["turns"] == run["turns"]
    assert 3 < s["statements_per_message"] < 200
    assert 0.1 <= s["transactions_per_message"] < 50  # a batch of messages is one
    assert s["statements_per_turn"] > s["statements_per_message"]
    top = [t["statement"] for t in s["top"]]
    assert any(t.startswith("COMMIT") for t in top)
    # Ingest's writes: one per conversation of a batch (the messages go in one INSERT).
    assert any("UPDATE conversations SET version" in t for t in top)
    assert s["idle"]["statements_per_second"] > 0


def test_a_tiny_run_on_sqlite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "load.json"
    status = load.main([*TINY, "--out", str(out)], spawn=spawn)
    printed = capsys.readouterr().out
    assert status == 0, printed
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["guard"]["passed"]
    (run,) = report["runs"]
    _plausible(run, processes=1)
    _counted(run)
    # The trace is SQLite's: the literals of the statements are normalized away.
    assert all("p00001" not in t["statement"] for t in run["statements"]["top"])
    assert "busiest statements of the load window" in printed
    assert "quiet idle p50/p99 s" in printed


def test_two_runtime_processes_on_postgresql(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if not os.environ.get(pg_cluster.DSN_ENV) and pg_cluster.find_binaries() is None:
        if pg_cluster.required():
            pytest.fail(f"{pg_cluster.REQUIRE_ENV} is set but PostgreSQL is unavailable")
        pytest.skip("no PostgreSQL: " + pg_cluster.HOW_TO_ENABLE)
    out = tmp_path / "load.json"
    status = load.main(
        [*TINY, "--store", "postgresql", "--processes", "2", "--out", str(out)], spawn=spawn
    )
    printed = capsys.readouterr().out
    assert status == 0, printed
    (run,) = json.loads(out.read_text(encoding="utf-8"))["runs"]
    _plausible(run, processes=2)
    if os.environ.get(pg_cluster.DSN_ENV) and not run["statements"]["available"]:
        assert "pg_stat_statements" in run["statements"]["why_not"]  # a server without it
    else:
        _counted(run)  # the benchmark's own cluster preloads pg_stat_statements


def test_statements_are_counted_by_their_shape() -> None:
    sql = "INSERT INTO t (a, b, c, d) VALUES (12, 'it''s', -3.5e2, NULL) -- x1"
    assert normalize(sql) == "INSERT INTO t (a, b, c, d) VALUES (?, ?, ?, ?) -- x1"
    assert normalize("SELECT id\n  FROM t2 WHERE x = 1") == "SELECT id FROM t2 WHERE x = ?"
