"""/export and /memory on Discord: real discord.py, the fake Discord, the wired runtime.

In a guild nothing private is posted: /export opens a DM with the person and sends the file
there as an attachment (or says in the channel that it could not); /memory shows only what the
guild may see.
"""

from __future__ import annotations

import json
from pathlib import Path

from bot.core.events import UserKey
from bot.runtime.exports import SENT_PRIVATELY
from memory.records import MemoryItem, UserMemory
from tests.adapters.test_discord import TOKEN, _endpoints_released, with_runtime
from tests.fakes.discord_api import FakeDiscord

__all__ = ["_endpoints_released"]  # the autouse fixture applies here too


def _texts(fake: FakeDiscord, channel: int) -> list[str]:
    return [m["content"] for m in fake.bot_messages(channel)]


async def test_export_in_a_guild_is_an_attachment_in_a_dm(tmp_path: Path) -> None:
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        guild = fake.add_guild("Cafe")
        async with with_runtime(fake, tmp_path) as bot:
            await fake.post(guild.general, ada, "my plan is a secret", mention_bot=True)
            await fake.wait_for_bot_messages(guild.general, 1)
            await bot.quiet()
            asked = await fake.post(guild.general, ada, "/export")
            await fake.wait_for_bot_messages(guild.general, 2)
            dm = fake.dm(ada)
            (document,) = fake.bot_messages(dm)
            (attachment,) = document["attachments"]
            assert attachment["filename"].endswith(".json")
            (post,) = [p for p in fake.posts if p.channel_id == dm]
            ((name, data),) = post.files
            assert name == attachment["filename"]
            exported = json.loads(data)
            assert exported["user"] == {"platform": "discord", "id": str(ada.id)}
            assert "my plan is a secret" in data.decode()
            assert document["content"].startswith("Your data export")
            assert FakeDiscord.pings(post.body) == set()
            answer = fake.bot_messages(guild.general)[-1]
            assert answer["content"] == SENT_PRIVATELY
            assert str(answer["message_reference"]["message_id"]) == asked["id"]
            assert not any(p.files for p in fake.posts if p.channel_id == guild.general)


async def test_export_in_a_guild_with_dms_closed_says_so_without_data(tmp_path: Path) -> None:
    async with FakeDiscord(token=TOKEN) as fake:
        bo = fake.add_user("Bo")
        guild = fake.add_guild("Cafe")
        fake.closed_dms.add(bo.id)
        async with with_runtime(fake, tmp_path) as bot:
            await fake.post(guild.general, bo, "my pin is 4321", mention_bot=True)
            await fake.wait_for_bot_messages(guild.general, 1)
            await bot.quiet()
            await fake.post(guild.general, bo, "/export")
            await fake.wait_for_bot_messages(guild.general, 2)
            answer = _texts(fake, guild.general)[-1]
            assert answer.startswith("I couldn't send your data export to you privately.")
            assert "allow direct messages" in answer and "4321" not in answer
            assert fake.bot_messages(fake.dm(bo)) == []
            fake.closed_dms.clear()
            await fake.post(guild.general, bo, "/export")
            await fake.wait_for_bot_messages(guild.general, 3)
            assert _texts(fake, guild.general)[-1] == SENT_PRIVATELY
            assert len(fake.bot_messages(fake.dm(bo))) == 1


async def test_memory_in_a_guild_hides_what_was_said_privately(tmp_path: Path) -> None:
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        guild = fake.add_guild("Cafe")
        async with with_runtime(fake, tmp_path) as bot:
            record = UserMemory(
                items=(
                    MemoryItem(
                        "semantic", "occupation", "nurse", private=False, scope=str(guild.general)
                    ),
                    MemoryItem("emotional", "fear", "spiders", private=True),
                )
            )
            user = UserKey("discord", str(ada.id))
            await bot.rt.store.set_user_memory(user, record.to_json(), bot.rt.clock.now())
            await fake.post(guild.general, ada, "/memory")
            (answer,) = await fake.wait_for_bot_messages(guild.general, 1)
            assert "nurse" in answer["content"] and "spiders" not in answer["content"]
            dm = fake.dm(ada)
            await fake.post(dm, ada, "/memory")
            (private,) = await fake.wait_for_bot_messages(dm, 1)
            assert "spiders" in private["content"]
