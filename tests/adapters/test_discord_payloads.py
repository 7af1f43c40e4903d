"""Malformed variants of every message kind the Discord adapter reads (attachments, voice
messages, stickers, polls, replies, forwards, mention markup), sent through the real gateway
to the real discord.py client: none stops the adapter or fails its normalization, and what
does come out keeps the Inbound's promises."""

from __future__ import annotations

import base64
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from bot.core.events import Inbound
from tests.adapters.test_discord import TOKEN, RecordingHandler, _endpoints_released, inbound_only
from tests.fakes.discord_api import FakeDiscord, FakeGuild, FakeUser

__all__ = ["_endpoints_released"]  # the autouse fixture applies here too

JSON = dict[str, Any]
SNOWFLAKE = 1174109840998400001
KINDS = {"image", "voice", "video_note", "audio", "video", "file"}

# Values a sloppy or hostile payload may hold where discord.py expects something else.
_junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**64), max_value=2**64),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
)
_snowflake = st.integers(min_value=SNOWFLAKE, max_value=SNOWFLAKE + 50).map(str)
_markup = st.lists(
    st.one_of(
        st.sampled_from(
            ["<@", "<@!", "<@&", "<#", "<t:", "<a:x:", "<:blob:", "</cmd:", ">", ":R>", " "]
        ),
        st.sampled_from(["@everyone", "@here", "\u200b", "\x00", "#general"]),
        st.from_regex(r"-?[0-9]{1,22}", fullmatch=True),
        st.text(max_size=6),
    ),
    max_size=12,
).map("".join)


