"""What people send on Discord besides plain text, through the real discord.py client and the
fake Discord: attachments, voice messages and stickers as ``MediaRef``, replies and forwards as
``Quote``, polls as words, mentions as the person wrote them, edits that now mention the bot.
"""

from __future__ import annotations

import copy
import io
import json
import warnings
from pathlib import Path
from typing import Any

from PIL import Image

from bot.core.events import Reply
from bot.core.llm import ImageBlock
from bot.core.media import MediaRef, Quote
from tests.adapters.test_discord import (
    TOKEN,
    _endpoints_released,
    _key,
    inbound_only,
    with_runtime,
)
from tests.fakes.discord_api import FakeDiscord, Upload
from tests.fakes.llm import GatedLLM

with warnings.catch_warnings():  # discord.py imports the deprecated audioop (test_discord.py)
    warnings.filterwarnings(
        "ignore", message="'audioop' is deprecated", category=DeprecationWarning
    )
    from adapters.discord.client import modernized

__all__ = ["_endpoints_released"]  # the autouse fixture applies here too

UNAVAILABLE = "[a message that is no longer available]"
OFFLINE = "[offline model] You said:"


def _id(payload: dict[str, object], index: int = 0) -> str:
    attachments = payload["attachments"]
    assert isinstance(attachments, list)
    return str(attachments[index]["id"])


# ---------------------------------------------------------------------- media


async def test_each_attachment_kind_becomes_its_media_ref() -> None:
    """Text is only what was written; every file is a MediaRef with its URL, id and sizes."""
    uploads = (
        Upload("cat.png", "image/png", b"\x89PNG cat", width=640, height=480),
        Upload("scan.JPG", None, b"jpeg bytes"),  # no content type: the extension tells
        Upload("SPOILER_plot.webp", "image/webp", b"webp", width=10, height=20),
        Upload("song.ogg", "audio/ogg", b"ogg", duration=61.5),
        Upload("clip.mp4", "video/mp4", b"mp4 bytes", width=1280, height=720, duration=9.0),
        Upload("notes.pdf", "application/pdf", b"%PDF-1.7"),
    )
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        async with inbound_only(fake) as (_, handler):
            dm = fake.dm(ada)
            sent = await fake.post(dm, ada, "look at these", attachments=uploads)
            (event,) = await handler.wait(1)
            urls = [fake.file_url(_id(sent, i)) for i in range(len(uploads))]
    ids = [_id(sent, i) for i in range(len(uploads))]
    assert event.text == "look at these"
    assert event.media == (
        MediaRef("image", "image cat.png", urls[0], ids[0], "image/png", 8, 640, 480),
        MediaRef("image", "image scan.JPG", urls[1], ids[1], "", 10),
        MediaRef("image", "image plot.webp (spoiler)", urls[2], ids[2], "image/webp", 4, 10, 20),
        MediaRef("audio", "audio song.ogg", urls[3], ids[3], "audio/ogg", 3, duration=61.5),
        MediaRef("video", "video clip.mp4", urls[4], ids[4], "video/mp4", 9, 1280, 720, 9.0),
        MediaRef("file", "file notes.pdf", urls[5], ids[5], "application/pdf", 8),
    )
    assert all(url.startswith("http://127.0.0.1:") for url in urls)


async def test_a_voice_message_is_voice_media_with_its_duration() -> None:
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        async with inbound_only(fake) as (_, handler):
            dm = fake.dm(ada)
            sent = await fake.voice(dm, ada, b"OggS voice", duration=4.25)
            (event,) = await handler.wait(1)
            url = fake.file_url(_id(sent))
    assert event.text == ""
    assert event.triggers_reply
    assert event.media == (
        MediaRef("voice", "voice message", url, _id(sent), "audio/ogg", 10, duration=4.25),
    )


