"""docs/scenes.md#loops, docs/web.md: the console's conversation page of a scene shows the cast,
who spoke at the last turn and why, the caps hit and the mute; each line under its persona."""

from __future__ import annotations

import aiohttp

from bot.app.web import console
from bot.config import Secrets, Settings
from bot.core.clock import ManualClock
from bot.store.base import BaseStore
from tests.harness import BOT
from tests.scenes.test_scene_turns import CAST, answering, group, scene, scene_bot

TOKEN = "op-token-0123456789abcdef"


async def test_the_console_shows_the_cast_who_spoke_and_why(
    store: BaseStore, clock: ManualClock
) -> None:
    llm = answering()
    rules = {"strategy": "manual", "max_lines_per_hour": 1}
    async with scene(store, clock, llm, **rules) as h:  # type: ignore[attr-defined]
        await group(h, "Bob, Carol: hello")
        await h.advance(30, step=3)
        await group(h, "Alice?")  # the hourly cap (1 line) was reached by the first turn
        await h.advance(30, step=3)
        settings = Settings.model_validate(
            {
                "personas": [p.model_dump() for p in CAST],
                "bots": [scene_bot(**rules).model_dump()],
            }
        )
        web = console(
            settings,
            Secrets({"PERSONABOT_WEB_TOKEN": TOKEN}),
            store=store,
            memory=h.memory,
            clock=clock,
            listen="127.0.0.1:0",
        )
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        jar = aiohttp.CookieJar(unsafe=True)  # cookies for 127.0.0.1
        async with web, aiohttp.ClientSession(cookie_jar=jar) as http:
            base = f"http://127.0.0.1:{web.port}"
            async with http.get(f"{base}/api/conversations/1", headers=bearer) as r:
                assert r.status == 200
                page = await r.json()
            async with http.post(f"{base}/login", data={"token": TOKEN, "next": "/"}) as r:
                assert r.status == 200
            async with http.get(f"{base}/conversations/1") as r:
                html = await r.text()
    assert page["conversation"]["bot"] == BOT
    shown = page["scene"]
    assert [c["name"] for c in shown["cast"]] == ["Alice", "Bob", "Carol"]
    # The last plan was the capped one: nobody spoke; the one before (Bob) is in the lines.
    assert shown["caps_last_hour"] == 1
    assert [(m["role"], m["persona"]) for m in page["transcript"]] == [
        ("user", None),
        ("assistant", "bob"),
        ("user", None),
    ]
    assert shown["last_plan"] == [
        {"persona": "bob", "reason": "addressed", "outcome": "sent", "name": "Bob"}
    ]
    assert "<h3>Scene</h3>" in html and "caps hit in the last hour: 1" in html
    assert "<td>Bob</td><td>addressed</td><td>sent</td>" in html
