"""Smoke test of bench/media.py: a quick run on tiny photos writes every figure, and
personabot's prompt costs less than re-sending every photo."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import media

VARIANT_FIELDS = {
    "input_tokens",
    "read_tokens",
    "write_tokens",
    "plain_tokens",
    "cost_uncached",
    "cost_cached",
    "dollars_cached",
    "image_tokens",
    "image_share",
    "images_sent",
}
TIMING_FIELDS = {"to_request", "turn", "build", "prepare", "download"}


def test_a_quick_run_reports_cost_and_latency_and_personabot_costs_less(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "media.json"
    argv = ["--quick", "--sizes", "320x240,2600x200", "--turns", "40", "--latency-turns", "6"]
    argv += ["--prepare-samples", "4", "--pool", "2", "--model-latency", "0.001"]
    status = media.main([*argv, "--out", str(out)])
    printed = capsys.readouterr().out
    assert status == 0, printed
    data = json.loads(out.read_text(encoding="utf-8"))

    cost = data["cost"]
    assert cost["turns"] == 40 and cost["photo_turns"] == [5, 15, 25, 35]
    variants = cost["variants"]
    assert set(variants) == {"resent", "personabot", "no_images"}
    for figures in variants.values():
        assert set(figures) >= VARIANT_FIELDS
        split = figures["read_tokens"] + figures["write_tokens"] + figures["plain_tokens"]
        assert split == figures["input_tokens"]
    resent, ours, text = variants["resent"], variants["personabot"], variants["no_images"]
    # Every photo reached the model while in the window; re-sending keeps them all.
    assert ours["images_sent"] > 0 and resent["images_sent"] > ours["images_sent"]
    assert text["image_tokens"] == 0 and text["cost_cached"] < ours["cost_cached"]
    assert ours["cost_cached"] < resent["cost_cached"]
    assert cost["ratio_personabot_to_resent"]["effective_cost"] < 1.0
    assert cost["with_memory_model"]["memory_image_tokens"] > 0  # the summariser saw images

    kinds = {k["name"]: k for k in data["latency"]["kinds"]}
    assert set(kinds) == {"text only", "photo 320x240", "image file 2600x200"}
    for kind in kinds.values():
        assert kind["turns"] == 6
        for field in TIMING_FIELDS:
            assert {"p50", "p99", "mean"} <= set(kind[field])
        assert {"added_p50_ms", "added_p99_ms"} <= set(kind)
    assert kinds["text only"]["download"]["p50"] == 0.0  # nothing fetched
    assert all(kinds[n]["download"]["p50"] > 0 for n in ("photo 320x240", "image file 2600x200"))
    prepared = {t["size"]: t for t in data["prepare_image"]}
    assert prepared["2600x200"]["output"].startswith("1568x")  # downscaled to the long edge
    assert data["passed"] is True
    assert "(b) personabot" in printed and "prepare_image alone" in printed
