"""Telegram messages (real aiogram objects, built from Bot API JSON) as Inbound events."""

from __future__ import annotations

from typing import Any

import pytest
from aiogram.types import Message

from adapters.telegram.inbound import BotIdentity, InboundRules, to_inbound
from bot.core.events import ConversationKey, Inbound, is_person
from tests.fakes.telegram_api import FakeTelegramAPI, TgChat, TgUser

ME = BotIdentity(777, "mira_bot")
RULES = InboundRules("mira", ME, commands=frozenset({"new", "reset", "help"}))
SASHA = TgUser(1001, "Sasha", "Petrova")
GROUP = TgChat.supergroup(-1001234567890, "Friends")
FORUM = TgChat.supergroup(-1009876543210, "Forum", forum=True)
BOT_USER = TgUser(ME.id, "Mira", username=ME.username, is_bot=True)

STICKER = {
    "file_id": "s1",
    "file_unique_id": "u1",
    "type": "regular",
    "width": 512,
    "height": 512,
    "is_animated": False,
    "is_video": False,
    "emoji": "😀",
}
PHOTO = [{"file_id": "p1", "file_unique_id": "pu1", "width": 90, "height": 90}]
VOICE = {"file_id": "v1", "file_unique_id": "vu1", "duration": 3}


def _message(
    chat: TgChat, text: str | None = None, *, user: TgUser | None = SASHA, **kwargs: Any
) -> Message:
    update = FakeTelegramAPI().message_update(chat, user, text, **kwargs)
    return Message.model_validate(update.get("message") or update["edited_message"])


def _inbound(message: Message, rules: InboundRules = RULES, **kwargs: Any) -> Inbound:
    inbound = to_inbound(message, rules, **kwargs)
    assert inbound is not None
    return inbound


def test_private_message_keys_on_ids_and_keeps_the_name_for_the_prompt() -> None:
    inbound = _inbound(_message(TgChat.private(SASHA), "hello", message_id=5))
    assert inbound.conversation == ConversationKey("telegram", "1001", None, "mira")
    assert inbound.author_id == "1001"
    assert inbound.display_name == "Sasha Petrova"
    assert inbound.platform_message_id == "5"
    assert inbound.is_private and inbound.triggers_reply
    assert inbound.kind == "message"


def test_group_messages_trigger_only_on_mention_or_reply_to_the_bot() -> None:
    plain = _inbound(_message(GROUP, "just chatting"))
    assert not plain.triggers_reply and not plain.is_private
    mention = _inbound(_message(GROUP, "😀😀 hey @Mira_Bot, thoughts?"))  # UTF-16 offsets
    assert mention.mentions_bot and mention.triggers_reply
    other = _inbound(_message(GROUP, "ask @mira_bot_fan instead"))
    assert not other.mentions_bot and not other.triggers_reply
    api = FakeTelegramAPI()
    mine = api.message_update(GROUP, BOT_USER, "I am Mira")["message"]["message_id"]
    theirs = api.message_update(GROUP, SASHA, "I am Sasha")["message"]["message_id"]
    reply = api.message_update(GROUP, SASHA, "right!", reply_to_message_id=mine)
    assert _inbound(Message.model_validate(reply["message"])).reply_to_bot
    reply = api.message_update(GROUP, SASHA, "right!", reply_to_message_id=theirs)
    assert not _inbound(Message.model_validate(reply["message"])).triggers_reply


def test_text_mention_of_the_bot_counts() -> None:
    entity = {"type": "text_mention", "offset": 0, "length": 4, "user": BOT_USER.to_dict()}
    assert _inbound(_message(GROUP, "Mira, hi", entities=[entity])).mentions_bot


def test_group_trigger_all_answers_everything() -> None:
    rules = InboundRules("mira", ME, group_trigger="all")
    assert _inbound(_message(GROUP, "just chatting"), rules).triggers_reply


def test_forum_topics_are_threads_but_reply_threads_are_not() -> None:
    topic = _inbound(_message(FORUM, "@mira_bot hi", thread_id=7))
    assert topic.conversation == ConversationKey("telegram", str(FORUM.id), "7", "mira")
    reply_thread = _message(GROUP, "hi", extra={"message_thread_id": 3})
    assert _inbound(reply_thread).conversation.thread_id is None
    # In a topic, every message "replies" to the topic's first message: that is not a reply.
    start = {
        "message_id": 7,
        "date": 0,
        "chat": FORUM.to_dict(),
        "from": BOT_USER.to_dict(),
        "forum_topic_created": {"name": "Mugs", "icon_color": 0},
    }
    implicit = _message(FORUM, "in the topic", thread_id=7, extra={"reply_to_message": start})
    assert not _inbound(implicit).reply_to_bot


