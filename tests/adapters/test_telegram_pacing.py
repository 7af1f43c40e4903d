"""One outbound pacer per chat, shared by every sender (two bot accounts of one scene here):
real aiogram against the fake Bot API, which dates each call by the same manual clock the
pacer waits on, so the assertions read clock time and nothing waits in real time."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Sequence
from itertools import pairwise
from typing import TypeVar

import pytest

from adapters.telegram.adapter import TelegramAdapter
from adapters.telegram.format import split_message
from adapters.telegram.pacing import TelegramPacer
from bot.core.errors import PreviewThrottled
from bot.core.events import Attachment, ConversationKey, Reply
from bot.core.ports import StreamSettings
from tests.adapters.test_telegram import ANN, BOT, TOKEN
from tests.fakes.clock import SignallingClock, drive
from tests.fakes.telegram_api import ApiCall, FakeTelegramAPI, TgChat

pytestmark = pytest.mark.timeout(30)

T = TypeVar("T")

OTHER = "rowan-telegram"
OTHER_TOKEN = "987654321:AAHtest-Rowan-token-0123456789abcdef"
GROUP = TgChat.supergroup(-1001000000011, "Scene")
SECOND_GROUP = TgChat.supergroup(-1001000000012, "Another scene")
PRIVATE = TgChat.private(ANN)
#: Bounds a wait for work that never waits on the clock (HTTP to the fake): a hang fails fast.
REAL_BOUND = 10.0


def key(chat: TgChat, bot: str = BOT) -> ConversationKey:
    return ConversationKey("telegram", str(chat.id), None, bot)


@pytest.fixture
def clock() -> SignallingClock:
    return SignallingClock()


@pytest.fixture
async def api(clock: SignallingClock) -> AsyncIterator[FakeTelegramAPI]:
    async with FakeTelegramAPI(now=clock.now) as server:
        server.add_bot(TOKEN, "mira_bot", "Mira")
        server.add_bot(OTHER_TOKEN, "rowan_bot", "Rowan")
        for chat in (GROUP, SECOND_GROUP, PRIVATE):
            server.message_update(chat, ANN, "hi")  # the chats exist (Ann started the bots)
        yield server


@pytest.fixture
def pacer(clock: SignallingClock) -> TelegramPacer:
    return TelegramPacer(clock=clock)


@pytest.fixture
async def mira(
    api: FakeTelegramAPI, clock: SignallingClock, pacer: TelegramPacer
) -> AsyncIterator[TelegramAdapter]:
    adapter = TelegramAdapter(
        bot_key=BOT, token=TOKEN, api_server=api.base_url, clock=clock, pacer=pacer
    )
    yield adapter
    await adapter.aclose()


@pytest.fixture
async def rowan(
    api: FakeTelegramAPI, clock: SignallingClock, pacer: TelegramPacer
) -> AsyncIterator[TelegramAdapter]:
    """A second bot account (another persona of the scene) sharing Mira's pacer."""
    adapter = TelegramAdapter(
        bot_key=OTHER, token=OTHER_TOKEN, api_server=api.base_url, clock=clock, pacer=pacer
    )
    yield adapter
    await adapter.aclose()


def sends(api: FakeTelegramAPI, chat: TgChat) -> list[ApiCall]:
    """Successful messages and files into the chat, by either bot, in arrival order."""
    wanted = ("sendMessage", "sendDocument")
    return [c for c in api.calls if c.method in wanted and c.ok and c.chat_id == chat.id]


def offsets(calls: Sequence[ApiCall], start: float) -> list[float]:
    return [round(c.at - start, 6) for c in calls]


async def bounded(work: Awaitable[T]) -> T:
    """Work that must finish without the clock moving."""
    return await asyncio.wait_for(work, REAL_BOUND)


