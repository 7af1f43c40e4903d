"""Discord application (slash) commands: the real discord.py client and the real runtime against
the fake Discord (tests/fakes/discord_interactions.py), on both stores where the store is
involved (docs/discord.md#7-commands, #sync).

The adapter's deferral timer runs on a manual clock: a slow answer is deferred when the clock
is moved past ``ACK_WITHIN``, never after real seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
import warnings
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import ValidationError

from bot.app.build import Runtime, runtime
from bot.config import DiscordBotSettings, Settings
from bot.core.agenda import NewReminder
from bot.core.clock import ManualClock
from bot.core.errors import AdapterError
from bot.core.events import ConversationKey, Inbound, QueuePolicy, Reply, SessionKey, UserKey
from bot.runtime.extensions import Command, CommandSpec, Extensions
from bot.store.base import BaseStore
from tests.backends import StoreFactory
from tests.fakes.discord_api import FakeDiscord, FakeUser
from tests.fakes.llm import GatedLLM
from tests.harness import eventually

with warnings.catch_warnings():
    warnings.filterwarnings(
        "ignore", message="'audioop' is deprecated", category=DeprecationWarning
    )
    from adapters.discord.adapter import DiscordAdapter
    from adapters.discord.endpoints import SharedEndpoints, endpoints_for
    from adapters.discord.interactions import ACK_WITHIN

TOKEN = "MTIzNDU2Nzg5MDEyMzQ1Njc4.GfAkEt.slash-commands-token-never-logged"
DENIED = "This bot is private."


@pytest.fixture(autouse=True)
def _endpoints_released() -> Iterator[None]:
    """Every test closes its adapters: discord.py's endpoints are process-wide state."""
    yield
    leaked = SharedEndpoints.holders()
    for _ in range(leaked):
        SharedEndpoints.release()
    assert leaked == 0, "a test left a Discord adapter open"


@pytest.fixture
def store_url(stores: StoreFactory) -> str:
    """A fresh database of each store backend, as the runtime's storage URL."""
    return stores.dsn or f"sqlite:///{stores.path}"


def _settings(fake: FakeDiscord, url: str, **bot: Any) -> Settings:
    return Settings.model_validate(
        {
            "storage": {"url": url},
            "llm": {"provider": "offline"},
            "queue": {"debounce_seconds": 0.2, "max_wait_seconds": 2.0},
            "schedule": {"reminders": True},
            "access": {"denied_reply": DENIED},
            "personas": [
                {
                    "id": "mira",
                    "name": "Mira",
                    "system": "You are Mira.",
                    "first_message": ["Hi, I'm Mira."],
                },
                {
                    "id": "orin",
                    "name": "Orin",
                    "system": "You are Orin.",
                    "first_message": ["Orin. Where to?"],
                },
            ],
            "bots": [
                {
                    "id": "mira",
                    "platform": "discord",
                    "personas": ["mira", "orin"],
                    "api_base": fake.api_base,
                    "gateway_url": fake.gateway_url,
                    **bot,
                }
            ],
        }
    )


@dataclass
class Rig:
    """The adapter (deferrals on a manual clock) inside a runtime on one store."""

    fake: FakeDiscord
    adapter: DiscordAdapter
    rt: Runtime
    clock: ManualClock
    llm: GatedLLM

    async def synced(self) -> None:
        """Wait until the start's command sync finished."""
        await eventually(lambda: self.adapter.synced is not None, "sync started")
        assert self.adapter.synced is not None
        await asyncio.wait_for(asyncio.shield(self.adapter.synced), 10)


