"""Streamed replies on Discord (``stream = "edit"``, docs/architecture.md#streaming): the real
discord.py adapter against the fake Discord, whose per-route buckets send discord.py the same
rate-limit headers Discord does.

What a person notices: a message appears once and grows in place, never pings anyone, never
floods the channel past Discord's limits, shows the end of a long answer, disappears when the
answer is discarded, and becomes the reply's first message when it is delivered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.app.build import runtime
from bot.config import Secrets, Settings
from bot.core.clock import SystemClock
from bot.core.errors import AdapterError, PreviewThrottled, PreviewUnavailable
from bot.core.events import Reply
from bot.core.llm import BaseLLM, ModelRequest, ModelResult, TextSink, Usage
from bot.core.ports import Preview, Streams, StreamSettings
from bot.runtime.streaming import Relay
from tests.adapters.test_discord import (
    TOKEN,
    RecordingHandler,
    Running,
    _endpoints_released,
    _key,
    connected_to,
)
from tests.fakes.discord_api import Bucket, FakeDiscord, FakeGuild, FakeUser, RecordedRequest

with warnings.catch_warnings():  # discord.py imports the deprecated audioop (test_discord.py)
    warnings.filterwarnings(
        "ignore", message="'audioop' is deprecated", category=DeprecationWarning
    )
    from adapters.discord.adapter import DiscordAdapter, create_adapter
    from adapters.discord.endpoints import SharedEndpoints, endpoints_for
    from adapters.discord.preview import PREVIEW_TIMEOUT

__all__ = ["_endpoints_released"]  # the autouse fixture applies here too

EDIT = StreamSettings(mode="edit")
LOUD = "Hey @everyone and @here, ask <@{user}> or <@&{role}> about it."


@contextlib.asynccontextmanager
async def connected(
    fake: FakeDiscord, *, preview_timeout: float = PREVIEW_TIMEOUT
) -> AsyncIterator[tuple[DiscordAdapter, RecordingHandler]]:
    """The adapter (with its preview timeout) on the fake's gateway, events recorded."""
    SharedEndpoints.acquire(endpoints_for(fake.api_base, fake.gateway_url, where="test"), where="t")
    adapter = DiscordAdapter(bot_key="mira", token=TOKEN, preview_timeout=preview_timeout)
    async with connected_to(fake, adapter) as handler:
        yield adapter, handler


def _preview(adapter: DiscordAdapter, channel: int, reply_to: str | None = None) -> Preview:
    preview = adapter.preview(_key(channel), EDIT, reply_to=reply_to)
    assert preview is not None
    return preview


async def _asked(fake: FakeDiscord, guild: FakeGuild, ada: FakeUser) -> str:
    """Ada mentions the bot in #general; the id of her message."""
    message = await fake.post(guild.general, ada, "tell me a story", mention_bot=True)
    return str(message["id"])


def _quiet(body: dict[str, Any] | None) -> bool:
    """The body notifies no one: no mention type parsed, no user or role allowed by id, not
    the replied-to author (``replied_user`` is left out when no message is quoted)."""
    assert body is not None
    allowed = body["allowed_mentions"]
    assert set(allowed) <= {"parse", "replied_user"}, allowed
    return (
        allowed["parse"] == []
        and allowed.get("replied_user", False) is False
        and FakeDiscord.pings(body) == set()
    )


# ---------------------------------------------------------------------- the preview


async def test_a_preview_is_posted_once_then_edited_in_place() -> None:
    """The first text posts a message quoting the person (pinging nobody); later texts edit
    it; the same text again costs no request; the bot's own edits are no inbound events."""
    async with FakeDiscord(token=TOKEN, create_limit=Bucket()) as fake:
        ada = fake.add_user("Ada")
        guild = fake.add_guild("Cafe")
        async with connected(fake) as (adapter, handler):
            asked = await _asked(fake, guild, ada)
            await handler.wait(1)
            preview = _preview(adapter, guild.general, reply_to=asked)
            assert (preview.kind, preview.draft_id, preview.message_id) == ("edit", None, None)
            await preview.show("Once upon a time, in a small")
            posted = preview.message_id
            await preview.show("Once upon a time, in a small cafe by the sea,")
            await preview.show("Once upon a time, in a small cafe by the sea,")
            await preview.show("Once upon a time, in a small cafe by the sea, a cat")
            # Sentinel: once Ada's next message is in, every event before it was handled.
            await handler.next_event(fake, guild.general, ada)
    (message,) = fake.bot_messages(guild.general)
    assert posted == message["id"]
    assert message["content"] == "Once upon a time, in a small cafe by the sea, a cat"
    (create,) = fake.creates(guild.general)
    reference = create.body["message_reference"] if create.body else None
    assert reference == {
        "type": 0,  # a reply, not a forward
        "message_id": int(asked),
        "channel_id": guild.general,
        "fail_if_not_exists": False,
    }
    assert str(create.body and create.body["nonce"]).startswith("preview-")
    assert [e.content for e in fake.edits(guild.general)] == [
        "Once upon a time, in a small cafe by the sea,",
        "Once upon a time, in a small cafe by the sea, a cat",
    ]
    assert [e.message_id for e in fake.edits(guild.general)] == [int(message["id"])] * 2
    # Ada's message and the sentinel only: the bot's own post and edits are no events.
    assert len(handler.events) == 2
    assert handler.events[0].platform_message_id == asked