def _maybe(fields: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[JSON]:
    """Dicts holding any subset of ``fields`` (a field may be left out, as in broken payloads)."""
    return st.fixed_dictionaries({}, optional=fields)


_attachment = st.fixed_dictionaries(
    {"id": _snowflake, "filename": st.text(max_size=30), "size": st.integers(-5, 2**40)},
    optional={
        "url": st.one_of(st.text(max_size=20), st.just("http://127.0.0.1:9/a.png")),
        "proxy_url": st.text(max_size=10),
        "content_type": st.one_of(
            st.none(),
            st.sampled_from(["image/png", "audio/ogg", "video/mp4", "IMAGE/GIF; x=1"]),
            st.text(max_size=12),
        ),
        "width": st.one_of(st.none(), st.integers(-5, 10**9)),
        "height": st.one_of(st.none(), st.integers(-5, 10**9)),
        "duration_secs": st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
        "waveform": st.one_of(st.none(), st.just(base64.b64encode(b"wave").decode())),
        "flags": st.integers(0, 2**16),
    },
).map(lambda a: {"proxy_url": "", "url": "", **a})
_sticker = st.fixed_dictionaries(
    {"id": _snowflake, "name": st.text(max_size=20), "format_type": st.integers(-2, 9)}
)
_poll = st.fixed_dictionaries(
    {
        "question": _maybe({"text": st.one_of(st.none(), st.text(max_size=20))}),
        "answers": st.lists(
            st.fixed_dictionaries(
                {
                    "answer_id": st.integers(1, 10),
                    "poll_media": _maybe({"text": st.one_of(st.none(), st.text(max_size=10))}),
                }
            ),
            max_size=4,
        ),
        "expiry": st.just("2030-01-01T00:00:00+00:00"),
    }
)
_snapshot = st.fixed_dictionaries(
    {
        "type": st.sampled_from([0, 19, 7]),
        "content": _markup,
        "embeds": st.lists(_maybe({"title": st.text(max_size=8)}), max_size=2),
        "attachments": st.lists(_attachment, max_size=2),
        "timestamp": st.just("2024-05-01T12:00:00+00:00"),
        "edited_timestamp": st.none(),
    },
    optional={"sticker_items": st.lists(_sticker, max_size=2), "flags": st.integers(0, 99)},
)


@st.composite
def _payload(draw: st.DrawFn) -> JSON:
    """Changes to a well-formed MESSAGE_CREATE: each kind's fields, well-formed or not."""
    changes: JSON = {"content": draw(_markup)}
    if draw(st.booleans()):
        changes["attachments"] = draw(st.lists(_attachment, max_size=3))
    if draw(st.booleans()):
        changes["sticker_items"] = draw(st.lists(_sticker, max_size=3))
    if draw(st.booleans()):
        changes["poll"] = draw(_poll)
    if draw(st.booleans()):
        changes["flags"] = draw(st.sampled_from([0, 1 << 13, 1 << 14, 2**31]))
    reference = draw(st.sampled_from(["none", "reply", "forward", "junk"]))
    if reference != "none":
        changes["message_reference"] = {
            "type": {"reply": 0, "forward": 1}.get(reference, draw(st.integers(-1, 9))),
            "message_id": draw(_snowflake),
            "channel_id": draw(_snowflake),
        }
        changes["type"] = 19 if reference == "reply" else draw(st.sampled_from([0, 19]))
        replied = draw(st.sampled_from(["absent", "null", "message", "broken"]))
        if replied == "null":
            changes["referenced_message"] = None
        elif replied == "broken":
            changes["referenced_message"] = draw(_maybe({"id": _snowflake, "content": _junk}))
        elif replied == "message":
            changes["referenced_message"] = "message"  # filled in by the test: a real one
        if reference == "forward" or draw(st.booleans()):
            changes["message_snapshots"] = draw(
                st.lists(st.fixed_dictionaries({"message": _snapshot}), max_size=2)
            )
    return changes


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _check(inbound: Inbound, payload: JSON, earlier: Any) -> None:
    """What every Inbound promises, whatever it was made of (``earlier``: every message the
    fake holds, which a reply may quote)."""
    written = "".join(_strings(payload))
    assert "\u200b" not in inbound.text or "\u200b" in written  # nothing inserted
    if inbound.quote is not None:
        assert len(inbound.quote.text) <= 1000
        quotable = written + "".join(_strings(earlier))
        assert "\u200b" not in inbound.quote.text or "\u200b" in quotable
    for media in inbound.media:
        assert media.kind in KINDS and media.label
        assert media.size is None or media.size >= 0
        assert media.duration is None or media.duration >= 0
    assert inbound.text or inbound.media or inbound.quote is not None


World = tuple[FakeDiscord, RecordingHandler, FakeUser, FakeGuild]


@pytest.fixture
async def world() -> AsyncIterator[World]:
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        guild = fake.add_guild("Cafe")
        async with inbound_only(fake) as (_, handler):
            yield fake, handler, ada, guild


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(changes=_payload(), in_guild=st.booleans())
async def test_no_variant_of_a_message_stops_the_adapter_or_breaks_its_inbound(
    world: World, changes: JSON, in_guild: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "personabot.discord")
    caplog.clear()  # one example's log only (the fixture lives across examples)
    fake, handler, ada, guild = world
    channel = guild.general if in_guild else fake.dm(ada)
    payload = await fake.post(channel, ada, "", dispatch=False)
    if changes.get("referenced_message") == "message":
        changes["referenced_message"] = await fake.post(channel, ada, "earlier", dispatch=False)
    payload.update(changes)
    seen = len(handler.events)
    await fake.dispatch("MESSAGE_CREATE", payload)
    sentinel = await fake.post(fake.dm(ada), ada, "sentinel")
    events = await handler.wait_for_message(sentinel["id"])
    made = [e for e in events[seen:] if e.platform_message_id == payload["id"]]
    for inbound in made:
        _check(inbound, payload, fake.messages)
    skipped = "cannot read" in caplog.text
    event("skipped by discord.py" if skipped else "an Inbound" if made else "not for the bot")
    assert "could not handle a Discord" not in caplog.text  # normalization never raised
