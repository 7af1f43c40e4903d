"""docs/scenes.md: a scene's lines in the store, on both backends. The first line of a turn
answers it (``finish_turn``), each later one passes its own final check (``finish_line``):
never recorded once newer human input is pending, whatever the hard cap, and never by a worker
whose lease was taken over. Each line keeps its speaker; the text sent carries the header."""

from __future__ import annotations

from bot.core.events import ConversationKey, Inbound, QueuePolicy, SceneLine
from bot.core.queue_rules import turn_lease
from bot.store.base import BaseStore

C = ConversationKey("telegram", "-100", None, "tavern")
T0 = 1_700_000_000.0
QUEUE = QueuePolicy(debounce=1.0, max_wait=8.0)


def said(text: str, mid: str) -> Inbound:
    return Inbound(C, "42", "Sasha", text, platform_message_id=mid, is_private=False)


async def test_lines_keep_their_speaker_and_go_out_in_its_voice(store: BaseStore) -> None:
    """The transcript keeps each line alone, under its persona; its outbox row names the
    persona too, also when read back after a crash (Delivery then sends it in that voice)."""
    await store.ingest(said("hi all", "1"), T0, QUEUE)
    turn = await store.pending_turn(C)
    assert turn is not None
    lease = await store.acquire_lease(turn_lease(C), "w", 30, T0 + 2)
    assert lease is not None
    first = await store.finish_turn(turn, lease, "hello!", T0 + 3, QUEUE, line=SceneLine("alice"))
    assert first.outcome == "recorded" and first.outbox is not None
    assert (first.outbox.text, first.outbox.persona) == ("hello!", "alice")
    second = await store.finish_line(turn, lease, "hey", T0 + 4, SceneLine("bob"))
    assert second.outcome == "recorded" and second.outbox is not None
    assert (second.outbox.text, second.outbox.persona) == ("hey", "bob")
    unsent = await store.unsent_outbox(T0 + 10)
    assert [(o.text, o.persona) for o in unsent] == [("hello!", "alice"), ("hey", "bob")]
    history = await store.history(turn.session, 10)
    assert [(m.role, m.persona, m.text) for m in history] == [
        ("user", None, "hi all"),
        ("assistant", "alice", "hello!"),
        ("assistant", "bob", "hey"),
    ]
    assert history[0].answered  # answered by the first line; the second answers nothing
    assert await store.pending_turn(C) is None
    assert await store.scene_lines_since(C, T0) == 2
    assert await store.scene_lines_since(C, T0 + 3.5) == 1
    other = ConversationKey("telegram", "-100", None, "other-bot")
    assert await store.scene_lines_since(other, T0) == 0


async def test_newer_input_discards_the_next_line_even_past_the_hard_cap(
    store: BaseStore,
) -> None:
    """A person who wrote between two speakers is answered by a new turn; the second speaker's
    line (written before it) is never recorded, not even after max_wait, when a reply would be."""
    await store.ingest(said("hi all", "1"), T0, QUEUE)
    turn = await store.pending_turn(C)
    assert turn is not None
    lease = await store.acquire_lease(turn_lease(C), "w", 60, T0 + 2)
    assert lease is not None
    await store.finish_turn(turn, lease, "hello!", T0 + 3, QUEUE, line=SceneLine("alice"))
    await store.ingest(said("wait, one more thing", "2"), T0 + 4, QUEUE)
    late = T0 + 30  # past first_pending_at + max_wait
    result = await store.finish_line(turn, lease, "hey", late, SceneLine("bob"))
    assert result.outcome == "discarded" and result.outbox is None
    history = await store.history(turn.session, 10)
    assert [m.persona for m in history if m.role == "assistant"] == ["alice"]
    newer = await store.pending_turn(C)
    assert newer is not None and [m.text for m in newer.messages] == ["wait, one more thing"]
    assert await store.timer(C) is not None  # the newer input's turn stands


async def test_a_line_after_the_lease_was_taken_over_is_fenced(store: BaseStore) -> None:
    await store.ingest(said("hi all", "1"), T0, QUEUE)
    turn = await store.pending_turn(C)
    assert turn is not None
    lease = await store.acquire_lease(turn_lease(C), "w", 10, T0 + 2)
    assert lease is not None
    await store.finish_turn(turn, lease, "hello!", T0 + 3, QUEUE, line=SceneLine("alice"))
    taken = await store.acquire_lease(turn_lease(C), "other", 10, T0 + 13)
    assert taken is not None
    result = await store.finish_line(turn, lease, "hey", T0 + 14, SceneLine("bob"))
    assert result.outcome == "fenced"
    assert await store.scene_lines_since(C, T0) == 1