async def test_the_preview_and_every_edit_ping_nobody() -> None:
    """@everyone, @here, user and role mentions as the model writes them notify no one: the
    post and every edit carry allowed_mentions none (no users, no roles, no replied user)."""
    async with FakeDiscord(token=TOKEN, edit_limit=Bucket(limit=50)) as fake:
        ada = fake.add_user("Ada")
        guild = fake.add_guild("Cafe")
        role = fake.add_role(guild, "Regulars")
        loud = LOUD.format(user=ada.id, role=role)
        async with connected(fake) as (adapter, _):
            asked = await _asked(fake, guild, ada)
            preview = _preview(adapter, guild.general, reply_to=asked)
            for end in range(24, len(loud) + 1, 8):
                await preview.show(loud[:end])
            await preview.show(loud)
    bodies = [r.body for r in fake.creates(guild.general) + fake.edits(guild.general)]
    assert len(bodies) >= 5
    assert all(_quiet(body) for body in bodies)
    assert fake.bot_messages(guild.general)[0]["content"] == loud
    assert FakeDiscord.pings({"content": loud}) != set()  # the check itself can fail


async def test_in_a_dm_the_preview_quotes_nothing() -> None:
    """Replies never quote in DMs (send does the same): the preview neither."""
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        async with connected(fake) as (adapter, handler):
            dm = fake.dm(ada)
            asked = await fake.post(dm, ada, "hi")
            await handler.wait(1)
            preview = _preview(adapter, dm, reply_to=str(asked["id"]))
            await preview.show("Hello Ada, how nice to hear from you.")
    (create,) = fake.creates(dm)
    assert create.body is not None and "message_reference" not in create.body
    assert _quiet(create.body)


async def test_only_the_edit_mode_previews_on_discord() -> None:
    """Discord has no drafts: auto, draft and off show the typing indicator only."""
    async with FakeDiscord(token=TOKEN) as fake:
        guild = fake.add_guild("Cafe")
        async with connected(fake) as (adapter, _):
            assert isinstance(adapter, Streams)
            for mode in ("auto", "draft", "off"):
                assert adapter.preview(_key(guild.general), StreamSettings(mode=mode)) is None
            assert adapter.preview(_key(guild.general), EDIT) is not None
    assert fake.creates(guild.general) == []


async def test_a_long_text_shows_its_tail() -> None:
    """Past 2000 characters the preview shows the end of the text, after "…"."""
    text = " ".join(f"word{i}" for i in range(1200))  # about 9,000 characters
    async with FakeDiscord(token=TOKEN) as fake:
        guild = fake.add_guild("Cafe")
        async with connected(fake) as (adapter, _):
            preview = _preview(adapter, guild.general)
            await preview.show(text[:1500])
            await preview.show(text)
    first, edit = fake.creates(guild.general) + fake.edits(guild.general)
    assert first.content == text[:1500]
    assert len(edit.content) == 2000
    assert edit.content == "…" + text[-1999:]
    assert (edit.status, fake.bot_messages(guild.general)[0]["content"]) == (200, edit.content)


async def test_discard_deletes_the_posted_message() -> None:
    """A discarded generation's preview disappears; deleting it twice is only logged."""
    async with FakeDiscord(token=TOKEN) as fake:
        guild = fake.add_guild("Cafe")
        async with connected(fake) as (adapter, _):
            unposted = _preview(adapter, guild.general)
            await unposted.discard()  # nothing posted: nothing to delete
            preview = _preview(adapter, guild.general)
            await preview.show("A half answer that will be thrown away")
            await preview.discard()
            await preview.discard()  # already gone: logged, not raised
    assert fake.bot_messages(guild.general) == []
    assert [d.status for d in fake.deletes(guild.general)] == [204, 404]
    assert {d.message_id for d in fake.deletes(guild.general)} == {int(str(preview.message_id))}


