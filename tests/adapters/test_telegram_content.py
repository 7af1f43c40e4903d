"""What people send on Telegram, as the Inbound the runtime gets: media references, honest
descriptions of file-less kinds, replies, quotes and forwards (real aiogram objects built from
Bot API JSON; the adapter-level tests through the Bot API are in test_telegram_media.py)."""

from __future__ import annotations

from typing import Any

import pytest
from aiogram import Bot
from aiogram.types import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.telegram.content import DOWNLOAD_LIMIT, UNREADABLE
from adapters.telegram.inbound import BotIdentity, InboundRules, to_inbound
from adapters.telegram.quotes import QUOTE_LIMIT, UNREADABLE_REPLY
from adapters.telegram.updates import parse_update
from bot.core.events import Inbound
from bot.core.media import MediaRef, Quote
from tests.fakes.telegram_api import (
    FakeTelegramAPI,
    TgChat,
    TgUser,
    channel_origin,
    chat_origin,
    hidden_user_origin,
    user_origin,
)

TOKEN = "777:AAH-content-tests"
ME = BotIdentity(777, "mira_bot")
RULES = InboundRules("mira", ME, commands=frozenset({"new", "help"}))
SASHA = TgUser(1001, "Sasha", "Petrova")
ANN = TgUser(1002, "Ann")
BOT_USER = TgUser(ME.id, "Mira", username=ME.username, is_bot=True)
PRIVATE = TgChat.private(SASHA)
GROUP = TgChat.supergroup(-1001234567890, "Friends")
CHANNEL = TgChat(-1005550000001, "channel", title="Mug News")


def _inbound(
    api: FakeTelegramAPI,
    chat: TgChat = PRIVATE,
    text: str | None = None,
    *,
    user: TgUser = SASHA,
    rules: InboundRules = RULES,
    **kwargs: Any,
) -> Inbound:
    update = api.message_update(chat, user, text, **kwargs)
    message = Message.model_validate(update.get("message") or update["edited_message"])
    inbound = to_inbound(message, rules, edited="edited_message" in update)
    assert inbound is not None
    return inbound


def _from_server(
    api: FakeTelegramAPI, chat: TgChat = PRIVATE, text: str | None = None, **kwargs: Any
) -> Inbound:
    """The Inbound of an update as it comes off the wire: read by parse_update (which brings
    an older Bot API server's update to today's shape), then normalized."""
    parsed = parse_update(api.message_update(chat, SASHA, text, **kwargs), Bot(TOKEN))
    assert parsed.update is not None and parsed.update.message is not None, parsed.describe()
    inbound = to_inbound(parsed.update.message, RULES)
    assert inbound is not None
    return inbound


@pytest.fixture
def api() -> FakeTelegramAPI:
    """The fake's builders only (no server: nothing here goes over HTTP)."""
    return FakeTelegramAPI()


# ----------------------------------------------------------------------------- photos


def test_a_photo_is_the_smallest_size_big_enough_for_the_model(api: FakeTelegramAPI) -> None:
    sizes = api.photo((90, 60), (800, 533), (1600, 1066), (2560, 1706))
    inbound = _inbound(api, extra={"photo": sizes}, caption="my cat")
    (photo,) = inbound.media
    assert inbound.text == "my cat"  # the caption only, no "[photo]"
    assert (photo.kind, photo.label, photo.ref) == ("image", "photo", sizes[2]["file_id"])
    assert (photo.width, photo.height, photo.media_type) == (1600, 1066, "image/jpeg")
    assert photo.unique_id == sizes[2]["file_unique_id"]
    assert photo.size == len(b"photo 1600x1066")


def test_a_small_photo_is_its_largest_size_and_never_one_past_the_download_limit(
    api: FakeTelegramAPI,
) -> None:
    small = api.photo((90, 90), (320, 320), (800, 800))
    assert _inbound(api, extra={"photo": small}).media[0].ref == small[2]["file_id"]
    huge = api.photo((320, 320), (1600, 1600), (4000, 4000))
    huge[1]["file_size"] = DOWNLOAD_LIMIT + 1  # the Bot API refuses to hand it out
    huge[2]["file_size"] = DOWNLOAD_LIMIT * 2
    assert _inbound(api, extra={"photo": huge}).media[0].ref == huge[0]["file_id"]
    for size in huge:
        size["file_size"] = DOWNLOAD_LIMIT + 1
    (photo,) = _inbound(api, extra={"photo": huge}).media
    assert (photo.kind, photo.label, photo.ref) == ("image", "photo", "")  # said, not fetched


