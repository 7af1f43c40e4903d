"""One evaluation run: every conversation replayed, every question asked each way, scored,
and appended to a JSONL file as soon as it is done (so ``--resume`` skips it next time).

A line of the JSONL file is one question with every way's figures (``personabot`` and the
baselines of bench/longmem/baselines.py): the answer, the latency of the model call, the
request's estimated input tokens and its cost under Claude's prompt-cache rules (bench/memory.py
``price_request``, on a cold cache: a question comes after a pause, so its prefix is written,
not read), where each evidence turn was found (bench/longmem/evidence.py), the dataset's
score and the judge's verdict.
"""

from __future__ import annotations

import asyncio
import json
import logging
import tempfile
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from bench.longmem.baselines import BASELINES, DEFAULT_CONTEXT_TOKENS, baseline_request
from bench.longmem.datasets import Conversation, Question
from bench.longmem.evidence import find_evidence
from bench.longmem.replay import RETRIES, RETRY_PAUSE, CountingLLM, Setup, ask, replay
from bench.longmem.scoring import Judge, dataset_score, verdict
from bench.memory import price_request, request_blocks
from bot.core.errors import ModelUnavailable
from bot.core.llm import BaseLLM, ModelRequest, ModelResult

log = logging.getLogger("personabot.eval")

_T = TypeVar("_T")

PERSONABOT = "personabot"
WAYS = (PERSONABOT, *BASELINES)


@dataclass(frozen=True, slots=True)
class Models:
    """The model under test, the memory model (summaries, extraction) and the judge."""

    answer: BaseLLM
    memory: BaseLLM
    judge: Judge | None


@dataclass(frozen=True, slots=True)
class RunOptions:
    """What to run."""

    setup: Setup = field(default_factory=Setup)
    ways: tuple[str, ...] = WAYS
    limit: int | None = None  # questions in all
    conversations: int | None = None
    context_tokens: int = DEFAULT_CONTEXT_TOKENS
    workdir: Path | None = None
    retry_pause: float = RETRY_PAUSE  # seconds before the first retry (then doubled)


def result_rows(results: Path) -> dict[str, dict[str, Any]]:
    """Every complete line of the JSONL file by question id, the last one of each question
    kept (a torn last line, cut by an interruption, is ignored)."""
    rows: dict[str, dict[str, Any]] = {}
    if results.exists():
        for line in results.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
                rows[str(row["question_id"])] = row
            except (json.JSONDecodeError, KeyError, TypeError):
                continue
    return rows


def read_results(results: Path) -> list[dict[str, Any]]:
    """Every complete line of the JSONL file, the last one of each question kept."""
    return list(result_rows(results).values())


def _append(results: Path, row: dict[str, Any]) -> None:
    results.parent.mkdir(parents=True, exist_ok=True)
    torn = False
    if results.exists() and results.stat().st_size:
        with results.open("rb") as f:
            f.seek(-1, 2)
            torn = f.read(1) != b"\n"  # a line cut by an interruption: start a new one
    with results.open("a", encoding="utf-8") as f:
        f.write(("\n" if torn else "") + json.dumps(row, ensure_ascii=False) + "\n")
        f.flush()


@dataclass(slots=True)
class Plan:
    """Questions to ask per conversation (after --limit, --conversations and --resume)."""

    items: list[tuple[Conversation, list[Question]]] = field(default_factory=list)

    @property
    def questions(self) -> int:
        """How many questions in all."""
        return sum(len(q) for _, q in self.items)


def plan(
    conversations: Sequence[Conversation],
    options: RunOptions,
    done: Mapping[str, Collection[str]],
) -> Plan:
    """What is left to ask: the questions the options select (--conversations, --limit)
    with a way not yet asked (``done``: question id -> the ways its earlier row has)."""
    out = Plan()
    budget = options.limit
    for conv in conversations[: options.conversations]:
        if budget is not None and budget <= 0:
            break
        chosen = list(conv.questions[:budget] if budget is not None else conv.questions)
        if budget is not None:
            budget -= len(chosen)
        left = [q for q in chosen if set(options.ways) - set(done.get(q.id, ()))]
        if left:
            out.items.append((conv, left))
    return out


def _figures(
    request: ModelRequest, result: ModelResult, latency: float, at: float
) -> dict[str, Any]:
    cost, _cache = price_request(request_blocks(request), {}, at)
    return {
        "answer": result.text,
        "latency_s": round(latency, 4),
        "input_tokens": cost.input_tokens,
        "cost_uncached": cost.uncached_cost,
        "cost_cached": round(cost.cost, 3),
        "usage": {
            "input_tokens": result.usage.input_tokens,
            "output_tokens": result.usage.output_tokens,
            "cache_read_input_tokens": result.usage.cache_read_input_tokens,
            "cache_creation_input_tokens": result.usage.cache_creation_input_tokens,
        },
        "layers": list(request.layers),
    }


async def _score(
    row: dict[str, Any],
    conv: Conversation,
    q: Question,
    request: ModelRequest,
    judge: Judge | None,
    pause: float,
) -> None:
    found = find_evidence(request, q.evidence, conv.texts())
    row["evidence"] = found.to_json()
    row["evidence_in_prompt"] = found.all_present if q.evidence else None
    row["score"] = dataset_score(conv.dataset, row["answer"], q.answer, q.abstain)
    row["judge"] = row["judge_answer"] = None
    if judge is not None:
        answer = await retried(lambda: judge.ask(q.text, q.answer, row["answer"], q.abstain), pause)
        row["judge"], row["judge_answer"] = verdict(answer), answer