async def test_stickers_are_images_except_lottie() -> None:
    """PNG and APNG stickers fetch as PNG, GIF as GIF; a Lottie sticker is a file, no ref."""
    stickers = (("wave", 1), ("dance", 2), ("lottie cat", 3), ("party", 4))
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        async with inbound_only(fake) as (_, handler):
            sent = await fake.post(fake.dm(ada), ada, "", stickers=stickers)
            (event,) = await handler.wait(1)
    ids = [item["id"] for item in sent["sticker_items"]]
    cdn = "https://cdn.discordapp.com/stickers"
    assert event.text == ""
    assert event.media == (
        MediaRef("image", "sticker wave", f"{cdn}/{ids[0]}.png", ids[0], "image/png"),
        MediaRef("image", "animated sticker dance", f"{cdn}/{ids[1]}.png", ids[1], "image/png"),
        MediaRef("file", "sticker lottie cat", "", ids[2]),
        MediaRef(
            "image",
            "animated sticker party",
            f"https://media.discordapp.net/stickers/{ids[3]}.gif",
            ids[3],
            "image/gif",
        ),
    )


def _legacy_stickers(message: dict[str, Any]) -> None:
    """``message`` as Discord sent it before ``sticker_items``: whole sticker objects."""
    message["stickers"] = [
        {**item, "pack_id": "847199849233514549", "description": "", "tags": "wave", "asset": ""}
        for item in message.pop("sticker_items")
    ]


async def test_stickers_of_an_older_payload_are_media_too() -> None:
    """A payload naming its stickers ``stickers`` (discord.py reads only ``sticker_items``):
    the stickers are MediaRefs, a reply to such a message names them, an edit keeps them."""
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        dm = fake.dm(ada)
        async with inbound_only(fake) as (_, handler):
            sent = await fake.post(dm, ada, "", stickers=(("wave", 1), ("cat", 3)), dispatch=False)
            _legacy_stickers(sent)
            await fake.dispatch("MESSAGE_CREATE", sent)
            original = copy.deepcopy(sent)
            reply = await fake.post(dm, ada, "this one", reply_to=sent)
            assert "stickers" in reply["referenced_message"]  # the replied-to message, as sent
            await fake.edit(sent, "now with words")
            created, replied, edited = await handler.wait(3)
    ids = [item["id"] for item in original["stickers"]]
    wave = MediaRef(
        "image", "sticker wave", f"https://cdn.discordapp.com/stickers/{ids[0]}.png", ids[0],
        "image/png",
    )  # fmt: skip
    cat = MediaRef("file", "sticker cat", "", ids[1])  # Lottie: told, never fetched
    assert (created.text, created.media) == ("", (wave, cat))
    assert replied.quote is not None and replied.quote.text == "[sticker wave] [sticker cat]"
    assert (edited.kind, edited.text, edited.media) == ("edit", "now with words", (wave, cat))


def test_an_older_payloads_malformed_stickers_never_break_the_message() -> None:
    """Entries without a readable id are left out; a missing format is an unknown one."""
    data = {"id": "1", "stickers": [None, {"name": "x"}, {"id": "12", "name": 5}, {"id": 13}]}
    assert modernized(data)["sticker_items"] == [
        {"id": "12", "name": "", "format_type": 0},
        {"id": "13", "name": "", "format_type": 0},
    ]
    assert "sticker_items" not in data  # the payload itself is left as it was
    sticker = {"id": "14", "name": "hi", "format_type": 1, "pack_id": "2", "tags": "hi"}
    forward = {"id": "2", "message_snapshots": [{"message": {"stickers": [sticker]}}, None]}
    (item,) = modernized(forward)["message_snapshots"][0]["message"]["sticker_items"]
    assert item == {"id": "14", "name": "hi", "format_type": 1}
    current = {"id": "1", "sticker_items": [], "stickers": [{"id": "12"}]}
    assert modernized(current) is current  # today's payload is read as it is
    assert modernized("no object") == "no object"