# ---------------------------------------------------------------------- media kinds


def _media(api: FakeTelegramAPI, **fields: Any) -> MediaRef:
    inbound = _inbound(api, extra=fields)
    assert inbound.text == "" and inbound.quote is None
    (media,) = inbound.media
    return media


def test_stickers_are_images_or_their_thumbnails(api: FakeTelegramAPI) -> None:
    static = api.sticker("static")
    media = _media(api, sticker=static)
    assert (media.kind, media.label, media.ref) == ("image", "sticker 😀", static["file_id"])
    assert media.media_type == "image/webp"
    for kind in ("animated", "video"):
        sticker = api.sticker(kind)
        media = _media(api, sticker=sticker)
        assert (media.kind, media.label) == ("image", f"{kind} sticker 😀")
        assert media.ref == sticker["thumbnail"]["file_id"]  # the still, never the TGS/WebM
        assert (media.width, media.height) == (128, 128)
    bare = _media(api, sticker=api.sticker("animated", emoji=None, thumbnail=False))
    assert (bare.kind, bare.label, bare.ref) == ("file", "animated sticker", "")


def test_documents_voice_video_and_audio_are_their_own_kinds(api: FakeTelegramAPI) -> None:
    image = api.document(b"png", file_name="cat.png", mime_type="image/png")
    assert _media(api, document=image) == MediaRef(
        "image", "image cat.png", image["file_id"], image["file_unique_id"], "image/png", 3
    )
    pdf = _media(api, document=api.document())
    assert (pdf.kind, pdf.label, pdf.media_type) == ("file", "file notes.pdf", "application/pdf")
    nameless = _media(api, document=api.document(file_name=None, mime_type=None))
    assert (nameless.kind, nameless.label) == ("file", "file")
    voice = _media(api, voice=api.voice(duration=7))
    assert (voice.kind, voice.label, voice.duration, voice.media_type) == (
        "voice",
        "voice message",
        7.0,
        "audio/ogg",
    )
    note = _media(api, video_note=api.video_note(length=240))
    assert (note.kind, note.label, note.width) == ("video_note", "video message", 240)
    audio = _media(api, audio=api.audio())
    assert (audio.kind, audio.label, audio.duration) == ("audio", "audio Band - Song", 200.0)
    video = _media(api, video=api.video())
    assert (video.kind, video.label, video.width, video.height) == ("video", "video", 1280, 720)


def test_a_gif_is_its_thumbnail_and_not_also_a_file(api: FakeTelegramAPI) -> None:
    fields = api.animation()
    gif = _media(api, **fields)  # Telegram sends a GIF's document twin too: one medium
    assert (gif.kind, gif.label, gif.ref) == (
        "image",
        "GIF",
        fields["animation"]["thumbnail"]["file_id"],
    )
    bare = _media(api, **api.animation(thumbnail=False))
    assert (bare.kind, bare.label) == ("video", "GIF")


def test_a_file_name_is_one_short_line(api: FakeTelegramAPI) -> None:
    name = "a]\n\tb " + "x" * 500 + ".pdf"
    label = _media(api, document=api.document(file_name=name)).label
    assert label.startswith("file a) b xxx") and len(label) <= 110 and "\n" not in label


# ------------------------------------------------------------------- older servers


