"""A console on a real store over real HTTP, for review 22's tests (as tests/web's rig)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp

from bot.app.build import build_memory
from bot.app.web import console
from bot.config import Secrets, Settings
from bot.core.clock import ManualClock
from bot.core.events import ConversationKey, Inbound, QueuePolicy
from bot.llm.offline import OfflineLLM
from bot.store.base import BaseStore

TOKEN = "op-token-0123456789abcdef"
T0 = 1_700_000_000.0
Q = QueuePolicy(debounce=0.0, max_wait=5.0)
DM = ConversationKey("telegram", "4242", None, "telegram-mira")
SETTINGS = {"bots": [{"platform": "telegram", "persona": "companion", "id": "telegram-mira"}]}


@dataclass
class Rig:
    base: str
    store: BaseStore
    http: aiohttp.ClientSession
    clock: ManualClock

    async def login(self) -> str:
        """Log in; the CSRF token of the session."""
        async with self.http.post(f"{self.base}/login", data={"token": TOKEN, "next": "/"}) as r:
            assert r.status == 200 and str(r.url).endswith("/")
        async with self.http.get(f"{self.base}/audit") as r:
            found = re.search(r'name="csrf" value="([^"]+)"', await r.text())
        assert found is not None
        return found[1]


async def answered(store: BaseStore, key: ConversationKey, name: str, text: str, at: float) -> int:
    """A message from user 7 and the bot's reply; the message's row id."""
    await store.ingest(Inbound(key, "7", name, text, f"m{at}", is_private=True), at, Q)
    turn = await store.pending_turn(key)
    assert turn is not None
    lease = await store.acquire_lease(f"turn:{key}", "w", 30, at)
    assert lease is not None
    assert (await store.finish_turn(turn, lease, f"re: {text}", at, Q)).outcome == "recorded"
    await store.release_lease(lease)
    return turn.messages[0].id


async def open_rig(store: BaseStore) -> AsyncIterator[Rig]:
    """The body of a ``rig`` fixture."""
    settings = Settings.model_validate(SETTINGS)
    clock = ManualClock(T0 + 100)
    memory = build_memory(settings, store, OfflineLLM(), clock)
    web = console(
        settings,
        Secrets({"PERSONABOT_WEB_TOKEN": TOKEN}),
        store=store,
        memory=memory,
        clock=clock,
        listen="127.0.0.1:0",
    )
    jar = aiohttp.CookieJar(unsafe=True)
    async with web, aiohttp.ClientSession(cookie_jar=jar) as http:
        yield Rig(f"http://127.0.0.1:{web.port}", store, http, clock)
