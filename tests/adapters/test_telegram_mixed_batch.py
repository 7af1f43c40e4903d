"""Review of issue 23: one 100-update getUpdates answer mixing text with NUL characters,
photos, documents, and edits of messages earlier in the same batch. Real aiogram polling,
the fake Bot API, the real runtime, on both stores."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.adapters.test_telegram import TOKEN
from tests.adapters.test_telegram_batches import _reply_calls, batch_bot
from tests.backends import StoreFactory
from tests.fakes.llm import GatedLLM
from tests.fakes.telegram_api import TgChat, TgUser

PEOPLE = [TgUser(3000 + n, f"P{n}") for n in range(20)]


@pytest.fixture
def store_url(stores: StoreFactory) -> str:
    return stores.dsn or f"sqlite:///{stores.path}"


async def test_a_mixed_100_update_batch_is_stored_in_order_and_answered_once(
    tmp_path: Path, store_url: str
) -> None:
    llm = GatedLLM(answer=lambda r: "got it")
    # Each person's edit in the batch first commits what came before it (docs/architecture.md,
    # "Ingest in batches"), so one person's five updates land in two of the batch's
    # transactions. The debounce must outlast the gap between two of them for the count of
    # model calls below to hold: with 0.2 s, a loaded machine (three test workers on two
    # cores) let a turn start between them, and the final check threw its reply away (one
    # reply still, but a 21st call). A second is far more than the gap, however loaded.
    async with batch_bot(tmp_path, store_url, llm, debounce=1.0) as rig:
        api = rig.api  # type: ignore[attr-defined]
        polls = api.polls_started(TOKEN)
        for n, person in enumerate(PEOPLE):  # 5 updates each, pushed in one go
            chat = TgChat.private(person)
            first = api.push_message(TOKEN, chat, person, f"hello {n}\x00 with a nul")
            mid = first["message"]["message_id"]
            api.push_message(TOKEN, chat, person, caption=f"look {n}", extra={"photo": api.photo()})
            api.push_message(TOKEN, chat, person, f"hello {n} edited", message_id=mid, edited=True)
            doc = api.document(file_name=f"notes\x00{n}.pdf", mime_type="application/pdf")
            api.push_message(TOKEN, chat, person, caption=f"doc {n}\x00", extra={"document": doc})
            api.push_message(TOKEN, chat, person, f"bye {n}")
        await api.wait_for(
            lambda: api.pending_updates(TOKEN) == 0, within=15, what="the acknowledgement"
        )
        assert api.polls_started(TOKEN) <= polls + 2  # one answer, not a trickle
        await api.wait_for(
            lambda: len({c.chat_id for c in api.sent_messages(TOKEN)}) == len(PEOPLE),
            within=15,
            what="a reply in every chat",
        )
        for person in PEOPLE:
            await rig.quiet(rig.key(TgChat.private(person)), grace=0.1)
        calls = _reply_calls(llm)
        for n, person in enumerate(PEOPLE):
            chat = TgChat.private(person)
            assert rig.replies(chat) == ["got it"], n
            stored = await rig.stored_texts(rig.key(chat))
            assert stored[0] == f"hello {n} edited", stored
            assert stored[1].startswith(f"look {n}") and stored[2].startswith(f"doc {n}")
            assert "\x00" not in "".join(stored)
            assert stored[3:] == [f"bye {n}", "got it"], stored
        assert len(calls) == len(PEOPLE), calls