def _old(file: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A file object as a Bot API 3.x server sent it: no file_unique_id, ``thumb``."""
    old = {k: v for k, v in file.items() if k not in ("file_unique_id", "thumbnail")}
    if "thumbnail" in file:
        old["thumb"] = _old(file["thumbnail"])
    return {**old, **fields}


def test_an_older_servers_files_are_media_not_lost(api: FakeTelegramAPI) -> None:
    """Files without ``file_unique_id`` (Bot API before 4.5) are MediaRefs fetched by their
    file_id; ``thumb`` (before 6.6) is the thumbnail; a sticker from before animated and
    video stickers (no type, is_animated, is_video) is a static one."""
    sizes = [_old(s) for s in api.photo((320, 240), (1600, 1200))]
    photo = _from_server(api, caption="my cat", extra={"photo": sizes})
    assert photo.text == "my cat"
    assert [(m.kind, m.ref, m.unique_id) for m in photo.media] == [
        ("image", sizes[1]["file_id"], sizes[1]["file_id"])
    ]
    sticker = _old(api.sticker("static"))
    for key in ("type", "is_animated", "is_video"):
        del sticker[key]
    (media,) = _from_server(api, extra={"sticker": sticker}).media
    assert (media.kind, media.label, media.ref) == ("image", "sticker 😀", sticker["file_id"])
    animated = _old(api.sticker("animated"), type="regular")
    del animated["is_video"]  # Bot API 4.5 to 5.4: animated stickers, no video ones yet
    (media,) = _from_server(api, extra={"sticker": animated}).media
    assert (media.label, media.ref) == ("animated sticker 😀", animated["thumb"]["file_id"])
    gif = api.animation()
    old_gif = {"animation": _old(gif["animation"]), "document": _old(gif["document"])}
    (media,) = _from_server(api, extra=old_gif).media
    assert (media.label, media.ref) == ("GIF", old_gif["animation"]["thumb"]["file_id"])
    for field, file, kind in (
        ("document", api.document(), "file"),
        ("voice", api.voice(), "voice"),
        ("audio", api.audio(), "audio"),
        ("video", api.video(), "video"),
        ("video_note", api.video_note(), "video_note"),
    ):
        (media,) = _from_server(api, extra={field: _old(file)}).media
        assert (media.kind, media.ref, media.unique_id) == (kind, file["file_id"], file["file_id"])


def test_an_older_servers_game_keeps_its_title(api: FakeTelegramAPI) -> None:
    """A 2017 game: photo sizes without file_unique_id, an animation without the width,
    height and duration Bot API 4.0 added. The animation alone is dropped; the game is told."""
    animation = _old(api.animation()["animation"])
    for key in ("width", "height", "duration"):
        animation.pop(key, None)
    game = {
        "title": "Karate Kido",
        "description": "No trees were harmed",
        "photo": [_old(s) for s in api.photo((320, 180))],
        "animation": animation,
    }
    assert _from_server(api, extra={"game": game}).text == "[game: Karate Kido]"


def test_media_that_cannot_be_repaired_is_still_said(api: FakeTelegramAPI) -> None:
    """A field no repair can save is dropped, with a stand-in: never a caption alone as if no
    file were there, never "a message this bot cannot read"."""
    sizes = api.photo((320, 240))
    del sizes[0]["width"]
    photo = _from_server(api, caption="my cat", extra={"photo": sizes})
    assert (photo.text, photo.media) == ("[a photo this bot could not read] my cat", ())
    voice = {"file_id": "AwAD-old"}  # no duration
    assert (
        _from_server(api, extra={"voice": voice}).text
        == "[a voice message this bot could not read]"
    )
    venue = {"title": "Cafe", "address": "Main St 1", "location": {"latitude": 1.0}}
    assert _from_server(api, extra={"venue": venue}).text == "[a place this bot could not read]"
    original = api.message_update(PRIVATE, SASHA, "the plan")["message"]
    del original["chat"]["type"]
    reply = _from_server(api, text="yes", extra={"reply_to_message": original})
    assert reply.quote == Quote("reply", "", UNREADABLE_REPLY)


@pytest.mark.parametrize(
    ("legacy", "author", "author_id"),
    [
        ({"forward_from": ANN.to_dict()}, "Ann", str(ANN.id)),
        ({"forward_sender_name": "Secret Sam"}, "Secret Sam", None),
        (
            {
                "forward_from_chat": CHANNEL.to_dict(),
                "forward_from_message_id": 7,
                "forward_signature": "Boss",
            },
            "Mug News (Boss)",
            f"channel:{CHANNEL.id}",
        ),
        ({"forward_from_chat": GROUP.to_dict()}, "Friends", f"anon:{GROUP.id}"),
        ({}, "", None),  # a forward date alone: a forward from nobody the server named
    ],
)
def test_an_older_servers_forward_is_a_quote_of_its_origin(
    api: FakeTelegramAPI, legacy: dict[str, Any], author: str, author_id: str | None
) -> None:
    """The forward fields Bot API 7.0 replaced by ``forward_origin`` mean the same quote."""
    extra = {**legacy, "forward_date": 1508912176}
    inbound = _from_server(api, text="@mira_bot /new look", extra=extra)
    assert inbound.text == ""
    assert inbound.quote == Quote("forward", author, "@mira_bot /new look", author_id)
    in_group = _from_server(api, GROUP, "@mira_bot look", extra=extra)
    assert not in_group.mentions_bot and not in_group.triggers_reply  # someone else's mention
    both = {**extra, "forward_origin": hidden_user_origin("Today's name")}
    today = _from_server(api, text="look", extra=both).quote
    assert today is not None and today.author == "Today's name"  # the current field wins


# --------------------------------------------------------------------------- file-less


_POLL = {
    "id": "p1",
    "question": "Tea or coffee?",
    "options": [
        {"persistent_id": "a", "text": "tea", "voter_count": 0},
        {"persistent_id": "b", "text": "coffee", "voter_count": 0},
    ],
    "total_voter_count": 0,
    "is_closed": False,
    "is_anonymous": True,
    "type": "regular",
    "allows_multiple_answers": False,
    "allows_revoting": False,
    "members_only": False,
}


@pytest.mark.parametrize(
    ("fields", "text"),
    [
        ({"location": {"latitude": 52.52, "longitude": 13.405}}, "[location: 52.52000, 13.40500]"),
        (
            {"location": {"latitude": 1.5, "longitude": 2.25, "live_period": 900}},
            "[live location: 1.50000, 2.25000]",
        ),
        (
            {
                "venue": {
                    "location": {"latitude": 1, "longitude": 2},
                    "title": "Cafe Mug",
                    "address": "Main St 1",
                },
                "location": {"latitude": 1, "longitude": 2},
            },
            "[place: Cafe Mug, Main St 1]",
        ),
        (
            {"contact": {"phone_number": "+100", "first_name": "Ann", "last_name": "Lee"}},
            "[contact: Ann Lee]",
        ),
        ({"dice": {"emoji": "🎲", "value": 4}}, "[dice 🎲 4]"),
        ({"poll": _POLL}, "[poll: Tea or coffee? (tea / coffee)]"),
        (
            {"game": {"title": "Mug Race", "description": "race", "photo": []}},
            "[game: Mug Race]",
        ),
        ({"story": {"chat": CHANNEL.to_dict(), "id": 5}}, "[story from Mug News]"),
        (
            {
                "giveaway": {
                    "chats": [CHANNEL.to_dict()],
                    "winners_selection_date": 1700000000,
                    "winner_count": 3,
                }
            },
            "[giveaway: 3 winners]",
        ),
        (
            {
                "checklist": {
                    "title": "Trip",
                    "tasks": [{"id": 1, "text": "tickets"}, {"id": 2, "text": "mugs"}],
                }
            },
            "[checklist: Trip (tickets / mugs)]",
        ),
        (
            {"paid_media": {"star_count": 10, "paid_media": [{"type": "preview"}]}},
            "[paid media: 1 item for 10 stars]",
        ),
        (
            {
                "invoice": {
                    "title": "Mug",
                    "description": "a mug",
                    "start_parameter": "x",
                    "currency": "EUR",
                    "total_amount": 100,
                }
            },
            "[invoice: Mug]",
        ),
        ({"brand_new_kind": {"something": 1}}, UNREADABLE),  # newer than aiogram
    ],
)
def test_kinds_without_a_file_are_an_honest_text(
    api: FakeTelegramAPI, fields: dict[str, Any], text: str
) -> None:
    inbound = _inbound(api, extra=fields)
    assert (inbound.text, inbound.media, inbound.triggers_reply) == (text, (), True)
    in_group = _inbound(api, GROUP, extra=fields)
    assert in_group.text == text and not in_group.triggers_reply  # context there


def test_a_caption_follows_the_description_and_service_messages_are_nothing(
    api: FakeTelegramAPI,
) -> None:
    paid = {"paid_media": {"star_count": 5, "paid_media": [{"type": "preview"}]}}
    assert _inbound(api, extra=paid, caption="for you").text == (
        "[paid media: 1 item for 5 stars] for you"
    )
    pinned = {"pinned_message": {"message_id": 1, "date": 0, "chat": PRIVATE.to_dict()}}
    update = api.message_update(PRIVATE, SASHA, None, extra=pinned)
    assert to_inbound(Message.model_validate(update["message"]), RULES) is None


def test_a_live_location_moving_is_no_edit() -> None:
    api = FakeTelegramAPI()
    live = {"location": {"latitude": 1.0, "longitude": 2.0, "live_period": 60}}
    update = api.message_update(PRIVATE, SASHA, None, edited=True, extra=live)
    assert to_inbound(Message.model_validate(update["edited_message"]), RULES, edited=True) is None


# ---------------------------------------------------------------------------- replies


def test_a_reply_carries_the_replied_message_and_its_author(api: FakeTelegramAPI) -> None:
    said = api.message_update(GROUP, ANN, "the meeting is at noon")["message"]["message_id"]
    inbound = _inbound(api, GROUP, "is it still?", reply_to_message_id=said)
    assert inbound.quote == Quote("reply", "Ann", "the meeting is at noon", str(ANN.id))
    assert not inbound.reply_to_bot and not inbound.triggers_reply
    mine = api.message_update(GROUP, BOT_USER, "I like blue mugs")["message"]["message_id"]
    to_me = _inbound(api, GROUP, "why?", reply_to_message_id=mine)
    assert to_me.quote == Quote("reply", "Mira", "I like blue mugs", str(ME.id), from_bot=True)
    assert to_me.reply_to_bot and to_me.triggers_reply


def test_a_reply_to_media_names_it_and_a_quote_is_the_quoted_part(api: FakeTelegramAPI) -> None:
    photo = api.message_update(GROUP, ANN, None, caption="our mug", extra={"photo": api.photo()})
    to_photo = _inbound(api, GROUP, "nice", reply_to_message_id=photo["message"]["message_id"])
    assert to_photo.quote is not None and to_photo.quote.text == "[photo] our mug"
    sticker = api.message_update(GROUP, ANN, None, extra={"sticker": api.sticker()})
    to_sticker = _inbound(api, GROUP, "ha", reply_to_message_id=sticker["message"]["message_id"])
    assert to_sticker.quote is not None and to_sticker.quote.text == "[sticker 😀]"
    long = api.message_update(GROUP, BOT_USER, "First part. Second part, the one.")
    quoted = _inbound(
        api,
        GROUP,
        "really?",
        reply_to_message_id=long["message"]["message_id"],
        quote="Second part",
    )
    assert quoted.quote == Quote("quote", "Mira", "Second part", str(ME.id), from_bot=True)
    assert quoted.triggers_reply  # quoting the bot is replying to it


def test_quoted_text_is_cut_to_a_thousand_characters(api: FakeTelegramAPI) -> None:
    essay = api.message_update(PRIVATE, SASHA, "word " * 900)["message"]["message_id"]
    inbound = _inbound(api, text="tl;dr?", reply_to_message_id=essay)
    assert inbound.quote is not None
    assert len(inbound.quote.text) == QUOTE_LIMIT and inbound.quote.text.endswith("…")


def test_an_external_reply_names_the_other_chat(api: FakeTelegramAPI) -> None:
    external = {
        "external_reply": {
            "origin": channel_origin(CHANNEL, 42),
            "chat": CHANNEL.to_dict(),
            "message_id": 42,
            "photo": api.photo((320, 320)),
        },
        "quote": {"text": "new mugs in stock", "position": 0},
    }
    inbound = _inbound(api, text="want one", extra=external)
    assert inbound.quote == Quote("quote", "Mug News", "new mugs in stock", f"channel:{CHANNEL.id}")
    del external["quote"]
    inbound = _inbound(api, text="want one", extra=external)
    assert inbound.quote is not None and inbound.quote.text == "[photo]"
    assert inbound.media == ()  # the other chat's photo is not this message's


# --------------------------------------------------------------------------- forwards


@pytest.mark.parametrize(
    ("origin", "author", "author_id"),
    [
        (user_origin(ANN), "Ann", str(ANN.id)),
        (hidden_user_origin("Secret Sam"), "Secret Sam", None),
        (chat_origin(GROUP, "Boss"), "Friends (Boss)", f"anon:{GROUP.id}"),
        (channel_origin(CHANNEL, 7), "Mug News", f"channel:{CHANNEL.id}"),
    ],
)
def test_a_forward_is_a_quote_of_its_origin(
    api: FakeTelegramAPI, origin: dict[str, Any], author: str, author_id: str | None
) -> None:
    inbound = _inbound(api, text="@mira_bot /new look", forward_origin=origin)
    assert inbound.text == ""  # the forwarder wrote nothing; the forwarded words are the quote
    assert inbound.quote == Quote("forward", author, "@mira_bot /new look", author_id)
    in_group = _inbound(api, GROUP, "@mira_bot look", forward_origin=origin)
    assert not in_group.mentions_bot and not in_group.triggers_reply  # someone else's mention


def test_a_forwarded_photo_keeps_its_media_and_the_bot_knows_its_own_words(
    api: FakeTelegramAPI,
) -> None:
    sizes = api.photo((800, 800))
    inbound = _inbound(api, caption="look", forward_origin=user_origin(ANN), extra={"photo": sizes})
    assert inbound.text == "" and [m.ref for m in inbound.media] == [sizes[0]["file_id"]]
    assert inbound.quote == Quote("forward", "Ann", "look", str(ANN.id))
    own = _inbound(api, text="I said this", forward_origin=user_origin(BOT_USER))
    assert own.quote is not None and own.quote.from_bot
    poll = _inbound(api, forward_origin=user_origin(ANN), extra={"poll": _POLL})
    assert poll.quote is not None and poll.quote.text == "[poll: Tea or coffee? (tea / coffee)]"


def test_an_automatic_forward_stays_the_channels_own_post(api: FakeTelegramAPI) -> None:
    channel_bot = TgUser(136817688, "Channel", username="Channel_Bot", is_bot=True)
    extra = {"sender_chat": CHANNEL.to_dict(), "is_automatic_forward": True}
    rules = InboundRules("mira", ME, group_trigger="all")
    inbound = _inbound(
        api,
        GROUP,
        "@mira_bot new mugs",
        user=channel_bot,
        rules=rules,
        forward_origin=channel_origin(CHANNEL, 3),
        extra=extra,
    )
    assert (inbound.author_id, inbound.text, inbound.quote) == (
        f"channel:{CHANNEL.id}",
        "@mira_bot new mugs",
        None,
    )
    assert not inbound.triggers_reply and not inbound.mentions_bot


# ------------------------------------------------------------------------------ edits


def test_an_edit_that_now_addresses_the_bot_triggers_a_reply(api: FakeTelegramAPI) -> None:
    first = _inbound(api, GROUP, "what about lunch", message_id=40)
    assert not first.triggers_reply
    edit = _inbound(api, GROUP, "what about lunch, @mira_bot?", message_id=40, edited=True)
    assert (edit.kind, edit.platform_message_id) == ("edit", "40")
    assert edit.triggers_reply and edit.mentions_bot
    mine = api.message_update(GROUP, BOT_USER, "lunch at one")["message"]["message_id"]
    replied = _inbound(api, GROUP, "ok!", message_id=41, reply_to_message_id=mine, edited=True)
    assert replied.kind == "edit" and replied.triggers_reply and replied.reply_to_bot
    plain = _inbound(api, GROUP, "what about dinner", message_id=40, edited=True)
    assert not plain.triggers_reply
    caption = _inbound(
        api, GROUP, None, message_id=42, caption="@mira_bot this?", edited=True,
        extra={"photo": api.photo((90, 90))},
    )  # fmt: skip
    assert caption.triggers_reply and caption.text == "@mira_bot this?"


# ------------------------------------------------------------------------- properties


_FILE = st.fixed_dictionaries(
    {"file_id": st.text(min_size=1, max_size=8), "file_unique_id": st.text(min_size=1, max_size=8)},
    optional={"file_size": st.integers(0, 2 * DOWNLOAD_LIMIT)},
)
_SIZE = st.builds(
    lambda f, w, h: {**f, "width": w, "height": h},
    _FILE,
    st.integers(0, 5000),
    st.integers(0, 5000),
)
_NAME = st.text(max_size=300)
_MIME = st.sampled_from(
    ["image/png", "image/heic", "application/pdf", "video/mp4", "", "IMAGE/JPEG"]
)
_MEDIA_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "photo": st.lists(_SIZE, max_size=4),
    "sticker": st.builds(
        lambda f, animated, video, thumb, emoji: {
            **f,
            "type": "regular",
            "width": 512,
            "height": 512,
            "is_animated": animated,
            "is_video": video,
            **({"thumbnail": thumb} if thumb else {}),
            **({"emoji": emoji} if emoji else {}),
        },
        _FILE,
        st.booleans(),
        st.booleans(),
        st.none() | _SIZE,
        st.none() | st.text(max_size=3),
    ),
    "document": st.builds(
        lambda f, name, mime: {**f, "file_name": name, "mime_type": mime}, _FILE, _NAME, _MIME
    ),
    "voice": st.builds(lambda f, d: {**f, "duration": d}, _FILE, st.integers(0, 10**6)),
    "video_note": st.builds(lambda f: {**f, "duration": 1, "length": 240}, _FILE),
    "audio": st.builds(
        lambda f, title: {**f, "duration": 1, **({"title": title} if title else {})},
        _FILE,
        st.none() | _NAME,
    ),
    "video": st.builds(lambda f: {**f, "width": 1, "height": 1, "duration": 1}, _FILE),
    "animation": st.builds(
        lambda f, thumb: {
            **f,
            "width": 1,
            "height": 1,
            "duration": 1,
            **({"thumbnail": thumb} if thumb else {}),
        },
        _FILE,
        st.none() | _SIZE,
    ),
    "location": st.builds(
        lambda lat, lon: {"latitude": lat, "longitude": lon},
        st.floats(-90, 90),
        st.floats(-180, 180),
    ),
    "contact": st.builds(
        lambda first: {"phone_number": "1", "first_name": first}, st.text(max_size=50)
    ),
    "dice": st.builds(lambda v: {"emoji": "🎲", "value": v}, st.integers(1, 6)),
    "poll": st.just(_POLL),
    "venue": st.builds(
        lambda title: {"location": {"latitude": 0, "longitude": 0}, "title": title, "address": ""},
        _NAME,
    ),
    "story": st.just({"chat": {"id": -1, "type": "channel"}, "id": 1}),
    "paid_media": st.just({"star_count": 1, "paid_media": []}),
    "caption": st.text(max_size=5000),
    "forward_origin": st.sampled_from(
        [user_origin(ANN), hidden_user_origin(""), chat_origin(GROUP), channel_origin(CHANNEL)]
    ),
    "quote": st.builds(lambda t: {"text": t, "position": 0}, st.text(max_size=2000)),
    "media_group_id": st.text(max_size=5),
    "reply_to_message": st.builds(
        lambda text: {
            "message_id": 1,
            "date": 0,
            "chat": PRIVATE.to_dict(),
            **({"text": text} if text is not None else {}),
        },
        st.none() | st.text(max_size=3000),
    ),
}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    fields=st.fixed_dictionaries({}, optional=_MEDIA_FIELDS),
    text=st.none() | st.text(max_size=5000),
    private=st.booleans(),
    edited=st.booleans(),
)
def test_no_payload_breaks_normalization_or_is_an_empty_turn(
    fields: dict[str, Any], text: str | None, private: bool, edited: bool
) -> None:
    """Random subsets of media fields, missing optional ones, huge captions and quotes: to_inbound
    never raises, and a private chat never gets an empty turn nor a silent drop."""
    chat = PRIVATE if private else GROUP
    raw: dict[str, Any] = {"message_id": 1, "date": 0, "chat": chat.to_dict(), **fields}
    raw["from"] = SASHA.to_dict()
    if text is not None:
        raw["text"] = text
    message = Message.model_validate(raw)
    inbound = to_inbound(message, RULES, edited=edited)
    if inbound is None:
        # In a private chat only an edit into a command or a live location's edit is dropped
        # (a group drops another bot's command, and an empty message: nobody is talking).
        command = (text or "").startswith("/") and "forward_origin" not in fields
        other_bot = command and "@" in (text or "")  # /cmd@other_bot
        assert not private or other_bot or (edited and (command or "location" in fields))
        return
    assert inbound.text.strip() or inbound.media or inbound.quote is not None
    if inbound.quote is not None:
        assert len(inbound.quote.text) <= QUOTE_LIMIT
    for media in inbound.media:
        assert media.label and len(media.label) <= 120
