"""Memory people can trust (issue 12): /forget sticks against running extractions, facts stay
where they were said, bystanders get no profile, erasure and export cover every chat."""

from __future__ import annotations

import asyncio
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from bot.core.clock import ManualClock
from bot.core.events import ConversationKey, Inbound, SessionKey, UserKey
from bot.core.llm import ModelRequest
from bot.llm.offline import OfflineLLM
from bot.store.base import BaseStore
from memory.assemble import Budget
from memory.records import MemoryItem, UserMemory
from memory.service import MemoryPolicy
from tests.fakes.llm import GatedLLM
from tests.harness import Harness, harness, settle
from tests.store.helpers import close_session

DM = ConversationKey("telegram", "11")
GROUP_A = ConversationKey("telegram", "-100")
GROUP_B = ConversationKey("telegram", "-200")
ADA = UserKey("telegram", "11")
BO = UserKey("telegram", "22")
_ids = iter(range(10_000, 1_000_000))


def system_text(request: ModelRequest) -> str:
    return "\n".join(b.text for b in request.system)


async def say(
    h: Harness,
    conv: ConversationKey,
    text: str,
    *,
    author: str = "11",
    name: str = "Ada",
    addressed: bool = True,
) -> str:
    """A message as an adapter delivers it: private in a DM, a group message otherwise
    (``addressed=False``: stored as context only, as a group message without a mention)."""
    mid = f"p{next(_ids)}"
    await h.router(
        Inbound(
            conversation=conv,
            author_id=author,
            display_name=name,
            text=text,
            platform_message_id=mid,
            is_private=conv is DM,
            triggers_reply=addressed,
            mentions_bot=addressed and conv is not DM,
        )
    )
    await settle(h.store)
    return mid


async def turn(h: Harness, conv: ConversationKey, text: str, **kw: object) -> None:
    await say(h, conv, text, **kw)  # type: ignore[arg-type]
    await h.advance(2, step=1.0)


async def learn(h: Harness, conv: ConversationKey, text: str) -> None:
    """A turn in ``conv``, then its session closed and memory learned from it."""
    await turn(h, conv, text)
    await close_session(h.store, conv, h.clock.now(), "test")
    await h.memory.extract_due()


async def until_called(llm: GatedLLM) -> None:
    """Wait until the gated model received its first call."""
    await asyncio.wait_for(llm.started.wait(), 5)


async def release_until_done(llm: GatedLLM, task: asyncio.Task[object]) -> None:
    """Open every gate (also of calls made after a lost compare-and-swap) until ``task`` ends."""
    async with asyncio.timeout(5):
        while not task.done():
            llm.release()
            await asyncio.sleep(0.005)
    await task


# -- item 1: /forget during an extraction ------------------------------------------------------


async def test_forget_during_the_extraction_model_call_is_not_undone(
    store: BaseStore, clock: ManualClock
) -> None:
    extractor = GatedLLM(gated=True, delegate=OfflineLLM())
    async with harness(store, clock, GatedLLM(), memory_llm=extractor) as h:
        await turn(h, DM, "my name is Ada")
        await turn(h, DM, "I work as a nurse")
        await say(h, DM, "/new")  # the sweep starts extracting the closed session
        await until_called(extractor)
        await say(h, DM, "/forget confirm")
        assert h.outlet.texts(DM)[-1].startswith("Done: I erased")
        extractor.release()
        await h.memory.wait_idle()
        record = await h.memory.user_memory(ADA)
        assert record.items == ()
        assert record.forgotten_at is not None  # the "never learn again" mark survived
        await turn(h, DM, "do you know me?")
        assert "nurse" not in system_text(h.llm.requests[-1])  # type: ignore[attr-defined]


async def test_an_extraction_that_loses_to_forget_learns_only_what_came_after(
    store: BaseStore, clock: ManualClock
) -> None:
    extractor = GatedLLM(gated=True, delegate=OfflineLLM())
    async with harness(store, clock, GatedLLM(), memory_llm=extractor) as h:
        await turn(h, DM, "my name is Ada")
        session = await store.current_session(DM)
        assert session is not None
        running = asyncio.create_task(h.memory.extract(session.key, 0))
        await until_called(extractor)
        await say(h, DM, "/forget confirm")
        await clock.advance(1)
        await turn(h, DM, "I live in Oslo")
        await release_until_done(extractor, running)  # type: ignore[arg-type]
        record = await h.memory.user_memory(ADA)
        assert [(i.field, i.value) for i in record.items] == [("location", "Oslo")]
        assert extractor.calls == 2  # re-asked about the allowed messages only
        assert "my name is Ada" not in extractor.last_input()


