"""The figures of a run, per way (personabot and the baselines): JSON-ready and as Markdown.

Per way: judge accuracy overall and by question category, the dataset's own score (LoCoMo
F1), the mean input tokens and effective cost per question (base input price = 1.0 per token;
cached: Claude's prompt-cache rules on a cold cache), p50 latency of the model call, and the
share of questions (with evidence) whose evidence reached the prompt, in all and by layer
(docs/memory-eval.md#what-the-numbers-mean).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from bench._report import percentile
from bench.longmem.evidence import LAYERS


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _share(flags: Sequence[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def way_figures(rows: Sequence[Mapping[str, Any]], way: str) -> dict[str, Any]:
    """The aggregate figures of one way over ``rows`` (the JSONL lines)."""
    figs = [(r, r["ways"][way]) for r in rows if way in r["ways"]]
    judged = [f["judge"] for _, f in figs if f.get("judge") is not None]
    by_cat: dict[str, list[bool]] = defaultdict(list)
    for r, f in figs:
        if f.get("judge") is not None:
            by_cat[r["category"]].append(bool(f["judge"]))
    scores = [f["score"] for _, f in figs if f.get("score") is not None]
    with_evidence = [f for r, f in figs if r["evidence_refs"]]
    layers = {
        layer: _share(
            [any(layer in found for found in f["evidence"].values()) for f in with_evidence]
        )
        for layer in LAYERS
    }
    return {
        "questions": len(figs),
        "judge_accuracy": _share(judged),
        "judge_accuracy_by_category": {c: _share(v) for c, v in sorted(by_cat.items())},
        "dataset_score": _mean(scores),
        "input_tokens_mean": _mean([f["input_tokens"] for _, f in figs]),
        "cost_uncached_mean": _mean([f["cost_uncached"] for _, f in figs]),
        "cost_cached_mean": _mean([f["cost_cached"] for _, f in figs]),
        "latency_p50_s": percentile([f["latency_s"] for _, f in figs], 50) if figs else None,
        "evidence_questions": len(with_evidence),
        "evidence_in_prompt": _share([bool(f["evidence_in_prompt"]) for f in with_evidence]),
        "evidence_by_layer": layers,
        "memory_input_tokens_per_question": _memory_tokens(rows) if way == "personabot" else None,
    }


def _memory_tokens(rows: Sequence[Mapping[str, Any]]) -> float | None:
    """The memory model's input tokens of the replays, spread over each conversation's
    questions (a resumed run's later replays counted for the questions they served)."""
    shares = []
    for r in rows:
        replay = r.get("replay") or {}
        tokens = sum((replay.get("memory_input_tokens") or {}).values())
        shares.append(tokens / max(1, int(replay.get("questions") or 1)))
    return _mean(shares)


def summary(rows: Sequence[Mapping[str, Any]], ways: Sequence[str]) -> dict[str, Any]:
    """Every way's figures."""
    return {way: way_figures(rows, way) for way in ways}


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def markdown(figures: Mapping[str, Mapping[str, Any]], title: str) -> str:
    """Two tables: the headline figures per way, and judge accuracy by category."""
    lines = [f"## {title}", ""]
    head = (
        "| way | questions | judge accuracy | dataset score | input tokens | cost (no cache) "
        "| cost (cached) | p50 latency s | evidence in prompt | window | summary | facts "
        "| memory model tokens |"
    )
    lines += [head, "|" + "---|" * 13]
    for way, f in figures.items():
        layer = f["evidence_by_layer"]
        lines.append(
            f"| {way} | {f['questions']} | {_pct(f['judge_accuracy'])} "
            f"| {_num(f['dataset_score'], 3)} | {_num(f['input_tokens_mean'])} "
            f"| {_num(f['cost_uncached_mean'])} | {_num(f['cost_cached_mean'])} "
            f"| {_num(f['latency_p50_s'], 3)} | {_pct(f['evidence_in_prompt'])} "
            f"| {_pct(layer['window'])} | {_pct(layer['summary'])} | {_pct(layer['facts'])} "
            f"| {_num(f['memory_input_tokens_per_question'])} |"
        )
    categories = sorted({c for f in figures.values() for c in f["judge_accuracy_by_category"]})
    if categories:
        lines += [
            "",
            "| way | " + " | ".join(categories) + " |",
            "|---|" + "---|" * len(categories),
        ]
        for way, f in figures.items():
            cells = [_pct(f["judge_accuracy_by_category"].get(c)) for c in categories]
            lines.append(f"| {way} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
