"""bench/typist.py runs (issue 37): a slow typist gets one reply covering the whole burst in
both modes, and with ``cut_stale`` the discarded generations stop before their end."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bench import typist
from tests import pg_cluster
from tests.processes import spawn


def test_a_quick_run_cuts_what_the_old_way_runs_to_the_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "typist.json"
    status = typist.main(["--quick", "--out", str(out)])
    printed = capsys.readouterr().out
    assert status == 0, printed
    bursts = json.loads(out.read_text())["bursts"]
    assert {b["cut"] for b in bursts} == {False, True}
    for burst in bursts:
        assert burst["replies"] == 1 and burst["complete"], burst
    old = next(b for b in bursts if not b["cut"])
    new = next(b for b in bursts if b["cut"])
    # Without the cut every discarded generation streamed the whole answer; with it, less.
    assert old["discarded"] and old["stale_per_discarded"] == 1.0, old
    assert new["discarded"] == 0 or new["stale_per_discarded"] < 1.0, new
    assert "stale/discarded/reply" in printed


def test_a_quick_run_on_two_postgresql_processes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The PostgreSQL case: ``personabot run`` processes, one polling Telegram; one complete
    reply per burst in both modes, stale generations cut only with the cut-off (the time
    each cut took is the benchmark's figure, not asserted here)."""
    if not os.environ.get(pg_cluster.DSN_ENV) and pg_cluster.find_binaries() is None:
        if pg_cluster.required():
            pytest.fail(f"{pg_cluster.REQUIRE_ENV} is set but PostgreSQL is unavailable")
        pytest.skip("no PostgreSQL: " + pg_cluster.HOW_TO_ENABLE)
    out = tmp_path / "typist.json"
    status = typist.main(
        ["--quick", "--processes", "2", "--no-embedded", "--out", str(out)], spawn=spawn
    )
    printed = capsys.readouterr().out
    assert status == 0, printed
    bursts = json.loads(out.read_text())["bursts"]
    assert [(b["processes"], b["cut"]) for b in bursts] == [(2, False), (2, True)]
    for burst in bursts:
        assert burst["replies"] == 1 and burst["complete"], burst
    old, new = bursts
    assert old["cuts"] == [] and old["stale_per_discarded"] == 1.0, old
    assert new["cuts"] and new["stale_per_discarded"] < 1.0, new
    assert all(isinstance(c["cross_process"], bool) for c in new["cuts"]), new
    assert "other process" in printed