async def test_a_message_deleted_during_extraction_is_not_learned(
    store: BaseStore, clock: ManualClock
) -> None:
    extractor = GatedLLM(gated=True, delegate=OfflineLLM())
    async with harness(store, clock, GatedLLM(), memory_llm=extractor) as h:
        await turn(h, DM, "my name is Ada")
        job = await say(h, DM, "I work as a nurse")
        await h.advance(2, step=1.0)
        session = await store.current_session(DM)
        assert session is not None
        running = asyncio.create_task(h.memory.extract(session.key, 0))
        await until_called(extractor)
        await h.router(Inbound(DM, "11", "Ada", "", job, kind="delete"))
        await settle(store)
        await release_until_done(extractor, running)  # type: ignore[arg-type]
        record = await h.memory.user_memory(ADA)
        assert [(i.field, i.value) for i in record.items] == [("name", "Ada")]


async def test_record_writes_are_compare_and_swap(store: BaseStore) -> None:
    assert await store.read_user_memory(ADA) == (None, 0)
    assert await store.set_user_memory(ADA, "a", 1.0, expected_version=0)
    assert not await store.set_user_memory(ADA, "b", 2.0, expected_version=0)
    assert await store.read_user_memory(ADA) == ("a", 1)
    assert await store.set_user_memory(ADA, "tombstone", 3.0)  # unconditional, bumps
    assert not await store.set_user_memory(ADA, "stale", 4.0, expected_version=1)
    assert await store.read_user_memory(ADA) == ("tombstone", 2)


# -- item 4: scope and bystanders --------------------------------------------------------------


async def test_a_fact_said_in_one_group_stays_in_that_group(
    store: BaseStore, clock: ManualClock
) -> None:
    llm = GatedLLM()
    async with harness(store, clock, llm, memory_llm=OfflineLLM()) as h:
        await learn(h, GROUP_A, "I work as a nurse")
        assert [i.scope for i in (await h.memory.user_memory(ADA)).items] == ["-100"]
        await turn(h, GROUP_B, "hello everyone")
        assert "nurse" not in system_text(llm.requests[-1])
        await turn(h, DM, "hello in private")
        assert "nurse" not in system_text(llm.requests[-1])
        await turn(h, GROUP_A, "hello again")
        assert "nurse" in system_text(llm.requests[-1])


async def test_share_across_groups_opts_in(store: BaseStore, clock: ManualClock) -> None:
    llm = GatedLLM()
    policy = MemoryPolicy(budget=Budget(), summary_model="m", share_across_groups=True)
    async with harness(store, clock, llm, memory_llm=OfflineLLM(), memory_policy=policy) as h:
        await learn(h, GROUP_A, "I work as a nurse")
        await turn(h, GROUP_B, "hello everyone")
        assert "nurse" in system_text(llm.requests[-1])


async def test_a_bystander_who_never_addressed_the_bot_gets_no_profile(
    store: BaseStore, clock: ManualClock
) -> None:
    async with harness(store, clock, GatedLLM(), memory_llm=OfflineLLM()) as h:
        await say(h, GROUP_A, "my name is Bo", author="22", name="Bo", addressed=False)
        await say(h, GROUP_A, "I'm afraid of spiders", author="22", name="Bo", addressed=False)
        await say(h, GROUP_A, "I live in Oslo", author="11", addressed=False)
        await learn(h, GROUP_A, "my name is Ada")  # Ada addresses the bot
        assert (await h.memory.user_memory(BO)).items == ()
        ada = await h.memory.user_memory(ADA)
        assert [(i.field, i.value) for i in ada.items] == [("name", "Ada")]  # not Oslo


async def test_a_groups_anonymous_admins_and_channels_get_no_profile(
    store: BaseStore, clock: ManualClock
) -> None:
    # The Telegram adapter's collective authors (adapters/telegram/inbound.py): every
    # anonymous admin of a group is one author, so nothing said as one may be learned.
    async with harness(store, clock, GatedLLM(), memory_llm=OfflineLLM()) as h:
        await say(h, GROUP_A, "my name is Bo", author="anon:-100", name="Anonymous admin")
        await say(h, GROUP_A, "I live in Oslo", author="channel:-1009", name="Friends News")
        await learn(h, GROUP_A, "my name is Ada")  # a person addressing the bot
        for collective in ("anon:-100", "channel:-1009"):
            assert (await h.memory.user_memory(UserKey("telegram", collective))).items == ()
        ada = await h.memory.user_memory(ADA)
        assert [(i.field, i.value) for i in ada.items] == [("name", "Ada")]


