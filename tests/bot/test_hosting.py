"""Hosting (issue 9): access control, limits, model outages, metrics, health, backups."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from bot.app import App
from bot.config import Settings
from bot.core.clock import ManualClock
from bot.core.errors import ModelUnavailable
from bot.core.events import ConversationKey, Inbound, SessionKey, UserKey
from bot.llm.anthropic import AnthropicLLM
from bot.llm.offline import OfflineLLM
from bot.runtime.access import AccessPolicy
from bot.runtime.limits import LimitPolicy
from bot.store.base import BaseStore
from bot.store.sqlite import SQLiteStore
from tests.bot.test_pipeline import FlakyLLM
from tests.fakes.adapter import QueueAdapter
from tests.fakes.llm import GatedLLM
from tests.fakes.messages_api import FakeMessagesAPI
from tests.harness import harness
from tests.processes import spawn

DM = ConversationKey("telegram", "42")
OTHER = ConversationKey("telegram", "43")


async def test_a_stranger_gets_no_model_call_and_one_notice_a_day(
    store: BaseStore, clock: ManualClock
) -> None:
    policy = AccessPolicy(allow_users=frozenset({"7"}), denied_reply="This bot is private.")
    llm = GatedLLM()
    async with harness(store, clock, llm, access=policy) as h:
        for text in ("hi", "hello?", "/help"):
            await h.say(DM, text, author="666")
            await h.advance(2)
        assert llm.calls == 0
        assert h.outlet.texts() == ["This bot is private."]
        assert await store.current_session(DM) is None  # stored nowhere
        await h.advance(86400, step=3600)
        await h.say(DM, "anyone?", author="666")
        assert h.outlet.texts() == ["This bot is private.", "This bot is private."]
        await h.say(OTHER, "hi", author="7")
        await h.advance(2)
        assert llm.calls == 1


async def test_stats_is_for_admins(store: BaseStore, clock: ManualClock) -> None:
    policy = AccessPolicy(admins=frozenset({"1"}))
    async with harness(store, clock, GatedLLM(), access=policy) as h:
        await h.say(DM, "hello", author="2")
        await h.advance(2)
        await h.say(DM, "/stats", author="2")
        assert h.outlet.texts()[-1] == "/stats is for the bot's admins."
        await h.say(DM, "/stats", author="1")
        report = h.outlet.texts()[-1]
        assert "turns answered: 1 in 1 conversation(s)" in report
        assert "tokens: 10 in, 5 out" in report
        assert "estimated cost: $0.0001" in report
        await h.say(DM, "/help", author="2")
        assert "/stats" not in h.outlet.texts()[-1]


async def test_hourly_limit_holds_across_two_processes(tmp_path: Path, clock: ManualClock) -> None:
    path = tmp_path / "shared.sqlite3"
    limits = LimitPolicy(user_turns_per_hour=2, message="Limit reached until {until}.")
    llm = GatedLLM()
    chats = [ConversationKey("telegram", f"g{i}") for i in range(4)]
    async with (
        SQLiteStore(path=path) as a,
        SQLiteStore(path=path) as b,
        harness(a, clock, llm, limits=limits, holder="a") as ha,
        harness(b, clock, llm, limits=limits, holder="b") as hb,
    ):
        # The same person writes in four chats handled by two processes.
        for i, chat in enumerate(chats):
            await (ha if i % 2 else hb).say(chat, f"message {i}", author="99")
        await ha.advance(3)
        assert llm.calls == 2
        notices = [t for t in ha.outlet.texts() + hb.outlet.texts() if t.startswith("Limit")]
        assert len(notices) == 1 and "until" in notices[0]
        await ha.say(chats[0], "still there?", author="99")
        await ha.advance(3)
        assert llm.calls == 2  # still limited, and no second notice
        assert len([t for t in ha.outlet.texts() + hb.outlet.texts() if t.startswith("Limit")]) == 1
        await ha.advance(3600, step=600)
        await ha.say(chats[0], "and now?", author="99")
        await ha.advance(3)
        assert llm.calls == 3
        # Messages sent while limited were kept, as context of the next turn.
        assert "still there?" in "\n".join(m.text for m in llm.requests[-1].messages)


async def test_outage_gives_one_notice_then_one_reply_for_everything(
    store: BaseStore, clock: ManualClock
) -> None:
    llm = FlakyLLM([ModelUnavailable("overloaded", status=529)] * 3)
    async with harness(store, clock, llm, trouble_notice="Having trouble, back soon.") as h:
        await h.say(DM, "first")
        await h.advance(1.6)
        await h.say(DM, "second")  # arrives during the outage
        await h.advance(20, step=0.5)
        assert llm.calls == 4
        assert h.outlet.texts() == ["Having trouble, back soon.", "ok: first\nsecond"]
        await h.advance(30)
        assert llm.calls == 4


async def test_authentication_error_does_not_loop(store: BaseStore, clock: ManualClock) -> None:
    async with FakeMessagesAPI() as api:
        api.fail_next(status=401, times=50)
        llm = AnthropicLLM(api_key="sk-wrong", base_url=api.base_url, max_retries=0)
        async with harness(store, clock, llm) as h:
            await h.say(DM, "hello")
            await h.advance(60, step=1)
        await llm.aclose()
        assert api.call_count == 1


async def test_long_input_is_cut_for_the_model_but_stored_whole(
    store: BaseStore, clock: ManualClock
) -> None:
    llm = GatedLLM()
    async with harness(store, clock, llm) as h:
        await h.say(DM, "x" * 9000)
        await h.say(DM, "   ")  # whitespace only: ignored
        await h.advance(2)
    assert llm.last_input() == "x" * 8000 + " [... cut: 1000 more characters not shown]"
    stored = await store.messages(SessionKey(DM, 1))
    assert [len(m.text) for m in stored if m.role == "user"] == [9000]


async def test_metrics_and_readiness(tmp_path: Path) -> None:
    settings = Settings.model_validate(
        {
            "storage": {"url": f"sqlite:///{tmp_path / 'm.sqlite3'}"},
            "queue": {"debounce_seconds": 0.05, "max_wait_seconds": 1},
            "observability": {"listen": "127.0.0.1:0"},
        }
    )
    persona = settings.persona(None)
    adapter = QueueAdapter(bot_key="tg")
    app = App(settings, llm=OfflineLLM())
    async with app.running({"tg": (persona, adapter)}) as rt:
        assert rt.health is not None
        base = f"http://127.0.0.1:{rt.health.port}"
        runner = asyncio.create_task(adapter.run(rt.router))
        key = ConversationKey("telegram", "1", None, "tg")
        await adapter.inbox.put(Inbound(key, "5", "Ann", "hello there", "m1"))
        labels = {"platform": "telegram", "persona": "companion", "outcome": "sent"}

        def turns() -> float:
            return rt.metrics.registry.get_sample_value("personabot_turns_total", labels) or 0

        async with asyncio.timeout(10):
            while turns() < 1:  # noqa: ASYNC110 - the counter moves after the send; bounded
                await asyncio.sleep(0.02)
        assert len(adapter.replies) == 1
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{base}/metrics") as resp:
                text = await resp.text()
            async with http.get(f"{base}/healthz") as resp:
                assert resp.status == 200
            async with http.get(f"{base}/readyz") as resp:
                assert resp.status == 200
            adapter.up = False
            async with http.get(f"{base}/readyz") as resp:
                assert resp.status == 503 and "not connected: tg" in await resp.text()
            adapter.up = True
            await rt.store.aclose()  # the store goes away
            async with http.get(f"{base}/readyz") as resp:
                assert resp.status == 503 and "store unreachable" in await resp.text()
        runner.cancel()
    samples = [s for family in text_string_to_metric_families(text) for s in family.samples]

    def value(name: str, **labels: str) -> float:
        wanted = {"platform": "telegram", "persona": "companion", **labels}
        found = [s.value for s in samples if s.name == name and s.labels == wanted]
        assert len(found) == 1, (name, labels)
        return found[0]

    assert value("personabot_turns_total", outcome="sent") == 1
    assert value("personabot_model_calls_total", purpose="reply") == 1
    assert value("personabot_tokens_total", kind="input") > 0
    assert value("personabot_tokens_total", kind="output") > 0
    assert value("personabot_inbound_messages_total") == 1
    assert value("personabot_scheduler_lag_seconds_count") == 1
    assert not any("user" in s.labels for s in samples)  # never labelled by user


async def test_an_overloaded_process_says_so_on_readyz_and_in_its_metrics(
    tmp_path: Path,
) -> None:
    """One turn slot, held by a slow model: a second conversation's due turn waits. Past
    max_backlog_age_seconds /readyz answers 503 naming the backlog (a supervisor can act),
    the gauges show it, and nothing is dropped: once the slot frees, both are answered."""
    settings = Settings.model_validate(
        {
            "storage": {"url": f"sqlite:///{tmp_path / 'o.sqlite3'}"},
            "queue": {
                "debounce_seconds": 0.05,
                "max_wait_seconds": 1,
                "max_concurrent_turns": 1,
                "max_backlog_age_seconds": 0.3,
            },
            "observability": {"listen": "127.0.0.1:0"},
        }
    )
    llm = GatedLLM(gated=True)
    adapter = QueueAdapter(bot_key="tg")
    app = App(settings, llm=llm)
    async with (
        app.running({"tg": (settings.persona(None), adapter)}) as rt,
        aiohttp.ClientSession() as http,
    ):
        assert rt.health is not None
        base = f"http://127.0.0.1:{rt.health.port}"
        runner = asyncio.create_task(adapter.run(rt.router))

        def gauge(name: str) -> float:
            return rt.metrics.registry.get_sample_value(name) or 0.0

        async def ready() -> tuple[int, str]:
            async with http.get(f"{base}/readyz") as resp:
                return resp.status, await resp.text()

        await adapter.inbox.put(
            Inbound(ConversationKey("telegram", "1", None, "tg"), "5", "Ann", "first", "m1")
        )
        async with asyncio.timeout(10):
            await llm.started.wait()  # the only slot is taken
        await adapter.inbox.put(
            Inbound(ConversationKey("telegram", "2", None, "tg"), "6", "Bo", "second", "m2")
        )
        async with asyncio.timeout(10):
            while (status := await ready())[0] == 200:  # noqa: ASYNC110 - polls HTTP; bounded
                await asyncio.sleep(0.05)
        assert status[0] == 503
        assert "overloaded: 1 due turn(s) waiting" in status[1]
        async with http.get(f"{base}/metrics") as resp:
            assert resp.status == 200
        assert gauge("personabot_queue_backlog_turns") == 1
        assert gauge("personabot_queue_backlog_age_seconds") > 0.3
        llm.release()
        async with asyncio.timeout(10):
            while len(adapter.replies) < 2:
                llm.release()
                await asyncio.sleep(0.02)
        assert await ready() == (200, "ready\n")
        assert gauge("personabot_queue_backlog_turns") == 0
        runner.cancel()


async def test_db_backup_is_a_valid_store(tmp_path: Path) -> None:
    src = tmp_path / "live.sqlite3"
    async with SQLiteStore(path=src) as store:
        for chat in ("1", "2", "3"):
            await store.open_session(ConversationKey("telegram", chat), 1.0)
    config = tmp_path / "c.toml"
    config.write_text(f'[storage]\nurl = "sqlite:///{src}"\n')
    backup = tmp_path / "backup.sqlite3"
    proc = await spawn(
        sys.executable,
        "-m",
        "bot",
        "db",
        "backup",
        str(backup),
        "--config",
        str(config),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    async with SQLiteStore(path=backup) as copy:
        sessions = [await copy.current_session(ConversationKey("telegram", c)) for c in "123"]
        assert all(s is not None for s in sessions)
    with sqlite3.connect(backup) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)


GROUP = ConversationKey("telegram", "-100")


async def test_one_limited_person_does_not_silence_a_group(
    store: BaseStore, clock: ManualClock
) -> None:
    """Issue 13, item 3: only the limited person's messages wait (kept as context, told once);
    everyone else in the same turn is answered."""
    limits = LimitPolicy(user_turns_per_hour=2, message="Limit reached until {until}.")
    llm = GatedLLM()
    async with harness(store, clock, llm, limits=limits) as h:
        for text in ("first", "second"):
            await h.say(GROUP, text, author="a", name="Ann", private=False)
            await h.advance(2)
        assert llm.calls == 2
        await h.say(GROUP, "me again", author="a", name="Ann", private=False)
        await h.say(GROUP, "hi all", author="b", name="Bob", private=False)
        await h.advance(2)
        assert llm.calls == 3
        assert "hi all" in llm.last_input()
        assert "me again" not in "\n".join(m.text for m in llm.requests[-1].messages)
        texts = h.outlet.texts()
        assert texts[-2].startswith("reply to:") and texts[-2].endswith("hi all")
        notices = [t for t in texts if "Limit reached" in t]
        assert len(notices) == 1 and notices[0].startswith("Ann: Limit reached until")
        await h.say(GROUP, "and me?", author="b", name="Bob", private=False)
        await h.advance(2)
        # Ann's held message is context now (in the window), never a turn of its own.
        assert llm.calls == 4
        assert "me again" in "\n".join(m.text for m in llm.requests[-1].messages)
        assert await store.pending_turn(GROUP) is None


async def test_input_tokens_per_person_per_day_include_memory_tasks(
    store: BaseStore, clock: ManualClock
) -> None:
    """Issue 13, item 2: a daily input budget per person, fed by replies and memory tasks;
    the limited person is held back, the bot's other users are not."""
    limits = LimitPolicy(user_input_tokens_per_day=25, message="Budget spent until {until}.")
    llm = GatedLLM()  # 10 input tokens a call
    async with harness(store, clock, llm, limits=limits) as h:
        for i in range(2):
            await h.say(DM, f"message {i}", author="99")
            await h.advance(2)
        assert llm.calls == 2  # 20 tokens charged to person 99
        await h.memory.extract(SessionKey(DM, 1), 0)  # a memory task over 99's messages
        assert llm.calls == 3
        assert await store.input_tokens_since(UserKey("telegram", "99"), 0.0) == 30
        await h.say(DM, "still there?", author="99")
        await h.advance(2)
        assert llm.calls == 3
        assert h.outlet.texts()[-1].startswith("Budget spent until")
        await h.say(OTHER, "hello", author="7")
        await h.advance(2)
        assert llm.calls == 4
        assert h.outlet.texts()[-1] == "reply to: hello"
        stats = await store.usage_since(0.0, "default")
        assert stats.input_tokens == 40
        assert dict((p, i) for p, i, *_ in stats.by_purpose) == {"reply": 30, "extract": 10}


