"""Edits and deletions are authorised by the stored message's author and chat (issue 12.7)."""

from __future__ import annotations

from bot.core.clock import ManualClock
from bot.core.events import ConversationKey, Inbound
from bot.runtime.access import AccessPolicy
from bot.store.base import BaseStore
from tests.fakes.llm import GatedLLM
from tests.harness import harness

GROUP = ConversationKey("discord", "500")


def _change(kind: str, message_id: str, *, author: str = "", text: str = "") -> Inbound:
    return Inbound(
        conversation=GROUP,
        author_id=author,
        display_name="",
        text=text,
        platform_message_id=message_id,
        is_private=False,
        kind=kind,  # type: ignore[arg-type]
    )


async def _texts(store: BaseStore) -> list[str]:
    session = await store.current_session(GROUP)
    assert session is not None
    return [m.text for m in await store.messages(session.key)]


async def test_a_deletion_without_an_author_removes_a_permitted_persons_message(
    store: BaseStore, clock: ManualClock
) -> None:
    """Discord delete events carry no author: with allow_users set they used to be refused."""
    policy = AccessPolicy(allow_users=frozenset({"7"}))
    async with harness(store, clock, GatedLLM(), access=policy, debounce=60) as h:
        await h.say(GROUP, "my secret plan", author="7", message_id="d1")
        await h.say(GROUP, "keep this", author="7", message_id="d2")
        await h.router(_change("delete", "d1"))
        assert await _texts(store) == ["keep this"]


async def test_nobody_edits_or_deletes_a_message_somebody_else_wrote(
    store: BaseStore, clock: ManualClock
) -> None:
    policy = AccessPolicy(allow_users=frozenset({"7", "8"}))
    async with harness(store, clock, GatedLLM(), access=policy, debounce=60) as h:
        await h.say(GROUP, "the meeting is at 3", author="7", message_id="e1")
        await h.router(_change("edit", "e1", author="666", text="the meeting is cancelled"))
        await h.router(_change("delete", "e1", author="666"))
        assert await _texts(store) == ["the meeting is at 3"]
        # A permitted person is not anyone else's editor either.
        await h.router(_change("edit", "e1", author="8", text="changed by someone else"))
        await h.router(_change("delete", "e1", author="8"))
        assert await _texts(store) == ["the meeting is at 3"]
        await h.router(_change("edit", "e1", author="7", text="the meeting is at 4"))
        assert await _texts(store) == ["the meeting is at 4"]


async def test_a_deletion_by_an_author_no_longer_allowed_still_applies(
    store: BaseStore, clock: ManualClock
) -> None:
    """Deleting removes only that person's own words: it is honoured after the allow list
    was tightened, so the message no longer feeds prompts."""
    async with harness(store, clock, GatedLLM(), debounce=60) as h:
        await h.say(GROUP, "first words", author="9", message_id="f1")
        await h.say(GROUP, "second words", author="9", message_id="f2")
    tightened = AccessPolicy(allow_users=frozenset({"7"}))
    async with harness(store, clock, GatedLLM(), access=tightened, debounce=60) as h:
        await h.router(_change("delete", "f2", author="9"))
        assert await _texts(store) == ["first words"]


async def test_an_edit_by_an_author_no_longer_allowed_asks_for_no_reply(
    store: BaseStore, clock: ManualClock
) -> None:
    """Issue 15 made an edit that mentions the bot arm a turn for a context-only message: from
    outside the allow list it still changes the text, and still gets no answer."""
    llm = GatedLLM()
    async with harness(store, clock, llm, debounce=1) as h:
        await h.router(
            Inbound(GROUP, "9", "", "nice view", "c1", is_private=False, triggers_reply=False)
        )
    tightened = AccessPolicy(allow_users=frozenset({"7"}))
    async with harness(store, clock, llm, access=tightened, debounce=1) as h:
        edit = _change("edit", "c1", author="9", text="@Mira nice view?")
        await h.router(edit)
        await h.advance(5)
        assert await _texts(store) == ["@Mira nice view?"]
        assert llm.calls == 0 and await store.timer(GROUP) is None
