"""bench/typist.py runs (issue 37): a slow typist gets one reply covering the whole burst in
both modes, and with ``cut_stale`` the discarded generations stop before their end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import typist


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