@contextlib.asynccontextmanager
async def slash_bot(
    fake: FakeDiscord, url: str, *, extensions: Extensions | None = None, **bot: Any
) -> AsyncIterator[Rig]:
    """The Discord bot ``mira`` (personas Mira and Orin) on the fake, its runtime on ``url``."""
    settings = _settings(fake, url, **bot)
    entry = settings.bots[0]
    SharedEndpoints.acquire(endpoints_for(fake.api_base, fake.gateway_url, where="t"), where="t")
    clock = ManualClock()
    app_commands = bot.get("app_commands", {})
    adapter = DiscordAdapter(
        bot_key="mira",
        token=TOKEN,
        clock=clock,
        app_commands=app_commands.get("sync", "global"),
        command_guilds=getattr(entry, "command_guilds", ()),
    )
    llm = GatedLLM(answer=lambda r: "a reply")
    try:
        async with runtime(
            settings,
            llm=llm,
            adapters={"mira": (settings.persona("mira"), adapter)},
            extensions=extensions or Extensions(),
        ) as rt:
            before = fake.sessions
            task = asyncio.create_task(adapter.run(rt.router.for_bot("mira")))
            try:
                await fake.wait_identified(after=before)
                rig = Rig(fake, adapter, rt, clock, llm)
                await rig.synced()
                yield rig
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
    finally:
        await adapter.aclose()


def _roll(help_text: str = "roll dice: /roll 2d6") -> Extensions:
    async def roll(inbound: Inbound, command: Command) -> str:
        return f"rolled {command.args or 'nothing'}"

    return Extensions(commands=(CommandSpec("roll", help_text, roll),))


def _writes(fake: FakeDiscord) -> list[tuple[str, str]]:
    return [(w.method, w.name) for w in fake.app_commands.writes]


async def _stored_texts(store: BaseStore, conversation: ConversationKey) -> list[str]:
    """Every message stored in the conversation, every session."""
    session = await store.current_session(conversation)
    last = 0 if session is None else session.key.session_id
    texts = []
    for number in range(1, last + 1):
        texts += [m.text for m in await store.messages(SessionKey(conversation, number))]
    return texts


# ---------------------------------------------------------------------- sync


async def test_commands_are_registered_once_and_only_ours_are_ever_changed(
    store_url: str,
) -> None:
    async with FakeDiscord(token=TOKEN) as fake:
        commands = fake.app_commands
        ping = commands.add_command("ping", "the operator's own command")
        other_app = fake.application_id + 99
        commands.add_command("roll", "another application's", application=other_app)
        async with slash_bot(fake, store_url, extensions=_roll()) as rig:
            registered = commands.scope("global")
        assert commands.bulk_overwrites == []
        assert {
            "new",
            "memory",
            "forget",
            "export",
            "persona",
            "reminders",
            "help",
            "roll",
            "ping",
        } <= set(registered)
        assert registered["ping"] == ping  # untouched
        persona = registered["persona"]["options"]
        assert persona == [
            {
                "type": 3,
                "name": "name",
                "description": persona[0]["description"],
                "autocomplete": True,
            }
        ]
        reminders = registered["reminders"]["options"]
        assert [(o["type"], o["name"]) for o in reminders] == [(1, "list"), (1, "cancel")]
        assert reminders[1]["options"][0] | {"description": ""} == {
            "type": 4,
            "name": "id",
            "description": "",
            "required": True,
            "autocomplete": True,
        }
        assert registered["roll"]["description"] == "roll dice: /roll 2d6"
        assert [o["name"] for o in registered["roll"]["options"]] == ["args"]
        created = len(commands.writes)
        assert created == len(registered) - 1 and all(w[0] == "POST" for w in _writes(fake))

        # A restart with nothing changed writes nothing.
        async with slash_bot(fake, store_url, extensions=_roll()):
            pass
        assert len(commands.writes) == created

        # The plugin's help changes: only its command is edited.
        async with slash_bot(fake, store_url, extensions=_roll("roll any dice")):
            pass
        assert _writes(fake)[created:] == [("PATCH", "roll")]

        # The plugin is gone: its command (ours) is deleted; the operator's /ping and the
        # other application's /roll stay.
        async with slash_bot(fake, store_url):
            pass
        assert _writes(fake)[created + 1 :] == [("DELETE", "roll")]
        assert "ping" in commands.scope("global") and "roll" not in commands.scope("global")
        assert "roll" in commands.scope("global", application=other_app)
        assert rig.rt.store is not None


