"""The person's language on Discord (docs/i18n.md): application command descriptions carry
``description_localizations`` from the same catalogs (names stay English), a restart with
nothing changed writes nothing, and under ``language = "auto"`` an interaction is answered in
the invoker's Discord ``locale`` (English for one without a catalog). The real discord.py
client and the real runtime against the fake Discord."""

from __future__ import annotations

import asyncio
import contextlib
import warnings
from collections.abc import AsyncIterator
from pathlib import Path

from bot.app.build import runtime
from bot.config import Settings
from bot.core.clock import ManualClock
from tests.adapters.test_discord_commands import TOKEN, _endpoints_released
from tests.fakes.discord_api import FakeDiscord
from tests.fakes.llm import GatedLLM
from tests.harness import eventually

with warnings.catch_warnings():
    warnings.filterwarnings(
        "ignore", message="'audioop' is deprecated", category=DeprecationWarning
    )
    from adapters.discord.adapter import DiscordAdapter
    from adapters.discord.endpoints import SharedEndpoints, endpoints_for

__all__ = ["_endpoints_released"]  # every test closes its adapters (the fixture's check)


def _settings(fake: FakeDiscord, url: str, language: str) -> Settings:
    persona = {"system": "You are Mira.", "first_message": ["Hi."], "language": language}
    return Settings.model_validate(
        {
            "storage": {"url": url},
            "llm": {"provider": "offline"},
            "schedule": {"reminders": True},
            "personas": [
                {"id": "mira", "name": "Mira", **persona},
                {"id": "orin", "name": "Orin", **persona},
            ],
            "bots": [
                {
                    "id": "mira",
                    "platform": "discord",
                    "personas": ["mira", "orin"],
                    "api_base": fake.api_base,
                    "gateway_url": fake.gateway_url,
                }
            ],
        }
    )


@contextlib.asynccontextmanager
async def bot(fake: FakeDiscord, url: str, language: str) -> AsyncIterator[None]:
    """The Discord bot ``mira`` running until its start's command sync is done and beyond."""
    settings = _settings(fake, url, language)
    SharedEndpoints.acquire(endpoints_for(fake.api_base, fake.gateway_url, where="t"), where="t")
    adapter = DiscordAdapter(bot_key="mira", token=TOKEN, clock=ManualClock())
    try:
        async with runtime(
            settings,
            llm=GatedLLM(answer=lambda r: "a reply"),
            adapters={"mira": (settings.persona("mira"), adapter)},
        ) as rt:
            before = fake.sessions
            task = asyncio.create_task(adapter.run(rt.router.for_bot("mira")))
            try:
                await fake.wait_identified(after=before)
                await eventually(lambda: adapter.synced is not None, "sync started")
                assert adapter.synced is not None
                await asyncio.wait_for(asyncio.shield(adapter.synced), 10)
                yield
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
    finally:
        await adapter.aclose()


async def test_descriptions_are_localized_and_a_restart_writes_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'bot.sqlite3'}"
    async with FakeDiscord(token=TOKEN) as fake:
        app = fake.app_commands
        async with bot(fake, url, "uk"):
            registered = app.scope("global")
        help_command = registered["help"]
        assert help_command["name"] == "help" and "name_localizations" not in help_command
        assert help_command["description"] == "list the commands"
        assert help_command["description_localizations"] == {"uk": "список команд"}
        (name,) = registered["persona"]["options"]
        assert name["description_localizations"] == {
            "uk": "на якого персонажа перемкнутися (порожньо: список)"
        }
        cancel = registered["reminders"]["options"][1]
        assert cancel["description_localizations"] == {"uk": "скасувати одне з ваших нагадувань"}
        assert cancel["options"][0]["description_localizations"] == {
            "uk": "яке нагадування скасувати"
        }
        written = len(app.writes)

        # Listed with their localizations, the same commands are not written again.
        async with bot(fake, url, "uk"):
            pass
        assert len(app.writes) == written

        # "auto": every shipped language Discord has a locale for (it has none for Hebrew).
        async with bot(fake, url, "auto"):
            registered = app.scope("global")
        assert registered["help"]["description_localizations"] == {
            "ru": "список команд",
            "uk": "список команд",
            "zh-CN": "列出命令",
        }


async def test_auto_answers_in_the_invoker_s_discord_language(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'bot.sqlite3'}"
    async with FakeDiscord(token=TOKEN) as fake:
        ada, li = fake.add_user("ada"), fake.add_user("li")
        async with bot(fake, url, "auto"):
            app = fake.app_commands
            help_uk = await app.invoke(fake.dm(ada), ada, "help", locale="uk")
            help_zh = await app.invoke(fake.dm(li), li, "help", locale="zh-CN")
            help_pt = await app.invoke(fake.dm(ada), ada, "help", locale="pt-BR")
            (uk,) = await app.wait_answers(help_uk)
            (zh,) = await app.wait_answers(help_zh)
            (pt,) = await app.wait_answers(help_pt)
        assert uk.content.startswith("Команди:\n/start - привітатися")
        assert zh.content.startswith("命令：\n/start - 打个招呼")
        assert pt.content.startswith("Commands:\n/start - say hello")
