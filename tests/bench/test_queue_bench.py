"""Smoke test of bench/queue.py: both schedulers in one small run on SQLite, and the claimed
one with two processes on PostgreSQL, each passing its exactly-once guard and reporting the
scale-out figures side by side."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import queue
from tests import pg_cluster
from tests.backends import PgTemplate

# A 1 s debounce: a burst's messages are ingested back to back, but on a loaded machine (two
# claiming processes, other test workers) one burst took 500 ms to store, longer than the
# default 0.2 s debounce, and was rightly answered in two turns: the guard then fails the run.
SMALL = [
    "--quick", "--conversations", "20", "--ingest-messages", "40", "--backlog", "20",
    "--debounce", "1.0",
]  # fmt: skip


def test_race_and_claim_run_side_by_side(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "queue.json"
    status = queue.main([*SMALL, "--scheduler", "race,claim", "--out", str(out)])
    printed = capsys.readouterr().out
    assert status == 0, printed
    runs = json.loads(out.read_text(encoding="utf-8"))["runs"]
    assert [r["parameters"]["scheduler"] for r in runs] == ["race", "claim"]
    for run in runs:
        assert run["guard"]["passed"]
        scale = run["scale_out"]
        assert scale["sent_per_process"] == [20]
        assert scale["backlog"]["answered"] and scale["backlog"]["turns_per_second"] > 0
    assert "Scale-out side by side" in printed


def test_two_claiming_processes_on_postgresql_share_the_turns(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    pg_template: PgTemplate,
) -> None:
    # The session's server, not a second cluster of the bench's own.
    monkeypatch.setenv(pg_cluster.DSN_ENV, pg_template.server_dsn)
    out = tmp_path / "queue.json"
    argv = [*SMALL, "--store", "postgresql", "--processes", "2", "--out", str(out)]
    status = queue.main(argv)
    printed = capsys.readouterr().out
    assert status == 0, printed
    run = json.loads(out.read_text(encoding="utf-8"))
    scale = run["scale_out"]
    assert sum(scale["sent_per_process"]) == 20
    assert sum(scale["backlog"]["sent_per_process"]) == 20
    assert scale["backlog"]["lost_cas_per_turn"] < 1.0
