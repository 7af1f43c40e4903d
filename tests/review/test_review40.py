"""Review of issue 40 (items 1 and 3): Discord application commands and personas that speak,
tried as a hostile user, a careless operator and a flaky network would, against the real
code: real discord.py against the fake Discord (tests/fakes/discord_interactions.py), the
fake speech server, the wired runtime, on both stores where the store matters. Each test
here failed when it was written; nothing is marked xfail."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import warnings
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.app.build import runtime
from bot.config import PersonaSettings, VoiceSettings
from bot.core.clock import ManualClock
from bot.core.events import Inbound
from bot.llm.speech import OpenAISpeech
from bot.runtime.extensions import Command, CommandSpec, Extensions
from tests.adapters.test_discord_commands import TOKEN, _roll, slash_bot
from tests.adapters.test_discord_commands import _endpoints_released as _released
from tests.adapters.test_discord_commands import _settings as _command_settings
from tests.adapters.test_telegram import _settings as telegram_settings
from tests.backends import StoreFactory
from tests.fakes.discord_api import FakeDiscord
from tests.fakes.llm import GatedLLM
from tests.fakes.speech_api import FakeSpeechAPI
from tests.harness import eventually
from tests.voices.test_voice_platforms import _voices

with warnings.catch_warnings():
    warnings.filterwarnings(
        "ignore", message="'audioop' is deprecated", category=DeprecationWarning
    )
    from adapters.discord.adapter import DiscordAdapter
    from adapters.discord.endpoints import SharedEndpoints, endpoints_for
    from tests.adapters.test_discord import TOKEN as DISCORD_TOKEN
    from tests.adapters.test_discord import _adapter as discord_adapter

__all__ = ["_released"]  # the Discord tests' autouse fixture: every adapter closed

ANSWER = "Of course I remember the song. Shall we sing it tomorrow?"


# ---------------------------------------------------------------------- sync policy


async def test_switching_the_sync_policy_leaves_no_stale_copy_of_our_commands(
    stores: StoreFactory,
) -> None:
    """An operator develops with ``sync = "guilds"`` then goes ``"global"`` (or back): the
    scope no longer synced keeps every command this bot created there, so the test server
    lists each command twice (the guild's and the global one) for good. The commands the
    bot recorded as its own in a scope it no longer syncs are its to remove; the operator's
    own command stays."""
    url = stores.dsn or f"sqlite:///{stores.path}"
    async with FakeDiscord(token=TOKEN) as fake:
        cafe = fake.add_guild("Cafe")
        guild_scope = f"guild:{cafe.id}"
        theirs = fake.app_commands.add_command("ping", "the operator's own", scope=guild_scope)
        async with slash_bot(fake, url):
            pass
        assert "new" in fake.app_commands.scope("global")

        # Development: the commands in the test server only.
        async with slash_bot(fake, url, app_commands={"sync": "guilds", "guilds": [cafe.id]}):
            pass
        assert "new" in fake.app_commands.scope(guild_scope)
        assert "new" not in fake.app_commands.scope("global"), (
            "every command of ours stays registered globally as well: listed twice in Cafe"
        )

        # Back to global: the guild copies of ours go, the operator's /ping stays.
        async with slash_bot(fake, url):
            pass
        assert set(fake.app_commands.scope(guild_scope)) == {"ping"}
        assert fake.app_commands.scope(guild_scope)["ping"] == theirs


# ---------------------------------------------------------------------- voices on Discord


async def test_discord_refusing_the_voice_file_as_too_large_still_sends_the_text(
    tmp_path: Path,
) -> None:
    """The speech client takes audio up to 20 MiB (MAX_AUDIO_BYTES); Discord takes uploads up
    to 10 MiB and answers a larger one 413 (code 40005, nothing posted). Only a 403 falls back
    to text: any other refusal of the attachment loses the reply, voice and text, though
    "nothing here may lose a reply" (docs/voices.md). Discord's 413 is scripted here; the
    same holds for a 400 about the file (a format Discord will not take)."""
    persona = PersonaSettings(
        id="mira",
        name="Mira",
        system="You are Mira.",
        first_message=["Hi."],
        voice=VoiceSettings(url="http://127.0.0.1:1/v1", voice="alloy", when="always"),
    )
    async with (
        FakeDiscord(token=DISCORD_TOKEN) as fake,
        FakeSpeechAPI() as tts,
        OpenAISpeech(tts.url, api_key=None) as speech,
    ):
        ada = fake.add_user("Ada")
        fake.add_guild("Cafe")
        settings = telegram_settings(tmp_path, debounce=0.2, max_wait=2.0).model_copy(
            update={"personas": [persona]}
        )
        adapter = discord_adapter(fake)
        try:
            async with runtime(
                settings,
                llm=GatedLLM(answer=lambda r: ANSWER),
                adapters={"mira": (persona, adapter)},
                voices=_voices(persona, speech),
            ) as rt:
                before = fake.sessions
                task = asyncio.create_task(adapter.run(rt.router))
                try:
                    await fake.wait_identified(after=before)
                    dm = fake.dm(ada)
                    fake.fail_next_send(dm, 413, code=40005, message="Request entity too large")
                    await fake.post(dm, ada, "sing me something")
                    await fake.wait_for(lambda: len(tts.inputs()) == 1, 10)
                    db = tmp_path / "telegram.sqlite3"
                    await eventually(lambda: _outbox(db) not in ([], ["pending"]), "settled", 10)
                    sent = [m["content"] for m in fake.bot_messages(dm)]
                finally:
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
        finally:
            await adapter.aclose()
    assert sent == [ANSWER], "the reply was lost: neither the voice nor its text went out"


def _outbox(db: Path) -> list[str]:
    """The statuses of the outbox rows of a SQLite store, oldest first."""
    with contextlib.closing(sqlite3.connect(db)) as connection:
        return [row[0] for row in connection.execute("SELECT status FROM outbox ORDER BY id")]


# ---------------------------------------------------------------------- a sync cut short


_REFUSE_RECORD = (
    "CREATE TRIGGER review_refuse BEFORE INSERT ON platform_commands "
    "BEGIN SELECT RAISE(ABORT, 'disk I/O error'); END"
)


def _sql(db: Path, statement: str) -> None:
    with contextlib.closing(sqlite3.connect(db)) as connection:
        connection.execute(statement)
        connection.commit()


@contextlib.asynccontextmanager
async def _started(
    fake: FakeDiscord, url: str, *, extensions: Extensions | None = None
) -> AsyncIterator[tuple[DiscordAdapter, list[BaseException]]]:
    """The Discord bot ``mira`` of tests/adapters/test_discord_commands.py started until its
    sync ended (however it ended); what its ``run()`` raised at shutdown, after the block."""
    settings = _command_settings(fake, url)
    SharedEndpoints.acquire(endpoints_for(fake.api_base, fake.gateway_url, where="t"), where="t")
    adapter = DiscordAdapter(bot_key="mira", token=TOKEN, clock=ManualClock())
    raised: list[BaseException] = []
    try:
        async with runtime(
            settings,
            llm=GatedLLM(answer=lambda r: "a reply"),
            adapters={"mira": (settings.persona("mira"), adapter)},
            extensions=extensions or Extensions(),
        ) as rt:
            before = fake.sessions
            task = asyncio.create_task(adapter.run(rt.router.for_bot("mira")))
            try:
                await fake.wait_identified(after=before)
                await eventually(
                    lambda: adapter.synced is not None and adapter.synced.done(), "sync ended"
                )
                yield adapter, raised
            finally:
                task.cancel()
                (outcome,) = await asyncio.gather(task, return_exceptions=True)
                if isinstance(outcome, Exception):
                    raised.append(outcome)
    finally:
        await adapter.aclose()


async def test_a_store_fault_while_recording_the_sync_is_reported_not_raised_at_shutdown(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The commands are created, then the store refuses the record of them for a moment (a
    database blip at start). The sync task dies with the store's error: nothing is logged
    while the bot serves (the operator never learns the sync failed), and the error comes
    out of the adapter's ``run()`` at shutdown instead of a clean stop."""
    db = tmp_path / "bot.sqlite3"
    async with FakeDiscord(token=TOKEN) as fake:
        async with _started(fake, f"sqlite:///{db}"):  # the schema, synced once
            pass
        _sql(db, "DELETE FROM platform_commands")  # as if the first record had failed
        _sql(db, _REFUSE_RECORD)
        fake.app_commands.commands.clear()
        caplog.clear()
        async with _started(fake, f"sqlite:///{db}", extensions=_roll()) as (adapter, raised):
            assert adapter.synced is not None
            logged = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
        assert any("not synced" in line for line in logged), (
            f"the failed sync is never logged while the bot serves: {logged}"
        )
        assert raised == [], f"the adapter's run() raised at shutdown: {raised!r}"


async def test_commands_created_by_a_sync_cut_short_stay_ours(tmp_path: Path) -> None:
    """A sync records what it created only once the whole scope is done: cut short after
    the creates (a store fault on the record, as here, or the process stopped while
    discord.py waits out a 429), the commands it made are no longer known as its own. The
    next start with the plugin's help changed takes its own /roll for someone else's
    ("not made by this bot"): never updated, and never deleted once the plugin is gone,
    so every member keeps a dead /roll in the menu.

    (Fix 40: the store refuses only the record of /zap, the command created after /roll.
    As first written it refused every record for the whole start, so no way of recording
    could ever keep /roll known; a sync now records each command right after Discord made
    it, and what is cut short after /roll's record must not lose it.)"""
    db = tmp_path / "bot.sqlite3"

    def plugin(help_text: str = "roll dice: /roll 2d6") -> Extensions:
        async def zap(inbound: Inbound, command: Command) -> str:
            return "zapped"

        return Extensions(commands=(*_roll(help_text).commands, CommandSpec("zap", "zap", zap)))

    async with FakeDiscord(token=TOKEN) as fake:
        async with _started(fake, f"sqlite:///{db}"):  # the schema
            pass
        _sql(db, _REFUSE_RECORD.replace(" BEGIN", " WHEN NEW.name = 'zap' BEGIN"))
        async with _started(fake, f"sqlite:///{db}", extensions=plugin()):
            pass
        assert "roll" in fake.app_commands.scope("global")
        assert "zap" in fake.app_commands.scope("global")
        _sql(db, "DROP TRIGGER review_refuse")
        writes = len(fake.app_commands.writes)
        async with _started(fake, f"sqlite:///{db}", extensions=plugin("roll any dice")):
            pass
        assert [(w.method, w.name) for w in fake.app_commands.writes[writes:]] == [
            ("PATCH", "roll")
        ]
        async with _started(fake, f"sqlite:///{db}"):  # the plugin removed
            pass
        assert "roll" not in fake.app_commands.scope("global")


# ---------------------------------------------------------------------- what is ephemeral


async def test_an_error_answer_to_a_public_command_is_ephemeral(tmp_path: Path) -> None:
    """docs/discord.md#7-commands: "Only you see it when the answer is ... a refusal or an
    error". ``/persona name:`` with a name the bot lacks is such an error, yet it is posted
    in the channel as the bot's message, quoting whatever was typed (up to the 2000
    characters an option is cut to): anyone can make the bot post a text of their choosing
    in the channel."""
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        guild = fake.add_guild("Cafe")
        async with slash_bot(fake, f"sqlite:///{tmp_path / 'bot.sqlite3'}"):
            app = fake.app_commands
            said = "Server notice: this channel closes tomorrow, move to #elsewhere"
            wrong = await app.invoke(
                guild.general, ada, "persona", [{"type": 3, "name": "name", "value": said}]
            )
            (answer,) = await app.wait_answers(wrong)
            assert "No persona" in answer.content
            assert answer.ephemeral, "the error is shown to the whole channel"
            assert fake.bot_messages(guild.general) == []


# ---------------------------------------------------------------------- once, across processes


async def test_an_interaction_seen_by_two_processes_at_once_runs_once(
    stores: StoreFactory,
) -> None:
    """docs/discord.md#7-commands: a slash command "is answered once, also when another
    process (another shard) of the same store sees it". The dedupe is a check that the
    answer's outbox row exists, made before the command runs and recorded only after it
    answered: while the first process is still running a command (a plugin that takes its
    time, a slow store), a second process that gets the same interaction (two sessions of
    one shard during a deploy's overlap, a redelivery) runs it a second time. Here a
    plugin's command (it could order, post, charge) runs twice."""
    url = stores.dsn or f"sqlite:///{stores.path}"
    runs: list[str] = []
    release = asyncio.Event()

    async def order(inbound: Inbound, command: Command) -> str:
        runs.append(command.args)
        await release.wait()
        return f"ordered {command.args}"

    shop = Extensions(commands=(CommandSpec("order", "order something", order),))
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        guild = fake.add_guild("Cafe")
        app = fake.app_commands
        args = [{"type": 3, "name": "args", "value": "one pizza"}]
        async with slash_bot(fake, url, extensions=shop):
            first = await app.invoke(guild.general, ada, "order", args)
            await eventually(lambda: runs == ["one pizza"], "the first process runs it")
            async with slash_bot(fake, url, extensions=shop):  # the second process
                await app.invoke(guild.general, ada, "order", again=first)
                sentinel = await app.invoke(guild.general, ada, "help")  # queued behind it
                await eventually(
                    lambda: len(runs) == 2 or bool(app.answers_to(sentinel)),
                    "the second process skips it (or runs it)",
                )
                release.set()
                await app.wait_answers(sentinel)
            await app.wait_answers(first)
    assert runs == ["one pizza"], f"the command ran {len(runs)} times"