async def _baseline(
    way: str, conv: Conversation, q: Question, models: Models, options: RunOptions
) -> tuple[ModelRequest, dict[str, Any]]:
    request = baseline_request(way, conv, q, options.setup, context_tokens=options.context_tokens)
    timed: list[float] = []

    async def call() -> ModelResult:
        timed.append(time.perf_counter())  # the latency is the last attempt's
        return await models.answer.complete(request)

    result = await retried(call, options.retry_pause)
    return request, _figures(request, result, time.perf_counter() - timed[-1], q.asked_at)


async def retried(call: Callable[[], Awaitable[_T]], pause: float = RETRY_PAUSE) -> _T:
    """``call()``, again after a pause while the model is unavailable (after the SDK's own
    retries), ``RETRIES`` times: a run of hours outlives a short outage. Answers and the
    judge alike (a judge that fails would drop the question's paid answers)."""
    for attempt in range(RETRIES):
        try:
            return await call()
        except ModelUnavailable:
            await asyncio.sleep(pause * 2**attempt)  # the endpoint is real: wait for real
    return await call()


async def _conversation(
    conv: Conversation,
    questions: Sequence[Question],
    models: Models,
    options: RunOptions,
    results: Path,
    workdir: Path,
    progress: Callable[[str], None],
    earlier: Mapping[str, dict[str, Any]],
) -> None:
    snapshot = workdir / f"{conv.id}.sqlite3".replace("/", "_")
    now = 0.0
    memory = CountingLLM(models.memory)
    # A resumed question keeps the ways its earlier row has and is asked the others.
    missing = {
        q.id: [w for w in options.ways if w not in _ways_of(earlier, q.id)] for q in questions
    }
    if any(PERSONABOT in ways for ways in missing.values()):
        started = time.perf_counter()
        until = min(q.asked_at for q in questions)
        now = await replay(conv, options.setup, snapshot, memory_llm=memory, until=until)
        progress(f"{conv.id}: replayed in {time.perf_counter() - started:.1f} s")
        if memory.failures:
            progress(
                f"{conv.id}: the memory model failed {sum(memory.failures.values())} times "
                "while replaying (its memory kept what it had: personabot's figures are weaker)"
            )
    # The memory model's work of this replay, shared by the questions it serves (a resumed
    # run replays again for the questions left: each replay is counted once in all).
    replayed = {
        "memory_calls": dict(memory.calls),
        "memory_input_tokens": dict(memory.input_tokens),
        "memory_failures": dict(memory.failures),
        "questions": len(questions),
    }
    for q in questions:
        prior = earlier.get(q.id, {})
        row: dict[str, Any] = {
            "question_id": q.id,
            "conversation": conv.id,
            "dataset": conv.dataset,
            "category": q.category,
            "question": q.text,
            "gold": q.answer,
            "abstain": q.abstain,
            "evidence_refs": list(q.evidence),
            "replay": replayed if PERSONABOT in missing[q.id] else prior.get("replay", replayed),
            "ways": dict(_ways_of(earlier, q.id)),
        }
        for way in missing[q.id]:
            if way == PERSONABOT:
                work = workdir / "question.sqlite3"
                answered = await ask(
                    conv, q, options.setup, snapshot, work,
                    now=now, memory_llm=memory, under_test=models.answer,
                    retry_pause=options.retry_pause,
                )  # fmt: skip
                request = answered.request
                figures = _figures(request, answered.result, answered.latency, answered.at)
            else:
                request, figures = await _baseline(way, conv, q, models, options)
            await _score(figures, conv, q, request, models.judge, options.retry_pause)
            row["ways"][way] = figures
        _append(results, row)
        progress(f"{q.id}: done")


def _ways_of(rows: Mapping[str, dict[str, Any]], question: str) -> dict[str, Any]:
    ways = rows.get(question, {}).get("ways")
    return ways if isinstance(ways, dict) else {}


async def run(
    conversations: Sequence[Conversation],
    models: Models,
    options: RunOptions,
    results: Path,
    *,
    resume: bool,
    progress: Callable[[str], None] = lambda _line: None,
) -> list[dict[str, Any]]:
    """Ask what is left, appending each question to ``results``; return the rows of the
    questions this run's options select, in their order.

    Resumed, a row of ``results`` counts only for a question of this run (same id, same
    dataset): rows of another dataset or outside --limit stay in the file and out of the
    report; a question asked fewer ways than this run's is asked the others.
    """
    if not resume and results.exists():
        results.unlink()
    selected = {
        q.id: conv.dataset for conv, qs in plan(conversations, options, {}).items for q in qs
    }
    earlier = {
        qid: row
        for qid, row in (result_rows(results) if resume else {}).items()
        if selected.get(qid) == row.get("dataset")
    }
    todo = plan(conversations, options, {qid: _ways_of(earlier, qid) for qid in earlier})
    progress(f"{todo.questions} questions to ask in {len(todo.items)} conversations")
    with tempfile.TemporaryDirectory(prefix="personabot-eval-", dir=options.workdir) as tmp:
        for conv, questions in todo.items:
            await _conversation(
                conv, questions, models, options, results, Path(tmp), progress, earlier
            )
    rows = result_rows(results)
    return [
        rows[qid]
        for qid, dataset in selected.items()
        if rows.get(qid, {}).get("dataset") == dataset
    ]