# ---------------------------------------------------------------------- text fidelity


async def test_mentions_read_as_written_with_names_and_honest_unknowns() -> None:
    """Known users, roles and channels by name; unknown ones say so; @everyone untouched."""
    async with FakeDiscord(token=TOKEN) as fake:
        ada, bob = fake.add_user("Ada"), fake.add_user("Bob")
        guild = fake.add_guild("Cafe")
        mods = fake.add_role(guild, "Moderators")
        games = fake.add_channel(guild, "games")
        nobody, nowhere, no_role = fake.hidden_channel(), fake.hidden_channel(), 10**17 + 1
        content = (
            f"<@{bob.id}> <@!{nobody}> <@&{mods}> <@&{no_role}> <#{games}> <#{nowhere}> "
            "@everyone @here <:blobcat:123456789012345678> <a:party:123456789012345679> "
            "</weather now:123456789012345670> at <t:1714564800:R> <t:99999999999999999>"
        )
        async with inbound_only(fake) as (_, handler):
            await fake.post(guild.general, ada, content, mention_users=(bob,))
            await fake.post(fake.dm(ada), ada, f"see <#{games}> and <#{nowhere}>")
            guild_event, dm_event = await handler.wait(2)
    assert guild_event.text == (
        "@Bob @unknown-user @Moderators @unknown-role #games #unknown-channel "
        "@everyone @here :blobcat: :party: /weather now at 2024-05-01 12:00 UTC "
        "<t:99999999999999999>"
    )
    assert dm_event.text == "see #games and #unknown-channel"  # resolved across the bot's guilds
    assert "\u200b" not in guild_event.text


# ---------------------------------------------------------------------- polls


async def test_a_poll_without_text_is_told_in_words() -> None:
    """A poll in a DM is a message; in a guild it is context (no longer dropped unlogged)."""
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        guild = fake.add_guild("Cafe")
        async with inbound_only(fake) as (_, handler):
            await fake.post(fake.dm(ada), ada, "", poll=("Lunch?", ("pizza", "soup")))
            await fake.post(guild.general, ada, "", poll=("Movie night?", ("yes", "no")))
            dm_event, guild_event = await handler.wait(2)
    assert (dm_event.text, dm_event.triggers_reply) == ("[poll: Lunch? (pizza / soup)]", True)
    assert guild_event.text == "[poll: Movie night? (yes / no)]"
    assert not guild_event.triggers_reply


# ---------------------------------------------------------------------- replies


async def test_replies_carry_the_replied_to_message() -> None:
    """To the bot (from_bot), to someone's picture (a stand-in), to a deleted message."""
    async with FakeDiscord(token=TOKEN) as fake:
        ada, bob = fake.add_user("Ada"), fake.add_user("Bob")
        guild = fake.add_guild("Cafe")
        ch = guild.general
        async with inbound_only(fake) as (adapter, handler):
            await fake.post(ch, bob, "ping", mention_bot=True)  # puts Bob in the handler
            await adapter.send(Reply(_key(ch), "I like tea."))
            (bots,) = await fake.wait_for_bot_messages(ch, 1)
            picture = await fake.post(ch, bob, "", attachments=(Upload("cat.png", "image/png"),))
            await fake.post(ch, ada, "me too", reply_to=bots)
            await fake.post(ch, ada, "cute", reply_to=picture)
            await fake.post(ch, ada, "what was that?", reply_to=picture, referenced="deleted")
            events = await handler.wait(5)
    to_bot, to_picture, to_deleted = events[2:]
    assert to_bot.quote == Quote("reply", "Mira", "I like tea.", str(fake.bot.id), True)
    assert to_bot.reply_to_bot and to_bot.triggers_reply and to_bot.text == "me too"
    assert to_picture.quote == Quote("reply", "Bob", "[image cat.png]", str(bob.id), False)
    assert not to_picture.reply_to_bot and not to_picture.triggers_reply
    assert to_deleted.quote == Quote("reply", "", UNAVAILABLE)


