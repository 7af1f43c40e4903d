"""The console's reads (docs/web.md) on both backends: keyset pages, search, queue, audit."""

from __future__ import annotations

from bot.core.events import ConversationKey, Inbound, QueuePolicy, UserKey
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


async def _answered_at(store: BaseStore, key: ConversationKey, said: float, replied: float) -> None:
    """A person's message at ``said`` and the bot's reply at ``replied``."""
    await store.ingest(Inbound(key, "u-7", "Sasha", "hi", f"{key.chat_id}-{said}"), said, Q)
    turn = await store.pending_turn(key)
    lease = await store.acquire_lease(f"turn:{key}", "w", 30, replied)
    assert turn is not None and lease is not None
    assert (await store.finish_turn(turn, lease, "hello", replied, Q)).outcome == "recorded"
    await store.release_lease(lease)


async def test_a_bots_last_update_is_its_newest_message_from_a_person(store: BaseStore) -> None:
    def chat(name: str, bot: str = "telegram-mira") -> ConversationKey:
        return ConversationKey("telegram", name, None, bot)

    assert await store.console_last_inbound("telegram-mira") is None
    # Twelve chats answered long after they wrote (later activity than anything below: the
    # walk passes more than one page of sessions), one person writing at T0 + 500 unanswered.
    for i in range(12):
        await _answered_at(store, chat(f"r{i}"), T0 + i, T0 + 2000 + i)
    await store.ingest(Inbound(chat("new"), "u-8", "Ana", "hey", "new-1"), T0 + 500, Q)
    # Another bot's newer message is not this bot's.
    await store.ingest(Inbound(chat("x", "discord-orin"), "u-9", "Bo", "yo", "x-1"), T0 + 900, Q)
    assert await store.console_last_inbound("telegram-mira") == T0 + 500
    assert await store.console_last_inbound("discord-orin") == T0 + 900
    assert await store.console_last_inbound("discord-nobody") is None


async def test_recent_trouble_lists_gaps_and_rejected_turns_newest_first(store: BaseStore) -> None:
    from bot.core.console import GAP_NOTICED_KEY
    from bot.core.events import SessionKey

    async def closed_out(name: str, texts: list[str], reason: str) -> ConversationKey:
        key = ConversationKey("telegram", name, "t-1", "telegram-mira")
        for i, text in enumerate(texts):
            await store.ingest(Inbound(key, "u-7", "Sasha", text, f"{name}-{i}"), T0 + 10 + i, Q)
        turn = await store.pending_turn(key)
        lease = await store.acquire_lease(f"turn:{key}", "w", 30, T0 + 20)
        assert turn is not None and lease is not None
        assert await store.skip_turn(turn, lease, T0 + 20, Q, reason=reason)
        return key

    assert await store.console_events() == []
    rejected = await closed_out("r", ["one", "two"], "rejected: prompt is too long <b>")
    await closed_out("l", ["three"], "limited: user_turns")  # a limit is no model rejection
    gapped = await _say(store, "g", "Ana", "hello", T0)
    await store.set_state(SessionKey(gapped, 1), GAP_NOTICED_KEY, "turns 1-2 missing", T0 + 50)
    await store.set_state(SessionKey(gapped, 1), "personabot:gap_told", "1-2", T0 + 60)
    events = await store.console_events()
    assert [(e.kind, e.key, e.session_no, e.turns, e.detail, e.at) for e in events] == [
        ("gap", gapped, 1, (), "turns 1-2 missing", T0 + 50),
        ("rejected", rejected, 1, (1, 2), "prompt is too long <b>", T0 + 11),
    ]
    assert await store.console_conversation(events[1].conversation_id) == rejected
    assert [e.kind for e in await store.console_events(limit=1)] == ["gap"]


async def test_the_people_who_used_the_most_since_a_time(store: BaseStore) -> None:
    from bot.core.console import PersonUsage
    from bot.core.events import UserKey

    chat = ConversationKey("telegram", "9")
    spent = Usage(input_tokens=300, output_tokens=999, cache_read_input_tokens=100)
    await store.record_usage(chat, "reply", "m", [("u-a", spent), (None, spent)], T0)
    await store.record_usage(chat, "summary", "m", [("u-b", Usage(100, 5))], T0 + 1)
    await store.record_usage(chat, "reply", "m", [("u-c", Usage(5000, 5))], T0 - 10)  # before
    for user, at in [("u-b", T0), ("u-b", T0 + 1), ("u-b", T0 + 2), ("u-a", T0), ("u-c", T0 - 10)]:
        reserved = await store.reserve_turn(UserKey("telegram", user), "telegram-mira", at)
        assert reserved.id is not None
    a, b = UserKey("telegram", "u-a"), UserKey("telegram", "u-b")
    # Input tokens as the per-person limit counts them (cache reads too, no output).
    assert await store.console_top("input_tokens", T0, 5) == [
        PersonUsage(a, 400),
        PersonUsage(b, 100),
    ]
    assert await store.console_top("input_tokens", T0, 1) == [PersonUsage(a, 400)]
    assert await store.console_top("turns", T0, 5) == [PersonUsage(b, 3), PersonUsage(a, 1)]
    assert await store.console_top("turns", T0 + 100, 5) == []