async def test_25_sends_into_a_group_keep_to_1_per_second_and_20_per_minute_in_asked_order(
    api: FakeTelegramAPI, mira: TelegramAdapter, rowan: TelegramAdapter, clock: SignallingClock
) -> None:
    start = clock.now()
    replies = [
        Reply(key(GROUP, BOT if i % 2 == 0 else OTHER), f"message {i}") for i in range(24)
    ] + [Reply(key(GROUP), "the export", attachment=Attachment("export.json", b"{}"))]
    senders = [mira if i % 2 == 0 else rowan for i in range(24)] + [mira]
    await drive(clock, asyncio.gather(*(s.send(r) for s, r in zip(senders, replies, strict=True))))
    posted = sends(api, GROUP)
    assert [c.text or c.params.get("caption") for c in posted] == [r.text for r in replies]
    at = [c.at for c in posted]
    assert all(later - earlier >= 1 - 1e-6 for earlier, later in pairwise(at))
    assert all(at[i + 20] - at[i] >= 60 - 1e-6 for i in range(len(at) - 20))
    # As fast as allowed: 20 a second apart, then the 21st when the first left the window.
    assert offsets(posted, start) == [*range(20), *range(60, 65)]
    assert {c.token for c in posted} == {TOKEN, OTHER_TOKEN}


async def test_sends_into_two_groups_do_not_wait_for_each_other(
    api: FakeTelegramAPI, mira: TelegramAdapter, clock: SignallingClock
) -> None:
    start = clock.now()
    first = asyncio.create_task(mira.send(Reply(key(GROUP), "first here")))
    second = asyncio.create_task(mira.send(Reply(key(GROUP), "second here")))
    await bounded(first)
    await bounded(clock.next_sleeper())  # the second waits for the group's next second
    await bounded(mira.send(Reply(key(SECOND_GROUP), "meanwhile there")))
    assert not second.done() and clock.now() == start
    await drive(clock, second)
    assert offsets(sends(api, GROUP), start) == [0, 1]
    assert offsets(sends(api, SECOND_GROUP), start) == [0]


async def test_a_private_chat_is_not_delayed(
    api: FakeTelegramAPI, mira: TelegramAdapter, clock: SignallingClock
) -> None:
    start = clock.now()
    long_text = "\n\n".join(["A sentence about mugs and cups that goes on. " * 30] * 5)
    await bounded(
        asyncio.gather(
            *(mira.send(Reply(key(PRIVATE), f"answer {i}")) for i in range(25)),
            mira.send(Reply(key(PRIVATE), long_text)),
        )
    )
    assert len(sends(api, PRIVATE)) == 25 + len(split_message(long_text))
    assert set(offsets(sends(api, PRIVATE), start)) == {0}
    assert clock.next_deadline() is None  # nobody ever waited on the clock


async def test_a_flood_limit_pauses_the_chat_for_every_sender_and_the_chunk_is_retried_once(
    api: FakeTelegramAPI,
    mira: TelegramAdapter,
    rowan: TelegramAdapter,
    pacer: TelegramPacer,
    clock: SignallingClock,
) -> None:
    start = clock.now()
    api.fail_next("sendMessage", status=429, retry_after=5, token=TOKEN)
    first = asyncio.create_task(mira.send(Reply(key(GROUP), "mira's line")))
    await bounded(clock.next_sleeper())  # Mira got the 429 and waits it out
    assert pacer.paused_for(GROUP.id) == 5
    second = asyncio.create_task(rowan.send(Reply(key(GROUP, OTHER), "rowan's line")))
    elsewhere = asyncio.create_task(rowan.send(Reply(key(SECOND_GROUP, OTHER), "elsewhere")))
    await bounded(elsewhere)  # another chat is not paused
    await drive(clock, asyncio.gather(first, second))
    limited, retried = api.calls_of("sendMessage", TOKEN)
    assert limited.status == 429 and retried.ok and retried.text == "mira's line"
    assert offsets([limited, retried], start) == [0, 5]  # retried once, after retry_after
    assert [c.token for c in sends(api, GROUP)] == [TOKEN, OTHER_TOKEN]
    # The other bot honoured Mira's retry_after, and waited its turn behind her retry.
    assert offsets(sends(api, GROUP), start) == [5, 6]