async def test_retract_deletes_a_preview_left_by_a_crash_and_never_raises() -> None:
    async with FakeDiscord(token=TOKEN) as fake:
        guild = fake.add_guild("Cafe")
        async with connected(fake) as (adapter, _):
            left = _preview(adapter, guild.general)
            await left.show("A preview whose process crashed midway")
            await adapter.retract(_key(guild.general), str(left.message_id))
            await adapter.retract(_key(guild.general), str(left.message_id))  # gone: logged
            await adapter.retract(_key(guild.general), "not-an-id")
    assert fake.bot_messages(guild.general) == []
    assert [d.status for d in fake.deletes(guild.general)] == [204, 404]


async def test_preview_errors_say_whether_to_go_on() -> None:
    """Forbidden or a deleted message: no more previews this turn; a bad request: this
    update failed (later ones may work)."""
    async with FakeDiscord(token=TOKEN) as fake:
        guild = fake.add_guild("Cafe")
        async with connected(fake) as (adapter, _):
            preview = _preview(adapter, guild.general)
            await preview.show("The beginning of a long answer")
            fake.fail_next_edit(guild.general, 400, code=50035, message="Invalid Form Body")
            with pytest.raises(AdapterError) as failed:
                await preview.show("The beginning of a long answer, and more")
            fake.fail_next_edit(guild.general, 403, code=50013, message="Missing Permissions")
            with pytest.raises(PreviewUnavailable):
                await preview.show("The beginning of a long answer, and more")
            await fake.delete(fake.bot_messages(guild.general)[0])  # a moderator deletes it
            with pytest.raises(PreviewUnavailable):
                await preview.show("The beginning of a long answer, and even more")
    assert type(failed.value) is AdapterError
    assert [e.status for e in fake.edits(guild.general)] == [400, 403, 404]


# ---------------------------------------------------------------------- rate limits


async def test_edits_stay_within_the_bucket_and_a_burst_is_coalesced() -> None:
    """A model writing fast (300 deltas) through the real relay, with no interval of its own:
    the edits stay within the channel's bucket (no 429 ever) and leave each window's last
    request to the reply; the relay coalesces the text meanwhile, and the last edit shows the
    whole text."""
    bucket = Bucket(limit=3, window=0.4)
    deltas = [f"w{i} " for i in range(300)]  # 1,590 characters: one message
    async with FakeDiscord(token=TOKEN, create_limit=Bucket(), edit_limit=bucket) as fake:
        guild = fake.add_guild("Cafe")
        async with connected(fake) as (adapter, _):
            preview = _preview(adapter, guild.general)
            chat = _key(guild.general)
            relay = Relay(preview, clock=SystemClock(), interval=0.0, conversation=chat)
            relay.start()
            try:
                for delta in deltas:
                    relay.text(0, delta)
                    await asyncio.sleep(0.004)  # the model's pace, not a synchronization
                whole = "".join(deltas)
                await fake.wait_for(lambda: fake.edits(guild.general)[-1].content == whole)
            finally:
                await relay.close()
    edits = fake.edits(guild.general)
    assert fake.throttled() == []
    assert all(e.status == 200 for e in edits)
    assert 4 <= len(edits) < len(deltas) // 10  # coalesced, yet it kept growing
    assert _within(edits, Bucket(bucket.limit - 1, bucket.window))  # one left for the reply
    assert fake.bot_messages(guild.general)[0]["content"] == whole


def _within(requests: list[RecordedRequest], bucket: Bucket) -> bool:
    """At most ``bucket.limit`` requests in each window, a window starting at the first
    request after the previous one ended (how Discord and the fake count)."""
    start, used = -float("inf"), 0
    for request in requests:
        if request.at >= start + bucket.window:
            start, used = request.at, 0
        used += 1
        if used > bucket.limit:
            return False
    return True


