"""``personabot eval memory`` (bot/app/eval_commands.py parses it): settings and flags to
models and options, the run, the JSON file and the Markdown table.

The model under test, the memory model and the judge come from the configuration's [llm]
(``--config``, else ./personabot.toml, else the bundled example) with the flags on top; the
memory budget, extraction pause and session timeout from [memory] and [sessions] of the
first persona, as ``personabot run`` would use them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench._report import configure_logging, environment, utc_timestamp, write_json
from bench.longmem.datasets import DatasetError, load
from bench.longmem.replay import Setup
from bench.longmem.report import markdown, summary
from bench.longmem.runner import Models, RunOptions, result_rows, run
from bench.longmem.scoring import JUDGE_PROMPT, JUDGE_SYSTEM, Judge
from bot.app.build.policies import memory_policy, retention_policy
from bot.app.build.registries import builtin_providers
from bot.config import LLMSettings, Secrets, Settings, load_settings
from bot.core.errors import ConfigError, PersonabotError
from bot.core.llm import BaseLLM
from bot.llm.offline import OfflineLLM

DEFAULT_SESSION_IDLE_MINUTES = 60.0


class UsageError(PersonabotError):
    """Options that would lose results or fail after the run (exit 2, before any call)."""


def check_outputs(out: Path, md: Path, results: Path, *, resume: bool, overwrite: bool) -> None:
    """Refuse, before any model call, outputs that could not be written after a paid run or
    would overwrite each other, and an earlier run's results that a run without --resume
    would delete."""
    if out.suffix in (".jsonl", ".md"):
        raise UsageError(
            f"--out {out}: name the JSON result (e.g. eval.json); the Markdown table and the "
            "per-question .jsonl are written next to it"
        )
    named = {"--out": out, "the Markdown table": md, "--results": results}
    if len({p.resolve() for p in named.values()}) < len(named):
        raise UsageError(f"--out {out} and --results {results} must be different files")
    for what, path in named.items():
        if path.is_dir():
            raise UsageError(f"{what} {path} is a directory; name a file")
        folder = next((p for p in (path.parent, *path.parent.parents) if p.exists()), Path("."))
        if not os.access(path if path.exists() else folder, os.W_OK):
            raise UsageError(f"{what} {path} cannot be written")
    if results.exists() and results.stat().st_size and not (resume or overwrite):
        raise UsageError(
            f"{results} holds an earlier run's results: --resume goes on from them, "
            "--overwrite deletes them and starts over"
        )


def _llm(settings: LLMSettings, secrets: Secrets, **overrides: Any) -> BaseLLM:
    update = {k: v for k, v in overrides.items() if v is not None}
    if update.get("provider", settings.provider) != settings.provider and "base_url" not in update:
        update["base_url"] = None  # [llm]'s endpoint is another provider's
    llm = settings.model_copy(update=update)
    factory = builtin_providers().get(llm.provider)
    if factory is None:
        raise ConfigError([f"--provider: unknown provider {llm.provider!r}"])
    return factory(llm, secrets)


def setup_from(settings: Settings, args: argparse.Namespace) -> Setup:
    """personabot's configuration for the run: the first persona's memory policy."""
    persona = settings.personas[0]
    policy = memory_policy(settings, persona)
    idle = args.session_idle_minutes
    if idle is None:
        configured = settings.sessions.idle_timeout_minutes
        idle = configured if configured else DEFAULT_SESSION_IDLE_MINUTES
    model = args.model or persona.model
    return Setup(
        budget=policy.budget,
        answer_model=model,
        memory_model=args.memory_model or settings.memory_for(persona).summary_model or model,
        extract_after_idle_seconds=policy.extract_after_idle_seconds,
        session_idle_seconds=idle * 60 if idle else None,
        retention=retention_policy(settings),
    )


def models_from(settings: Settings, args: argparse.Namespace, setup: Setup) -> Models:
    """The model under test, the memory model and the judge."""
    secrets = Secrets()
    answer = _llm(
        settings.llm,
        secrets,
        provider=args.provider,
        base_url=args.base_url,
        api_key_env=args.api_key_env,
    )
    memory = OfflineLLM() if args.offline_memory else answer
    judge = None
    if not args.no_judge:
        same = args.judge_provider is None and args.judge_base_url is None
        # A judge of another provider talks to that provider's own endpoint (and key): the
        # endpoint and key under test are another API's.
        other = args.judge_provider not in (None, args.provider or settings.llm.provider)
        judge_llm = (
            answer
            if same
            else _llm(
                settings.llm,
                secrets,
                provider=args.judge_provider or args.provider,
                base_url=args.judge_base_url or (None if other else args.base_url),
                api_key_env=None if other else args.api_key_env,
            )
        )
        judge = Judge(judge_llm, args.judge_model or setup.answer_model)
    return Models(answer, memory, judge)


def payload(
    args: argparse.Namespace, setup: Setup, options: RunOptions, rows: list[dict[str, Any]]
) -> dict[str, Any]:
    """Everything measured, JSON-ready."""
    return {
        "benchmark": "longmem",
        "timestamp": utc_timestamp(),
        "dataset": str(args.dataset),
        "parameters": {
            "setup": asdict(setup),
            "ways": list(options.ways),
            "limit": options.limit,
            "conversations": options.conversations,
            "context_tokens": options.context_tokens,
            "judge_model": None if args.no_judge else (args.judge_model or setup.answer_model),
            "judge_system": JUDGE_SYSTEM,
            "judge_prompt": JUDGE_PROMPT,
            "pricing": (
                "bench/memory.py Pricing: write 1.25x (5-minute entries) or 2x (1-hour), "
                "read 0.1x, cold cache"
            ),
        },
        "environment": environment(),
        "summary": summary(rows, options.ways),
        "questions": rows,
    }


async def eval_memory(args: argparse.Namespace) -> int:
    """The run of ``personabot eval memory`` (parsed arguments); returns the exit code."""
    settings = load_settings(args.config)
    results = args.results or args.out.with_suffix(".jsonl")
    md = args.out.with_suffix(".md")
    # Refused before any client is made (nothing to close) and any model call.
    check_outputs(args.out, md, results, resume=args.resume, overwrite=args.overwrite)
    conversations = load(args.dataset)
    setup = setup_from(settings, args)
    models = models_from(settings, args, setup)
    options = RunOptions(
        setup=setup,
        ways=tuple(args.ways),
        limit=args.limit,
        conversations=args.conversations,
        context_tokens=args.context_tokens,
        retry_pause=args.retry_pause,
    )

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        rows = await run(
            conversations, models, options, results, resume=args.resume, progress=progress
        )
    finally:
        judge = None if models.judge is None else models.judge.llm
        for llm in {id(m): m for m in (models.answer, models.memory, judge) if m}.values():
            closing = getattr(llm, "aclose", None)
            if closing is not None:
                await closing()
    others = len(result_rows(results)) - len(rows)
    if others:
        progress(
            f"{others} rows of {results} are no questions of this run (another dataset, "
            "--limit or --conversations): left out of the report"
        )
    data = payload(args, setup, options, rows)
    write_json(args.out, data)
    table = markdown(data["summary"], f"Memory eval: {Path(args.dataset).name}")
    md.write_text(table, encoding="utf-8")
    print(table)
    print(f"JSON: {args.out}  Markdown: {md}  per question: {results}", file=sys.stderr)
    return 0


def run_memory_eval(args: argparse.Namespace) -> int:
    """Entry point of ``personabot eval memory``; exit 2 on bad input, 1 on a failed run."""
    configure_logging(args.verbose)
    try:
        return asyncio.run(eval_memory(args))
    except (DatasetError, UsageError) as exc:
        print(f"personabot eval: {exc}", file=sys.stderr)
        return 2
    except ConfigError as exc:
        for line in exc.lines():
            print(f"personabot: config error: {line}", file=sys.stderr)
        return 2
    except PersonabotError as exc:
        print(f"personabot eval: {exc} (rerun with --resume to go on)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted: rerun with --resume to continue", file=sys.stderr)
        return 130
