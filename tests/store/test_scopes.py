"""docs/architecture.md#keys: keys, sessions and scopes; the 16-step acceptance log at the store
API."""

from __future__ import annotations

from bot.core.events import NOT_SET, ConversationKey, SessionKey, SessionPolicy, UserKey
from bot.store.base import BaseStore
from tests.backends import StoreFactory
from tests.store.helpers import close_session, delete_user_memory

C1 = ConversationKey("telegram", "1001")
C2 = ConversationKey("telegram", "2002")
T0 = 1_700_000_000.0


async def test_sixteen_step_log(store: BaseStore) -> None:
    """The acceptance log of docs/architecture.md#keys, step by step; 'Sasha' is never a key."""
    s = await store.open_session(C1, T0)  # 1: C1/S1 (display name "Sasha" is not a key)
    c1s1 = s.key
    assert c1s1 == SessionKey(C1, 1)
    await store.set_state(c1s1, "choice", "blue mug", T0)  # 2
    c2s1 = (await store.open_session(C2, T0)).key  # 3: C2/S1, also "Sasha"
    assert c2s1 == SessionKey(C2, 1)
    await store.set_state(c2s1, "choice", "green mug", T0)  # 4
    assert await store.get_state(c1s1, "choice") == "blue mug"  # 5
    assert await store.get_state(c2s1, "choice") == "green mug"  # 6
    await store.set_state(c1s1, "choice", "white mug", T0)  # 7
    assert await store.get_state(c2s1, "choice") == "green mug"  # 8
    assert await store.get_state(c1s1, "choice") == "white mug"  # 9
    closed = await close_session(store, C1, T0 + 1, "end")  # 10
    assert closed is not None and closed.status == "closed"
    c1s2 = (await store.open_session(C1, T0 + 2)).key  # 11
    assert c1s2 == SessionKey(C1, 2)
    assert await store.get_state(c1s2, "choice") is NOT_SET  # 12
    assert await store.get_state(c2s1, "choice") == "green mug"  # 13
    await store.set_state(c1s2, "choice", "red mug", T0 + 3)  # 14
    assert await store.get_state(c1s2, "choice") == "red mug"  # 15
    assert await store.get_state(c2s1, "choice") == "green mug"  # 16
    # Closing keeps the old session's data: it is closed, not deleted.
    assert await store.get_state(c1s1, "choice") == "white mug"


async def test_not_set_differs_from_empty(store: BaseStore) -> None:
    """An empty string is a value; a missing key is NOT_SET."""
    key = (await store.open_session(C1, T0)).key
    await store.set_state(key, "note", "", T0)
    assert await store.get_state(key, "note") == ""
    assert await store.get_state(key, "other") is NOT_SET
    assert await store.delete_state(key, "note") == 1
    assert await store.get_state(key, "note") is NOT_SET


async def test_threads_and_bots_are_separate_conversations(store: BaseStore) -> None:
    """A forum topic, the chat itself and another bot in the same chat never share state."""
    keys = [
        ConversationKey("telegram", "1001"),
        ConversationKey("telegram", "1001", "7"),
        ConversationKey("telegram", "1001", None, "other-bot"),
        ConversationKey("discord", "1001"),
    ]
    for i, key in enumerate(keys):
        session = (await store.open_session(key, T0)).key
        await store.set_state(session, "choice", f"mug {i}", T0)
    for i, key in enumerate(keys):
        assert await store.get_state(SessionKey(key, 1), "choice") == f"mug {i}"


async def test_new_session_numbers_are_per_conversation(store: BaseStore) -> None:
    """/new closes the open session and opens the next number; other conversations keep S1."""
    await store.open_session(C1, T0)
    await store.open_session(C2, T0)
    s2 = await store.new_session(C1, T0 + 5, "new")
    assert s2.key.session_id == 2
    sessions = await store.list_sessions(C1)
    assert [(s.key.session_id, s.status, s.close_reason) for s in sessions] == [
        (1, "closed", "new"),
        (2, "open", None),
    ]
    current = await store.current_session(C2)
    assert current is not None and current.key.session_id == 1


async def test_idle_timeout_and_daily_reset_open_a_new_session(store: BaseStore) -> None:
    """An expired session is closed with its reason and the next message gets a new one."""
    policy = SessionPolicy(idle_seconds=600)
    first = await store.open_session(C1, T0, policy)
    same = await store.open_session(C1, T0 + 599, policy)
    assert same.key == first.key
    later = await store.open_session(C1, T0 + 599 + 600, policy)
    assert later.key.session_id == 2
    old = await store.get_session(first.key)
    assert old is not None and old.close_reason == "idle"

    daily = SessionPolicy(daily_reset_hour=4)
    day = 86400.0 * 20000  # midnight UTC of some day
    s = await store.open_session(C2, day + 3 * 3600, daily)  # 03:00
    assert (await store.open_session(C2, day + 3.9 * 3600, daily)).key == s.key
    after = await store.open_session(C2, day + 4.1 * 3600, daily)  # 04:06: past the reset
    assert after.key.session_id == s.key.session_id + 1