async def test_a_preview_never_waits_on_a_bucket_and_leaves_its_last_edit_to_the_reply() -> None:
    """When a preview edit would take the bucket's last request, the preview is throttled at
    once (no request, no wait inside discord.py) until the bucket resets: the final reply's
    edit goes out immediately."""
    async with FakeDiscord(token=TOKEN, edit_limit=Bucket(limit=3, window=1.0)) as fake:
        guild = fake.add_guild("Cafe")
        async with connected(fake) as (adapter, _):
            preview = _preview(adapter, guild.general)
            await preview.show("It was a dark and stormy")
            await preview.show("It was a dark and stormy night;")
            await preview.show("It was a dark and stormy night; the rain")
            started = time.monotonic()
            with pytest.raises(PreviewThrottled) as throttled:
                await preview.show("It was a dark and stormy night; the rain fell")
            assert time.monotonic() - started < 0.3
            assert 0 < throttled.value.retry_after <= 1.0
            assert len(fake.edits(guild.general)) == 2  # nothing was sent
            final = "It was a dark and stormy night; the rain fell in torrents."
            reply = Reply(_key(guild.general), final, outbox_id=9, replaces=preview.message_id)
            called = asyncio.get_running_loop().time()
            await adapter.send(reply)  # discord.py then waits out the emptied bucket
            (_, _, last) = fake.edits(guild.general)
    assert (last.content, last.status) == (final, 200)
    assert last.at - called < 0.3  # at once, in the same window as the preview's edits
    assert fake.throttled() == []


async def test_a_429_discord_py_would_wait_out_is_a_throttled_preview() -> None:
    """A 429 the buckets did not foresee (another process used them): discord.py would sleep
    ``retry_after`` (10 s) inside the call; the preview gives up after its timeout instead,
    and the next update goes through."""
    async with FakeDiscord(token=TOKEN) as fake:
        guild = fake.add_guild("Cafe")
        async with connected(fake, preview_timeout=0.5) as (adapter, _):
            preview = _preview(adapter, guild.general)
            await preview.show("Chapter one: the arrival")
            fake.fail_next_edit(guild.general, 429, retry_after=10.0)
            started = time.monotonic()
            with pytest.raises(PreviewThrottled) as throttled:
                await preview.show("Chapter one: the arrival of the ship")
            assert time.monotonic() - started < 2.0
            assert throttled.value.retry_after == 0.5
            await preview.show("Chapter one: the arrival of the ship at dawn")
    assert [e.status for e in fake.edits(guild.general)] == [429, 200]
    assert fake.bot_messages(guild.general)[0]["content"] == (
        "Chapter one: the arrival of the ship at dawn"
    )


async def test_a_post_answered_too_late_is_not_posted_twice() -> None:
    """The first post arrives but its answer is slower than the preview's timeout: the post
    is tried again with the same nonce, Discord hands back the message already posted, and
    the preview brings it up to date."""
    async with FakeDiscord(token=TOKEN) as fake:
        guild = fake.add_guild("Cafe")
        async with connected(fake, preview_timeout=0.5) as (adapter, _):
            preview = _preview(adapter, guild.general)
            fake.answer_late("create", guild.general, 1.2)
            with pytest.raises(PreviewThrottled):
                await preview.show("Dear diary, today I met")
            assert preview.message_id is None
            await preview.show("Dear diary, today I met a dragon")
            await fake.wait_for(lambda: len(fake.creates(guild.general)) == 2)
    (message,) = fake.bot_messages(guild.general)
    assert preview.message_id == message["id"]
    assert message["content"] == "Dear diary, today I met a dragon"
    first, second = (r.body for r in fake.creates(guild.general))
    assert first and second and first["nonce"] == second["nonce"]
    assert [e.content for e in fake.edits(guild.general)] == ["Dear diary, today I met a dragon"]


# ---------------------------------------------------------------------- the final reply


async def test_the_reply_edits_the_preview_into_its_first_chunk() -> None:
    """The delivered reply: its first chunk is the preview, edited (pinging nobody); the rest
    are new messages with their nonces. Delivered again (crash recovery), nothing doubles."""
    async with FakeDiscord(token=TOKEN, create_limit=Bucket()) as fake:
        ada = fake.add_user("Ada")
        guild = fake.add_guild("Cafe")
        role = fake.add_role(guild, "Regulars")
        first = LOUD.format(user=ada.id, role=role) + " " + ("alpha " * 300).strip()
        rest = ("beta " * 300).strip()
        text = first + "\n\n" + rest  # two paragraphs: two chunks
        async with connected(fake) as (adapter, _):
            asked = await _asked(fake, guild, ada)
            preview = _preview(adapter, guild.general, reply_to=asked)
            await preview.show(first[:200])
            reply = Reply(
                _key(guild.general),
                text,
                outbox_id=42,
                reply_to_platform_message_id=asked,
                replaces=preview.message_id,
            )
            await adapter.send(reply)
            await adapter.send(reply)
    posted, second = fake.bot_messages(guild.general)
    assert posted["id"] == preview.message_id
    assert (posted["content"], second["content"]) == (first, rest)
    edits = fake.edits(guild.general)
    assert [e.content for e in edits] == [first] * 2
    creates = fake.creates(guild.general)
    assert [c.body and c.body["nonce"] for c in creates[1:]] == ["42-1", "42-1"]
    assert all(_quiet(r.body) for r in creates + edits)


