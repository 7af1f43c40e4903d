"""Benchmark of streamed replies (docs/architecture.md#streaming): how soon a Telegram person
sees the reply begin, and how many platform calls a reply costs, streamed or not.

The real path: the wired runtime (bot/app/build.py) on SQLite in a temp dir, the real aiogram
adapter polling the fake Bot API (tests/fakes/telegram_api.py), the real Anthropic client
against the fake Messages API (tests/fakes/messages_api.py), which streams each reply at a
fixed token rate (``--token-rate`` tokens per second, ``--words`` words). N turns (one private
chat each, one after the other) are run twice in the same process: with ``stream = "auto"``
(drafts) and with ``stream = "off"`` (the typing indicator, then the whole message).

Per turn it measures, on one monotonic clock (both fakes run in this process):

- **first token -> visible**: from the model's first token (the fake's ``token_times[0]``)
  to the first thing the person sees of the reply: the first ``sendMessageDraft`` when
  streaming (the issue's figure: target under 300 ms plus the throttle), the final
  ``sendMessage`` when not (there the answer arrives whole, after the same generation time:
  the fake's ``latency`` is set to it, and "first token" is the request's arrival);
- **request -> visible**: from the model request's arrival to the same moment, comparable
  between the two paths;
- **calls per reply**: drafts, final messages and typing actions the bot sent for the turn.

Usage (always as a module)::

    uv run python -m bench.streaming [--quick] [--out bench/results/streaming.json]

Prints plain-text tables, writes every figure as JSON, and exits 1 when a streamed turn did
not end in exactly one final message equal to the recorded reply.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

from adapters.telegram.adapter import TelegramAdapter
from bench._report import (
    configure_logging,
    environment,
    format_table,
    percentile,
    positive_float,
    positive_int,
    utc_timestamp,
    write_json,
)
from bot.app.build import runtime
from bot.config import (
    PersonaSettings,
    QueueSettings,
    Settings,
    StorageSettings,
    TelegramBotSettings,
)
from bot.core.events import ConversationKey
from bot.llm.anthropic import AnthropicLLM
from tests.fakes.messages_api import FakeMessagesAPI, RecordedRequest, tokens
from tests.fakes.telegram_api import FakeTelegramAPI, TgChat, TgUser

TOKEN: Final = "123456789:AAHbench-stream-token-0123456789abcd"
BOT: Final = "bench-telegram"
PERSONA: Final = PersonaSettings(
    id="mira", name="Mira", system="You are Mira.", first_message=["Hi"]
)
TARGET_MS: Final = 300.0  # the target for first token -> first draft, plus the throttle


@dataclass(frozen=True, slots=True)
class Params:
    turns: int
    words: int
    token_rate: float
    interval: float
    out: Path | None


@dataclass(frozen=True, slots=True)
class TurnFigures:
    first_visible_ms: float
    from_request_ms: float  # the model request's arrival to the first thing visible
    generation_ms: float  # the model's first token to its last
    drafts: int
    finals: int
    typing: int
    final_ok: bool


def reply_text(words: int) -> str:
    vocabulary = "tea leaves steep slowly in water just below boiling for a calm cup".split()  # noqa: SIM905
    return " ".join(vocabulary[i % len(vocabulary)] for i in range(words)) + "."


async def _mode(params: Params, mode: str, root: Path) -> list[TurnFigures]:
    """Run ``params.turns`` turns with ``stream = mode``; the figures of each."""
    text = reply_text(params.words)
    async with FakeTelegramAPI() as tg, FakeMessagesAPI(reply_text=text) as claude:
        tg.add_bot(TOKEN, "mira_bot", "Mira")
        claude.token_interval = 1.0 / params.token_rate
        if mode == "off":
            # The same model speed without streaming: the whole answer after its last token.
            claude.latency = (len(tokens(text)) - 1) * claude.token_interval
        settings = Settings(
            storage=StorageSettings(url=f"sqlite:///{root / f'{mode}.sqlite3'}"),
            queue=QueueSettings(
                debounce_seconds=0.05, max_wait_seconds=0.5, scan_interval_seconds=0.2
            ),
            personas=[PERSONA],
            bots=[
                TelegramBotSettings(
                    platform="telegram",
                    id=BOT,
                    persona="mira",
                    stream=mode,  # type: ignore[arg-type]
                    stream_interval_seconds=params.interval,
                )
            ],
        )
        adapter = TelegramAdapter(bot_key=BOT, token=TOKEN, api_server=tg.base_url)
        llm = AnthropicLLM(api_key="sk-bench", base_url=claude.base_url, max_retries=0)
        figures = []
        async with runtime(settings, llm=llm, adapters={BOT: (PERSONA, adapter)}) as rt:
            task = asyncio.create_task(adapter.run(rt.router))
            try:
                await tg.wait_for(lambda: tg.polls_started(TOKEN), what="polling")
                for n in range(params.turns):
                    user = TgUser(5000 + n, f"P{n}")
                    chat = TgChat.private(user)
                    before = claude.call_count
                    tg.push_message(TOKEN, chat, user, "how do I make tea?")
                    chat_id = chat.id
                    await tg.wait_for(
                        lambda: tg.sent_messages(TOKEN, chat_id),  # noqa: B023 - awaited here
                        what="the reply",
                        within=60,
                    )
                    request = claude.requests[before]
                    key = ConversationKey("telegram", str(chat.id), None, BOT)
                    session = await rt.store.current_session(key)
                    assert session is not None
                    recorded = [
                        m.text
                        for m in await rt.store.messages(session.key)
                        if m.role == "assistant"
                    ]
                    figures.append(_figures(tg, chat, request, recorded))
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                await adapter.aclose()
                await llm.aclose()
        return figures


def _figures(
    tg: FakeTelegramAPI, chat: TgChat, request: RecordedRequest, recorded: list[str]
) -> TurnFigures:
    # Without streaming there is no first token: the answer comes whole, after the latency.
    times = request.token_times or [request.received_at]
    first_token = times[0]
    calls = [c for c in tg.calls_of("sendMessageDraft", TOKEN) if c.chat_id == chat.id]
    finals = tg.sent_messages(TOKEN, chat.id)
    typing = [c for c in tg.chat_actions(TOKEN) if c.chat_id == chat.id]
    shown = [c.at for c in calls if c.ok] or [finals[0].at]
    final_ok = len(finals) == 1 and [finals[0].visible_text] == recorded
    return TurnFigures(
        first_visible_ms=(min(shown) - first_token) * 1000,
        from_request_ms=(min(shown) - request.received_at) * 1000,
        generation_ms=(times[-1] - first_token) * 1000,
        drafts=len(calls),
        finals=len(finals),
        typing=len(typing),
        final_ok=final_ok,
    )


def _summary(figures: Sequence[TurnFigures]) -> dict[str, float]:
    visible = [f.first_visible_ms for f in figures]
    count = len(figures) or 1
    return {
        "first_visible_p50_ms": percentile(visible, 50),
        "first_visible_p99_ms": percentile(visible, 99),
        "from_request_p50_ms": percentile([f.from_request_ms for f in figures], 50),
        "from_request_p99_ms": percentile([f.from_request_ms for f in figures], 99),
        "generation_p50_ms": percentile([f.generation_ms for f in figures], 50),
        "drafts_per_reply": sum(f.drafts for f in figures) / count,
        "finals_per_reply": sum(f.finals for f in figures) / count,
        "typing_per_reply": sum(f.typing for f in figures) / count,
        "calls_per_reply": sum(f.drafts + f.finals + f.typing for f in figures) / count,
    }


async def run(params: Params) -> int:
    with tempfile.TemporaryDirectory(prefix="personabot-bench-stream-") as tmp:
        root = Path(tmp)
        streamed = await _mode(params, "auto", root)
        plain = await _mode(params, "off", root)
    results = {"streamed": _summary(streamed), "non_streaming": _summary(plain)}
    generation_ms = results["streamed"]["generation_p50_ms"]
    ratio = results["streamed"]["from_request_p50_ms"] / max(
        1e-9, results["non_streaming"]["from_request_p50_ms"]
    )
    rows = [
        [
            name,
            f"{r['first_visible_p50_ms']:.0f}",
            f"{r['first_visible_p99_ms']:.0f}",
            f"{r['from_request_p50_ms']:.0f}",
            f"{r['from_request_p99_ms']:.0f}",
            f"{r['drafts_per_reply']:.1f}",
            f"{r['finals_per_reply']:.2f}",
            f"{r['typing_per_reply']:.1f}",
            f"{r['calls_per_reply']:.1f}",
        ]
        for name, r in results.items()
    ]
    print(
        format_table(
            [
                "path",
                "1st token->visible p50 ms",
                "p99",
                "request->visible p50 ms",
                "p99",
                "drafts",
                "finals",
                "typing",
                "calls",
            ],
            rows,
            title=(
                f"{params.turns} turns, {params.words} words at {params.token_rate:g} tokens/s "
                f"(~{generation_ms / 1000:.1f} s per reply), interval {params.interval:g} s"
            ),
        )
    )
    print(f"request -> first visible, streamed / non-streaming (p50): {ratio:.3f}")
    ok = all(f.final_ok for f in streamed + plain)
    payload: dict[str, Any] = {
        "benchmark": "streaming",
        "timestamp": utc_timestamp(),
        "environment": environment(),
        "params": {k: v for k, v in asdict(params).items() if k != "out"},
        "results": results,
        "ratio_request_to_visible_p50": ratio,
        "target_first_draft_ms": TARGET_MS,
        "every_turn_one_final_equal_to_record": ok,
        "turns": {
            "streamed": [asdict(f) for f in streamed],
            "non_streaming": [asdict(f) for f in plain],
        },
    }
    if params.out is not None:
        write_json(params.out, payload)
    return 0 if ok else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.streaming", description=__doc__)
    parser.add_argument("--turns", type=positive_int, default=30)
    parser.add_argument("--words", type=positive_int, default=60)
    parser.add_argument("--token-rate", type=positive_float, default=40.0)
    parser.add_argument("--interval", type=positive_float, default=1.0)
    parser.add_argument("--quick", action="store_true", help="5 turns of 12 words")
    parser.add_argument("--out", type=Path, default=Path("bench/results/streaming.json"))
    parser.add_argument("-v", "--verbose", action="count", default=0)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m bench.streaming``."""
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    turns, words = (5, 12) if args.quick else (args.turns, args.words)
    params = Params(turns, words, args.token_rate, args.interval, args.out)
    return asyncio.run(run(params))


if __name__ == "__main__":
    sys.exit(main())