async def test_user_memory_is_per_platform_user(store: BaseStore) -> None:
    """User scope is keyed by (platform, user_id); a read of nothing is NOT_SET."""
    alice = UserKey("telegram", "42")
    same_id_elsewhere = UserKey("discord", "42")
    assert await store.get_user_memory(alice) is NOT_SET
    await store.set_user_memory(alice, '{"name": "Alice"}', T0)
    assert await store.get_user_memory(alice) == '{"name": "Alice"}'
    assert await store.get_user_memory(same_id_elsewhere) is NOT_SET
    assert await delete_user_memory(store, alice) is True
    assert await store.get_user_memory(alice) is NOT_SET


async def test_schema_is_migrated_once(stores: StoreFactory) -> None:
    """Migrations run at open and are idempotent on reopen: data survives, version unchanged."""
    from bot.store.migrations.sqlite import MIGRATIONS

    async with stores.new() as first:
        session = (await first.open_session(C1, T0)).key
        await first.set_state(session, "choice", "blue mug", T0)
        version = await first.schema_version()
    assert version == MIGRATIONS[-1][0]
    async with stores.new() as again:
        assert await again.schema_version() == version
        assert await again.get_state(session, "choice") == "blue mug"


async def test_edits_and_deletions(store: BaseStore) -> None:
    """An unanswered message can be edited (bumping the version); an answered one cannot."""
    from bot.core.events import Inbound, QueuePolicy

    policy = QueuePolicy()
    await store.ingest(Inbound(C1, "u1", "Sasha", "helo", "p1"), T0, policy)
    assert await store.edit_message(C1, "p1", "hello", T0 + 1, policy) == "updated"
    assert await store.conversation_version(C1) == 2
    turn = await store.pending_turn(C1)
    assert turn is not None and [m.text for m in turn.messages] == ["hello"]
    lease = await store.acquire_lease("t", "w", 30, T0 + 2)
    assert lease is not None
    assert (await store.finish_turn(turn, lease, "hi!", T0 + 2, policy)).outcome == "recorded"
    assert await store.edit_message(C1, "p1", "changed my mind", T0 + 3, policy) == "too_late"
    assert await store.edit_message(C1, "nope", "x", T0 + 3, policy) == "unknown"
    removed = await store.delete_message(C1, "p1")
    assert removed is not None and removed.text == "hello" and removed.author_id == "u1"
    assert await store.delete_message(C1, "p1") is None
    session = await store.current_session(C1)
    assert session is not None
    assert [m.role for m in await store.messages(session.key)] == ["assistant"]


async def test_inactive_conversation_reactivates_on_new_input(store: BaseStore) -> None:
    from bot.core.events import Inbound, QueuePolicy

    await store.open_session(C1, T0)
    await store.set_conversation_status(C1, False, "blocked by the user")
    assert await store.conversation_active(C1) is False
    await store.ingest(Inbound(C1, "u1", "Sasha", "I'm back", "p9"), T0, QueuePolicy())
    assert await store.conversation_active(C1) is True


async def test_a_chat_keeps_its_persona_across_sessions_until_it_switches(store: BaseStore) -> None:
    """docs/personas.md#several-personas: a session records its persona; every session opened
    after it (expiry, /new, a closed chat's next message) inherits it; /persona opens one with
    another; pending turns and the check-in state say whose they are."""
    from bot.core.events import Inbound, QueuePolicy

    first = await store.open_session(C1, T0)
    assert first.persona is None  # the bot's default persona
    orin = await store.new_session(C1, T0 + 1, "persona", persona="orin")
    assert (orin.key.session_id, orin.persona) == (2, "orin")
    kept = await store.new_session(C1, T0 + 2, "new")
    assert (kept.key.session_id, kept.persona) == (3, "orin")
    await close_session(store, C1, T0 + 3)
    reopened = await store.open_session(C1, T0 + 4)
    assert (reopened.key.session_id, reopened.persona) == (4, "orin")
    idle = SessionPolicy(idle_seconds=10)
    expired = await store.open_session(C1, T0 + 100, idle)
    assert (expired.key.session_id, expired.persona) == (5, "orin")
    back = await store.new_session(C1, T0 + 101, "persona", persona="mira")
    assert back.persona == "mira"
    assert [s.persona for s in await store.list_sessions(C1)] == [
        None,
        "orin",
        "orin",
        "orin",
        "orin",
        "mira",
    ]
    # Another chat of the same bot keeps the default.
    assert (await store.open_session(C2, T0)).persona is None
    # A pending turn carries its session's persona (a switch after it does not change it).
    await store.ingest(Inbound(C1, "u1", "Sasha", "hello", "m1"), T0 + 102, QueuePolicy(0, 5))
    await store.new_session(C1, T0 + 103, "persona", persona="orin")
    turn = await store.pending_turn(C1)
    assert turn is not None and turn.session.session_id == 6 and turn.persona == "mira"
    state = await store.initiative_state(C1)
    assert state is not None and state.persona == "orin"