async def test_a_reply_discord_did_not_resolve_is_read_from_cache_or_fetched_once() -> None:
    """No referenced_message: discord.py's cache first, else one REST lookup, else a stand-in;
    long quoted text is cut to 1,000 characters."""
    async with FakeDiscord(token=TOKEN) as fake:
        ada, bob = fake.add_user("Ada"), fake.add_user("Bob")
        dm = fake.dm(ada)
        async with inbound_only(fake) as (_, handler):
            cached = await fake.post(dm, ada, "seen by the bot")
            unseen = await fake.post(dm, bob, "x" * 1500, dispatch=False)
            gone = await fake.post(dm, bob, "deleted soon", dispatch=False)
            await fake.delete(gone)
            await fake.post(dm, ada, "a", reply_to=cached, referenced="absent")
            await fake.post(dm, ada, "b", reply_to=unseen, referenced="absent")
            await fake.post(dm, ada, "c", reply_to=gone, referenced="absent")
            events = await handler.wait(5)  # with the deletion's event
    from_cache, fetched, missing = events[2:]
    assert from_cache.quote == Quote("reply", "Ada", "seen by the bot", str(ada.id))
    assert fetched.quote is not None
    assert (fetched.quote.author, len(fetched.quote.text)) == ("Bob", 1000)
    assert fetched.quote.text == "x" * 999 + "…"
    assert missing.quote == Quote("reply", "", UNAVAILABLE)
    assert fake.message_fetches == [(dm, int(unseen["id"])), (dm, int(gone["id"]))]


# ---------------------------------------------------------------------- forwards


async def test_a_forward_is_a_quote_with_the_snapshots_files() -> None:
    """From a channel the bot cannot see: no author; from a message it saw: its author."""
    async with FakeDiscord(token=TOKEN) as fake:
        ada, bob = fake.add_user("Ada"), fake.add_user("Bob")
        guild = fake.add_guild("Cafe")
        dm = fake.dm(ada)
        elsewhere = fake.hidden_channel()
        async with inbound_only(fake) as (_, handler):
            source = await fake.post(
                elsewhere,
                bob,
                "the recipe: <@&123456789012345678> flour",
                attachments=(Upload("cake.jpg", "image/jpeg", b"jpeg", width=3, height=2),),
                dispatch=False,
            )
            await fake.forward(dm, ada, source)
            seen = await fake.post(guild.general, bob, "meet at 6")
            await fake.forward(dm, ada, seen)
            events = await handler.wait(3)
    unknown, _, known = events
    assert unknown.text == "" and unknown.triggers_reply and unknown.is_private
    assert unknown.quote == Quote("forward", "", "the recipe: @unknown-role flour")
    (picture,) = unknown.media
    assert (picture.kind, picture.label) == ("image", "image cake.jpg")
    assert picture.unique_id == _id(source)
    assert (picture.width, picture.height) == (3, 2)
    assert known.quote == Quote("forward", "Bob", "meet at 6", str(bob.id))
    assert known.media == ()


# ---------------------------------------------------------------------- edits


async def test_an_edit_that_now_mentions_the_bot_asks_for_a_reply() -> None:
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        guild = fake.add_guild("Cafe")
        async with inbound_only(fake) as (_, handler):
            message = await fake.post(guild.general, ada, "what do you think?")
            await fake.edit(message, "what do you think??")
            await fake.edit(message, "what do you think?", mention_bot=True)
            private = await fake.post(fake.dm(ada), ada, "helo")
            await fake.edit(private, "hello")
            events = await handler.wait(5)
    flags = [(e.kind, e.text, e.triggers_reply, e.mentions_bot) for e in events]
    assert flags == [
        ("message", "what do you think?", False, False),
        ("edit", "what do you think??", False, False),
        ("edit", "@Mira what do you think?", True, True),
        ("message", "helo", True, False),
        ("edit", "hello", True, False),
    ]


