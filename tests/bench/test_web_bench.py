"""Smoke test of bench/web.py: a small run on SQLite requests every page, all answer 200, and
each gets server times from the console's Server-Timing header."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import web


def test_a_small_run_times_every_console_page(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "web.json"
    argv = ["--store", "sqlite", "--conversations", "60", "--messages", "600", "--samples", "2"]
    argv += ["--lag-conversations", "20"]
    status = web.main([*argv, "--out", str(out)])
    printed = capsys.readouterr().out
    assert status == 0, printed
    (result,) = json.loads(out.read_text(encoding="utf-8"))["results"]
    assert result["failures"] == []
    assert set(result["pages"]) == {
        "overview",
        "conversations (first page)",
        "conversations (deep page)",
        "a conversation",
        "a person",
    }
    assert all(p["samples"] == 2 and p["p95_ms"] > 0 for p in result["pages"].values())
    assert "sqlite: a person" in printed
