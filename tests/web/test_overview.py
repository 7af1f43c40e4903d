"""The overview as ``personabot web`` serves it, apart from the bots' process (no adapters, no
counters of its own): each bot's last update, the last gaps and model rejections, and the
people nearest their per-person daily limits, all read from the store, on both stores; hostile
text in every field they show is escaped."""

from __future__ import annotations

import datetime as dt
from typing import Any

import aiohttp

from bot.app.build import build_memory
from bot.app.web import console
from bot.config import Secrets, Settings
from bot.core.clock import ManualClock
from bot.core.errors import RequestRejected
from bot.core.events import ConversationKey, Inbound, QueuePolicy, UserKey
from bot.core.llm import ModelRequest, Usage
from bot.llm.offline import OfflineLLM
from bot.store.base import BaseStore
from tests.backends import StoreFactory
from tests.bot.test_retention import delete_rows
from tests.fakes.llm import GatedLLM
from tests.harness import BOT, harness

TOKEN = "overview-token-0123456789abcdef"
XSS = '"><img src=x onerror=alert(1)>'
RAW = "<img src=x"
SHOWN = "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;"  # XSS as the page holds it
Q = QueuePolicy(debounce=0.0, max_wait=5.0)
MIRA = {"platform": "telegram", "persona": "companion", "id": "telegram-mira"}


async def _overview(
    store: BaseStore, clock: ManualClock, settings: dict[str, Any]
) -> tuple[dict[str, Any], str]:
    """The overview's JSON and page from a console of its own on ``store``."""
    parsed = Settings.model_validate(settings)
    web = console(
        parsed,
        Secrets({"PERSONABOT_WEB_TOKEN": TOKEN}),
        store=store,
        memory=build_memory(parsed, store, OfflineLLM(), clock),
        clock=clock,
        listen="127.0.0.1:0",
    )
    async with web, aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        base = f"http://127.0.0.1:{web.port}"
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        async with http.get(f"{base}/api/overview", headers=bearer) as r:
            assert r.status == 200
            data = await r.json()
        async with http.post(f"{base}/login", data={"token": TOKEN}) as r:
            assert r.status == 200 and r.url.path == "/"
            page = await r.text()
    assert RAW not in page
    return data, page


def _utc(at: float) -> str:
    return dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


async def test_gaps_and_rejections_the_turns_met_are_on_another_processs_overview(
    store: BaseStore, stores: StoreFactory, clock: ManualClock
) -> None:
    # Hostile chat and thread ids (as a platform could hand them in) and a hostile rejection.
    chat = ConversationKey("telegram", XSS, XSS, BOT)

    def answer(request: ModelRequest) -> str:
        if "POISON" in request.messages[-1].text:
            raise RequestRejected(f"prompt is too long {XSS}")
        return "fine"

    async with harness(store, clock, GatedLLM(answer=answer)) as h:
        await h.say(chat, "hello")
        await h.advance(2)
        await h.say(chat, "how are you?")
        await h.advance(2)
        await delete_rows(stores, [1, 2])  # another tool deletes turns 1-2
        gap_found = clock.now() + 1.5  # when the next turn runs (the debounce)
        await h.say(chat, "POISON one")
        await h.say(chat, "POISON two")
        written = clock.now()
        await h.advance(2)
        await h.say(chat, "and now?")  # a turn in the same gap: found once, listed once
        await h.advance(2)
    data, page = await _overview(store, clock, {"bots": [MIRA]})
    events = [
        {k: e[k] for k in ("kind", "chat_id", "thread_id", "session", "turns")}
        for e in data["events"]
    ]
    # The gap was found when the turn ran; the rejected messages were written before it.
    assert events == [
        {"kind": "gap", "chat_id": XSS, "thread_id": XSS, "session": 1, "turns": []},
        {"kind": "rejected", "chat_id": XSS, "thread_id": XSS, "session": 1, "turns": [5, 6]},
    ]
    gap, rejected = data["events"]
    assert rejected["detail"] == f"prompt is too long {XSS}" and rejected["at"] == written
    assert gap["detail"] == "turns 1-2 missing; gap policy note"
    assert abs(gap["at"] - gap_found) <= 0.2
    # The page: both, in that order, their conversation linked, everything escaped.
    listed = page[page.index("Recent gaps and model rejections") :]
    assert listed.index("turns missing") < listed.index("rejected by the model")
    assert f"turn(s) 5, 6: prompt is too long {SHOWN}" in listed
    assert f'href="/conversations/{gap["conversation_id"]}?session=1"' in listed
    assert f"{BOT}:telegram:{SHOWN}:{SHOWN}" in listed


