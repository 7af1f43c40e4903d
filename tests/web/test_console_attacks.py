"""The operator console attacked (issue 35 item 10, from review 35b)."""

from __future__ import annotations

import re
from pathlib import Path

import aiohttp
import pytest

from bot.core.events import ConversationKey, Inbound
from tests.adapters.test_telegram_e2e import _env, personabot_run
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.web.test_console import T0, Q, Rig
from tests.web.test_console_state import TOKEN as TG_TOKEN
from tests.web.test_console_state import WEB_TOKEN, _addresses, _config

pytestmark = pytest.mark.timeout(90)

#: A user id with a "/" in it (a plugin platform's id, e.g. an XMPP JID with its resource).
SLASHED = ConversationKey("xmpp", "ada@example.org/phone", None, "telegram-mira")


async def test_a_person_whose_id_holds_a_slash_is_reachable_from_the_console(rig: Rig) -> None:
    """The conversation page links the person, and the person's page posts its forget and
    export forms, with Jinja's ``urlencode``, which leaves "/" as it is: the link and both
    actions are 404s (the overview's ``segment`` filter gets it right)."""
    await rig.store.ingest(
        Inbound(SLASHED, SLASHED.chat_id, "Ada", "hello", "m1", is_private=True), T0, Q
    )
    await rig.login()
    async with rig.http.get(f"{rig.base}/conversations/1") as r:
        page = await r.text()
    links = re.findall(r'href="(/people/[^"]+)"', page)
    assert links, page
    for link in links:
        async with rig.http.get(rig.base + link) as r:
            assert r.status == 200, link
    async with rig.http.get(f"{rig.base}/people/xmpp/ada%40example.org%2Fphone") as r:
        assert r.status == 200
        person = await r.text()
    actions = re.findall(r'action="(/people/[^"]+)"', person)
    assert actions, person
    for action in actions:
        assert action.count("/") == 4, action  # /people/PLATFORM/USER/ACTION


async def test_a_bot_whose_every_poll_is_refused_is_not_shown_connected(tmp_path: Path) -> None:
    """The same token polled by a second process (or a webhook still set): every getUpdates
    is a 409 Conflict and the bot never receives a message, yet the console shows it
    "connected", with no last error (only 5xx and network failures are recorded)."""
    async with FakeTelegramAPI() as telegram:
        telegram.add_bot(TG_TOKEN, "state_bot")
        telegram.fail_next(
            "getUpdates",
            status=409,
            description="Conflict: terminated by other getUpdates request; make sure that "
            "only one bot instance is running",
            times=10_000,
        )
        config = _config(tmp_path, telegram.base_url)
        env = _env(TG_TOKEN=TG_TOKEN, PERSONABOT_WEB_TOKEN=WEB_TOKEN)
        async with personabot_run(tmp_path, config, env), aiohttp.ClientSession() as http:
            console, _ = await _addresses(tmp_path)
            bearer = {"Authorization": f"Bearer {WEB_TOKEN}"}
            # After each refused poll (an event of the fake), the overview is read again:
            # the state must turn within a few polls, never after a fixed sleep.
            for polls in range(2, 6):
                await telegram.wait_for(
                    lambda n=polls: len(telegram.calls_of("getUpdates")) >= n,
                    within=40,
                    what="polls",
                )
                async with http.get(f"{console}/api/overview", headers=bearer) as r:
                    (bot,) = (await r.json())["bots"]
                if bot["state"] != "connected":
                    break
    assert bot["state"] != "connected", bot
    assert "getUpdates failed" in bot["last_error"]["message"] and "Conflict" in str(bot), bot