async def test_a_rate_limited_write_is_waited_out_and_made_once(tmp_path: Any) -> None:
    async with FakeDiscord(token=TOKEN) as fake:
        fake.app_commands.throttle_next_write(0.05)
        async with slash_bot(fake, f"sqlite:///{tmp_path / 'bot.sqlite3'}"):
            pass
        writes = fake.app_commands.writes
        assert [w.status for w in writes[:2]] == [429, 201]
        created = [w.name for w in writes if w.status == 201]
        assert len(created) == len(set(created)) == len(fake.app_commands.scope("global"))


async def test_a_command_of_the_same_name_someone_else_made_is_left_alone(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    async with FakeDiscord(token=TOKEN) as fake:
        theirs = fake.app_commands.add_command("help", "the operator's help, not ours")
        async with slash_bot(fake, f"sqlite:///{tmp_path / 'bot.sqlite3'}"):
            pass
        assert fake.app_commands.scope("global")["help"] == theirs
        assert ("POST", "help") not in _writes(fake) and ("PATCH", "help") not in _writes(fake)
        assert "/help in global was not made by this bot" in caplog.text


async def test_guild_sync_registers_in_the_listed_guilds_and_off_registers_nothing(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"sqlite:///{tmp_path / 'bot.sqlite3'}"
    async with FakeDiscord(token=TOKEN) as fake:
        cafe, closed = fake.add_guild("Cafe"), fake.add_guild("Closed")
        fake.app_commands.denied_guilds.add(closed.id)
        policy = {"sync": "guilds", "guilds": [cafe.id, closed.id]}
        async with slash_bot(fake, url, app_commands=policy):
            pass
        assert "new" in fake.app_commands.scope(f"guild:{cafe.id}")
        assert fake.app_commands.scope("global") == {}
        assert "invite the bot with the scopes 'bot applications.commands'" in caplog.text
        writes = len(fake.app_commands.writes)
        async with slash_bot(fake, url, app_commands={"sync": "off"}):
            pass
        assert len(fake.app_commands.writes) == writes


# ---------------------------------------------------------------------- interactions


async def test_a_slash_command_with_options_runs_once_and_is_never_stored(
    store_url: str,
) -> None:
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        guild = fake.add_guild("Cafe")
        async with slash_bot(fake, store_url) as rig:
            app = fake.app_commands
            memory = await app.invoke(guild.general, ada, "memory")
            (answer,) = await app.wait_answers(memory)
            assert (answer.kind, answer.ephemeral) == ("message", True)
            assert "nothing about you to show in this group" in answer.content
            assert FakeDiscord.pings(answer.body) == set()

            switch = await app.invoke(
                guild.general, ada, "persona", [{"type": 3, "name": "name", "value": "orin"}]
            )
            (answer,) = await app.wait_answers(switch)
            assert (answer.kind, answer.ephemeral) == ("message", False)
            assert "Orin. Where to?" in answer.content
            key = ConversationKey("discord", str(guild.general), None, "mira")
            session = await rig.rt.store.current_session(key)
            assert session is not None and session.persona == "orin"

            # Delivered again (a resume): not run a second time, not answered again.
            await app.invoke(guild.general, ada, "persona", again=switch)
            sentinel = await app.invoke(guild.general, ada, "help")
            await app.wait_answers(sentinel)
            assert len(app.answers_to(switch)) == 1
            assert (await rig.rt.store.current_session(key)) == session

            assert await _stored_texts(rig.rt.store, key) == []
            assert rig.llm.requests == []
        # Another process (the same store) gets it once more: the store says it ran.
        async with slash_bot(fake, store_url) as rig:
            before = len(fake.requests)
            await app.invoke(guild.general, ada, "persona", again=switch)
            sentinel = await app.invoke(guild.general, ada, "help")
            await app.wait_answers(sentinel)
            callbacks = [r for r in fake.requests[before:] if r.path.endswith("/callback")]
            assert len(callbacks) == 1  # the sentinel's only
            assert (await rig.rt.store.current_session(key)) == session


async def test_a_slow_answer_is_deferred_then_edited_in(tmp_path: Any) -> None:
    release = asyncio.Event()

    async def slow(inbound: Inbound, command: Command) -> str:
        await release.wait()
        return f"done: {command.args}"

    slow_ext = Extensions(commands=(CommandSpec("slow", "takes a while", slow),))
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        dm = fake.dm(ada)
        url = f"sqlite:///{tmp_path / 'bot.sqlite3'}"
        async with slash_bot(fake, url, extensions=slow_ext) as rig:
            app = fake.app_commands
            work = await app.invoke(dm, ada, "slow", [{"type": 3, "name": "args", "value": "x y"}])
            await eventually(lambda: rig.clock.next_deadline() is not None, "deferral armed")
            assert app.answers_to(work) == []
            await rig.clock.advance(ACK_WITHIN)
            (deferred,) = await app.wait_answers(work)
            assert (deferred.kind, deferred.ephemeral) == ("deferred", False)
            release.set()
            answers = await app.wait_answers(work, 2)
            assert [(a.kind, a.content) for a in answers] == [
                ("deferred", ""),
                ("edit", "done: x y"),
            ]


async def test_a_person_outside_the_access_lists_is_refused_privately(tmp_path: Any) -> None:
    async with FakeDiscord(token=TOKEN) as fake:
        ada, bob = fake.add_user("Ada"), fake.add_user("Bob")
        guild = fake.add_guild("Cafe")
        url = f"sqlite:///{tmp_path / 'bot.sqlite3'}"
        async with slash_bot(fake, url, allow_users=[str(ada.id)]) as rig:
            app = fake.app_commands
            for _ in range(2):  # every time: only Bob reads it, so it is not rationed
                refused = await app.invoke(guild.general, bob, "forget")
                (answer,) = await app.wait_answers(refused)
                assert (answer.kind, answer.content, answer.ephemeral) == ("message", DENIED, True)
            stats = await app.invoke(guild.general, ada, "stats")
            (answer,) = await app.wait_answers(stats)
            assert answer.ephemeral and "admins" in answer.content
            # Autocomplete shows Bob nothing either.
            typed = await app.autocomplete(
                guild.general,
                bob,
                "persona",
                [{"type": 3, "name": "name", "value": "", "focused": True}],
            )
            (answer,) = await app.wait_answers(typed)
            assert answer.choices == ()
            assert rig.llm.requests == []
            assert fake.bot_messages(guild.general) == []  # nothing public at all


async def test_an_unknown_or_forged_command_is_answered_privately_and_never_routed(
    tmp_path: Any,
) -> None:
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        dm = fake.dm(ada)
        url = f"sqlite:///{tmp_path / 'bot.sqlite3'}"
        async with slash_bot(fake, url, extensions=_roll()) as rig:
            app = fake.app_commands
            forged = await app.invoke(dm, ada, "no-such-thing\nhi")
            (answer,) = await app.wait_answers(forged)
            assert answer.ephemeral and "don't know that command" in answer.content
            # A plugin's free text is its arguments as typed, whatever they say.
            args = [{"type": 3, "name": "args", "value": "list\n  of  dice"}]
            roll = await app.invoke(dm, ada, "roll", args)
            (answer,) = await app.wait_answers(roll)
            assert (answer.content, answer.ephemeral) == ("rolled list of dice", False)
            key = ConversationKey("discord", str(dm), None, "mira")
            assert await _stored_texts(rig.rt.store, key) == []


async def test_an_answer_to_an_interaction_this_process_never_saw_is_not_posted(
    tmp_path: Any,
) -> None:
    """After a restart the interaction's token is gone: the recovered answer (it could be a
    /memory) fails rather than going out in the channel."""
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        dm = fake.dm(ada)
        async with slash_bot(fake, f"sqlite:///{tmp_path / 'bot.sqlite3'}") as rig:
            key = ConversationKey("discord", str(dm), None, "mira")
            reply = Reply(key, "What I remember about you: ...", 7, "i123456789012345678")
            with pytest.raises(AdapterError, match="not posted in the channel"):
                await rig.adapter.send(reply)
            assert fake.posts == []


# ---------------------------------------------------------------------- autocomplete


async def _reminder(store: BaseStore, key: ConversationKey, user: str, about: str) -> None:
    """A reminder ``user`` asked for in ``key``, stored with the reply that agreed to it."""
    now = time.time()  # the runtime's clock: the reminder is due tomorrow
    inbound = Inbound(key, user, "Someone", f"remind me of {about}", str(len(about)))
    await store.ingest(inbound, now, QueuePolicy())
    turn = await store.pending_turn(key)
    assert turn is not None
    lease = await store.acquire_lease(f"turn:{key}", "test", 30, now)
    assert lease is not None
    due = NewReminder(user, about, now + 86400, "UTC")
    done = await store.finish_turn(turn, lease, "okay", now, QueuePolicy(), reminders=[due])
    assert done.outcome == "recorded"
    await store.release_lease(lease)


async def test_autocomplete_offers_personas_and_only_the_askers_own_reminders(
    store_url: str, stores: StoreFactory
) -> None:
    async with FakeDiscord(token=TOKEN) as fake:
        ada, bob = fake.add_user("Ada"), fake.add_user("Bob")
        dm_ada, dm_bob = fake.dm(ada), fake.dm(bob)
        key_ada = ConversationKey("discord", str(dm_ada), None, "mira")
        key_bob = ConversationKey("discord", str(dm_bob), None, "mira")
        async with stores.new() as earlier:  # asked for before this start
            await _reminder(earlier, key_ada, str(ada.id), "the dentist")
            await _reminder(earlier, key_bob, str(bob.id), "bob's secret")
        async with slash_bot(fake, store_url) as rig:
            store = rig.rt.store
            app = fake.app_commands

            typed = await app.autocomplete(
                dm_ada,
                ada,
                "persona",
                [{"type": 3, "name": "name", "value": "or", "focused": True}],
            )
            (answer,) = await app.wait_answers(typed)
            assert answer.choices == ({"name": "Orin (orin)", "value": "orin"},)

            cancel = [{"type": 4, "name": "id", "value": "", "focused": True}]
            typed = await app.autocomplete(
                dm_ada, ada, "reminders", [{"type": 1, "name": "cancel", "options": cancel}]
            )
            (answer,) = await app.wait_answers(typed)
            (mine,) = await store.reminders(_user(ada), bot="mira")
            assert [c["value"] for c in answer.choices] == [mine.id]
            assert "the dentist" in answer.choices[0]["name"]
            assert all("secret" not in c["name"] for c in answer.choices)

            # And cancelling it by the offered id works like the typed command.
            chosen = [{"type": 4, "name": "id", "value": mine.id}]
            done = await app.invoke(
                dm_ada, ada, "reminders", [{"type": 1, "name": "cancel", "options": chosen}]
            )
            (answer,) = await app.wait_answers(done)
            assert answer.ephemeral and answer.content == f"Reminder #{mine.id} cancelled."
            assert await store.reminders(_user(ada), bot="mira") == []
            assert len(await store.reminders(_user(bob), bot="mira")) == 1


def _user(user: FakeUser) -> UserKey:
    return UserKey("discord", str(user.id))


# ---------------------------------------------------------------------- configuration


@pytest.mark.parametrize(
    ("app_commands", "error"),
    [
        ({"sync": "guilds"}, "app_commands.guilds: list the servers"),
        ({"sync": "global", "guilds": [1]}, "guilds: only with sync = 'guilds'"),
        ({"sync": "everywhere"}, "app_commands.sync"),
        ({"sync": "guilds", "guilds": [-5]}, "server ids are positive"),
        ({"sink": "off"}, "app_commands.sink"),
    ],
)
def test_the_sync_policy_is_checked_with_clear_errors(
    app_commands: dict[str, Any], error: str
) -> None:
    entry = {"platform": "discord", "persona": "p", "app_commands": app_commands}
    with pytest.raises(ValidationError, match=re.escape(error)):
        DiscordBotSettings.model_validate(entry)
    fine = {**entry, "guilds": [7], "app_commands": {"sync": "guilds"}}
    assert DiscordBotSettings.model_validate(fine).command_guilds == (7,)