async def test_a_reply_whose_preview_was_deleted_is_posted_anew() -> None:
    """The preview is gone (a moderator, or a retract): the first chunk is posted as a new
    message, quoting the person, with its nonce, so delivering it again posts nothing more."""
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        guild = fake.add_guild("Cafe")
        async with connected(fake) as (adapter, _):
            asked = await _asked(fake, guild, ada)
            preview = _preview(adapter, guild.general, reply_to=asked)
            await preview.show("A preview about to be deleted")
            await fake.delete(fake.bot_messages(guild.general)[0])
            reply = Reply(
                _key(guild.general),
                "The whole answer, at last.",
                outbox_id=7,
                reply_to_platform_message_id=asked,
                replaces=preview.message_id,
            )
            await adapter.send(reply)
            await adapter.send(reply)
    (message,) = fake.bot_messages(guild.general)
    assert message["content"] == "The whole answer, at last."
    assert message["id"] != preview.message_id
    assert [e.status for e in fake.edits(guild.general)] == [404, 404]
    reposts = fake.creates(guild.general)[1:]
    assert [r.body and r.body["nonce"] for r in reposts] == ["7-0", "7-0"]
    assert all(r.body and r.body["message_reference"]["message_id"] == int(asked) for r in reposts)
    assert all(_quiet(r.body) for r in reposts)


async def test_a_preview_too_old_to_edit_is_replaced_by_a_new_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Discord allows no more edits of old messages for now (30046, a reply recovered long
    after a crash): the reply is posted anew and the stale preview deleted."""
    caplog.set_level(logging.INFO, "personabot.discord")
    async with FakeDiscord(token=TOKEN) as fake:
        guild = fake.add_guild("Cafe")
        async with connected(fake) as (adapter, _):
            preview = _preview(adapter, guild.general)
            await preview.show("A preview left for more than an hour")
            fake.fail_next_edit(guild.general, 400, code=30046, message="Maximum edits reached")
            reply = Reply(
                _key(guild.general),
                "The recovered reply.",
                outbox_id=3,
                replaces=preview.message_id,
            )
            await adapter.send(reply)
    (message,) = fake.bot_messages(guild.general)
    assert message["content"] == "The recovered reply."
    assert [d.message_id for d in fake.deletes(guild.general)] == [int(str(preview.message_id))]
    assert "cannot be edited now" in caplog.text


# ---------------------------------------------------------------------- in the runtime


class Storyteller(BaseLLM):
    """Streams its answer: the first piece at once, the rest when the test says ``go``."""

    name = "storyteller"

    def __init__(self, pieces: list[str]) -> None:
        self.pieces = pieces
        self.go = asyncio.Event()
        self.calls = 0

    async def complete(self, request: ModelRequest) -> ModelResult:
        return ModelResult("".join(self.pieces), Usage(10, 5), "storyteller")

    async def stream(self, request: ModelRequest, on_text: TextSink) -> ModelResult:
        self.calls += 1
        on_text(self.pieces[0])
        await self.go.wait()
        for piece in self.pieces[1:]:
            on_text(piece)
            await asyncio.sleep(0)
        return await self.complete(request)


@contextlib.asynccontextmanager
async def streaming_bot(
    fake: FakeDiscord, tmp_path: Path, llm: BaseLLM, *, preview_timeout: float | None = None
) -> AsyncIterator[Running]:
    """A Discord bot entry with ``stream = "edit"`` inside the wired runtime (SQLite file);
    ``preview_timeout`` replaces the adapter's default bound on a preview call."""
    db = tmp_path / "personabot.sqlite3"
    entry = {
        "platform": "discord",
        "persona": "companion",
        "id": "mira",
        "api_base": fake.api_base,
        "gateway_url": fake.gateway_url,
        "stream": "edit",
        "stream_interval_seconds": 0.2,
    }
    settings = Settings.model_validate(
        {
            "bots": [entry],
            "storage": {"url": f"sqlite:///{db}"},
            "queue": {"debounce_seconds": 0.2, "max_wait_seconds": 2.0},
        }
    )
    persona = settings.persona()
    adapter = create_adapter(settings.bots[0], persona, Secrets({"DISCORD_BOT_TOKEN": TOKEN}))
    if preview_timeout is not None:
        adapter = DiscordAdapter(bot_key="mira", token=TOKEN, preview_timeout=preview_timeout)
    try:
        async with runtime(settings, llm=llm, adapters={"mira": (persona, adapter)}) as rt:
            before = fake.sessions
            task = asyncio.create_task(adapter.run(rt.router))
            try:
                await fake.wait_identified(after=before)
                yield Running(fake, adapter, rt, db)
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
    finally:
        await adapter.aclose()


