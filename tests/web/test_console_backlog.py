"""Issue 34: a conversation page over a backlog of thousands of pending messages, inside a
running ``personabot run``, renders in under a second and never holds the bots' event loop
for more than 100 ms (docs/web.md#performance).

The backlog is what a model outage leaves: 5,000 messages of one chat stored before the
process starts, the model holding its first call (the Messages API fake never answers
while ``hold`` is unset), so they all stay pending. The event loop's stalls are read from
the process's own ``personabot_event_loop_stall_seconds`` histogram (bot/runtime/loopwatch.py),
before and after the page.
"""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import aiohttp

from bot.core.events import ConversationKey, Inbound, QueuePolicy
from bot.store.sqlite import SQLiteStore
from tests.adapters.test_telegram_e2e import _env, personabot_run
from tests.fakes.messages_api import FakeMessagesAPI
from tests.fakes.telegram_api import FakeTelegramAPI

TOKEN = "5550034:AABacklog-e2e-token-abcdefghijklmno"
WEB_TOKEN = "backlog-operator-token-0123456789"
PENDING = 5000
CHAT = "777"


def _config(tmp_path: Path, telegram: str, model: str) -> Path:
    path = tmp_path / "personabot.toml"
    path.write_text(
        f"""
[storage]
url = "sqlite:///{tmp_path / "bots.sqlite3"}"

[llm]
provider = "anthropic"
base_url = "{model}"
max_retries = 0

[queue]
debounce_seconds = 0.2
max_wait_seconds = 1
scan_interval_seconds = 0.2
shutdown_grace_seconds = 1

[web]
listen = "127.0.0.1:0"

[observability]
listen = "127.0.0.1:0"

[[personas]]
id = "mira"
name = "Mira"
system = "You are Mira."
first_message = ["Hi, I'm Mira."]

[[bots]]
platform = "telegram"
persona = "mira"
token_env = "TG_TOKEN"
api_server = "{telegram}"
""",
        encoding="utf-8",
    )
    return path


async def _backlog(path: Path) -> None:
    """5,000 messages of one person, stored as the adapter would (ingest), none answered."""
    chat = ConversationKey("telegram", CHAT, None, "telegram-mira")
    policy = QueuePolicy(debounce=0.2, max_wait=1.0)
    start = time.time() - PENDING
    async with SQLiteStore(path=path) as store:
        for first in range(0, PENDING, 500):
            items = [
                (Inbound(chat, CHAT, "Sasha", f"message {i}: " + "word " * 20, f"m{i}"), policy)
                for i in range(first, first + 500)
            ]
            await store.ingest_many(items, start + first)


async def _logged(tmp_path: Path, pattern: str) -> str:
    for _ in range(600):
        found = re.search(pattern, (tmp_path / "err.log").read_text(errors="replace"))
        if found:
            return found[1]
        await asyncio.sleep(0.05)
    raise AssertionError(f"never logged {pattern!r}:\n" + (tmp_path / "err.log").read_text())


def _stalls(metrics: str) -> tuple[float, float]:
    """(wake-ups, those later than 100 ms) of the event loop watch so far."""
    count = re.search(r"^personabot_event_loop_stall_seconds_count (\S+)$", metrics, re.M)
    within = re.search(
        r'^personabot_event_loop_stall_seconds_bucket\{le="0\.1"\} (\S+)$', metrics, re.M
    )
    assert count and within, metrics
    return float(count[1]), float(count[1]) - float(within[1])


async def test_a_conversation_page_over_5000_pending_messages_holds_no_chat(
    tmp_path: Path,
) -> None:
    await _backlog(tmp_path / "bots.sqlite3")
    async with FakeTelegramAPI() as telegram, FakeMessagesAPI() as model:
        model.hold = asyncio.Event()  # the outage: the model never answers
        telegram.add_bot(TOKEN, "mira_bot")
        config = _config(tmp_path, telegram.base_url, model.base_url)
        env = _env(TG_TOKEN=TOKEN, ANTHROPIC_API_KEY="sk-test", PERSONABOT_WEB_TOKEN=WEB_TOKEN)
        async with (
            personabot_run(tmp_path, config, env),
            aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http,
        ):
            console = await _logged(tmp_path, r"operator console on (http://127\.0\.0\.1:\d+)")
            health = await _logged(tmp_path, r"health and metrics on (http://127\.0\.0\.1:\d+)")
            for _ in range(600):  # the first turn is with the model: the backlog is real
                replies = [r for r in model.requests if r.streamed]
                if replies:
                    break
                await asyncio.sleep(0.05)
            turn = replies[0].last_user_text
            assert "message 0:" in turn and "message 49:" in turn and "message 50:" not in turn
            bearer = {"Authorization": f"Bearer {WEB_TOKEN}"}
            async with http.get(f"{console}/api/conversations", headers=bearer) as r:
                (row,) = (await r.json())["conversations"]
            async with http.post(f"{console}/login", data={"token": WEB_TOKEN}) as r:
                assert r.status == 200
            async with http.get(f"{health}/metrics") as r:
                before = _stalls(await r.text())

            started = time.perf_counter()
            async with http.get(f"{console}/conversations/{row['id']}") as r:
                page = await r.text()
                assert r.status == 200, page
            took = time.perf_counter() - started

            await asyncio.sleep(0.1)  # the watch's next wake-up records the last stretch
            async with http.get(f"{health}/metrics") as r:
                after = _stalls(await r.text())
            async with http.get(f"{console}/api/conversations/{row['id']}", headers=bearer) as r:
                data = await r.json()
            model.hold.set()

    assert took < 1.0, f"the page took {took:.2f} s"
    assert after[0] > before[0], "the loop watch recorded nothing while the page was built"
    assert after[1] == before[1], "the event loop was held over 100 ms while building the page"
    # What the page says: the backlog's size, the one bounded turn the pipeline takes, and
    # a bounded transcript with a way to the earlier messages.
    assert f"Waiting for an answer: {PENDING} message(s)" in page
    assert data["pending_turn"]["messages"] == PENDING
    title = data["prompt"]["title"]
    assert "the next turn, 50 message(s); 4950 more wait" in title, title
    prompt = "\n".join(b["text"] for b in data["prompt"]["blocks"])
    assert "message 49:" in prompt and "message 50:" not in prompt
    assert len(data["transcript"]) == 200
    assert data["transcript"][-1]["text"].startswith(f"message {PENDING - 1}:")
    assert f"before={data['earlier_before_turn']}" in page.replace("&amp;", "&")