async def test_a_transcript_page_and_the_backlog_count_read_only_what_they_show(
    store: BaseStore,
) -> None:
    """The conversation page's reads (issue 34): the newest messages before a turn, in turn
    order, a page at a time, and how many messages of the chat wait for an answer."""
    key = ConversationKey("telegram", "c1")
    for i in range(1, 26):
        await store.ingest(Inbound(key, "u1", "Ana", f"m{i}", f"id{i}"), T0 + i, Q)
    session = await store.current_session(key)
    assert session is not None
    newest = await store.messages(session.key, limit=10)
    assert [m.text for m in newest] == [f"m{i}" for i in range(16, 26)]
    earlier = await store.messages(session.key, before_turn=newest[0].turn, limit=10)
    assert [m.text for m in earlier] == [f"m{i}" for i in range(6, 16)]
    first = await store.messages(session.key, before_turn=earlier[0].turn, limit=10)
    assert [m.text for m in first] == [f"m{i}" for i in range(1, 6)]
    assert len(await store.messages(session.key)) == 25
    # A cursor past any turn number (a hand-edited URL) is the newest page, not an error.
    assert await store.messages(session.key, before_turn=10**15, limit=10) == newest
    assert await store.pending_count(key) == 25
    assert await store.pending_count(ConversationKey("telegram", "nobody")) == 0
    turn = await store.pending_turn(key, 10)
    assert turn is not None and len(turn.messages) == 10


async def test_a_person_page_reads_their_count_newest_names_and_asked_sources(
    store: BaseStore,
) -> None:
    """The person page's read (issue 34): bounded whatever they wrote, and only their own
    messages come back as sources (another person's id asked for is not shown)."""
    for i in range(30):
        await _say(store, "c1", f"Ana {i % 25}", f"hello {i}", T0 + i)
    other = ConversationKey("telegram", "c2")
    await store.ingest(Inbound(other, "u-Bob", "Bob", "bob's", "b1"), T0 + 100, Q)
    user = UserKey("telegram", "u-Ana 0")
    assert (await store.console_person(user, [])).messages == 2  # "Ana 0" wrote twice
    everyone = [
        m.id
        for s in await store.list_sessions(ConversationKey("telegram", "c1"))
        for m in await store.messages(s.key)
    ]
    bob = [m.id for s in await store.list_sessions(other) for m in await store.messages(s.key)]
    view = await store.console_person(user, [*everyone, *bob, 10**9])
    assert sorted(m.text for m in view.sources.values()) == ["hello 0", "hello 25"]
    assert view.names == ("Ana 0",)


async def test_a_person_page_lists_their_newest_conversations_and_knows_strangers(
    store: BaseStore,
) -> None:
    """Issue 35, item 10: a person's page did not list their conversations, and a typo'd
    user id rendered an empty page. The store reads the newest few conversations they wrote
    in (one more says "more") and whether anything of them is stored at all."""
    for i in range(4):
        key = ConversationKey("telegram", f"c{i}")
        await store.ingest(Inbound(key, "u-Ana", "Ana", f"hi {i}", f"a{i}"), T0 + i, Q)
    await store.ingest(
        Inbound(ConversationKey("telegram", "c1"), "u-Ana", "Ana", "again", "a9"), T0 + 50, Q
    )
    await store.ingest(
        Inbound(ConversationKey("telegram", "c9"), "u-Bob", "Bob", "x", "b1"), T0 + 60, Q
    )
    view = await store.console_person(UserKey("telegram", "u-Ana"), [], chats=3)
    assert [(c.key.chat_id, c.messages, c.last_at) for c in view.chats] == [
        ("c1", 2, T0 + 50),
        ("c3", 1, T0 + 3),
        ("c2", 1, T0 + 2),
    ]
    assert view.more_chats and view.known
    assert await store.console_conversation(view.chats[0].id) == ConversationKey("telegram", "c1")
    everything = await store.console_person(UserKey("telegram", "u-Ana"), [], chats=4)
    assert len(everything.chats) == 4 and not everything.more_chats
    stranger = await store.console_person(UserKey("telegram", "u-Anna"), [])
    assert (stranger.known, stranger.chats, stranger.messages) == (False, (), 0)
    # A memory record alone (what /forget leaves) makes them known.
    await store.set_user_memory(UserKey("telegram", "u-Cy"), "{}", T0)
    assert (await store.console_person(UserKey("telegram", "u-Cy"), [])).known
    # So does a charge against their limits (their messages deleted by retention since).
    chat = ConversationKey("telegram", "c9")
    await store.record_usage(chat, "reply", "m", [("u-Di", Usage(10, 1))], T0)
    assert (await store.console_person(UserKey("telegram", "u-Di"), [])).known