def test_items_stored_before_scopes_existed_are_private() -> None:
    old = json.dumps(
        {
            "forgotten_at": None,
            "items": [{"section": "semantic", "field": "pet", "value": "cat", "private": False}],
        }
    )
    record = UserMemory.from_json(old)
    assert record.visible(chat="-100").items == ()
    assert [i.value for i in record.visible(chat=None).items] == ["cat"]


# -- item 5: erasure and export ----------------------------------------------------------------


async def _ada_and_bo(h: Harness) -> None:
    """Ada talks privately and in a group with Bo; the group's history is summarised."""
    await turn(h, DM, "my secret is marmalade")
    await turn(h, GROUP_A, "my secret is porridge")
    await turn(h, GROUP_A, "I like trains", author="22", name="Bo")
    await say(h, GROUP_A, "porridge for everyone")
    await say(h, GROUP_A, "and trains for all", author="22", name="Bo")  # one shared reply
    await h.advance(2, step=1.0)
    for i in range(4):
        await turn(h, GROUP_A, f"Bo line {i}", author="22", name="Bo")
    await h.memory.wait_idle()


def _everything(data: object) -> str:
    return json.dumps(data, ensure_ascii=False)


async def test_forget_with_deletion_removes_every_copy_and_says_what_is_kept(
    store: BaseStore, clock: ManualClock
) -> None:
    policy = MemoryPolicy(budget=Budget(window_messages=2), summary_model="m")
    async with harness(
        store,
        clock,
        GatedLLM(),
        memory_llm=OfflineLLM(),
        memory_policy=policy,
        forget_deletes_messages=True,
    ) as h:
        await _ada_and_bo(h)
        group = await store.current_session(GROUP_A)
        assert group is not None
        summary = await store.get_summary(group.key)
        assert summary is not None and "porridge" in summary.body  # quoted verbatim
        before = await store.user_data(ADA)
        assert len(before.messages) == 3 and len(before.replies) == 3
        await say(h, DM, "/forget confirm")
        answer = h.outlet.texts(DM)[-1]
        assert "deleted 3 of your messages, 2 replies of mine that answered only you" in answer
        assert "1 conversation summary" in answer
        assert "Kept: 1 reply of mine that also answered other people" in answer
        after = await store.user_data(ADA)
        assert after.messages == () and after.summaries == ()
        assert [r.text for r in after.replies] == []  # the shared reply's sources are gone
        stored = [
            m.text
            for conv in (DM, GROUP_A)
            for info in await store.list_sessions(conv)
            for m in await store.messages(info.key)
        ]
        assert not any("marmalade" in t or "secret" in t for t in stored)
        assert "I like trains" in stored  # Bo's messages stay
        assert await store.get_summary(group.key) is None
        # The next compaction rebuilds the summary from what is left.
        await turn(h, GROUP_A, "Bo again", author="22", name="Bo")
        await h.memory.wait_idle()
        rebuilt = await store.get_summary(group.key)
        assert rebuilt is not None and "porridge" not in rebuilt.body
        assert "trains" in rebuilt.body


async def test_forget_without_deletion_says_messages_are_kept(
    store: BaseStore, clock: ManualClock
) -> None:
    async with harness(store, clock, GatedLLM(), memory_llm=OfflineLLM()) as h:
        await turn(h, DM, "my name is Ada")
        await say(h, DM, "/forget confirm")
        answer = h.outlet.texts(DM)[-1]
        assert "Kept: your messages in our chats" in answer
        assert (await store.user_data(ADA)).messages != ()


async def test_a_summary_folding_forgotten_messages_is_not_saved(
    store: BaseStore, clock: ManualClock
) -> None:
    summarizer = GatedLLM(gated=True, delegate=OfflineLLM())
    policy = MemoryPolicy(budget=Budget(window_messages=2), summary_model="m")
    async with harness(
        store,
        clock,
        GatedLLM(),
        memory_llm=summarizer,
        memory_policy=policy,
        forget_deletes_messages=True,
    ) as h:
        for i in range(3):
            await turn(h, GROUP_A, f"secret number {i}")
        await until_called(summarizer)  # the window overflowed: compaction is running
        await say(h, DM, "/forget confirm")
        summarizer.release()
        await h.memory.wait_idle()
        session = await store.current_session(GROUP_A)
        assert session is not None
        summary = await store.get_summary(session.key)
        assert summary is None or "secret" not in summary.body


