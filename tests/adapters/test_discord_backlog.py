"""Review of issue 23: Discord events that queue up behind a store fault (messages, an edit of
the failing message, a deletion of a message queued behind it), handed over as one batch
once the fault clears. The fake gateway, the real adapter and runtime on a SQLite file; the
fault is a trigger that refuses one text."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from pathlib import Path

import pytest

from tests.adapters.test_discord import TOKEN, with_runtime
from tests.fakes.discord_api import FakeDiscord
from tests.fakes.llm import GatedLLM

FAULT = "the store refuses this one"


def _trigger(db: Path, on: bool) -> None:
    conn = sqlite3.connect(db, isolation_level=None, timeout=10)
    try:
        conn.execute(
            "CREATE TRIGGER inject_fault BEFORE INSERT ON messages WHEN NEW.text = "
            f"'{FAULT}' BEGIN SELECT RAISE(ABORT, 'injected fault'); END"
            if on
            else "DROP TRIGGER inject_fault"
        )
    finally:
        conn.close()


async def test_events_queued_behind_a_store_fault_are_stored_in_order_once_it_clears(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, "personabot.discord")
    llm = GatedLLM(answer=lambda r: "re: " + " | ".join(m.text for m in r.messages[-3:]))
    async with FakeDiscord(token=TOKEN) as fake:
        ada, bob = fake.add_user("Ada"), fake.add_user("Bob")
        guild = fake.add_guild("Cafe")
        ada_dm, bob_dm = fake.dm(ada), fake.dm(bob)
        async with with_runtime(fake, tmp_path, llm) as bot:
            _trigger(bot.db, True)
            first = await fake.post(ada_dm, ada, FAULT)
            await bot.until(lambda: "not stored" in caplog.text)
            # Queued behind it, in gateway order, while it is retried.
            await fake.post(bob_dm, bob, "Bob behind the fault")
            gone = await fake.post(guild.general, ada, "a guild message deleted at once")
            await fake.delete(gone)
            await fake.edit(first, "Ada's message, edited while the store refused it")
            await fake.post(ada_dm, ada, "Ada again")
            _trigger(bot.db, False)
            await fake.wait_for_bot_messages(bob_dm, 1)
            await fake.wait_for_bot_messages(ada_dm, 1)
            await bot.quiet()

            def texts() -> list[str]:
                return [r[0] for r in bot.rows("SELECT text FROM messages WHERE role='user'")]

            stored = texts()
            assert "a guild message deleted at once" not in stored, stored
            assert FAULT not in stored, stored  # the edit applies: it came after the message
            assert "Ada's message, edited while the store refused it" in stored
            assert len(fake.bot_messages(bob_dm)) == 1
            assert len(fake.bot_messages(ada_dm)) == 1, fake.bot_messages(ada_dm)
            reply_calls = [r for r in llm.requests if r.purpose == "reply"]
            assert len(reply_calls) == 2, [r.messages[-1].text for r in reply_calls]


async def test_a_fault_in_the_middle_of_a_discord_batch_with_an_edit_and_a_deletion(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The batch [message, its edit, a guild message and its deletion, the refused message,
    one more] fails at the refused message after the edit and the deletion ran (each stores
    what came before it); handed over again once the fault clears: the edit holds, the deleted
    message stays deleted, everything else is answered once."""
    caplog.set_level(logging.ERROR, "personabot.discord")
    llm = GatedLLM(answer=lambda r: "got it")
    async with FakeDiscord(token=TOKEN) as fake:
        ada, bob, cyd = fake.add_user("Ada"), fake.add_user("Bob"), fake.add_user("Cyd")
        guild = fake.add_guild("Cafe")
        ada_dm, bob_dm, cyd_dm = fake.dm(ada), fake.dm(bob), fake.dm(cyd)
        async with with_runtime(fake, tmp_path, llm, busy_timeout_ms=4000) as bot:
            _trigger(bot.db, True)
            # Hold the write lock so that the events below queue up into one batch.
            holder = sqlite3.connect(bot.db, isolation_level=None, timeout=10)
            try:
                holder.execute("BEGIN IMMEDIATE")
                await fake.post(cyd_dm, cyd, "Cyd first, alone in a batch")
                await asyncio.sleep(0.3)  # the consumer waits on the lock
                first = await fake.post(ada_dm, ada, "Ada's message")
                await fake.edit(first, "Ada's message, edited")
                gone = await fake.post(guild.general, ada, "a guild message deleted at once")
                await fake.delete(gone)
                await fake.post(bob_dm, bob, FAULT)
                await fake.post(cyd_dm, cyd, "Cyd after the fault")
                await asyncio.sleep(0.3)
                holder.execute("COMMIT")
            finally:
                holder.close()
            await bot.until(lambda: caplog.text.count("not stored") >= 1)
            _trigger(bot.db, False)
            for dm in (ada_dm, bob_dm, cyd_dm):
                await fake.wait_for_bot_messages(dm, 1)
            await bot.quiet()
            stored = [r[0] for r in bot.rows("SELECT text FROM messages WHERE role='user'")]
            assert "a guild message deleted at once" not in stored, stored
            assert "Ada's message" not in stored and "Ada's message, edited" in stored, stored
            assert stored.count("Cyd after the fault") == 1 and FAULT in stored
            assert len(fake.bot_messages(ada_dm)) == 1
            assert len(fake.bot_messages(bob_dm)) == 1
            cyd_replies = len(fake.bot_messages(cyd_dm))
            assert cyd_replies in (1, 2), cyd_replies  # one per turn; never a repeat
            calls = [r.messages[-1].text for r in llm.requests if r.purpose == "reply"]
            assert sum("Cyd after the fault" in c for c in calls) == 1, calls