# ---------------------------------------------------------------------- through the runtime


async def test_a_forward_and_a_poll_in_a_dm_are_answered_once_each(tmp_path: Path) -> None:
    async with FakeDiscord(token=TOKEN) as fake:
        ada, bob = fake.add_user("Ada"), fake.add_user("Bob")
        dm = fake.dm(ada)
        async with with_runtime(fake, tmp_path) as bot:
            picture = Upload("map.png", "image/png", b"png", width=4, height=3)
            source = await fake.post(
                fake.hidden_channel(), bob, "forward me", attachments=(picture,), dispatch=False
            )
            forward = await fake.forward(dm, ada, source)
            await fake.wait_for_bot_messages(dm, 1)
            await bot.quiet()
            poll = await fake.post(dm, ada, "", poll=("Tea or coffee?", ("tea", "coffee")))
            await fake.wait_for_bot_messages(dm, 2)
            await bot.quiet()
            rows = bot.rows(
                "SELECT platform_message_id, text FROM messages WHERE role = 'user' ORDER BY id"
            )
            (quote,) = bot.rows("SELECT quote FROM messages WHERE quote IS NOT NULL")
            media = bot.rows("SELECT kind, label, unique_id, width, height FROM media")
    assert rows == [(forward["id"], ""), (poll["id"], "[poll: Tea or coffee? (tea / coffee)]")]
    assert json.loads(quote[0]) == {
        "origin": "forward",
        "author": "",
        "text": "forward me",
        "author_id": None,
        "from_bot": False,
    }
    assert media == [("image", "image map.png", _id(source), 4, 3)]
    replies = [m["content"] for m in fake.bot_messages(dm)]
    assert len(replies) == 2
    assert replies[1].startswith(f"{OFFLINE} [poll: Tea or coffee? (tea / coffee)]")


async def test_stored_text_is_what_the_person_wrote(tmp_path: Path) -> None:
    """In the store: @everyone without an invisible character, an unknown channel honestly."""
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        guild = fake.add_guild("Cafe")
        hidden = fake.hidden_channel()
        async with with_runtime(fake, tmp_path) as bot:
            await fake.post(guild.general, ada, f"@everyone look at <#{hidden}>", mention_bot=True)
            await fake.wait_for_bot_messages(guild.general, 1)
            await bot.quiet()
            (stored,) = bot.rows("SELECT text FROM messages WHERE role = 'user'")
    assert stored == ("@Mira @everyone look at #unknown-channel",)
    assert "\u200b" not in stored[0]


async def test_an_image_attachment_in_a_dm_reaches_the_model_as_an_image(
    tmp_path: Path,
) -> None:
    """Downloaded from the (fake) CDN, prepared, and sent as an image block with the caption."""
    picture = io.BytesIO()
    Image.new("RGB", (300, 200), "orange").save(picture, "PNG")
    llm = GatedLLM(answer=lambda r: "an orange square")
    async with FakeDiscord(token=TOKEN) as fake:
        ada = fake.add_user("Ada")
        dm = fake.dm(ada)
        async with with_runtime(fake, tmp_path, llm) as bot:
            upload = Upload("art.png", "image/png", picture.getvalue(), width=300, height=200)
            await fake.post(dm, ada, "my painting", attachments=(upload,))
            await fake.wait_for_bot_messages(dm, 1)
            await bot.quiet()
    (turn,) = [r for r in llm.requests if r.purpose == "reply"]
    blocks = turn.messages[-1].blocks
    (image,) = [b for b in blocks if isinstance(b, ImageBlock)]
    assert Image.open(io.BytesIO(image.data)).size == (300, 200)
    assert turn.messages[-1].text == "[image art.png]\nmy painting"
    assert [m["content"] for m in fake.bot_messages(dm)] == ["an orange square"]
