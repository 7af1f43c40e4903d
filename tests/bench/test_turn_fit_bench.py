"""Smoke test of bench/turn_fit.py: a small run times fit_turn next to the one-by-one
baseline, both keep the same messages, and the table and JSON say so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import turn_fit


def test_a_small_run_compares_fit_turn_with_the_baseline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "turn_fit.json"
    assert turn_fit.main(["--sizes", "60,120", "--repeat", "1", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["failures"] == []
    assert [r["messages"] for r in data["results"]] == [60, 120]
    assert all(0 < r["kept"] < r["messages"] for r in data["results"])
    assert "one-by-one ms" in printed
