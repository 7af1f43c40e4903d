"""A small fake of the Telegram Bot API for tests: real aiogram over real HTTP on 127.0.0.1.

It answers ``/bot<token>/<method>`` the way the Bot API does for aiogram: form-encoded or
multipart requests, ``{"ok": true, "result": ...}`` answers and ``{"ok": false, "error_code",
"description", "parameters"}`` errors with the same HTTP status.

::

    async with FakeTelegramAPI() as api:
        api.add_bot(TOKEN, "mira_bot")
        sasha = TgUser(1001, "Sasha")
        api.push_message(TOKEN, TgChat.private(sasha), sasha, "hello")   # a getUpdates update
        api.fail_next("sendMessage", status=429, retry_after=1)          # flood limit once
        await api.wait_for(lambda: api.sent_messages(TOKEN), within=10)
        assert api.sent_messages(TOKEN)[0].visible_text == "..."

Behaviour:

* ``getMe`` answers the bot user of the token; an unknown token gets ``401 Unauthorized``.
* ``getUpdates`` long-polls (``timeout`` seconds) the token's queue; updates below ``offset``
  are confirmed and dropped, as on Telegram. A second ``getUpdates`` for the same token ends
  the first with ``409 Conflict: terminated by other getUpdates request``; with a webhook set
  it answers 409 too. :meth:`FakeTelegramAPI.redeliver` queues an update again, delivered
  once whatever the offset (Telegram re-sending an update whose offset was never confirmed).
* ``sendMessage`` / ``editMessageText`` check the text like Telegram: ``parse_mode=HTML`` is
  parsed (supported tags only, properly nested; else ``400 can't parse entities``), and the
  text left after parsing may be at most 4096 UTF-16 code units (else ``400 message is too
  long``). A ``reply_parameters`` message that does not exist (never sent, or deleted with
  :meth:`FakeTelegramAPI.delete_message`) gives ``400 message to be replied not found``
  unless ``allow_sending_without_reply`` is set.
* ``sendMessageDraft`` (Bot API 10.3) is checked like ``sendMessage`` (HTML, 4096 units after
  parsing; an empty text is Telegram's "Thinking…" placeholder) and needs a non-zero integer
  ``draft_id``; a chat that is not private answers ``400 TEXTDRAFT_PEER_INVALID``. The latest
  draft of each (chat, draft id) is kept (:meth:`FakeTelegramAPI.draft_text`); successful calls
  are :meth:`FakeTelegramAPI.drafts`. :meth:`FakeTelegramAPI.push_stop` queues the
  ``stopped_message_generation`` update of the draft's stop button.
* ``editMessageText`` with the text (and formatting) the message already has answers ``400
  message is not modified``, as Telegram does.
* ``sendDocument`` takes a multipart upload (kept as :class:`UploadedFile`; ``attach://name``
  references resolved, and ``params["document"]`` of the recorded call is the file) with an optional
  ``caption`` (at most 1024 characters). A private chat the user never opened (the user was
  only seen in groups) answers ``403 Forbidden: bot can't initiate conversation with a user``
  for every send, as Telegram does before the user pressed Start.
  :meth:`FakeTelegramAPI.remove_from_chat` makes a bot no member of a group (``403 Forbidden:
  bot is not a member of the supergroup chat`` for its sends there).
* ``sendVoice`` takes a multipart ``voice`` upload like ``sendDocument``, an optional
  ``caption`` (checked like a message's text, at most 1024 characters after parsing) and
  ``duration``; a private chat of a user in :attr:`FakeTelegramAPI.voice_forbidden` answers
  ``400 Bad Request: VOICE_MESSAGES_FORBIDDEN`` (their privacy setting), as Telegram does.
* ``sendChatAction``, ``setMyCommands``, ``setWebhook``, ``deleteWebhook``, ``getWebhookInfo``
  and ``deleteMessage`` are answered and recorded. ``setMyCommands`` keeps a list per
  ``scope`` and ``language_code`` (two lowercase letters, else ``400``), as Telegram does
  (:meth:`FakeTelegramAPI.menu` for names, :meth:`FakeTelegramAPI.commands` for the whole
  list); ``deleteMyCommands`` removes the one of its scope and language (its people get the
  scope's menu without a language, or the next scope's).
* Inline keyboards: a ``sendMessage`` ``reply_markup`` is checked (``callback_data`` 1-64
  bytes, else ``400 BUTTON_DATA_INVALID``) and kept on the message
  (:meth:`FakeTelegramAPI.keyboard`). :meth:`FakeTelegramAPI.push_press` queues the
  ``callback_query`` update of a press (of a button's data, or of any data: a forged press).
  ``answerCallbackQuery`` takes each query once (a second answer or an unknown id is ``400
  query is too old...``); :meth:`FakeTelegramAPI.press_answers` are the answers.
  ``editMessageReplyMarkup`` replaces (or, without ``reply_markup``, takes away) a message's
  keyboard (``400 message is not modified`` when it is the same).
* :meth:`FakeTelegramAPI.fail_next` scripts errors per method (and optionally per token):
  ``429`` with ``retry_after``, ``400`` with a description, ``403``, ``5xx``...
* Files: :meth:`FakeTelegramAPI.add_file` registers bytes under a new ``file_id``;
  ``getFile`` answers its ``file_path`` (``400 invalid file_id`` for an unknown id, ``400 file
  is too big`` past the Bot API's 20 MB) and ``/file/bot<token>/<file_path>`` serves the bytes.
  :meth:`FakeTelegramAPI.fail_download` scripts a download's failure (any status) or a hang
  (until the server closes). Builders register files and return the message fields of a
  photo (several sizes), document, sticker (static, animated, video), voice note, video note,
  audio, video and GIF; :meth:`FakeTelegramAPI.album` builds an album's updates, and
  :meth:`FakeTelegramAPI.message_update` takes captions, replies with a ``quote``, external
  replies and forwards (:func:`user_origin` and the other origins).
* Every call, failed ones included, is recorded in :attr:`FakeTelegramAPI.calls` (file
  downloads in :attr:`FakeTelegramAPI.downloads`), dated by ``now`` (a test's manual clock
  can date them).
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import itertools
import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp
from aiohttp import web

from tests.fakes.server import FakeServer

MESSAGE_LIMIT = 4096
WEBHOOK_SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"

_JSON_FIELDS = frozenset(
    {
        "allowed_updates",
        "caption_entities",
        "commands",
        "entities",
        "link_preview_options",
        "reply_markup",
        "reply_parameters",
        "scope",
    }
)
_DEFAULT_DESCRIPTIONS = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden: bot was blocked by the user",
    404: "Not Found",
    409: "Conflict",
    500: "Internal Server Error",
    502: "Bad Gateway",
}
_CHAT_ACTIONS = frozenset(
    {
        "typing",
        "upload_photo",
        "record_video",
        "upload_video",
        "record_voice",
        "upload_voice",
        "upload_document",
        "choose_sticker",
        "find_location",
        "record_video_note",
        "upload_video_note",
    }
)


# --------------------------------------------------------------------------- Telegram HTML


class EntityParseError(ValueError):
    """Telegram's ``can't parse entities`` for a ``parse_mode=HTML`` text."""


_HTML_TAGS = frozenset(
    {
        "a",
        "b",
        "blockquote",
        "code",
        "del",
        "em",
        "i",
        "ins",
        "pre",
        "s",
        "span",
        "strike",
        "strong",
        "tg-emoji",
        "tg-spoiler",
        "u",
    }
)
_TAG = re.compile(
    r"<(/?)([A-Za-z][A-Za-z0-9-]*)"
    r"((?:\s+[A-Za-z-]+(?:\s*=\s*(?:\"[^\"]*\"|'[^']*'|[^\s>\"']+))?)*)\s*>"
)
_ENTITY = re.compile(r"&(?:lt|gt|amp|quot|#[0-9]{1,7}|#x[0-9A-Fa-f]{1,6});")


def parse_telegram_html(text: str) -> str:
    """The text Telegram shows for ``parse_mode=HTML``; raises EntityParseError like Telegram.

    Only Telegram's tags, properly nested; ``&lt; &gt; &amp; &quot;`` and numeric entities are
    decoded, any other ``&`` stays literal, and any ``<`` must start a supported tag.
    """
    out: list[str] = []
    stack: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        offset = len(text[:index].encode("utf-8"))
        if char == "<":
            tag = _TAG.match(text, index)
            if tag is None:
                raise EntityParseError(f"Unclosed start tag at byte offset {offset}")
            closing, name = tag[1] == "/", tag[2].lower()
            if name not in _HTML_TAGS:
                kind = "end" if closing else "start"
                raise EntityParseError(f'Unsupported {kind} tag "{name}" at byte offset {offset}')
            if not closing:
                stack.append(name)
            elif not stack:
                raise EntityParseError(f"Unexpected end tag at byte offset {offset}")
            elif stack[-1] != name:
                raise EntityParseError(
                    f'Unmatched end tag at byte offset {offset}, expected "</{stack[-1]}>", '
                    f'found "</{name}>"'
                )
            else:
                stack.pop()
            index = tag.end()
        elif char == "&" and (entity := _ENTITY.match(text, index)) is not None:
            out.append(html.unescape(entity[0]))
            index = entity.end()
        else:
            out.append(char)
            index += 1
    if stack:
        raise EntityParseError(f'Can\'t find end tag corresponding to start tag "{stack[-1]}"')
    return "".join(out)


def utf16_units(text: str) -> int:
    """Length in UTF-16 code units, as Telegram counts it."""
    return len(text.encode("utf-16-le")) // 2


# ------------------------------------------------------------------------ users and chats


@dataclass(frozen=True, slots=True)
class TgUser:
    """A Telegram user (or bot) as it appears in updates."""

    id: int
    first_name: str
    last_name: str | None = None
    username: str | None = None
    is_bot: bool = False
    # The user's app language (IETF tag), as Telegram sends it; may be absent.
    language_code: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The ``User`` object."""
        data: dict[str, Any] = {"id": self.id, "is_bot": self.is_bot, "first_name": self.first_name}
        if self.last_name:
            data["last_name"] = self.last_name
        if self.username:
            data["username"] = self.username
        if self.language_code:
            data["language_code"] = self.language_code
        return data