async def test_export_all_covers_every_chat_and_kind_of_row(
    store: BaseStore, clock: ManualClock
) -> None:
    policy = MemoryPolicy(budget=Budget(window_messages=2), summary_model="m")
    async with harness(
        store, clock, GatedLLM(), memory_llm=OfflineLLM(), memory_policy=policy
    ) as h:
        await _ada_and_bo(h)
        await turn(h, DM, "I work as a nurse")
        await store.reserve_turn(ADA, "default", clock.now())
        for conv in (DM, GROUP_A):
            await close_session(store, conv, clock.now(), "test")
        await h.memory.extract_due()
        doc = await h.memory.export_all(ADA)
    json.dumps(doc)  # JSON-able
    assert doc["user"] == {"platform": "telegram", "id": "11"}
    assert [m["text"] for m in doc["messages"]] == [
        "my secret is marmalade",
        "my secret is porridge",
        "porridge for everyone",
        "I work as a nurse",
    ]
    assert {m["chat_id"] for m in doc["messages"]} == {"11", "-100"}
    assert len(doc["replies_to_you"]) == 4
    assert len(doc["outbox"]) == 4
    assert [s["chat_id"] for s in doc["summaries"]] == ["-100"]
    assert "porridge" in _everything(doc["summaries"])
    assert [u["bot"] for u in doc["usage"]] == ["default"]
    assert {c["purpose"] for c in doc["model_usage"]} >= {"reply"}  # charged to Ada
    assert [i["value"] for i in doc["memory"]["items"]] == ["nurse"]
    assert "I like trains" not in _everything(doc["messages"])  # only Ada's own messages
    assert (await store.user_data(BO)).messages[0].text == "I like trains"


async def test_erasure_reaches_other_bots_and_closed_sessions(
    store: BaseStore, clock: ManualClock
) -> None:
    async with harness(store, clock, GatedLLM(), forget_deletes_messages=True) as h:
        await turn(h, DM, "an old secret")
        await say(h, DM, "/new")
        await turn(h, DM, "a new secret")
        other_bot = ConversationKey("telegram", "11", None, "other")
        await h.ingestor.ingest(Inbound(other_bot, "11", "Ada", "to the other bot", "x1"))
        await say(h, DM, "/forget confirm")
        assert "deleted 2 of your messages" in h.outlet.texts(DM)[-1]
        assert "1 message of yours still waiting for my answer" in h.outlet.texts(DM)[-1]
        left = [m.text for m in (await store.user_data(ADA)).messages]
        assert left == ["to the other bot"]  # pending: kept, and said so
        for n in (1, 2):
            texts = [m.text for m in await store.messages(SessionKey(DM, n))]
            assert not any("secret" in t for t in texts)


_scopes = st.one_of(st.none(), st.sampled_from(["-100", "-200", "-300"]))
_items = st.lists(
    st.builds(
        MemoryItem,
        section=st.just("semantic"),
        field=st.sampled_from(["pet", "job", "city"]),
        value=st.text(min_size=1, max_size=5),
        private=st.booleans(),
        scope=_scopes,
    ),
    max_size=6,
)


@settings(max_examples=200, deadline=None)
@given(
    items=_items,
    chat=_scopes,
    private_in_groups=st.booleans(),
    across_groups=st.booleans(),
)
def test_a_fact_is_shown_only_in_its_scope(
    items: list[MemoryItem], chat: str | None, private_in_groups: bool, across_groups: bool
) -> None:
    record = UserMemory.from_json(UserMemory(items=tuple(items)).to_json())
    shown = record.visible(
        chat=chat, private_in_groups=private_in_groups, across_groups=across_groups
    ).items
    for item in shown:
        if item.private or item.scope is None:  # said in private
            assert chat is None or private_in_groups
        elif not across_groups:
            assert item.scope == chat  # a group's fact, in that group only
    if chat is None and not across_groups:
        assert all(i.private or i.scope is None for i in shown)


async def test_memory_in_a_group_shows_what_that_groups_prompt_shows_with_sharing(
    store: BaseStore, clock: ManualClock
) -> None:
    """Review 12: with share_across_groups the group-A fact is in group B's prompt, but
    /memory in group B left it out (it ignored that setting): the person could not see what
    the bot uses about them there."""
    llm = GatedLLM()
    policy = MemoryPolicy(budget=Budget(), summary_model="m", share_across_groups=True)
    async with harness(store, clock, llm, memory_llm=OfflineLLM(), memory_policy=policy) as h:
        await learn(h, GROUP_A, "I work as a nurse")
        await turn(h, GROUP_B, "hello everyone")
        assert "nurse" in system_text(llm.requests[-1])
        await say(h, GROUP_B, "/memory")
        assert "nurse" in h.outlet.texts(GROUP_B)[-1]