async def test_a_flood_limit_on_a_preview_delays_the_other_bots_reply(
    api: FakeTelegramAPI, mira: TelegramAdapter, rowan: TelegramAdapter, clock: SignallingClock
) -> None:
    start = clock.now()
    api.fail_next("sendMessage", status=429, retry_after=5, token=TOKEN)
    shown = mira.preview(key(GROUP), StreamSettings(mode="edit"), reply_to=None)
    assert shown is not None
    with pytest.raises(PreviewThrottled):
        await shown.show("thinking aloud")  # a preview is refused at once, never delayed
    await drive(clock, rowan.send(Reply(key(GROUP, OTHER), "my answer")))
    assert offsets(sends(api, GROUP), start) == [5]


async def test_a_flood_limit_pauses_a_private_chat_too(
    api: FakeTelegramAPI, mira: TelegramAdapter, clock: SignallingClock
) -> None:
    start = clock.now()
    api.fail_next("sendMessage", status=429, retry_after=5)
    first = asyncio.create_task(mira.send(Reply(key(PRIVATE), "one")))
    await bounded(clock.next_sleeper())
    second = asyncio.create_task(mira.send(Reply(key(PRIVATE), "two")))
    await drive(clock, asyncio.gather(first, second))
    assert [c.text for c in sends(api, PRIVATE)] == ["one", "two"]
    assert offsets(sends(api, PRIVATE), start) == [5, 5]  # paused, but never spaced


async def test_a_long_reply_takes_one_slot_per_chunk_in_order(
    api: FakeTelegramAPI, mira: TelegramAdapter, rowan: TelegramAdapter, clock: SignallingClock
) -> None:
    start = clock.now()
    paragraph = "A sentence about *mugs* & cups that goes on. " * 30
    text = "\n\n".join([paragraph.strip()] * 5)
    chunks = split_message(text)
    assert len(chunks) == 3
    await drive(clock, mira.send(Reply(key(GROUP), text)))
    await drive(clock, rowan.send(Reply(key(GROUP, OTHER), "and then me")))
    posted = sends(api, GROUP)
    assert [c.text for c in posted] == [chunk.html for chunk in chunks] + ["and then me"]
    assert offsets(posted, start) == [0, 1, 2, 3]


async def test_previews_draw_from_the_group_budget_and_leave_its_last_slot_to_replies(
    api: FakeTelegramAPI, mira: TelegramAdapter, clock: SignallingClock
) -> None:
    start = clock.now()
    shown = mira.preview(key(GROUP), StreamSettings(mode="edit"), reply_to=None)
    assert shown is not None
    await shown.show("word")  # a post: 1 of the minute's 20
    await drive(clock, mira.send(Reply(key(GROUP), "in between")))  # waits its second: 2
    await shown.show("word 1")  # an edit is not spaced like a message: 3
    second = mira.preview(key(GROUP), StreamSettings(mode="edit"), reply_to=None)
    assert second is not None
    with pytest.raises(PreviewThrottled) as spaced:
        await second.show("another post")  # a new message within a second of the last
    assert spaced.value.retry_after == pytest.approx(1)
    for count in range(2, 18):  # 16 more edits: 19 posts and edits in the minute
        await shown.show(f"word {count}")
    with pytest.raises(PreviewThrottled) as spent:
        await shown.show("one edit too many")
    assert spent.value.retry_after == pytest.approx(59)  # when the first post leaves the window
    await drive(clock, mira.send(Reply(key(GROUP), "the final reply")))  # the 20th slot
    await drive(clock, mira.send(Reply(key(GROUP), "one more")))  # waits for the window
    assert offsets(sends(api, GROUP), start) == [0, 1, 2, 60]
    assert len(api.calls_of("editMessageText", TOKEN)) == 17
