"""Edits that change whether a message addresses the bot (issue 15): a group message kept as
context only that is edited to mention the bot becomes pending and arms the timer exactly
like a new message that mentions it; an answered message never triggers again."""

from __future__ import annotations

from bot.core.events import (
    ConversationKey,
    Inbound,
    QueuePolicy,
    SessionPolicy,
)
from bot.core.media import MediaRef
from bot.store.base import BaseStore

GROUP = ConversationKey("telegram", "-100")
POLICY = QueuePolicy(debounce=1.5, max_wait=8.0)
T0 = 1_700_000_000.0
PHOTO = MediaRef("image", "photo", ref="AgAC", unique_id="AQAD")


async def _say(
    store: BaseStore, text: str, message_id: str, now: float, *, triggers: bool = False
) -> None:
    inbound = Inbound(
        GROUP,
        "11",
        "Ada",
        text,
        message_id,
        is_private=False,
        triggers_reply=triggers,
        media=(PHOTO,),
    )
    assert (await store.ingest(inbound, now, POLICY)).stored


async def test_a_context_message_edited_to_mention_the_bot_is_answered_like_new_input(
    store: BaseStore,
) -> None:
    await _say(store, "what a view", "g1", T0)
    assert await store.timer(GROUP) is None and await store.pending_turn(GROUP) is None
    outcome = await store.edit_message(
        GROUP, "g1", "@Mira what a view, right?", T0 + 5, POLICY, triggers_reply=True
    )
    assert outcome == "updated"
    assert await store.conversation_version(GROUP) == 2
    timer = await store.timer(GROUP)
    assert timer is not None
    assert (timer.due_at, timer.first_pending_at, timer.armed_version) == (T0 + 6.5, T0 + 5, 2)
    turn = await store.pending_turn(GROUP)
    assert turn is not None and turn.version == 2
    [message] = turn.messages
    assert (message.text, message.addressed, message.version) == (
        "@Mira what a view, right?",
        True,
        2,
    )
    assert [m.ref for m in message.media] == [PHOTO]  # the photo stays with it
    history = await store.history(turn.session, 10)
    assert history == []  # pending input is the turn, not history


async def test_the_hard_cap_of_input_already_pending_holds_for_the_edit(store: BaseStore) -> None:
    await _say(store, "@Mira hi", "g1", T0, triggers=True)
    await _say(store, "lovely weather", "g2", T0 + 1)
    await store.edit_message(GROUP, "g2", "@Mira lovely, eh?", T0 + 7, POLICY, triggers_reply=True)
    timer = await store.timer(GROUP)
    assert timer is not None and timer.due_at == T0 + 8.0  # min(now + debounce, first + cap)
    turn = await store.pending_turn(GROUP)
    assert turn is not None and [m.text for m in turn.messages] == ["@Mira hi", "@Mira lovely, eh?"]


async def test_an_edit_that_does_not_address_the_bot_only_changes_the_text(
    store: BaseStore,
) -> None:
    await _say(store, "what a veiw", "g1", T0)
    assert await store.edit_message(GROUP, "g1", "what a view", T0 + 5, POLICY) == "updated"
    assert await store.timer(GROUP) is None and await store.pending_turn(GROUP) is None
    assert await store.conversation_version(GROUP) == 1
    session = await store.current_session(GROUP)
    assert session is not None
    [message] = await store.messages(session.key)
    assert (message.text, message.addressed) == ("what a view", False)


async def test_an_answered_message_never_triggers_again(store: BaseStore) -> None:
    await _say(store, "@Mira hi", "g1", T0, triggers=True)
    turn = await store.pending_turn(GROUP)
    assert turn is not None
    lease = await store.acquire_lease("turn", "w", 30, T0 + 2)
    assert lease is not None
    assert (await store.finish_turn(turn, lease, "hello!", T0 + 2, POLICY)).outcome == "recorded"
    version = await store.conversation_version(GROUP)
    outcome = await store.edit_message(
        GROUP, "g1", "@Mira hi again", T0 + 3, POLICY, triggers_reply=True
    )
    assert outcome == "too_late"
    assert await store.timer(GROUP) is None and await store.pending_turn(GROUP) is None
    assert await store.conversation_version(GROUP) == version


async def test_a_message_of_a_session_that_ended_does_not_trigger(store: BaseStore) -> None:
    """Closed by /new, or idle past the session policy: the edit changes the text only (the
    reply would land in a conversation that has moved on)."""
    await _say(store, "old chatter", "g1", T0)
    await store.new_session(GROUP, T0 + 1)
    await store.edit_message(GROUP, "g1", "@Mira old", T0 + 2, POLICY, triggers_reply=True)
    assert await store.timer(GROUP) is None and await store.pending_turn(GROUP) is None

    idle = SessionPolicy(idle_seconds=600)
    await _say(store, "fresh chatter", "g2", T0 + 3)
    await store.edit_message(
        GROUP, "g2", "@Mira still here", T0 + 3 + 599, POLICY, triggers_reply=True, sessions=idle
    )
    await _say(store, "idle chatter", "g3", T0 + 3 + 599)
    await store.edit_message(
        GROUP, "g3", "@Mira idle", T0 + 3 + 599 + 601, POLICY, triggers_reply=True, sessions=idle
    )
    turn = await store.pending_turn(GROUP)
    assert turn is not None and [m.text for m in turn.messages] == ["@Mira still here"]
    assert [(m.text, m.addressed) for m in await store.messages(turn.session)] == [
        ("@Mira still here", True),
        ("@Mira idle", False),
    ]


async def test_a_message_closed_out_without_a_reply_does_not_trigger(store: BaseStore) -> None:
    """A message a limit held back was handled: editing it is no way around the limit."""
    await _say(store, "@Mira hi", "g1", T0, triggers=True)
    turn = await store.pending_turn(GROUP)
    assert turn is not None
    lease = await store.acquire_lease("turn", "w", 30, T0 + 2)
    assert lease is not None
    assert await store.skip_turn(turn, lease, T0 + 2, POLICY, "limited")
    await store.edit_message(GROUP, "g1", "@Mira hi?", T0 + 3, POLICY, triggers_reply=True)
    assert await store.timer(GROUP) is None and await store.pending_turn(GROUP) is None
