"""Smoke test of bench/streaming.py: a quick run shows drafts before the final message on the
streamed path, none without streaming, and every turn ends in one final message equal to the
recorded reply."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import streaming


def test_a_quick_run_reports_drafts_and_one_final_message_per_reply(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "streaming.json"
    status = streaming.main(["--quick", "--token-rate", "60", "--out", str(out)])
    printed = capsys.readouterr().out
    assert status == 0, printed
    data = json.loads(out.read_text(encoding="utf-8"))
    streamed, plain = data["results"]["streamed"], data["results"]["non_streaming"]
    assert streamed["drafts_per_reply"] >= 1 and plain["drafts_per_reply"] == 0
    assert streamed["finals_per_reply"] == plain["finals_per_reply"] == 1
    assert data["every_turn_one_final_equal_to_record"] is True
    # The first draft comes before the whole answer could have been sent.
    assert streamed["from_request_p50_ms"] < plain["from_request_p50_ms"]
    assert "first visible" in printed