@pytest.mark.parametrize(
    ("chat", "text", "expected"),
    [
        (GROUP, "/new@mira_bot", "/new"),
        (GROUP, "/NEW@MIRA_BOT  now please", "/new  now please"),
        (GROUP, "/help", "/help"),
        (GROUP, "/new@other_bot", None),  # another bot's: not even context
        (GROUP, "/weather", None),  # an unknown unaddressed command is another bot's
        (GROUP, "/weather@mira_bot", "/weather"),  # ours, unknown: the router says so
        (GROUP, "/weather@mira_bot, Paris?", "/weather , Paris?"),  # the entity ends at ","
        (GROUP, "/weather@mira_bot?", "/weather ?"),
        (GROUP, "/weather@other_bot, Paris", None),
        (GROUP, "/weather@mira_botnik hi", None),  # another bot whose name starts like ours
        (TgChat.private(SASHA), "/weather", "/weather"),
        (TgChat.private(SASHA), "/start", "/start"),
    ],
)
def test_commands_addressed_to_us_only(chat: TgChat, text: str, expected: str | None) -> None:
    inbound = to_inbound(_message(chat, text), RULES)
    assert (inbound.text if inbound else None) == expected
    if inbound is not None:
        assert inbound.triggers_reply


def test_edits_are_edits_and_commands_are_never_edited() -> None:
    edit = _inbound(_message(GROUP, "fixed typo", message_id=9, edited=True), edited=True)
    assert edit.kind == "edit" and edit.platform_message_id == "9" and edit.text == "fixed typo"
    assert to_inbound(_message(GROUP, "/new", edited=True), RULES, edited=True) is None


def test_bots_and_the_bot_itself_are_ignored() -> None:
    other_bot = TgUser(888, "Other", username="other_bot", is_bot=True)
    assert to_inbound(_message(GROUP, "beep", user=other_bot), RULES) is None
    assert to_inbound(_message(GROUP, "my own words", user=BOT_USER), RULES) is None


ANONYMOUS = TgUser(1087968824, "Group", username="GroupAnonymousBot", is_bot=True)
CHANNEL_BOT = TgUser(136817688, "Channel", username="Channel_Bot", is_bot=True)
CHANNEL = TgChat(-1005550000001, "channel", title="Friends News")


def test_anonymous_admins_are_their_own_author_never_the_group() -> None:
    extra = {"sender_chat": GROUP.to_dict()}
    inbound = _inbound(_message(GROUP, "@mira_bot admins say hi", user=ANONYMOUS, extra=extra))
    assert inbound.author_id == f"anon:{GROUP.id}" and inbound.display_name == "Anonymous admin"
    assert inbound.triggers_reply  # an admin addressing the bot is answered
    signed = _message(GROUP, "hi", user=ANONYMOUS, extra={**extra, "author_signature": "Owner"})
    assert _inbound(signed).display_name == "Owner"
    assert not is_person(inbound.author_id) and is_person(_inbound(_message(GROUP, "x")).author_id)


def test_a_channel_is_its_own_author_and_its_automatic_forwards_never_trigger() -> None:
    rules = InboundRules("mira", ME, group_trigger="all", commands=RULES.commands)
    entities = [{"type": "mention", "offset": 0, "length": 9}]
    extra = {"sender_chat": CHANNEL.to_dict(), "is_automatic_forward": True}
    for text in ("news of the day", "@mira_bot read this", "/new"):
        forward = _message(GROUP, text, user=CHANNEL_BOT, entities=entities, extra=extra)
        inbound = _inbound(forward, rules)
        assert inbound.author_id == f"channel:{CHANNEL.id}"
        assert inbound.display_name == "Friends News" and inbound.text == text
        assert not inbound.triggers_reply and not inbound.mentions_bot  # kept as context
        assert not is_person(inbound.author_id)
    # Someone posting as the channel (not an automatic forward) is the channel, and is heard.
    posted = _message(GROUP, "hello", user=CHANNEL_BOT, extra={"sender_chat": CHANNEL.to_dict()})
    inbound = _inbound(posted, rules)
    assert inbound.author_id == f"channel:{CHANNEL.id}" and inbound.triggers_reply


@pytest.mark.parametrize(
    ("extra", "label", "ignored"),
    [
        ({"sticker": STICKER}, "sticker 😀", None),
        ({"photo": PHOTO}, "photo", None),
        ({"voice": VOICE}, "voice message", None),
        ({"photo": PHOTO, "caption": "look at this"}, "photo", "look at this"),
    ],
)
def test_non_text_messages_carry_media_or_are_ignored(
    extra: dict[str, Any], label: str, ignored: str | None
) -> None:
    """The text is what the person wrote; the media ride along (no "[photo]" in the text),
    unless the bot is told to ignore non-text content."""
    message = _message(TgChat.private(SASHA), None, extra=extra)
    inbound = _inbound(message)
    assert inbound.text == extra.get("caption", "")
    assert [m.label for m in inbound.media] == [label]
    quiet = InboundRules("mira", ME, non_text="ignore")
    inbound_quiet = to_inbound(message, quiet)
    assert (inbound_quiet.text if inbound_quiet else None) == ignored
    assert inbound_quiet is None or inbound_quiet.media == ()


def test_service_messages_are_ignored() -> None:
    joined = _message(GROUP, None, extra={"new_chat_members": [SASHA.to_dict()]})
    assert to_inbound(joined, RULES) is None


def test_a_caption_can_mention_the_bot() -> None:
    caption = "@mira_bot what is this?"
    entities = [{"type": "mention", "offset": 0, "length": 9}]
    extra = {"photo": PHOTO, "caption": caption, "caption_entities": entities}
    inbound = _inbound(_message(GROUP, None, extra=extra))
    assert inbound.mentions_bot and inbound.triggers_reply and inbound.text == caption
    assert [m.kind for m in inbound.media] == ["image"]