@dataclass(frozen=True, slots=True)
class TgChat:
    """A Telegram chat: private, group, supergroup (optionally a forum) or channel."""

    id: int
    type: str
    title: str | None = None
    first_name: str | None = None
    is_forum: bool = False

    @classmethod
    def private(cls, user: TgUser) -> TgChat:
        """The private chat of a user with the bot (its id is the user's id)."""
        return cls(user.id, "private", first_name=user.first_name)

    @classmethod
    def group(cls, chat_id: int, title: str = "Group") -> TgChat:
        """A basic group (negative id)."""
        return cls(chat_id, "group", title=title)

    @classmethod
    def supergroup(cls, chat_id: int, title: str = "Supergroup", *, forum: bool = False) -> TgChat:
        """A supergroup (id below -10**12), optionally with forum topics."""
        return cls(chat_id, "supergroup", title=title, is_forum=forum)

    def to_dict(self) -> dict[str, Any]:
        """The ``Chat`` object."""
        data: dict[str, Any] = {"id": self.id, "type": self.type}
        if self.title:
            data["title"] = self.title
        if self.first_name:
            data["first_name"] = self.first_name
        if self.is_forum:
            data["is_forum"] = True
        return data


# ------------------------------------------------------------------------------ records


@dataclass(frozen=True, slots=True)
class ApiCall:
    """One request the fake received, with the HTTP status it answered."""

    token: str
    method: str
    params: dict[str, Any]
    status: int
    at: float  # the server's ``now()`` on arrival (time.monotonic() unless given)
    result: Any = None  # what a successful call answered (e.g. the sent Message)

    @property
    def ok(self) -> bool:
        """Whether the call succeeded."""
        return self.status == 200

    @property
    def message_id(self) -> int:
        """The id of the message a successful send created."""
        assert isinstance(self.result, dict), f"{self.method} answered no message"
        return int(self.result["message_id"])

    @property
    def chat_id(self) -> int | None:
        """The ``chat_id`` parameter as an int."""
        value = self.params.get("chat_id")
        return None if value is None else int(value)

    @property
    def text(self) -> str:
        """The ``text`` parameter ("" when absent)."""
        return str(self.params.get("text", ""))

    @property
    def parse_mode(self) -> str | None:
        """The ``parse_mode`` parameter."""
        value = self.params.get("parse_mode")
        return None if value is None else str(value)

    @property
    def visible_text(self) -> str:
        """The text as the user sees it (HTML parsed when ``parse_mode=HTML``)."""
        return parse_telegram_html(self.text) if self.parse_mode == "HTML" else self.text

    @property
    def thread_id(self) -> int | None:
        """The ``message_thread_id`` parameter as an int."""
        value = self.params.get("message_thread_id")
        return None if value is None else int(value)

    @property
    def reply_to(self) -> int | None:
        """The message replied to (``reply_parameters.message_id`` or the legacy field)."""
        return _reply_target(self.params)[0]

    @property
    def allow_sending_without_reply(self) -> bool:
        """Whether the reply may be sent if the replied-to message is gone."""
        return _reply_target(self.params)[1]

    @property
    def draft_id(self) -> int | None:
        """The ``draft_id`` parameter (``sendMessageDraft``) as an int."""
        value = self.params.get("draft_id")
        return None if value is None else int(value)

    def flag(self, name: str) -> bool | None:
        """A boolean parameter (``can_stop``, ``keep_on_stop``...); None when not sent."""
        value = self.params.get(name)
        return None if value is None else str(value).lower() in {"1", "true"}


@dataclass(frozen=True, slots=True)
class UploadedFile:
    """A file uploaded with a multipart request."""

    filename: str
    data: bytes
    content_type: str


@dataclass(frozen=True, slots=True)
class TgFile:
    """A file the fake serves: its ids, its bytes and the size Telegram reports."""

    file_id: str
    file_unique_id: str
    data: bytes
    file_size: int | None  # what updates and getFile claim (None: not reported)
    file_path: str

    def fields(self) -> dict[str, Any]:
        """``file_id``, ``file_unique_id`` and (when reported) ``file_size``."""
        data: dict[str, Any] = {"file_id": self.file_id, "file_unique_id": self.file_unique_id}
        if self.file_size is not None:
            data["file_size"] = self.file_size
        return data


