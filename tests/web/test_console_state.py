"""A bot's connection as the console and /readyz show it, in a real ``personabot run``
against the fake Telegram Bot API (issue 35, item 10): "not connected" said why, the
reason the log had, and never the token that Telegram's URLs carry."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import aiohttp

from tests.adapters.test_telegram_e2e import _env, personabot_run
from tests.fakes.telegram_api import FakeTelegramAPI

TOKEN = "5550011:AAState-e2e-token-abcdefghijklmnopq"
WEB_TOKEN = "state-operator-token-0123456789"


def _config(tmp_path: Path, telegram: str) -> Path:
    path = tmp_path / "personabot.toml"
    path.write_text(
        f"""
[storage]
url = "sqlite:///{tmp_path / "bots.sqlite3"}"

[llm]
provider = "offline"

[observability]
listen = "127.0.0.1:0"

[web]
listen = "127.0.0.1:0"

[[bots]]
platform = "telegram"
persona = "companion"
token_env = "TG_TOKEN"
api_server = "{telegram}"
""",
        encoding="utf-8",
    )
    return path


async def _addresses(tmp_path: Path) -> tuple[str, str]:
    """The console's and the health server's base URLs, from the log."""
    log = ""
    for _ in range(300):
        log = (tmp_path / "err.log").read_text(errors="replace")
        console = re.search(r"operator console on (http://127\.0\.0\.1:\d+)", log)
        health = re.search(r"health and metrics on (http://127\.0\.0\.1:\d+)", log)
        if console and health:
            return console[1], health[1]
        await asyncio.sleep(0.1)
    raise AssertionError("the servers never started:\n" + log)


async def _failed_bot(http: aiohttp.ClientSession, console: str) -> dict[str, Any]:
    """The overview's bot once it has a last error (the failed poll's answer is read just
    after the fake recorded the call)."""
    bearer = {"Authorization": f"Bearer {WEB_TOKEN}"}
    for _ in range(100):
        async with http.get(f"{console}/api/overview", headers=bearer) as r:
            (bot,) = (await r.json())["bots"]
        if bot.get("last_error"):
            return dict(bot)
        await asyncio.sleep(0.05)
    raise AssertionError(f"no last error: {bot}")


async def test_a_bot_that_cannot_reach_telegram_says_why(tmp_path: Path) -> None:
    async with FakeTelegramAPI() as telegram:
        telegram.add_bot(TOKEN, "state_bot")
        # A proxy in front of Telegram failing every poll, quoting the request path (and so
        # the token) in its error, as real proxies do.
        telegram.fail_next(
            "getUpdates",
            status=502,
            description=f"Bad Gateway: upstream of /bot{TOKEN}/getUpdates refused",
            times=10_000,
        )
        config = _config(tmp_path, telegram.base_url)
        env = _env(TG_TOKEN=TOKEN, PERSONABOT_WEB_TOKEN=WEB_TOKEN)
        async with personabot_run(tmp_path, config, env), aiohttp.ClientSession() as http:
            console, health = await _addresses(tmp_path)
            await telegram.wait_for(
                lambda: len(telegram.calls_of("getUpdates")) >= 1, within=40, what="a poll"
            )
            bot = await _failed_bot(http, console)
            async with http.get(f"{health}/readyz") as r:
                ready = (r.status, await r.text())
            jar = aiohttp.CookieJar(unsafe=True)
            async with (
                aiohttp.ClientSession(cookie_jar=jar) as browser,
                browser.post(f"{console}/login", data={"token": WEB_TOKEN}) as r,
            ):
                page = await r.text()
    assert bot["state"] == "not connected"
    error = bot["last_error"]
    assert error is not None and "getUpdates failed" in error["message"]
    assert "Bad Gateway: upstream of /bot[redacted]/getUpdates refused" in error["message"]
    assert abs(error["at"] - time.time()) < 120
    row = re.search(r"<tr><td>telegram-companion</td>.*?</tr>", page, re.S)
    assert row is not None, page
    assert "not connected" in row[0] and "last error" in row[0] and "Bad Gateway" in row[0]
    assert ready[0] == 503
    assert "not connected: telegram-companion (last error at" in ready[1]
    assert "getUpdates failed" in ready[1] and "[redacted]" in ready[1]
    secret = TOKEN.split(":", 1)[1]
    for shown in (str(bot), page, ready[1]):
        assert secret not in shown
