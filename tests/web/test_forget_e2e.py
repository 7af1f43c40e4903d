"""A fact forgotten through the console is gone from the next model request: a real
``personabot run`` with ``[web] listen``, the fake Telegram Bot API (real aiogram) and the fake
Messages API (real anthropic SDK), on SQLite and on PostgreSQL.

The person states two facts; memory extraction learns them (the console's person page lists
them, and the next reply's request carries both); the operator forgets one with the console's
form (a logged-in POST with the CSRF token); the request of the person's next reply carries
the other fact and not the forgotten one.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

from tests.adapters.test_telegram_e2e import _env, personabot_run
from tests.backends import StoreFactory
from tests.fakes.messages_api import CannedReply, FakeMessagesAPI, RecordedRequest
from tests.fakes.telegram_api import FakeTelegramAPI, TgChat, TgUser
from tests.web.test_browser import _console_url

TOKEN = "5550011:AAForget-e2e-token-abcdefghijklmnop"
WEB_TOKEN = "forget-operator-token-0123456789"
PERSON = TgUser(4242, "Sasha")
STATED = "I look after patients until dawn, and a small dog keeps me company."
# What the model makes of it: words said nowhere in the chat, so a request can only carry
# them through the remembered facts (the window holds the message itself).
FORGOTTEN = ("occupation", "night-shift nurse on ward 7B")
KEPT = ("pet", "a beagle called Biscuit")


def _config(tmp_path: Path, url: str, telegram: str, claude: str) -> Path:
    path = tmp_path / "personabot.toml"
    path.write_text(
        f"""
[storage]
url = {json.dumps(url)}

[llm]
base_url = {json.dumps(claude)}
max_retries = 0

[queue]
debounce_seconds = 0.2
max_wait_seconds = 2
scan_interval_seconds = 0.2
shutdown_grace_seconds = 2

[memory]
extract_after_idle_minutes = 0.01
sweep_interval_seconds = 0.2

[web]
listen = "127.0.0.1:0"

[[personas]]
id = "mira"
name = "Mira"
system = "You are Mira."
first_message = ["Hi, I'm Mira."]
model = "claude-test"

[[bots]]
platform = "telegram"
persona = "mira"
token_env = "TG_TOKEN"
api_server = "{telegram}"
""",
        encoding="utf-8",
    )
    return path


def _is_extraction(request: RecordedRequest) -> bool:
    return "<messages_of " in request.last_user_text


def _extraction(request: RecordedRequest) -> CannedReply:
    """Both facts, from the message that stated them; nothing from any other message."""
    found: dict[str, list[dict[str, Any]]] = {"semantic": [], "emotional": [], "episodic": []}
    for line in request.last_user_text.splitlines():
        if line.startswith("{") and json.loads(line)["text"] == STATED:
            source = json.loads(line)["message_id"]
            found["semantic"] = [
                {"field": field, "value": value, "source": source}
                for field, value in (FORGOTTEN, KEPT)
            ]
    return CannedReply(json.dumps(found))


async def _until(check: Callable[[], Awaitable[bool]], what: str, within: float = 30.0) -> None:
    for _ in range(int(within / 0.2)):
        if await check():
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


async def test_a_fact_forgotten_through_the_console_is_gone_from_the_next_request(
    tmp_path: Path, stores: StoreFactory
) -> None:
    url = f"sqlite:///{stores.path}" if stores.backend.name == "sqlite" else stores.dsn
    async with FakeTelegramAPI() as telegram, FakeMessagesAPI(reply_text="Noted.") as claude:
        telegram.add_bot(TOKEN, "mira_bot")
        claude.answer_when(_is_extraction, _extraction)
        config = _config(tmp_path, url, telegram.base_url, claude.base_url)
        env = _env(TG_TOKEN=TOKEN, ANTHROPIC_API_KEY="sk-test-e2e", PERSONABOT_WEB_TOKEN=WEB_TOKEN)
        chat = TgChat.private(PERSON)

        def reply_to(text: str) -> RecordedRequest | None:
            found = [r for r in claude.requests if r.last_user_text.endswith(text)]
            return found[-1] if found else None

        async def body_of_reply_to(text: str) -> str:
            """The JSON body of the request for the reply to ``text``, once it came."""
            await telegram.wait_for(lambda: reply_to(text), what=f"the reply to {text!r}")
            request = reply_to(text)
            assert request is not None
            return json.dumps(request.body)

        async with (
            personabot_run(tmp_path, config, env),
            aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http,
        ):
            base = await _console_url(tmp_path)
            bearer = {"Authorization": f"Bearer {WEB_TOKEN}"}

            async def facts() -> list[tuple[str, str]]:
                async with http.get(f"{base}/api/people/telegram/4242", headers=bearer) as r:
                    return [(f["field"], f["value"]) for f in (await r.json())["facts"]]

            await telegram.wait_for(lambda: telegram.polls_started(TOKEN), within=40, what="poll")
            telegram.push_message(TOKEN, chat, PERSON, STATED)
            await telegram.wait_for(lambda: reply_to(STATED), what="the first reply")

            async def learned() -> bool:
                return sorted(await facts()) == sorted([FORGOTTEN, KEPT])

            await _until(learned, "memory extraction to learn both facts")
            # The facts reach the model: the next reply's request carries both.
            telegram.push_message(TOKEN, chat, PERSON, "what do you remember about me?")
            before = await body_of_reply_to("about me?")
            assert FORGOTTEN[1] in before and KEPT[1] in before

            # The operator forgets one fact with the person page's form.
            async with http.post(f"{base}/login", data={"token": WEB_TOKEN}) as r:
                assert r.status == 200
            async with http.get(f"{base}/people/telegram/4242") as r:
                page = await r.text()
            csrf = re.search(r'name="csrf" value="([^"]+)"', page)
            assert csrf is not None and FORGOTTEN[1] in page
            form = {
                "csrf": csrf[1],
                "section": "semantic",
                "field": FORGOTTEN[0],
                "value": FORGOTTEN[1],
            }
            async with http.post(f"{base}/people/telegram/4242/forget-item", data=form) as r:
                assert r.status == 200  # back on the person page
                page = await r.text()
            assert FORGOTTEN[1] not in page and KEPT[1] in page
            assert await facts() == [KEPT]

            telegram.push_message(TOKEN, chat, PERSON, "and now?")
            after = await body_of_reply_to("and now?")
    assert FORGOTTEN[1] not in after  # forgotten: gone from what the model is sent
    assert KEPT[1] in after  # the other fact is still remembered and sent
    assert STATED in after  # the window still holds what was said (only the fact went)