@dataclass(frozen=True, slots=True)
class Download:
    """One request for a file's bytes and the HTTP status it got."""

    token: str
    path: str
    status: int


@dataclass(frozen=True, slots=True)
class _DownloadFault:
    status: int | None  # None: hang until the server closes
    description: str


def user_origin(user: TgUser) -> dict[str, Any]:
    """``forward_origin`` of a message a user wrote."""
    return {"type": "user", "date": int(time.time()), "sender_user": user.to_dict()}


def hidden_user_origin(name: str) -> dict[str, Any]:
    """``forward_origin`` of a user who hides their account in forwards."""
    return {"type": "hidden_user", "date": int(time.time()), "sender_user_name": name}


def chat_origin(chat: TgChat, signature: str | None = None) -> dict[str, Any]:
    """``forward_origin`` of a message sent on behalf of a chat (an anonymous admin)."""
    origin: dict[str, Any] = {
        "type": "chat",
        "date": int(time.time()),
        "sender_chat": chat.to_dict(),
    }
    if signature:
        origin["author_signature"] = signature
    return origin


def channel_origin(
    chat: TgChat, message_id: int = 1, signature: str | None = None
) -> dict[str, Any]:
    """``forward_origin`` of a channel post."""
    origin: dict[str, Any] = {
        "type": "channel",
        "date": int(time.time()),
        "chat": chat.to_dict(),
        "message_id": message_id,
    }
    if signature:
        origin["author_signature"] = signature
    return origin


#: The Bot API lets bots download files up to 20 MB.
DOWNLOAD_LIMIT = 20 * 1024 * 1024
DEFAULT_PHOTO_SIZES = ((90, 60), (320, 213), (800, 533), (1280, 853), (2560, 1706))


@dataclass(frozen=True, slots=True)
class _Failure:
    method: str
    status: int
    description: str
    retry_after: int | None
    token: str | None


@dataclass
class _Update:
    update_id: int
    payload: dict[str, Any]
    forced: bool = False  # redelivered: handed out once whatever the offset


@dataclass
class _Account:
    token: str
    user: TgUser
    updates: list[_Update] = field(default_factory=list)
    poll_generation: int = 0
    webhook_url: str | None = None
    webhook_secret: str | None = None
    outside: set[int] = field(default_factory=set)  # groups the bot is not a member of
    # setMyCommands' menus by (scope type, scope chat id, language code; "": none).
    menus: dict[tuple[str, int | None, str], list[dict[str, Any]]] = field(default_factory=dict)
    queries: dict[str, bool] = field(default_factory=dict)  # callback query id -> answered


class _ApiError(Exception):
    def __init__(self, status: int, description: str, retry_after: int | None = None) -> None:
        super().__init__(description)
        self.status = status
        self.description = description
        self.retry_after = retry_after


# --------------------------------------------------------------------------------- server


