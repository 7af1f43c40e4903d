"""Smoke test of bench/scenes.py: a short run plays the same human turns to a single persona
and to a 3-persona scene through the real pipeline, every scene turn has two lines from two
personas, and the scene's cost per line is priced against the single persona's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import scenes


def test_a_short_run_prices_a_scene_against_a_single_persona(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "scenes.json"
    code = scenes.main(["--turns", "24", "--out", str(out)])
    data = json.loads(out.read_text(encoding="utf-8"))
    assert code == (0 if data["passed"] else 1)
    assert data["single"]["replies"] == 24 and data["scene"]["replies"] == 48
    assert sorted(data["speakers"]) == ["Mira", "Orin", "Tess"]  # list: everyone in turn
    assert sum(data["speakers"].values()) == 48
    ratio = data["scene"]["cost_cached_per_reply"] / data["single"]["cost_cached_per_reply"]
    assert data["ratio_cached_per_reply"] == pytest.approx(ratio)
    assert 0 < data["scene"]["read_share"] < 1
    assert "scene / single, cached, per reply" in capsys.readouterr().out
