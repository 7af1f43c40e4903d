"""Benchmark of a slow typist (issue 37): a person who sends k short messages 1 s apart while
the persona answers, each message landing after the debounce, during a generation.

The real path, as bench/streaming.py: the wired runtime on SQLite in a temp dir, the real
aiogram adapter polling the fake Bot API, the real Anthropic client against the fake Messages
API, which streams every answer at a fixed token rate (``--generation`` seconds per answer).
Each burst (k = 6 and 10 by default) goes into its own private chat; every configuration runs
twice in the same process, with ``[queue] cut_stale = false`` (a stale generation runs to its
end and the final check throws it away) and ``true`` (newer input cuts it off at once).

Per burst it measures, on one monotonic clock (both fakes run in this process):

- **calls** and **replies**: model calls made for the burst, final messages sent (1 reply,
  covering every message of the burst: the last model call's prompt holds all k);
- **stale characters per discarded generation**, relative to the kept reply: the characters
  streamed by every call but the kept one, over their number, over the reply's length (a stale
  generation that runs to its end is 1.0; the issue's target with the cut-off: at most 0.2);
- **last message -> reply**: from the last message being handed to the fake Bot API (the
  bot's long poll takes it at once) to the final ``sendMessage`` (target: at most debounce +
  one generation + 0.3 s).

Usage (always as a module)::

    uv run python -m bench.typist [--quick] [--out bench/results/typist.json]

Prints a table, writes every figure as JSON, and exits 1 when a burst did not get exactly one
reply whose prompt held all of its messages.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

from adapters.telegram.adapter import TelegramAdapter
from bench._report import (
    configure_logging,
    environment,
    format_table,
    positive_float,
    utc_timestamp,
    write_json,
)
from bench.streaming import PERSONA, reply_text
from bot.app.build import runtime
from bot.config import (
    QueueSettings,
    Settings,
    StorageSettings,
    TelegramBotSettings,
)
from bot.llm.anthropic import AnthropicLLM
from tests.fakes.messages_api import FakeMessagesAPI, tokens
from tests.fakes.telegram_api import FakeTelegramAPI, TgChat, TgUser

TOKEN: Final = "123456789:AAHbench-typist-token-0123456789abcd"
BOT: Final = "bench-telegram"
#: The issue's targets (bench, not timed tests).
STALE_TARGET: Final = 0.2
SLACK_S: Final = 0.3


@dataclass(frozen=True, slots=True)
class Params:
    bursts: tuple[int, ...]
    gap: float
    generation: float
    debounce: float
    max_wait: float
    words: int
    out: Path | None


@dataclass(frozen=True, slots=True)
class BurstFigures:
    cut: bool
    k: int
    calls: int
    replies: int
    complete: bool  # the kept reply's prompt held every message of the burst
    discarded: int
    stale_chars: int
    reply_chars: int
    stale_per_discarded: float  # stale characters per discarded call, over the reply's length
    last_to_reply_ms: float


async def _mode(params: Params, cut: bool, root: Path) -> list[BurstFigures]:
    """Every burst of ``params`` with ``cut_stale = cut``; the figures of each."""
    text = reply_text(params.words)
    pieces = tokens(text)
    async with FakeTelegramAPI() as tg, FakeMessagesAPI(reply_text=text) as claude:
        tg.add_bot(TOKEN, "mira_bot", "Mira")
        claude.token_interval = params.generation / max(1, len(pieces) - 1)
        settings = Settings(
            storage=StorageSettings(url=f"sqlite:///{root / f'cut-{cut}.sqlite3'}"),
            queue=QueueSettings(
                debounce_seconds=params.debounce,
                max_wait_seconds=params.max_wait,
                scan_interval_seconds=0.2,
                cut_stale=cut,
            ),
            personas=[PERSONA],
            bots=[TelegramBotSettings(platform="telegram", id=BOT, persona="mira")],
        )
        adapter = TelegramAdapter(bot_key=BOT, token=TOKEN, api_server=tg.base_url)
        llm = AnthropicLLM(api_key="sk-bench", base_url=claude.base_url, max_retries=0)
        figures = []
        async with runtime(settings, llm=llm, adapters={BOT: (PERSONA, adapter)}) as rt:
            task = asyncio.create_task(adapter.run(rt.router))
            try:
                await tg.wait_for(lambda: tg.polls_started(TOKEN), what="polling")
                for n, k in enumerate(params.bursts):
                    figures.append(await _burst(tg, claude, params, cut, k, 7000 + n, text))
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                await adapter.aclose()
                await llm.aclose()
        return figures


async def _burst(
    tg: FakeTelegramAPI,
    claude: FakeMessagesAPI,
    params: Params,
    cut: bool,
    k: int,
    user_id: int,
    text: str,
) -> BurstFigures:
    """k messages ``params.gap`` apart into a new private chat; wait for the chat to be quiet."""
    user = TgUser(user_id, f"P{user_id}")
    chat = TgChat.private(user)
    before = claude.call_count
    words = [f"part{i}of{k}" for i in range(1, k + 1)]
    last_at = 0.0
    for i, word in enumerate(words):
        if i:
            await asyncio.sleep(params.gap)  # the person's typing: real time is the point
        tg.push_message(TOKEN, chat, user, f"and {word}")
        last_at = time.monotonic()
    chat_id = chat.id
    await tg.wait_for(
        lambda: tg.sent_messages(TOKEN, chat_id),
        what="the reply",
        within=60 + k * params.generation,
    )
    # Quiet: no call still streaming, nothing more sent for a few generations' time.
    await asyncio.sleep(params.generation + params.debounce + 0.5)
    requests = claude.requests[before:]
    finals = tg.sent_messages(TOKEN, chat.id)
    kept = requests[-1] if requests else None
    complete = kept is not None and all(w in " ".join(kept.text_of("user")) for w in words)
    streamed = [len("".join(tokens(text)[: len(r.token_times)])) for r in requests[:-1]]
    discarded = len(streamed)
    reply_chars = len(text)
    return BurstFigures(
        cut=cut,
        k=k,
        calls=len(requests),
        replies=len(finals),
        complete=complete,
        discarded=discarded,
        stale_chars=sum(streamed),
        reply_chars=reply_chars,
        stale_per_discarded=(sum(streamed) / discarded / reply_chars) if discarded else 0.0,
        last_to_reply_ms=(finals[0].at - last_at) * 1000 if finals else float("nan"),
    )


async def run(params: Params) -> int:
    with tempfile.TemporaryDirectory(prefix="personabot-bench-typist-") as tmp:
        root = Path(tmp)
        figures = [*await _mode(params, False, root), *await _mode(params, True, root)]
    bound_ms = (params.debounce + params.generation + SLACK_S) * 1000
    rows = [
        [
            "cut" if f.cut else "run to the end",
            f.k,
            f.calls,
            f.replies,
            "yes" if f.complete else "NO",
            f.discarded,
            f.stale_chars,
            f"{f.stale_per_discarded:.2f}",
            f"{f.last_to_reply_ms:.0f}",
        ]
        for f in figures
    ]
    print(
        format_table(
            [
                "stale generations",
                "k",
                "calls",
                "replies",
                "complete",
                "discarded",
                "stale chars",
                "stale/discarded/reply",
                "last msg->reply ms",
            ],
            rows,
            title=(
                f"Slow typist: k messages {params.gap:g} s apart, answers streamed over "
                f"{params.generation:g} s, debounce {params.debounce:g} s, max_wait "
                f"{params.max_wait:g} s (targets with the cut: stale <= {STALE_TARGET}, "
                f"last msg->reply <= {bound_ms:.0f} ms)"
            ),
        )
    )
    ok = all(f.replies == 1 and f.complete for f in figures)
    payload: dict[str, Any] = {
        "benchmark": "typist",
        "timestamp": utc_timestamp(),
        "environment": environment(),
        "params": {k: v for k, v in asdict(params).items() if k != "out"},
        "targets": {"stale_per_discarded": STALE_TARGET, "last_to_reply_ms": bound_ms},
        "bursts": [asdict(f) for f in figures],
        "one_complete_reply_per_burst": ok,
    }
    if params.out is not None:
        write_json(params.out, payload)
    return 0 if ok else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.typist", description=__doc__)
    parser.add_argument("--gap", type=positive_float, default=1.0, help="seconds between messages")
    parser.add_argument("--generation", type=positive_float, default=2.0)
    parser.add_argument("--debounce", type=positive_float, default=0.8)
    parser.add_argument("--max-wait", type=positive_float, default=30.0)
    parser.add_argument("--words", type=int, default=60)
    parser.add_argument("--quick", action="store_true", help="one burst of 3, faster answers")
    parser.add_argument("--out", type=Path, default=Path("bench/results/typist.json"))
    parser.add_argument("-v", "--verbose", action="count", default=0)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m bench.typist``."""
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    if args.quick:
        params = Params((3,), 0.5, 0.6, 0.3, 30.0, 20, args.out)
    else:
        params = Params(
            (6, 10), args.gap, args.generation, args.debounce, args.max_wait, args.words, args.out
        )
    return asyncio.run(run(params))


if __name__ == "__main__":
    sys.exit(main())