class FakeTelegramAPI(FakeServer):
    """A local Bot API server for one or more bot tokens; use as ``async with``."""

    def __init__(
        self, *, shutdown_timeout: float = 0.5, now: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__(shutdown_timeout=shutdown_timeout)
        self._now = now  # dates each call (a test's manual clock: its sends' clock times)
        self.calls: list[ApiCall] = []
        self._accounts: dict[str, _Account] = {}
        self._chats: dict[int, TgChat] = {}
        self._users: set[int] = set()
        self._messages: dict[tuple[int, int], dict[str, Any]] = {}
        # What each bot message was sent as (text, parse_mode): "not modified" compares it.
        self._sources: dict[tuple[int, int], tuple[str, str | None]] = {}
        self._drafts: dict[tuple[int, int], str] = {}
        self._message_ids: dict[int, itertools.count[int]] = {}
        self._update_ids = itertools.count(100)
        self._failures: list[_Failure] = []
        self.downloads: list[Download] = []
        self._files: dict[str, TgFile] = {}
        self._file_ids = itertools.count(1)
        self._download_faults: list[_DownloadFault] = []
        self._released = asyncio.Event()  # set at close: hanging downloads end
        self._changed = asyncio.Event()
        self._closing = False
        #: Users whose privacy settings refuse voice messages (``sendVoice`` answers 400).
        self.voice_forbidden: set[int] = set()

    # --------------------------------------------------------------------- accounts

    def add_bot(self, token: str, username: str, first_name: str | None = None) -> TgUser:
        """Register a bot token; its user id is the token's numeric prefix, as on Telegram."""
        user = TgUser(
            int(token.split(":", 1)[0]), first_name or username, username=username, is_bot=True
        )
        self._accounts[token] = _Account(token, user)
        return user

    def remove_from_chat(self, token: str, chat_id: int) -> None:
        """The bot is not a member of the group: its sends there answer ``403 Forbidden: bot
        is not a member of the supergroup chat``, as Telegram's do."""
        self._accounts[token].outside.add(chat_id)

    def bot_user(self, token: str) -> TgUser:
        """The bot user of a token."""
        return self._accounts[token].user

    def commands(
        self,
        token: str,
        language_code: str = "",
        scope: str = "default",
        chat_id: int | None = None,
    ) -> list[dict[str, Any]]:
        """The commands last set with ``setMyCommands`` for ``scope`` and ``language_code``
        ("": the scope's menu for every language without its own; none set: empty)."""
        return list(self._accounts[token].menus.get((scope, chat_id, language_code), []))

    def set_menu(
        self,
        token: str,
        commands: list[dict[str, Any]],
        language_code: str,
        scope: str = "default",
        chat_id: int | None = None,
    ) -> None:
        """A menu as an earlier run of the bot left it (``setMyCommands``)."""
        self._accounts[token].menus[(scope, chat_id, language_code)] = list(commands)

    def menu(
        self,
        token: str,
        scope: str = "default",
        chat_id: int | None = None,
        language: str | None = None,
    ) -> list[str] | None:
        """The command names set for a scope (and language); None when never set."""
        found = self._accounts[token].menus.get((scope, chat_id, language or ""))
        return None if found is None else [str(c["command"]) for c in found]

    def polls_started(self, token: str) -> int:
        """How many ``getUpdates`` calls of the token arrived (a long poll counts at once)."""
        return self._accounts[token].poll_generation

    def webhook(self, token: str) -> tuple[str | None, str | None]:
        """(url, secret_token) set with ``setWebhook``."""
        account = self._accounts[token]
        return account.webhook_url, account.webhook_secret

    # ---------------------------------------------------------------------- updates

    def message_update(
        self,
        chat: TgChat,
        user: TgUser | None,
        text: str | None = None,
        *,
        message_id: int | None = None,
        thread_id: int | None = None,
        reply_to_message_id: int | None = None,
        entities: list[dict[str, Any]] | None = None,
        edited: bool = False,
        caption: str | None = None,
        quote: str | None = None,
        forward_origin: Mapping[str, Any] | None = None,
        media_group_id: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Build a ``message`` (or ``edited_message``) update; the chat learns the message.

        Entities for ``/commands`` and ``@mentions`` are added as Telegram does, unless given
        (in a ``caption`` too). ``quote`` is the part of the replied-to message the user quoted
        (its text must contain it). ``extra`` adds raw Message fields (``sticker``,
        ``photo``, ``external_reply``...).
        """
        self._chats[chat.id] = chat
        if message_id is None:
            message_id = next(self._ids_of(chat.id))
        message: dict[str, Any] = {
            "message_id": message_id,
            "date": int(time.time()),
            "chat": chat.to_dict(),
        }
        if user is not None:
            message["from"] = user.to_dict()
            self._users.add(user.id)
        if thread_id is not None:
            message["message_thread_id"] = thread_id
            message["is_topic_message"] = True
        if text is not None:
            message["text"] = text
            found = auto_entities(text) if entities is None else entities
            if found:
                message["entities"] = found
        if caption is not None:
            message["caption"] = caption
            found = auto_entities(caption)
            if found:
                message["caption_entities"] = found
        if reply_to_message_id is not None:
            message.update(self._reply_fields(chat, reply_to_message_id, quote))
        if forward_origin is not None:
            message["forward_origin"] = dict(forward_origin)
        if media_group_id is not None:
            message["media_group_id"] = media_group_id
        if edited:
            message["edit_date"] = int(time.time())
        message.update(extra or {})
        self._messages[(chat.id, message_id)] = message
        kind = "edited_message" if edited else "message"
        return {"update_id": next(self._update_ids), kind: message}

    def _reply_fields(self, chat: TgChat, message_id: int, quote: str | None) -> dict[str, Any]:
        """``reply_to_message`` (the chat's message, else a bare one) and the ``quote``."""
        original = self._messages.get((chat.id, message_id)) or {
            "message_id": message_id,
            "date": int(time.time()),
            "chat": chat.to_dict(),
        }
        # Telegram sends the replied-to message without its own reply (one level only).
        fields: dict[str, Any] = {
            "reply_to_message": {k: v for k, v in original.items() if k != "reply_to_message"}
        }
        if quote is not None:
            said = str(original.get("text") or original.get("caption") or "")
            assert quote in said, f"{quote!r} is not part of the replied-to message"
            position = utf16_units(said[: said.index(quote)])
            fields["quote"] = {"text": quote, "position": position}
        return fields

    def push(self, token: str, update: Mapping[str, Any]) -> int:
        """Queue an update for ``getUpdates``; return its update id."""
        payload = dict(update)
        payload.setdefault("update_id", next(self._update_ids))
        self._accounts[token].updates.append(_Update(int(payload["update_id"]), payload))
        self._notify()
        return int(payload["update_id"])

    def push_message(
        self, token: str, chat: TgChat, user: TgUser | None, text: str | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """Build a message update (see :meth:`message_update`), queue it, return it."""
        update = self.message_update(chat, user, text, **kwargs)
        self.push(token, update)
        return update

    def stop_update(
        self, chat: TgChat, draft_id: int, thread_id: int | None = None
    ) -> dict[str, Any]:
        """Build the ``stopped_message_generation`` update of a draft's stop button."""
        stopped: dict[str, Any] = {"chat": chat.to_dict(), "draft_id": draft_id}
        if thread_id is not None:
            stopped["message_thread_id"] = thread_id
        return {"update_id": next(self._update_ids), "stopped_message_generation": stopped}

    def push_stop(
        self, token: str, chat: TgChat, draft_id: int, thread_id: int | None = None
    ) -> dict[str, Any]:
        """The person pressed the stop button of draft ``draft_id``: queue the update, return it."""
        update = self.stop_update(chat, draft_id, thread_id)
        self.push(token, update)
        return update

    def push_press(
        self,
        token: str,
        chat: TgChat,
        user: TgUser,
        message_id: int,
        *,
        button: int = 0,
        data: str | None = None,
    ) -> dict[str, Any]:
        """``user`` pressed button ``button`` (counted row by row) of the bot's message
        ``message_id`` in ``chat``: queue the ``callback_query`` update, return it. ``data``
        sends that data instead of the button's (a modified client: any data for any
        message with a keyboard). The message in the update is as the chat shows it now."""
        message = self._messages[(chat.id, message_id)]
        if data is None:
            buttons = [b for row in message["reply_markup"]["inline_keyboard"] for b in row]
            data = str(buttons[button]["callback_data"])
        query_id = f"q{next(self._update_ids)}"
        self._accounts[token].queries[query_id] = False
        self._users.add(user.id)
        update = {
            "update_id": next(self._update_ids),
            "callback_query": {
                "id": query_id,
                "from": user.to_dict(),
                "message": message,
                "chat_instance": f"ci{chat.id}",
                "data": data,
            },
        }
        self.push(token, update)
        return update

    def keyboard(self, chat_id: int, message_id: int) -> list[list[str]] | None:
        """The labels of a message's inline keyboard, row by row (None: it has none)."""
        markup = self._messages[(chat_id, message_id)].get("reply_markup")
        if not markup:
            return None
        return [[str(b["text"]) for b in row] for row in markup["inline_keyboard"]]

    def press_answers(self, token: str | None = None) -> list[ApiCall]:
        """Successful ``answerCallbackQuery`` calls, in order."""
        return [c for c in self.calls_of("answerCallbackQuery", token) if c.ok]

    def push_raw(self, token: str, entry: Any) -> int:
        """Queue any JSON value as one entry of ``getUpdates`` (as a broken server or proxy
        might send it); it takes the next update id's place, so a later update's offset
        confirms it. Return that id."""
        update_id = next(self._update_ids)
        self._accounts[token].updates.append(_Update(update_id, entry))
        self._notify()
        return update_id

    def redeliver(self, token: str, update: Mapping[str, Any]) -> None:
        """Queue an already delivered update again (same update id), delivered once."""
        payload = dict(update)
        self._accounts[token].updates.append(_Update(int(payload["update_id"]), payload, True))
        self._notify()

    def pending_updates(self, token: str) -> int:
        """Updates not confirmed by an offset yet (redeliveries included)."""
        return len(self._accounts[token].updates)

    def delete_message(self, chat_id: int, message_id: int) -> None:
        """The user deleted a message: replies to it now fail without the allow flag, edits of
        it with ``message to edit not found``."""
        self._messages.pop((chat_id, message_id), None)
        self._sources.pop((chat_id, message_id), None)

    def message(self, chat_id: int, message_id: int) -> dict[str, Any] | None:
        """A message as the chat shows it now (None once deleted)."""
        return self._messages.get((chat_id, message_id))

    def album(
        self,
        chat: TgChat,
        user: TgUser,
        items: Sequence[Mapping[str, Any]],
        *,
        caption: str | None = None,
        media_group_id: str | None = None,
        **kwargs: Any,
    ) -> list[dict[str, Any]]:
        """The updates of an album: one per item (``photo``/``video``... fields), one shared
        ``media_group_id``, the caption on the first item as Telegram sends it."""
        group = media_group_id or f"album-{next(self._file_ids)}"
        return [
            self.message_update(
                chat,
                user,
                caption=caption if index == 0 else None,
                media_group_id=group,
                extra=item,
                **kwargs,
            )
            for index, item in enumerate(items)
        ]

    # ------------------------------------------------------------------------ files

    def add_file(
        self,
        data: bytes,
        *,
        file_size: int | None = None,
        report_size: bool = True,
        suffix: str = "",
    ) -> TgFile:
        """Register bytes under a new file id; ``file_size`` is the size Telegram claims (the
        real one unless given: a lying server; ``report_size=False``: none reported)."""
        number = next(self._file_ids)
        claimed = (len(data) if file_size is None else file_size) if report_size else None
        file = TgFile(
            f"AgAC-file-{number}", f"AQAD{number}", data, claimed, f"files/file_{number}{suffix}"
        )
        self._files[file.file_id] = file
        return file

    def file(self, file_id: str) -> TgFile:
        """A registered file by its id."""
        return self._files[file_id]

    def photo(self, *sizes: tuple[int, int] | tuple[int, int, bytes]) -> list[dict[str, Any]]:
        """The ``photo`` field: one registered file per size (bytes ``photo WxH`` unless
        given), smallest first as Telegram sends them."""
        found = []
        for size in sizes or DEFAULT_PHOTO_SIZES:
            width, height = size[0], size[1]
            data = size[2] if len(size) == 3 else f"photo {width}x{height}".encode()
            found.append(
                {**self.add_file(data, suffix=".jpg").fields(), "width": width, "height": height}
            )
        return found

    def document(
        self,
        data: bytes = b"%PDF-1.7 notes",
        *,
        file_name: str | None = "notes.pdf",
        mime_type: str | None = "application/pdf",
    ) -> dict[str, Any]:
        """The ``document`` field of a file sent as a file."""
        document = self.add_file(data).fields()
        if file_name is not None:
            document["file_name"] = file_name
        if mime_type is not None:
            document["mime_type"] = mime_type
        return document

    def sticker(
        self,
        kind: Literal["static", "animated", "video"] = "static",
        *,
        emoji: str | None = "😀",
        thumbnail: bool = True,
    ) -> dict[str, Any]:
        """The ``sticker`` field: a static WebP, or an animated (TGS) / video (WebM) sticker
        with (or without) its thumbnail."""
        suffix = {"static": ".webp", "animated": ".tgs", "video": ".webm"}[kind]
        sticker = {
            **self.add_file(f"{kind} sticker".encode(), suffix=suffix).fields(),
            "type": "regular",
            "width": 512,
            "height": 512,
            "is_animated": kind == "animated",
            "is_video": kind == "video",
        }
        if emoji is not None:
            sticker["emoji"] = emoji
        if thumbnail:
            thumb = self.add_file(f"{kind} sticker thumbnail".encode(), suffix=".webp")
            sticker["thumbnail"] = {**thumb.fields(), "width": 128, "height": 128}
        return sticker

    def voice(self, data: bytes = b"OggS voice", *, duration: int = 3) -> dict[str, Any]:
        """The ``voice`` field of a voice note."""
        return {
            **self.add_file(data, suffix=".oga").fields(),
            "duration": duration,
            "mime_type": "audio/ogg",
        }

    def video_note(
        self, data: bytes = b"mp4 round", *, duration: int = 5, length: int = 240
    ) -> dict[str, Any]:
        """The ``video_note`` field of a round video message."""
        return {
            **self.add_file(data, suffix=".mp4").fields(),
            "duration": duration,
            "length": length,
        }

    def audio(
        self,
        data: bytes = b"ID3 song",
        *,
        performer: str | None = "Band",
        title: str | None = "Song",
        duration: int = 200,
    ) -> dict[str, Any]:
        """The ``audio`` field of a music file."""
        audio = {
            **self.add_file(data, suffix=".mp3").fields(),
            "duration": duration,
            "mime_type": "audio/mpeg",
        }
        if performer is not None:
            audio["performer"] = performer
        if title is not None:
            audio["title"] = title
        return audio

    def video(self, data: bytes = b"mp4 video", *, duration: int = 12) -> dict[str, Any]:
        """The ``video`` field."""
        return {
            **self.add_file(data, suffix=".mp4").fields(),
            "width": 1280,
            "height": 720,
            "duration": duration,
            "mime_type": "video/mp4",
        }

    def animation(self, *, thumbnail: bool = True) -> dict[str, Any]:
        """The ``animation`` and ``document`` fields of a GIF (an MP4, as Telegram sends it)."""
        gif = {
            **self.add_file(b"mp4 gif", suffix=".mp4").fields(),
            "width": 320,
            "height": 240,
            "duration": 2,
            "mime_type": "video/mp4",
            "file_name": "funny.gif.mp4",
        }
        if thumbnail:
            thumb = self.add_file(b"gif thumbnail", suffix=".jpg")
            gif["thumbnail"] = {**thumb.fields(), "width": 320, "height": 240}
        document = {k: gif[k] for k in ("file_id", "file_unique_id", "file_name", "mime_type")}
        return {"animation": gif, "document": document}

    def fail_download(
        self, *, status: int | None = 500, description: str | None = None, times: int = 1
    ) -> None:
        """The next ``times`` file downloads answer ``status`` with ``description`` in the
        Bot API's error shape (None: hang until the server closes)."""
        text = description or _DEFAULT_DESCRIPTIONS.get(status or 0, "Error")
        self._download_faults.extend([_DownloadFault(status, text)] * times)

    async def deliver_webhook(
        self, token: str, update: Mapping[str, Any], *, secret: str | Literal[False] | None = None
    ) -> int:
        """POST an update to the token's webhook URL as Telegram does; return the status.

        ``secret`` None sends the secret set with ``setWebhook``, a string sends that value,
        False sends no secret header at all.
        """
        account = self._accounts[token]
        assert account.webhook_url, "no webhook set for this token"
        header = account.webhook_secret if secret is None else (secret or None)
        headers = {} if header is None else {WEBHOOK_SECRET_HEADER: header}
        async with (
            aiohttp.ClientSession() as session,
            session.post(account.webhook_url, json=dict(update), headers=headers) as resp,
        ):
            await resp.read()
            return resp.status

    async def deliver_raw_webhook(self, token: str, body: bytes) -> int:
        """POST any body (not JSON, say) to the token's webhook with its secret; the status."""
        account = self._accounts[token]
        assert account.webhook_url, "no webhook set for this token"
        headers = {"Content-Type": "application/json"}
        if account.webhook_secret:
            headers[WEBHOOK_SECRET_HEADER] = account.webhook_secret
        async with (
            aiohttp.ClientSession() as session,
            session.post(account.webhook_url, data=body, headers=headers) as resp,
        ):
            await resp.read()
            return resp.status

    # -------------------------------------------------------------------- scripting

    def fail_next(
        self,
        method: str,
        *,
        status: int,
        description: str | None = None,
        retry_after: int | None = None,
        times: int = 1,
        token: str | None = None,
    ) -> None:
        """Answer the next ``times`` calls of ``method`` (of ``token``, if given) with an error.

        ``status=429`` with ``retry_after`` gives ``Too Many Requests: retry after N`` and
        ``parameters.retry_after``; other statuses get Telegram's usual descriptions.
        """
        if description is None:
            description = (
                f"Too Many Requests: retry after {retry_after}"
                if status == 429
                else _DEFAULT_DESCRIPTIONS.get(status, "Error")
            )
        failure = _Failure(method, status, description, retry_after, token)
        self._failures.extend([failure] * times)

    # ------------------------------------------------------------------- inspection

    def calls_of(self, method: str, token: str | None = None) -> list[ApiCall]:
        """Recorded calls of a method (failed ones included)."""
        return [c for c in self.calls if c.method == method and token in (None, c.token)]

    def sent_messages(self, token: str | None = None, chat_id: int | None = None) -> list[ApiCall]:
        """Successful ``sendMessage`` calls, in order."""
        return [
            c for c in self.calls_of("sendMessage", token) if c.ok and chat_id in (None, c.chat_id)
        ]

    def sent_documents(self, token: str | None = None, chat_id: int | None = None) -> list[ApiCall]:
        """Successful ``sendDocument`` calls, in order (``params["document"]`` is the file)."""
        return [
            c for c in self.calls_of("sendDocument", token) if c.ok and chat_id in (None, c.chat_id)
        ]

    def sent_voices(self, token: str | None = None, chat_id: int | None = None) -> list[ApiCall]:
        """Successful ``sendVoice`` calls, in order (``params["voice"]`` is the file)."""
        return [
            c for c in self.calls_of("sendVoice", token) if c.ok and chat_id in (None, c.chat_id)
        ]

    def drafts(self, token: str | None = None, chat_id: int | None = None) -> list[ApiCall]:
        """Successful ``sendMessageDraft`` calls, in order."""
        return [
            c
            for c in self.calls_of("sendMessageDraft", token)
            if c.ok and chat_id in (None, c.chat_id)
        ]

    def draft_text(self, chat_id: int, draft_id: int) -> str | None:
        """The text (as the user sees it) of the latest draft with this id in the chat."""
        return self._drafts.get((chat_id, draft_id))

    def chat_actions(self, token: str | None = None) -> list[ApiCall]:
        """Successful ``sendChatAction`` calls, in order."""
        return [c for c in self.calls_of("sendChatAction", token) if c.ok]

    async def wait_for(
        self, predicate: Callable[[], object], within: float = 10.0, what: str = "condition"
    ) -> None:
        """Poll ``predicate`` until it is truthy; AssertionError after ``within`` seconds."""
        deadline = time.monotonic() + within
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {within}s waiting for {what}")
            await asyncio.sleep(0.02)

    # -------------------------------------------------------------------- lifecycle

    # ``base_url`` (from FakeServer) is the bot's ``api_server``: aiogram appends
    # ``/bot<token>/<method>``.

    def _build_app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/bot{token}/{method}", self._handle)
        app.router.add_route("GET", "/file/bot{token}/{path:.+}", self._download)
        app.router.add_route("*", "/{tail:.*}", self._not_found)
        return app

    async def _before_cleanup(self) -> None:
        """Wake long polls and hanging downloads."""
        self._closing = True
        self._released.set()
        self._notify()

    # ---------------------------------------------------------------------- serving

    def _ids_of(self, chat_id: int) -> itertools.count[int]:
        return self._message_ids.setdefault(chat_id, itertools.count(1))

    def _notify(self) -> None:
        """Wake every long poll (each re-checks its own state)."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def _not_found(self, request: web.Request) -> web.Response:
        return _error_response(_ApiError(404, "Not Found"))

    async def _handle(self, request: web.Request) -> web.Response:
        token, method = request.match_info["token"], request.match_info["method"]
        params = await _read_params(request)
        account = self._accounts.get(token)
        arrived = self._now()
        try:
            if account is None:
                raise _ApiError(401, "Unauthorized")
            self._scripted_failure(token, method)
            result = await self._dispatch(account, method, params)
        except _ApiError as exc:
            self.calls.append(ApiCall(token, method, params, exc.status, arrived))
            return _error_response(exc)
        self.calls.append(ApiCall(token, method, params, 200, arrived, result))
        return web.json_response({"ok": True, "result": result})

    async def _download(self, request: web.Request) -> web.StreamResponse:
        token, path = request.match_info["token"], request.match_info["path"]
        try:
            file = await self._serve_file(token, path)
        except _ApiError as exc:
            self.downloads.append(Download(token, path, exc.status))
            return _error_response(exc)
        self.downloads.append(Download(token, path, 200))
        return web.Response(body=file.data, content_type="application/octet-stream")

    async def _serve_file(self, token: str, path: str) -> TgFile:
        """The file to send; raises the error to answer."""
        if token not in self._accounts:
            raise _ApiError(401, "Unauthorized")
        if self._download_faults:
            fault = self._download_faults.pop(0)
            if fault.status is None:
                await self._released.wait()
                raise _ApiError(503, "Service Unavailable")
            raise _ApiError(fault.status, fault.description)
        for file in self._files.values():
            if file.file_path == path:
                return file
        raise _ApiError(404, "Not Found")

    def _get_file(self, account: _Account, params: dict[str, Any]) -> dict[str, Any]:
        file = self._files.get(str(params.get("file_id", "")))
        if file is None:
            raise _ApiError(400, "Bad Request: invalid file_id")
        if max(file.file_size or 0, len(file.data)) > DOWNLOAD_LIMIT:
            raise _ApiError(400, "Bad Request: file is too big")
        return {**file.fields(), "file_path": file.file_path}

    def _scripted_failure(self, token: str, method: str) -> None:
        for failure in self._failures:
            if failure.method == method and failure.token in (None, token):
                self._failures.remove(failure)
                raise _ApiError(failure.status, failure.description, failure.retry_after)

    async def _dispatch(self, account: _Account, method: str, params: dict[str, Any]) -> Any:
        simple: dict[str, Callable[[_Account, dict[str, Any]], Any]] = {
            "getMe": lambda a, _: {
                **a.user.to_dict(),
                "can_join_groups": True,
                "can_read_all_group_messages": False,
                "supports_inline_queries": False,
            },
            "sendMessage": self._send_message,
            "sendMessageDraft": self._send_message_draft,
            "sendDocument": self._send_document,
            "sendVoice": self._send_voice,
            "editMessageText": self._edit_message_text,
            "sendChatAction": _send_chat_action,
            "setMyCommands": _set_my_commands,
            "deleteMyCommands": _delete_my_commands,
            "answerCallbackQuery": _answer_callback_query,
            "editMessageReplyMarkup": self._edit_message_reply_markup,
            "setWebhook": _set_webhook,
            "deleteWebhook": _delete_webhook,
            "getWebhookInfo": lambda a, _: {
                "url": a.webhook_url or "",
                "has_custom_certificate": False,
                "pending_update_count": len(a.updates),
            },
            "deleteMessage": self._delete_message,
            "getFile": self._get_file,
            "close": lambda a, _: True,
            "logOut": lambda a, _: True,
        }
        if method == "getUpdates":
            return await self._get_updates(account, params)
        handler = simple.get(method)
        if handler is None:
            raise _ApiError(404, "Not Found")
        return handler(account, params)

    async def _get_updates(self, account: _Account, params: dict[str, Any]) -> list[Any]:
        if account.webhook_url:
            raise _ApiError(
                409,
                "Conflict: can't use getUpdates method while webhook is active; "
                "use deleteWebhook to delete the webhook first",
            )
        offset = int(params.get("offset") or 0)
        limit = int(params.get("limit") or 100)
        timeout = float(params.get("timeout") or 0)
        if offset:
            # Confirm: everything below the offset is gone for good (redeliveries stay once).
            account.updates = [u for u in account.updates if u.update_id >= offset or u.forced]
        account.poll_generation += 1
        generation = account.poll_generation
        self._notify()  # a newer poll ends an older one
        deadline = time.monotonic() + timeout
        while not self._closing:
            if generation != account.poll_generation:
                raise _ApiError(
                    409,
                    "Conflict: terminated by other getUpdates request; make sure that only "
                    "one bot instance is running",
                )
            ready = account.updates[:limit]
            if ready:
                handed = {id(u) for u in ready if u.forced}
                account.updates = [u for u in account.updates if id(u) not in handed]
                return [u.payload for u in ready]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)
        return []

    def _checked_text(self, params: dict[str, Any], *, empty: bool = False) -> str:
        text = str(params.get("text", ""))
        visible = text
        if str(params.get("parse_mode", "")).upper() == "HTML":
            try:
                visible = parse_telegram_html(text)
            except EntityParseError as exc:
                raise _ApiError(400, f"Bad Request: can't parse entities: {exc}") from None
        if not visible.strip() and not empty:
            raise _ApiError(400, "Bad Request: message text is empty")
        if utf16_units(visible) > MESSAGE_LIMIT:
            raise _ApiError(400, "Bad Request: message is too long")
        return visible

    def _chat(self, chat_id: int, account: _Account | None = None) -> TgChat:
        """The chat a send goes to, refused as Telegram refuses it."""
        if account is not None and chat_id in account.outside:
            raise _ApiError(403, "Forbidden: bot is not a member of the supergroup chat")
        chat = self._chats.get(chat_id)
        if chat is None and chat_id in self._users:
            raise _ApiError(403, "Forbidden: bot can't initiate conversation with a user")
        if chat is None:
            raise _ApiError(400, "Bad Request: chat not found")
        return chat

    def _send_document(self, account: _Account, params: dict[str, Any]) -> dict[str, Any]:
        chat_id = int(params["chat_id"])
        chat = self._chat(chat_id, account)
        upload = params.get("document")
        if isinstance(upload, str) and upload.startswith("attach://"):
            upload = params.get(upload.removeprefix("attach://"))  # the Bot API's file reference
        if not isinstance(upload, UploadedFile):
            raise _ApiError(400, "Bad Request: there is no document in the request")
        caption = str(params.get("caption") or "")
        if len(caption) > 1024:
            raise _ApiError(400, "Bad Request: message caption is too long")
        message: dict[str, Any] = {
            "message_id": next(self._ids_of(chat_id)),
            "date": int(time.time()),
            "chat": chat.to_dict(),
            "from": account.user.to_dict(),
            "document": {
                "file_id": f"doc-{chat_id}-{len(self.calls)}",
                "file_unique_id": f"u{len(self.calls)}",
                "file_name": upload.filename,
                "mime_type": upload.content_type,
                "file_size": len(upload.data),
            },
        }
        if caption:
            message["caption"] = caption
        params["document"] = upload
        if params.get("message_thread_id") is not None:
            message["message_thread_id"] = int(params["message_thread_id"])
        self._messages[(chat_id, message["message_id"])] = message
        return message

    def _send_voice(self, account: _Account, params: dict[str, Any]) -> dict[str, Any]:
        chat_id = int(params["chat_id"])
        chat = self._chat(chat_id, account)
        if chat_id in self.voice_forbidden:
            raise _ApiError(400, "Bad Request: VOICE_MESSAGES_FORBIDDEN")
        upload = params.get("voice")
        if isinstance(upload, str) and upload.startswith("attach://"):
            upload = params.get(upload.removeprefix("attach://"))
        if not isinstance(upload, UploadedFile):
            raise _ApiError(400, "Bad Request: there is no voice in the request")
        caption = ""
        if params.get("caption"):
            caption = self._checked_text({**params, "text": params["caption"]})
            if utf16_units(caption) > 1024:
                raise _ApiError(400, "Bad Request: message caption is too long")
        message: dict[str, Any] = {
            "message_id": next(self._ids_of(chat_id)),
            "date": int(time.time()),
            "chat": chat.to_dict(),
            "from": account.user.to_dict(),
            "voice": {
                "file_id": f"voice-{chat_id}-{len(self.calls)}",
                "file_unique_id": f"u{len(self.calls)}",
                "duration": int(params.get("duration") or 0),
                "mime_type": upload.content_type,
                "file_size": len(upload.data),
            },
        }
        if caption:
            message["caption"] = caption
        params["voice"] = upload
        if params.get("message_thread_id") is not None:
            message["message_thread_id"] = int(params["message_thread_id"])
        self._messages[(chat_id, message["message_id"])] = message
        return message

    def _send_message(self, account: _Account, params: dict[str, Any]) -> dict[str, Any]:
        chat_id = int(params["chat_id"])
        chat = self._chat(chat_id, account)
        visible = self._checked_text(params)
        reply, allow_without = _reply_target(params)
        if reply is not None and (chat_id, reply) not in self._messages and not allow_without:
            raise _ApiError(400, "Bad Request: message to be replied not found")
        message: dict[str, Any] = {
            "message_id": next(self._ids_of(chat_id)),
            "date": int(time.time()),
            "chat": chat.to_dict(),
            "from": account.user.to_dict(),
            "text": visible,
        }
        if params.get("message_thread_id") is not None:
            message["message_thread_id"] = int(params["message_thread_id"])
            message["is_topic_message"] = chat.is_forum
        if reply is not None and (chat_id, reply) in self._messages:
            message["reply_to_message"] = self._messages[(chat_id, reply)]
        markup = params.get("reply_markup")
        if markup is not None:
            message["reply_markup"] = _checked_keyboard(markup)
        self._messages[(chat_id, message["message_id"])] = message
        self._sources[(chat_id, message["message_id"])] = _source(params)
        return message

    def _send_message_draft(self, account: _Account, params: dict[str, Any]) -> bool:
        chat_id = int(params["chat_id"])
        chat = self._chat(chat_id)
        try:
            draft_id = int(params.get("draft_id", 0))
        except ValueError:
            draft_id = 0
        if draft_id == 0:
            raise _ApiError(400, "Bad Request: DRAFT_ID_INVALID")
        if chat.type != "private":
            raise _ApiError(400, "Bad Request: TEXTDRAFT_PEER_INVALID")
        self._drafts[(chat_id, draft_id)] = self._checked_text(params, empty=True)
        return True

    def _edit_message_text(self, account: _Account, params: dict[str, Any]) -> dict[str, Any]:
        key = (int(params["chat_id"]), int(params["message_id"]))
        if key not in self._messages:
            raise _ApiError(400, "Bad Request: message to edit not found")
        visible = self._checked_text(params)
        if self._sources.get(key) == _source(params):
            raise _ApiError(
                400,
                "Bad Request: message is not modified: specified new message content and reply "
                "markup are exactly the same as a current content and reply markup of the message",
            )
        message = {**self._messages[key], "text": visible, "edit_date": int(time.time())}
        self._messages[key] = message
        self._sources[key] = _source(params)
        return message

    def _edit_message_reply_markup(
        self, account: _Account, params: dict[str, Any]
    ) -> dict[str, Any]:
        key = (int(params["chat_id"]), int(params["message_id"]))
        if key not in self._messages:
            raise _ApiError(400, "Bad Request: message to edit not found")
        markup = params.get("reply_markup")
        new = None if not markup else _checked_keyboard(markup)
        message = dict(self._messages[key])
        if new == message.get("reply_markup"):
            raise _ApiError(
                400,
                "Bad Request: message is not modified: specified new message content and reply "
                "markup are exactly the same as a current content and reply markup of the message",
            )
        if new is None:
            message.pop("reply_markup", None)
        else:
            message["reply_markup"] = new
        self._messages[key] = message
        return message

    def _delete_message(self, account: _Account, params: dict[str, Any]) -> bool:
        key = (int(params["chat_id"]), int(params["message_id"]))
        if self._messages.pop(key, None) is None:
            raise _ApiError(400, "Bad Request: message to delete not found")
        self._sources.pop(key, None)
        return True


def _send_chat_action(account: _Account, params: dict[str, Any]) -> bool:
    if params.get("action") not in _CHAT_ACTIONS:
        raise _ApiError(400, "Bad Request: wrong parameter action in request")
    return True


def _answer_callback_query(account: _Account, params: dict[str, Any]) -> bool:
    query = str(params.get("callback_query_id", ""))
    if account.queries.get(query, True):
        raise _ApiError(
            400,
            "Bad Request: query is too old and response timeout expired or query ID is invalid",
        )
    if len(str(params.get("text") or "")) > 200:
        raise _ApiError(400, "Bad Request: MESSAGE_TOO_LONG")
    account.queries[query] = True
    return True


def _checked_keyboard(markup: Any) -> dict[str, Any]:
    """An inline keyboard as Telegram checks it (the data of each button: 1-64 bytes)."""
    rows = markup.get("inline_keyboard") if isinstance(markup, dict) else None
    if not isinstance(rows, list):
        raise _ApiError(400, "Bad Request: can't parse reply keyboard markup JSON object")
    for row in rows:
        for button in row:
            data = str(button.get("callback_data", ""))
            if not 1 <= len(data.encode()) <= 64:
                raise _ApiError(400, "Bad Request: BUTTON_DATA_INVALID")
    return dict(markup)


def _set_my_commands(account: _Account, params: dict[str, Any]) -> bool:
    commands = params.get("commands")
    if not isinstance(commands, list):
        raise _ApiError(400, "Bad Request: can't parse commands JSON object")
    for command in commands:
        if not re.fullmatch(r"[a-z0-9_]{1,32}", str(command.get("command", ""))):
            raise _ApiError(400, "Bad Request: BOT_COMMAND_INVALID")
        if not 1 <= len(str(command.get("description", ""))) <= 256:
            raise _ApiError(400, "Bad Request: BOT_COMMAND_DESCRIPTION_INVALID")
    account.menus[_menu_key(params)] = list(commands)
    return True


def _delete_my_commands(account: _Account, params: dict[str, Any]) -> bool:
    account.menus.pop(_menu_key(params), None)
    return True


def _menu_key(params: dict[str, Any]) -> tuple[str, int | None, str]:
    """The (scope type, scope chat id, language code) a ``setMyCommands`` or
    ``deleteMyCommands`` call names; ``language_code`` is two lowercase letters or none."""
    scope = params.get("scope") if isinstance(params.get("scope"), dict) else {"type": "default"}
    chat = scope.get("chat_id")
    language = str(params.get("language_code") or "")
    if language and not re.fullmatch(r"[a-z]{2}", language):
        raise _ApiError(400, "Bad Request: invalid language code specified")
    return str(scope.get("type")), None if chat is None else int(chat), language


def _set_webhook(account: _Account, params: dict[str, Any]) -> bool:
    url = str(params.get("url") or "")
    secret = params.get("secret_token")
    if secret is not None and not re.fullmatch(r"[A-Za-z0-9_-]{1,256}", str(secret)):
        raise _ApiError(400, "Bad Request: secret token contains unallowed characters")
    account.webhook_url = url or None
    account.webhook_secret = None if secret is None else str(secret)
    return True


def _delete_webhook(account: _Account, params: dict[str, Any]) -> bool:
    account.webhook_url = None
    account.webhook_secret = None
    if str(params.get("drop_pending_updates", "")).lower() in {"1", "true"}:
        account.updates.clear()
    return True


def _source(params: Mapping[str, Any]) -> tuple[str, str | None]:
    """What a text message is sent as: its text and parse mode."""
    mode = params.get("parse_mode")
    return str(params.get("text", "")), None if mode is None else str(mode).upper()


def _reply_target(params: Mapping[str, Any]) -> tuple[int | None, bool]:
    """(message replied to, allow_sending_without_reply) from new or legacy parameters."""
    reply = params.get("reply_parameters")
    source: Mapping[str, Any] = reply if isinstance(reply, dict) else params
    target = source.get("message_id" if isinstance(reply, dict) else "reply_to_message_id")
    allow = str(source.get("allow_sending_without_reply", "")).lower() in {"1", "true"}
    return (None if target is None else int(target)), allow


def _error_response(exc: _ApiError) -> web.Response:
    payload: dict[str, Any] = {
        "ok": False,
        "error_code": exc.status,
        "description": exc.description,
    }
    if exc.retry_after is not None:
        payload["parameters"] = {"retry_after": exc.retry_after}
    return web.json_response(payload, status=exc.status)


async def _read_params(request: web.Request) -> dict[str, Any]:
    """Form-encoded, multipart, JSON body or query string, as the Bot API accepts."""
    params: dict[str, Any] = dict(request.query)
    if request.content_type == "application/json":
        body = await request.json()
        params.update(body if isinstance(body, dict) else {})
        return params
    if request.can_read_body:
        form = await request.post()
        for key, value in form.items():
            if isinstance(value, web.FileField):
                data = value.file.read()
                params[key] = UploadedFile(value.filename, data, value.content_type)
            else:
                params[key] = value
    for key in _JSON_FIELDS & params.keys():
        if isinstance(params[key], str):
            with contextlib.suppress(ValueError):
                params[key] = json.loads(params[key])
    return params


_AUTO_ENTITY = re.compile(
    r"(?P<command>^/[A-Za-z0-9_]{1,32}(?:@[A-Za-z0-9_]{3,32})?)|(?P<mention>@[A-Za-z0-9_]{5,32})"
)


def auto_entities(text: str) -> list[dict[str, Any]]:
    """``bot_command`` and ``mention`` entities as Telegram adds them (UTF-16 offsets)."""
    entities = []
    for match in _AUTO_ENTITY.finditer(text):
        kind = "bot_command" if match["command"] else "mention"
        entities.append(
            {
                "type": kind,
                "offset": utf16_units(text[: match.start()]),
                "length": utf16_units(match[0]),
            }
        )
    return entities
