"""Smoke test of bench/tools.py: a quick run records real requests with 0, 10 and 30 tools,
prices both layouts, and finds the breakpoint on the tools saving money and nothing changed
without tools."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import tools


def test_a_quick_run_prices_both_layouts_for_each_tool_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "tools.json"
    assert tools.main(["--quick", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["failures"] == []
    runs = {(r["tools"], r["layout"]): r for r in data["results"]}
    assert set(runs) == {(n, layout) for n in (0, 10, 30) for layout in ("before", "after")}
    assert runs[(0, "after")]["per_call"] == runs[(0, "before")]["per_call"]
    for n in (10, 30):
        before, after = runs[(n, "before")], runs[(n, "after")]
        assert after["input_tokens"] == before["input_tokens"]  # the same bytes, cached better
        assert after["read_tokens"] > before["read_tokens"]
        assert after["dollars"] < before["dollars"]
    assert runs[(30, "after")]["tool_tokens"] > runs[(10, "after")]["tool_tokens"] > 0
    assert all(c["breakpoints"] <= 4 for r in data["results"] for c in r["per_call"])
    assert "cache read/call" in printed and "30 tools, after" in printed
