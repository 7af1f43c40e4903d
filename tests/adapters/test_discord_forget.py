"""/forget as a Discord application command (issue 40 items 1 and 2): it asks first, only the
asker sees the question (with the commands that answer it, Discord having no buttons here),
and ``answer:confirm`` erases. The real discord.py against the fake Discord."""

from __future__ import annotations

import pytest

from bot.core.events import UserKey
from tests.adapters.test_discord_commands import TOKEN, slash_bot, store_url
from tests.fakes.discord_api import FakeDiscord

__all__ = ["store_url"]  # the fixture, re-exported for pytest
pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


async def test_forget_asks_privately_and_erases_on_answer_confirm(store_url: str) -> None:
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        guild = fake.add_guild("Cafe")
        async with slash_bot(fake, store_url) as rig:
            app = fake.app_commands
            (option,) = app.scope("global")["forget"]["options"]
            assert option["name"] == "answer"
            assert [c["value"] for c in option["choices"]] == ["confirm", "cancel"]
            person = UserKey("discord", str(ada.id))
            await rig.rt.store.set_timezone(person, "Europe/Berlin", 0.0)
            asked = await app.invoke(guild.general, ada, "forget")
            (question,) = await app.wait_answers(asked)
            assert question.ephemeral
            assert question.content.startswith("Erase everything I remember about you")
            assert "/forget confirm - Yes, erase" in question.content
            assert await rig.rt.store.timezone_of(person) == "Europe/Berlin"
            confirm = [{"type": 3, "name": "answer", "value": "confirm"}]
            done = await app.invoke(guild.general, ada, "forget", confirm)
            (answer,) = await app.wait_answers(done)
            assert answer.ephemeral and answer.content.startswith("Done: I erased")
            assert await rig.rt.store.timezone_of(person) is None
