"""The operator console over real HTTP (aiohttp client) on both stores: login, CSRF, the
401s, escaping of hostile text, person actions and their audit log, the JSON API."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
import pytest

from bot.app.build import build_memory
from bot.app.web import console
from bot.config import Secrets, Settings
from bot.core.clock import ManualClock
from bot.core.errors import ConfigError
from bot.core.events import ConversationKey, Inbound, QueuePolicy, UserKey
from bot.llm.offline import OfflineLLM
from bot.store.base import BaseStore
from memory.records import MemoryItem, UserMemory

TOKEN = "op-token-0123456789abcdef"
T0 = 1_700_000_000.0
Q = QueuePolicy(debounce=0.0, max_wait=5.0)
XSS_NAME = "<img src=x onerror=alert(1)>"
XSS_TEXT = "</script><script>alert(1)</script>"
DM = ConversationKey("telegram", "4242", None, "telegram-mira")
GROUP = ConversationKey("telegram", "-100", None, "telegram-mira")


@dataclass
class Rig:
    base: str
    store: BaseStore
    http: aiohttp.ClientSession

    async def login(self) -> str:
        """Log in; the CSRF token of the session."""
        async with self.http.post(f"{self.base}/login", data={"token": TOKEN, "next": "/"}) as r:
            assert r.status == 200 and str(r.url).endswith("/")
        return await self.csrf()

    async def csrf(self) -> str:
        async with self.http.get(f"{self.base}/audit") as r:
            page = await r.text()
        found = re.search(r'name="csrf" value="([^"]+)"', page)
        assert found is not None
        return found[1]


async def _answered(store: BaseStore, key: ConversationKey, name: str, text: str, at: float) -> int:
    """A message from user 7 and the bot's reply; the message's row id."""
    await store.ingest(Inbound(key, "7", name, text, f"m{at}", is_private=key is DM), at, Q)
    turn = await store.pending_turn(key)
    assert turn is not None
    lease = await store.acquire_lease(f"turn:{key}", "w", 30, at)
    assert lease is not None
    assert (await store.finish_turn(turn, lease, f"re: {text}", at, Q)).outcome == "recorded"
    await store.release_lease(lease)
    return turn.messages[0].id


@pytest.fixture
async def rig(store: BaseStore) -> AsyncIterator[Rig]:
    settings = Settings.model_validate(
        {"bots": [{"platform": "telegram", "persona": "companion", "id": "telegram-mira"}]}
    )
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
    jar = aiohttp.CookieJar(unsafe=True)  # cookies for 127.0.0.1
    async with web, aiohttp.ClientSession(cookie_jar=jar) as http:
        yield Rig(f"http://127.0.0.1:{web.port}", store, http)


PAGES = ["/", "/conversations", "/conversations/1", "/people/telegram/7", "/retention", "/audit"]


async def test_nothing_without_login_and_the_api_only_with_the_bearer_token(rig: Rig) -> None:
    await _answered(rig.store, DM, "Ada", "hello", T0)
    for path in PAGES:
        async with rig.http.get(rig.base + path, allow_redirects=False) as r:
            assert r.status == 303 and r.headers["Location"].startswith("/login?next="), path
        api = "/api/overview" if path == "/" else "/api" + path
        async with rig.http.get(rig.base + api) as r:
            assert r.status == 401, api
            assert (await r.json()) == {"error": "unauthorized"}
        async with rig.http.get(
            rig.base + api, headers={"Authorization": "Bearer wrong-token-xxxxxxxx"}
        ) as r:
            assert r.status == 401, api
    for action in ("forget-item", "forget", "export"):
        async with rig.http.post(f"{rig.base}/people/telegram/7/{action}", data={}) as r:
            assert r.status == 401
        async with rig.http.post(f"{rig.base}/api/people/telegram/7/{action}", json={}) as r:
            assert r.status == 401
    # The API answers the Bearer token (and the cookie of a login does not open it).
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    async with rig.http.get(f"{rig.base}/api/conversations", headers=bearer) as r:
        body = await r.json()
    assert [c["chat_id"] for c in body["conversations"]] == ["4242"]
    await rig.login()
    async with rig.http.get(f"{rig.base}/api/conversations") as r:
        assert r.status == 401


async def test_failed_logins_are_limited_per_address(rig: Rig) -> None:
    for _ in range(4):
        async with rig.http.post(f"{rig.base}/login", data={"token": "nope"}) as r:
            assert r.status == 401
    await rig.login()  # a success clears the count
    for _ in range(5):
        async with rig.http.post(f"{rig.base}/login", data={"token": TOKEN[:-1]}) as r:
            assert r.status == 401
    async with rig.http.post(f"{rig.base}/login", data={"token": TOKEN}) as r:
        assert r.status == 429  # even the right token waits a minute after five failures


async def test_a_login_sets_a_strict_cookie_and_never_redirects_away(rig: Rig) -> None:
    async with rig.http.post(
        f"{rig.base}/login",
        data={"token": TOKEN, "next": "//evil.example/x"},
        allow_redirects=False,
    ) as r:
        assert r.status == 303 and r.headers["Location"] == "/"
        cookie = r.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    for path in PAGES[:2]:
        async with rig.http.get(rig.base + path) as r:
            assert r.status == 200
            assert "script-src" not in r.headers["Content-Security-Policy"]  # none at all
            assert "default-src 'none'" in r.headers["Content-Security-Policy"]
            assert r.headers["X-Frame-Options"] == "DENY"
            assert "<script" not in (await r.text()).lower()


async def test_hostile_names_and_messages_render_as_text(rig: Rig) -> None:
    await _answered(rig.store, DM, XSS_NAME, XSS_TEXT, T0)
    await rig.login()
    pages = []
    for path in ("/conversations", "/conversations/1", "/people/telegram/7"):
        async with rig.http.get(rig.base + path) as r:
            assert r.status == 200, path
            pages.append(await r.text())
    listing, conversation, person = pages
    assert XSS_NAME not in listing and "&lt;img src=x onerror=alert(1)&gt;" in listing
    assert XSS_TEXT not in conversation
    assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in conversation
    assert XSS_NAME not in person and "&lt;img" in person
    for page in pages:
        assert "<script" not in page.lower() and "<img" not in page.lower()


async def test_forgetting_through_the_console_needs_csrf_and_is_audited(rig: Rig) -> None:
    source = await _answered(rig.store, DM, "Ada", "I am a nurse", T0)
    user = UserKey("telegram", "7")
    record = UserMemory(
        items=(
            MemoryItem("semantic", "occupation", "nurse", sources=(source,)),
            MemoryItem("semantic", "name", "Ada", sources=(source,), private=False, scope="-100"),
        )
    )
    await rig.store.set_user_memory(user, record.to_json(), T0)
    csrf = await rig.login()
    async with rig.http.get(f"{rig.base}/people/telegram/7") as r:
        page = await r.text()
    assert "nurse" in page and "private chat" in page and "group -100" in page
    assert "I am a nurse" in page  # the message the fact came from
    item = {"section": "semantic", "field": "occupation", "value": "nurse"}
    async with rig.http.post(f"{rig.base}/people/telegram/7/forget-item", data=item) as r:
        assert r.status == 403  # no CSRF token
    async with rig.http.post(
        f"{rig.base}/people/telegram/7/forget-item", data={**item, "csrf": "forged"}
    ) as r:
        assert r.status == 403
    stored = await rig.store.get_user_memory(user)
    assert "nurse" in str(stored)
    async with rig.http.post(
        f"{rig.base}/people/telegram/7/forget-item", data={**item, "csrf": csrf}
    ) as r:
        assert r.status == 200
    stored = await rig.store.get_user_memory(user)
    assert "nurse" not in str(stored) and "Ada" in str(stored)
    async with rig.http.post(f"{rig.base}/people/telegram/7/forget", data={"csrf": csrf}) as r:
        assert r.status == 400  # not confirmed: nothing erased
    assert "Ada" in str(await rig.store.get_user_memory(user))
    async with rig.http.post(
        f"{rig.base}/people/telegram/7/forget", data={"csrf": csrf, "confirm": "yes"}
    ) as r:
        assert r.status == 200
    assert "Ada" not in str(await rig.store.get_user_memory(user))
    async with rig.http.post(f"{rig.base}/people/telegram/7/export", data={"csrf": csrf}) as r:
        assert r.status == 200 and "attachment" in r.headers["Content-Disposition"]
        export = await r.json(content_type=None)
    assert export["user"] == {"platform": "telegram", "id": "7"}
    entries = await rig.store.audit_log()
    assert [e.action for e in reversed(entries)] == [
        "view person",
        "forget item",
        "view person",  # the redirect back to the page
        "forget everything",
        "view person",
        "export",
    ]
    assert all(e.target == "telegram:7" and e.actor == "operator" for e in entries)


async def test_the_api_lists_pages_and_acts(rig: Rig) -> None:
    for i in range(4):
        key = ConversationKey("telegram", f"c{i}", None, "telegram-mira")
        await _answered(rig.store, key, f"P{i}", "hi", T0 + i)
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    async with rig.http.get(f"{rig.base}/api/conversations?q=p2", headers=bearer) as r:
        found = await r.json()
    assert [c["chat_id"] for c in found["conversations"]] == ["c2"]
    async with rig.http.get(f"{rig.base}/api/conversations/1", headers=bearer) as r:
        page = await r.json()
    assert [m["text"] for m in page["transcript"]] == ["hi", "re: hi"]
    assert page["prompt"]["layers"][0]["name"] == "persona"
    async with rig.http.get(f"{rig.base}/api/conversations/999", headers=bearer) as r:
        assert r.status == 404
    async with rig.http.post(
        f"{rig.base}/api/people/telegram/7/forget", headers=bearer, json={}
    ) as r:
        assert r.status == 400
    async with rig.http.post(
        f"{rig.base}/api/people/telegram/7/forget", headers=bearer, json={"confirm": True}
    ) as r:
        assert r.status == 200 and (await r.json())["items"] == 0
    assert [(e.actor, e.action) for e in await rig.store.audit_log()] == [
        ("api", "forget everything"),
        ("api", "view conversation"),
    ]


async def test_the_console_refuses_to_start_without_a_token(store: BaseStore) -> None:
    settings = Settings()
    memory = build_memory(settings, store, OfflineLLM(), ManualClock(T0))
    for environ in ({}, {"PERSONABOT_WEB_TOKEN": "short"}):
        with pytest.raises(ConfigError, match="PERSONABOT_WEB_TOKEN"):
            console(
                settings,
                Secrets(environ),
                store=store,
                memory=memory,
                clock=ManualClock(T0),
                listen="0.0.0.0:0",
            )


def test_only_loopback_addresses_count_as_loopback() -> None:
    from bot.app.web.server import is_loopback

    assert all(is_loopback(h) for h in ("127.0.0.1", "127.8.0.1", "::1", "[::1]", "localhost"))
    assert not any(is_loopback(h) for h in ("127.evil.example", "0.0.0.0", "10.0.0.1", "::"))


async def test_a_conversation_page_lists_the_newest_sessions_and_deletions_only(rig: Rig) -> None:
    """Review 34: a chat with 60 sessions and a person's /forget leaving 60 deleted ranges
    listed every one of them (20,000 sessions: 3.5 MB, the bots' loop held 0.7 s). The page
    lists the newest 50 of each and says so; an older session opens by its number."""
    for i in range(60):
        await _answered(rig.store, GROUP, "Ana", f"hi {i}", T0 + 2 * i)
        await rig.store.new_session(GROUP, T0 + 2 * i + 1)
    # Another person's 60 messages in the open session, each between two of Ana's: /forget.
    for i in range(60):
        await rig.store.ingest(Inbound(GROUP, "9", "Bo", f"bo {i}", f"b{i}", False), T0 + 200, Q)
        await rig.store.ingest(Inbound(GROUP, "7", "Ana", f"ana {i}", f"a{i}", False), T0 + 200, Q)
    turn = await rig.store.pending_turn(GROUP)
    assert turn is not None
    lease = await rig.store.acquire_lease(f"turn:{GROUP}", "w", 30, T0 + 300)
    assert lease is not None
    await rig.store.finish_turn(turn, lease, "ok", T0 + 300, Q)
    await rig.store.release_lease(lease)
    assert (await rig.store.erase_user_messages(UserKey("telegram", "9"))).messages
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    async with rig.http.get(f"{rig.base}/api/conversations/1", headers=bearer) as r:
        page = await r.json()
    assert [s["number"] for s in page["sessions"]] == list(range(12, 62))
    assert page["older_sessions"] and page["session"] == 61
    assert len(page["deleted"]) == 50 and page["older_deleted"]
    assert page["deleted"][-1]["turns"] == [119, 119]  # the newest: Bo's last message
    async with rig.http.get(f"{rig.base}/api/conversations/1?session=3", headers=bearer) as r:
        old = await r.json()
    assert old["session"] == 3 and [m["text"] for m in old["transcript"]] == ["hi 2", "re: hi 2"]
    await rig.login()
    async with rig.http.get(f"{rig.base}/conversations/1") as r:
        html = await r.text()
    assert "Older sessions are not listed" in html and "Older deletions by personabot" in html


async def test_the_retention_page_audits_one_page_of_open_sessions_at_a_time(
    store: BaseStore,
) -> None:
    """Review 34: each view of /retention audited every open session (a gap query each) and
    dry-ran retention over all of them: 5,000 open sessions took a second of the bots'
    loop. It audits one page (the console's page size) and links the next."""
    from bot.app.web import console_data

    settings = Settings.model_validate(
        {
            "bots": [{"platform": "telegram", "persona": "companion", "id": "telegram-mira"}],
            "retention": {"mode": "message", "days": 1},
        }
    )
    clock = ManualClock(T0 + 5 * 86400)
    memory = build_memory(settings, store, OfflineLLM(), clock)
    data = console_data(settings=settings, store=store, memory=memory, clock=clock, page_size=2)
    for i in range(5):
        await _answered(
            store, ConversationKey("telegram", f"c{i}", None, "telegram-mira"), "P", "hi", T0 + i
        )
    seen, after, pages = [], 0, 0
    while True:
        page = await data.retention(after)
        pages += 1
        assert len(page["next_run"]["lines"]) <= 3  # two sessions and the "only the first" note
        seen += [r["conversation"] for r in page["at_risk"]]
        if page["audit_next"] is None:
            break
        after = page["audit_next"]
    assert pages == 3 and len(seen) == len(set(seen)) == 5  # each at risk once: old, unsummarised
    assert "only the first 2 open sessions" in page["next_run"]["lines"][-1]


async def test_a_chat_with_another_persona_is_shown_and_previewed_as_that_persona(
    store: BaseStore,
) -> None:
    """Issue 35, item 2: a chat held with ``personabot chat --persona seraphina`` (bot key
    ``console-seraphina``) was listed as the default persona's and its prompt preview built
    with the default persona's pin; the playground's ``web-<persona>`` chats too."""
    from bot.app.web import console_data
    from bot.app.web.views import Viewer

    personas = [
        {"id": "mira", "name": "Mira", "system": "You are Mira.", "first_message": ["Hi."]},
        {
            "id": "seraphina",
            "name": "Seraphina",
            "system": "You are Seraphina, guardian of the glade.",
            "first_message": ["Welcome, traveller."],
        },
    ]
    settings = Settings.model_validate(
        {"personas": personas, "bots": [{"platform": "telegram", "persona": "mira"}]}
    )
    clock = ManualClock(T0 + 100)
    memory = build_memory(settings, store, OfflineLLM(), clock)
    data = console_data(settings=settings, store=store, memory=memory, clock=clock, page_size=20)
    for bot in ("console-seraphina", "web-seraphina"):
        platform = "console" if bot.startswith("console") else "web"
        key = ConversationKey(platform, "me", None, bot)
        await store.ingest(Inbound(key, "me", "Me", "hello", f"{bot}-1"), T0, Q)
    listed = (await data.conversations())["conversations"]
    assert {c["bot"]: c["persona"] for c in listed} == {
        "console-seraphina": "seraphina",
        "web-seraphina": "seraphina",
    }
    for row in listed:
        page = await data.conversation(row["id"], None, Viewer("op", "127.0.0.1"))
        assert [s["persona"] for s in page["sessions"]] == ["seraphina"]
        system = page["prompt"]["blocks"][0]["text"]
        assert "guardian of the glade" in system and "You are Mira." not in system


NAV = '<a href="/conversations">Conversations</a>'


async def test_error_pages_keep_the_navigation_and_the_api_answers_json(rig: Rig) -> None:
    """Issue 35, item 10: a 400 or a 404 was a bare page without the navigation (the
    operator's way back); aiohttp's own 404 was plain text, for the API too."""
    await _answered(rig.store, DM, "Ada", "hello", T0)
    csrf = await rig.login()
    for method, path, data, status, said in (
        ("GET", "/no-such-page", None, 404, "There is no such page."),
        ("GET", "/conversations/999", None, 404, "no conversation 999"),
        ("POST", "/people/telegram/7/forget", {"csrf": csrf}, 400, "Tick the box"),
        ("POST", "/audit", {"csrf": csrf}, 405, "does not take that kind of request"),
    ):
        async with rig.http.request(method, rig.base + path, data=data) as r:
            page = await r.text()
            assert r.status == status, path
            assert r.content_type == "text/html"
            assert "default-src 'none'" in r.headers["Content-Security-Policy"]
        assert said in page, page
        assert NAV in page and 'action="/logout"' in page, path  # inside the layout
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    for path, status in (("/api/no-such-page", 404), ("/api/conversations/999", 404)):
        async with rig.http.get(rig.base + path, headers=bearer) as r:
            assert r.status == status and r.content_type == "application/json", path
            assert "error" in await r.json()
    # Without a login, an unknown page is still only the way to the login.
    async with (
        aiohttp.ClientSession() as stranger,
        stranger.get(f"{rig.base}/no-such-page", allow_redirects=False) as r,
    ):
        assert r.status == 303 and r.headers["Location"].startswith("/login")


async def test_an_unknown_person_is_a_404_and_a_known_one_lists_their_conversations(
    rig: Rig,
) -> None:
    """Issue 35, item 10: a typo'd person URL rendered an empty page (and wrote "view
    person" to the audit log); a person's page did not list their conversations. It lists
    the newest 50, says when there are more, and links each."""
    from bot.app.web.views import LIST_PAGE

    for i in range(LIST_PAGE + 1):
        key = ConversationKey("telegram", f"g{i}", None, "telegram-mira")
        await rig.store.ingest(Inbound(key, "7", "Ada", "hi", f"g{i}", False), T0 + i, Q)
    await _answered(rig.store, DM, "Ada", "hello", T0 + 500)  # the newest
    await rig.login()
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    for path in ("/people/telegram/77", "/people/telegram/7%20"):
        async with rig.http.get(rig.base + path) as r:
            assert r.status == 404, path
            page = await r.text()
        assert "no person telegram:77" in page or "no person telegram:7 " in page
        assert NAV in page
        async with rig.http.get(f"{rig.base}/api{path}", headers=bearer) as r:
            assert r.status == 404 and "no person" in (await r.json())["error"]
    assert await rig.store.audit_log() == []  # nobody's page was viewed
    async with rig.http.get(f"{rig.base}/api/people/telegram/7", headers=bearer) as r:
        person = await r.json()
    listed = person["conversations"]
    assert len(listed) == LIST_PAGE and person["more_conversations"]
    assert [c["chat_id"] for c in listed[:3]] == ["4242", f"g{LIST_PAGE}", f"g{LIST_PAGE - 1}"]
    assert listed[0]["messages"] == 1 and listed[0]["last_message_at"] == T0 + 500
    async with rig.http.get(f"{rig.base}/people/telegram/7") as r:
        page = await r.text()
    assert f'<a href="/conversations/{listed[0]["id"]}">' in page
    assert "They wrote in more conversations" in page
    # Forgotten: their messages gone, the record of the /forget left: still a page, not a 404.
    await rig.store.set_user_memory(UserKey("telegram", "8"), UserMemory().to_json(), T0)
    async with rig.http.get(f"{rig.base}/people/telegram/8") as r:
        assert r.status == 200 and "No stored messages of theirs." in await r.text()


async def test_the_overview_chart_has_every_hour_on_its_axis_and_a_table(rig: Rig) -> None:
    """Issue 35, item 10: the hourly chart was one bar per hour that had traffic, no axis,
    no labels. Now: the current clock hour and the 23 before it, hour labels on the axis,
    each bar's values in its <title> (hover), and the same numbers in a table."""
    from bot.core.llm import Usage

    hour = (T0 + 100) // 3600 * 3600
    await rig.store.record_usage(DM, "reply", "m", [("7", Usage(300, 45))], hour - 2 * 3600 + 5)
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    async with rig.http.get(f"{rig.base}/api/overview", headers=bearer) as r:
        hours = (await r.json())["last_24h"]["hours"]
    assert len(hours) == 24 and hours[-1]["start"] == hour
    assert [h["start"] for h in hours] == [hour - (23 - i) * 3600 for i in range(24)]
    assert hours[21] == {"start": hour - 7200, "replies": 1, "calls": 1, "tokens": 345}
    assert sum(h["tokens"] for h in hours) == 345
    await rig.login()
    async with rig.http.get(f"{rig.base}/") as r:
        page = await r.text()
    titles = re.findall(r"<title>([^<]*)</title>", page)[1:]  # [0]: the document's
    assert len(titles) == 24
    label = dt.datetime.fromtimestamp(hour - 7200, dt.UTC).strftime("%H:00")
    assert f"{label} UTC: 345 tokens, 1 replies, 1 model calls" in titles
    axis = re.findall(r'<text class="hour"[^>]*>(\d\d:00)</text>', page)
    assert len(axis) == 8 and axis[-1] == dt.datetime.fromtimestamp(
        hour - 2 * 3600, dt.UTC
    ).strftime("%H:00")
    table = page[page.index("<summary>The hours as a table</summary>") :]
    assert "<td>345</td><td>1</td><td>1</td>" in table
