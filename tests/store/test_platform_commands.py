"""What each bot recorded as its own platform commands (migration 22, docs/discord.md#sync):
a sync deletes only what is recorded here, on both stores."""

from __future__ import annotations

from bot.store.base import BaseStore
from tests.backends import StoreFactory


async def test_a_record_is_replaced_whole_and_kept_apart_per_bot_and_scope(
    store: BaseStore,
) -> None:
    assert await store.registered_commands("mira", "global") == {}
    await store.record_commands("mira", "global", {"new": "11", "roll": "12"})
    await store.record_commands("mira", "guild:5", {"new": "21"})
    await store.record_commands("orin", "global", {"help": "31"})
    await store.record_commands("mira", "global", {"new": "11", "memory": "13"})
    assert await store.registered_commands("mira", "global") == {"new": "11", "memory": "13"}
    assert await store.registered_commands("mira", "guild:5") == {"new": "21"}
    assert await store.registered_commands("orin", "global") == {"help": "31"}
    await store.record_commands("mira", "guild:5", {})
    assert await store.registered_commands("mira", "guild:5") == {}


async def test_the_scopes_with_a_record_are_listed_per_bot(store: BaseStore) -> None:
    """A sync visits them all, also the scopes its policy no longer covers."""
    await store.record_commands("mira", "global", {"new": "11"})
    await store.record_commands("mira", "guild:5", {"new": "21"})
    await store.record_commands("orin", "guild:7", {"help": "31"})
    assert await store.command_scopes("mira") == ("global", "guild:5")
    await store.record_commands("mira", "global", {})
    assert await store.command_scopes("mira") == ("guild:5",)
    assert await store.command_scopes("ada") == ()


async def test_another_process_reads_the_record(stores: StoreFactory) -> None:
    async with stores.new() as one, stores.new() as other:
        await one.record_commands("mira", "global", {"new": "11"})
        assert await other.registered_commands("mira", "global") == {"new": "11"}