async def test_a_streamed_reply_grows_in_one_message_that_becomes_the_reply(
    tmp_path: Path,
) -> None:
    """In a guild with ``stream = "edit"``: the reply appears as a message quoting the person
    while the model writes, and that same message ends as the whole reply; nothing pings."""
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        guild = fake.add_guild("Cafe")
        loud = LOUD.format(user=ada.id, role=guild.bot_role)
        llm = Storyteller([loud, " Once upon a time", " there was a cafe.", " The end."])
        async with streaming_bot(fake, tmp_path, llm) as bot:
            asked = await _asked(fake, guild, ada)
            (preview,) = await fake.wait_for_bot_messages(guild.general, 1)
            assert preview["content"] == loud  # shown before the model finished
            llm.go.set()
            await bot.until(lambda: bot.rows("SELECT status FROM outbox") == [("sent",)])
    (message,) = fake.bot_messages(guild.general)
    assert message["id"] == preview["id"]
    assert message["content"] == "".join(llm.pieces)
    (create,) = fake.creates(guild.general)
    assert create.body and create.body["message_reference"]["message_id"] == int(asked)
    edits = fake.edits(guild.general)
    assert edits[-1].content == "".join(llm.pieces)
    assert all(_quiet(r.body) for r in [create, *edits])
    assert fake.deletes(guild.general) == []


async def test_a_discarded_generation_takes_its_preview_back(tmp_path: Path) -> None:
    """Ada writes again while the first answer is being shown: the final check discards it,
    its preview is deleted, and the next generation's message becomes the one reply."""
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        guild = fake.add_guild("Cafe")
        llm = Storyteller(["A first answer, soon out of date,", " and its end."])
        async with streaming_bot(fake, tmp_path, llm) as bot:
            await _asked(fake, guild, ada)
            (first,) = await fake.wait_for_bot_messages(guild.general, 1)
            again = await fake.post(guild.general, ada, "a poem, please", mention_bot=True)
            stored = "SELECT platform_message_id FROM messages WHERE role = 'user'"
            await bot.until(lambda: (again["id"],) in bot.rows(stored))
            llm.go.set()
            await bot.until(lambda: bot.rows("SELECT status FROM outbox") == [("sent",)])
    (reply,) = fake.bot_messages(guild.general)
    assert reply["id"] != first["id"]
    assert reply["content"] == "".join(llm.pieces)
    assert [(d.message_id, d.status) for d in fake.deletes(guild.general)] == [
        (int(first["id"]), 204)
    ]
    assert llm.calls == 2


async def test_a_preview_post_that_lands_after_its_call_gave_up_never_stays_beside_the_reply(
    tmp_path: Path,
) -> None:
    """A flaky network: the preview's first post reaches Discord but its answer comes after
    the preview gave up, and the model finishes before another update. The person must not
    be left with the half answer as a message of its own beside the reply."""
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        guild = fake.add_guild("Cafe")
        llm = Storyteller(["Once upon a time there was a cafe", " by the sea. The end."])
        async with streaming_bot(fake, tmp_path, llm, preview_timeout=0.5) as bot:
            fake.answer_late("create", guild.general, 1.0)
            await _asked(fake, guild, ada)
            await bot.until(lambda: bool(fake.bot_messages(guild.general)))  # posted, unanswered
            llm.go.set()  # the answer is done while the post waits for its answer
            await bot.until(lambda: bot.rows("SELECT status FROM outbox") == [("sent",)])
            await asyncio.sleep(0.6)  # the late answer has come by now
            await bot.quiet()
    assert [m["content"] for m in fake.bot_messages(guild.general)] == ["".join(llm.pieces)]
