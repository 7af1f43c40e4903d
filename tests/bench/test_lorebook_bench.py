"""Smoke test of bench/lorebook.py: a quick run at the lorebook limits writes every figure,
the compiled matching fires what the old loop fired, and the review's book is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import lorebook


def test_a_quick_run_matches_the_old_loop_and_refuses_the_review_book(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "lorebook.json"
    argv = ["--quick", "--runs", "2", "--review-entries", "6000", "--target-ms", "200"]
    status = lorebook.main([*argv, "--out", str(out)])
    printed = capsys.readouterr().out
    assert status == 0, printed
    data = json.loads(out.read_text(encoding="utf-8"))
    assert all(data["checks"].values()), data["checks"]
    cases = {(t["case"], t["way"]) for t in data["timings"]}
    assert ("at the limits, short chat", "compiled") in cases
    assert ("at the limits, 20,000 characters", "old loop") in cases
    assert data["review_book"]["card_refused"] == (
        "data.character_book.entries: 6,000 entries, over the lorebook limit of 5,000 entries"
    )
    assert "Lorebook matching per prompt" in printed