async def test_edits_and_deletions_are_authorised_by_the_stored_message(
    store: BaseStore, clock: ManualClock
) -> None:
    """With ``allow_users`` set, a permitted person's message deleted on Discord (the event
    names no author) is removed; nobody can edit or delete someone else's stored message."""
    room = ConversationKey("discord", "900", None)
    policy = AccessPolicy(allow_users=frozenset({"7", "8"}))
    async with harness(store, clock, GatedLLM(), access=policy, debounce=5.0) as h:
        await h.say(room, "keep me", author="7", message_id="m1", private=False)
        await h.say(room, "delete me", author="7", message_id="m2", private=False)

        def change(kind: str, message_id: str, author: str, text: str = "") -> Inbound:
            return Inbound(room, author, "", text, message_id, is_private=False, kind=kind)  # type: ignore[arg-type]

        await h.router(change("edit", "m1", "8", "forged by 8"))  # not the author
        await h.router(change("delete", "m1", "8"))  # not the author
        await h.router(change("delete", "m2", ""))  # Discord: no author in the event
        session = await store.current_session(room)
        assert session is not None
        texts = [m.text for m in await store.messages(session.key)]
    assert texts == ["keep me"]


async def test_the_runtime_stops_at_once_when_stopped_during_a_scan(
    store: BaseStore, clock: ManualClock
) -> None:
    """A stop that lands while the scheduler reads due timers is not lost: with a manual
    clock (and with a real one, for up to a scan interval) the stop used to wait for time."""
    async with asyncio.timeout(5):
        async with harness(store, clock, GatedLLM()):
            await asyncio.sleep(0)  # the scheduler is now inside its first scan of the store
