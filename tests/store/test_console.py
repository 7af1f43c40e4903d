"""The console's reads (docs/web.md) on both backends: keyset pages, search, queue, audit."""

from __future__ import annotations

from bot.core.events import ConversationKey, Inbound, QueuePolicy
from bot.core.llm import Usage
from bot.store.base import BaseStore

T0 = 1_700_000_000.0
Q = QueuePolicy(debounce=5.0, max_wait=30.0)


async def _say(store: BaseStore, chat: str, name: str, text: str, at: float) -> ConversationKey:
    key = ConversationKey("telegram", chat)
    await store.ingest(Inbound(key, f"u-{name}", name, text, f"{chat}-{at}"), at, Q)
    return key


async def test_conversations_come_newest_first_one_keyset_page_at_a_time(store: BaseStore) -> None:
    for i in range(7):
        await _say(store, f"c{i}", f"Person {i}", "hello", T0 + i)
    await _say(store, "c2", "Sasha", "again", T0 + 100)  # c2 is now the newest
    await store.new_session(ConversationKey("telegram", "c3"), T0 + 200)  # c3 once, by S2
    first = await store.console_conversations(limit=3)
    assert [r.key.chat_id for r in first] == ["c3", "c2", "c6"]
    assert (first[0].session_no, first[0].status, first[0].participants) == (2, "open", ())
    assert first[1].participants == ("Person 2", "Sasha")
    seen = [r.key.chat_id for r in first]
    cursor = first[-1]
    while True:
        page = await store.console_conversations(
            after=(cursor.last_activity_at, cursor.session_row), limit=3
        )
        if not page:
            break
        seen += [r.key.chat_id for r in page]
        cursor = page[-1]
    assert seen == ["c3", "c2", "c6", "c5", "c4", "c1", "c0"]  # each once, in order
    found = await store.console_conversation(first[1].id)
    assert found == ConversationKey("telegram", "c2")
    assert await store.console_conversation(10**9) is None


async def test_search_by_chat_id_or_part_of_a_name(store: BaseStore) -> None:
    await _say(store, "111", "Ana Lima", "hi", T0)
    await _say(store, "222", "100% Real_Name", "hi", T0 + 1)
    await _say(store, "333", "Bob", "hi", T0 + 2)
    assert [r.key.chat_id for r in await store.console_conversations(search="111")] == ["111"]
    assert [r.key.chat_id for r in await store.console_conversations(search="lima")] == ["111"]
    # LIKE's wildcards in a search are plain characters.
    assert [r.key.chat_id for r in await store.console_conversations(search="0% r")] == ["222"]
    assert await store.console_conversations(search="l%name") == []  # % is no wildcard
    assert [r.key.chat_id for r in await store.console_conversations(search="l_n")] == ["222"]
    assert await store.console_conversations(search="a_l") == []  # nor is _
    assert await store.console_conversations(search="%") == [
        r for r in await store.console_conversations() if r.key.chat_id == "222"
    ]


async def test_queue_usage_and_the_audit_log(store: BaseStore) -> None:
    chat = await _say(store, "9", "Sasha", "hello", T0)
    view = await store.console_queue(T0)
    assert (view.timers, view.due) == (1, 0)
    view = await store.console_queue(T0 + 60)
    assert (view.timers, view.due, view.oldest_due_at) == (1, 1, T0 + 5)
    lease = await store.acquire_lease(f"turn:{chat}", "worker-a", 30, T0 + 60)
    assert lease is not None
    assert (await store.console_queue(T0 + 61)).leases == (("worker-a", 1),)
    assert (await store.console_queue(T0 + 100)).leases == ()  # expired
    usage = Usage(input_tokens=100, output_tokens=20, cache_read_input_tokens=60)
    await store.record_usage(chat, "reply", "m", [("u-Sasha", usage)], T0 + 10)
    await store.record_usage(chat, "summary", "m", [(None, usage)], T0 + 4000)
    buckets = await store.console_usage(T0, 3600)
    assert [
        (b.start, b.calls, b.replies, b.input_tokens, b.cache_read_tokens) for b in buckets
    ] == [
        (T0, 1, 1, 100, 60),
        (T0 + 3600, 1, 0, 100, 60),
    ]
    for i in range(3):
        await store.record_audit("operator", "view_person", f"telegram:{i}", "", T0 + i)
    entries = await store.audit_log(limit=2)
    assert [e.target for e in entries] == ["telegram:2", "telegram:1"]
    older = await store.audit_log(before=entries[-1].id)
    assert [e.target for e in older] == ["telegram:0"]


async def test_edited_messages_and_the_lease_holder(store: BaseStore) -> None:
    from bot.core.events import SessionKey

    chat = await _say(store, "5", "Sasha", "helo", T0)
    await _say(store, "5", "Sasha", "second", T0 + 1)
    await store.edit_message(chat, f"5-{T0}", "hello", T0 + 2, Q)
    session = SessionKey(chat, 1)
    messages = await store.messages(session)
    assert [m.text for m in messages] == ["hello", "second"]
    assert await store.console_edits(session) == {messages[0].id: T0 + 2}
    assert await store.console_lease(f"turn:{chat}", T0) is None
    lease = await store.acquire_lease(f"turn:{chat}", "worker-b", 30, T0)
    assert lease is not None
    assert await store.console_lease(f"turn:{chat}", T0 + 1) == ("worker-b", T0 + 30)
    assert await store.console_lease(f"turn:{chat}", T0 + 31) is None
