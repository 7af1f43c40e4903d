"""Review 22: without a login nothing answers, the playground's POSTs included: no model
call, no message, no audit row (both stores; a real playground runtime behind the console)."""

from __future__ import annotations

import asyncio

import aiohttp

from bot.app.app import App
from bot.app.build import build_memory
from bot.app.web import console
from bot.app.web.playground import playground
from bot.config import Secrets, Settings
from bot.core.clock import SystemClock
from bot.store.base import BaseStore
from tests.fakes.llm import GatedLLM
from tests.web.security.rig import SETTINGS, TOKEN

GETS = ["/", "/conversations", "/conversations/1", "/people/telegram/7", "/retention", "/audit"]
PAGE_POSTS = [
    "/logout",
    "/playground/companion",
    "/people/telegram/7/forget-item",
    "/people/telegram/7/forget",
    "/people/telegram/7/export",
]
API_POSTS = [
    "/api/playground/companion",
    "/api/people/telegram/7/forget-item",
    "/api/people/telegram/7/forget",
    "/api/people/telegram/7/export",
]


async def test_no_route_answers_without_a_login_and_the_playground_calls_no_model(
    store: BaseStore,
) -> None:
    llm = GatedLLM()  # counts every model call the playground's runtime makes
    quick = {"debounce_seconds": 0.05, "max_wait_seconds": 1, "scan_interval_seconds": 0.05}
    settings = Settings.model_validate({**SETTINGS, "queue": quick})
    app = App(settings, Secrets({}), clock=SystemClock(), llm=llm)
    jar = aiohttp.CookieJar(unsafe=True)
    async with (
        playground(app, store) as try_out,
        console(
            settings,
            Secrets({"PERSONABOT_WEB_TOKEN": TOKEN}),
            store=store,
            memory=build_memory(settings, store, llm, SystemClock()),
            clock=SystemClock(),
            listen="127.0.0.1:0",
            playground=try_out,
        ) as web,
        aiohttp.ClientSession(cookie_jar=jar) as http,
    ):
        base = f"http://127.0.0.1:{web.port}"
        for path in [*GETS, "/playground"]:
            async with http.get(base + path, allow_redirects=False) as r:
                assert r.status == 303 and r.headers["Location"].startswith("/login?next="), path
            api = "/api/overview" if path == "/" else "/api" + path
            async with http.get(base + api) as r:
                assert r.status == 401, api
        # A page POST without a session: 401 (a form may carry any csrf it likes).
        form = {"text": "hello", "confirm": "yes", "csrf": "guessed"}
        for path in PAGE_POSTS:
            async with http.post(base + path, data=form, allow_redirects=False) as r:
                assert r.status == 401, path
                assert "Log in first." in await r.text()
        # An API POST without the Bearer token, or with a wrong one: 401.
        for headers in ({}, {"Authorization": "Bearer wrong-token-0123456789"}):
            for path in API_POSTS:
                body = {"text": "hello", "confirm": True}
                async with http.post(base + path, json=body, headers=headers) as r:
                    assert r.status == 401, path
                    assert await r.json() == {"error": "unauthorized"}
        await asyncio.sleep(0.5)  # a turn would have been due ten times over
        assert llm.calls == 0
        chat = await try_out.chat("companion")
        assert (chat.session, chat.messages, chat.waiting) == (None, (), False)
        assert await store.console_conversations() == []  # no message anywhere
        assert await store.audit_log() == []

        # The same POST with the token is taken and answered once: the check above could fail.
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        async with http.post(base + API_POSTS[0], json={"text": "hello"}, headers=bearer) as r:
            assert r.status == 200 and await r.json() == {"accepted": True}
        for _ in range(100):
            if llm.calls:
                break
            await asyncio.sleep(0.05)
        assert llm.calls == 1 and llm.last_input().endswith("hello")