async def test_each_bots_last_update_is_when_a_person_last_wrote_to_it(
    store: BaseStore, clock: ManualClock
) -> None:
    discord = {"platform": "discord", "persona": "companion", "id": "discord-orin"}
    settings = {"bots": [MIRA, discord]}
    data, page = await _overview(store, clock, settings)
    assert [(b["key"], b["last_update"]) for b in data["bots"]] == [
        ("telegram-mira", None),
        ("discord-orin", None),
    ]
    assert page.count("<td>never</td>") == 2
    chat = ConversationKey("telegram", "42", None, "telegram-mira")
    said = clock.now() - 600
    await store.ingest(Inbound(chat, "7", XSS, XSS, "m-1"), said, Q)
    turn = await store.pending_turn(chat)
    lease = await store.acquire_lease(f"turn:{chat}", "w", 30, said + 300)
    assert turn is not None and lease is not None
    await store.finish_turn(turn, lease, "a reply is no update", said + 300, Q)
    data, page = await _overview(store, clock, settings)
    assert [(b["key"], b["last_update"]) for b in data["bots"]] == [
        ("telegram-mira", said),
        ("discord-orin", None),
    ]
    row = page[page.index("<td>telegram-mira</td>") : page.index("<td>discord-orin</td>")]
    assert f"<td>{_utc(said)}</td>" in row
    assert page.count("<td>never</td>") == 1


async def test_the_people_nearest_their_daily_limits_with_used_and_limit(
    store: BaseStore, clock: ManualClock
) -> None:
    bots = {"bots": [{**MIRA, "admins": ["boss"]}]}
    data, page = await _overview(store, clock, bots)
    assert data["person_limits"] == []
    assert "No per-person daily limit is set" in page
    today = clock.now() - clock.now() % 86400
    chat = ConversationKey("telegram", "42", None, "telegram-mira")
    hostile = ConversationKey(XSS, "42", None, "telegram-mira")  # a platform name, too
    await store.record_usage(hostile, "reply", "m", [(XSS, Usage(1200, 50))], today + 5)
    await store.record_usage(chat, "reply", "m", [("7", Usage(300, 50))], today + 6)
    await store.record_usage(chat, "reply", "m", [("boss", Usage(900, 50))], today + 7)
    await store.record_usage(chat, "reply", "m", [("8", Usage(5000, 50))], today - 1)  # yesterday
    await store.record_usage(
        chat, "summary", "m", [(None, Usage(7000, 50))], today + 8
    )  # the bot's
    for user, times in (("7", 3), (XSS, 1)):
        for i in range(times):
            await store.reserve_turn(UserKey("telegram", user), "telegram-mira", today + i)
    limits = {"user_input_tokens_per_day": 1000, "user_turns_per_day": 4}
    data, page = await _overview(store, clock, {**bots, "limits": limits})
    tokens, turns = data["person_limits"]
    assert (tokens["limit"], tokens["per_day"], turns["limit"], turns["per_day"]) == (
        "user_input_tokens_per_day",
        1000,
        "user_turns_per_day",
        4,
    )
    assert [
        (p["platform"], p["user_id"], p["used"], p["share"], p["admin"]) for p in tokens["people"]
    ] == [
        (XSS, XSS, 1200, 1.2, False),
        ("telegram", "boss", 900, 0.9, True),
        ("telegram", "7", 300, 0.3, False),
    ]
    assert [(p["user_id"], p["used"], p["share"]) for p in turns["people"]] == [
        ("7", 3, 0.75),
        (XSS, 1, 0.25),
    ]
    shown = page[page.index("People nearest their daily limits") :]
    assert (
        f"{SHOWN}:{SHOWN}</a></td>\n<td>1200</td><td>1000</td><td>120.0 % (reached)</td>" in shown
    )
    quoted = "%22%3E%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E"
    assert f'<a href="/people/{quoted}/{quoted}">' in shown
    assert "telegram:boss</a> (admin: not limited on the bots they administer)" in shown
    assert "<td>3</td><td>4</td><td>75.0 %</td>" in shown
