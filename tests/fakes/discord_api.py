"""A small fake of Discord: REST API and gateway on one aiohttp server on ``127.0.0.1``.

The real discord.py client talks to it (point ``api_base`` and ``gateway_url`` at
:attr:`FakeDiscord.api_base` and :attr:`FakeDiscord.gateway_url`), so login, the gateway
handshake, heartbeats, resumes, rate-limit handling and error parsing all happen for real.

::

    async with FakeDiscord(token="t0k3n") as fake:
        ada = fake.add_user("Ada")
        guild = fake.add_guild("Cafe")                 # with a #general text channel
        ...start the bot with fake.api_base / fake.gateway_url...
        await fake.wait_identified()
        await fake.post(guild.general, ada, "hi", mention_bot=True)
        posted = await fake.wait_for_bot_messages(guild.general, 1)
        assert FakeDiscord.pings(fake.posts[-1].body) == set()

REST (under ``/api/v10``, ``Authorization: Bot <token>`` required, else 401):

* ``GET /users/@me``, ``GET /oauth2/applications/@me``, ``GET /gateway/bot``,
  ``GET /channels/{id}`` (404 code 10003 for unknown channels);
* ``POST /channels/{id}/messages``: recorded in :attr:`FakeDiscord.posts` (failures too),
  answered with the scripted failure queued for that channel (:meth:`fail_next_send`), else the
  created message. A nonce with ``enforce_nonce`` that this channel already saw returns the
  earlier message and creates nothing, like Discord. Created messages are echoed on the gateway
  as ``MESSAGE_CREATE`` (the bot hears itself, as on Discord);
* ``POST /channels/{id}/typing``: recorded in :attr:`FakeDiscord.typing`, 204.
* multipart ``POST /channels/{id}/messages`` (``payload_json`` plus ``files[n]``, as discord.py
  uploads files): the files are kept in :attr:`RecordedPost.files` and become the message's
  ``attachments``; a DM to a user in :attr:`FakeDiscord.closed_dms` answers 403 code 50007
  ("Cannot send messages to this user"), as Discord does when DMs from a server are off;
* ``GET /users/{id}`` and ``POST /users/@me/channels`` (open the DM channel with a user);
* ``GET /channels/{id}/messages/{id}``: the stored message with freshly signed attachment URLs
  (404 code 10008 once deleted), recorded in :attr:`FakeDiscord.message_fetches`;
* ``PATCH /channels/{id}/messages/{id}`` (edit one of the bot's messages: its ``content``
  replaced, ``MESSAGE_UPDATE`` on the gateway with the whole message, as Discord sends) and
  ``DELETE /channels/{id}/messages/{id}`` (204, ``MESSAGE_DELETE``): 404 code 10008 for a
  message that does not exist (any more), 403 code 50005 for editing another user's message;
  scripted failures with :meth:`fail_next_edit` and :meth:`fail_next_delete`; a create or an
  edit carried out at once but answered late with :meth:`answer_late`.

Webhooks (one per channel, created by the bot for the personas of a scene: docs/scenes.md):

* ``GET`` / ``POST /channels/{id}/webhooks`` (list, create; ``Authorization`` needed): 403 code
  50013 ("Missing Permissions") in a channel :meth:`FakeDiscord.deny_manage_webhooks` named;
  a webhook someone else made is :meth:`FakeDiscord.add_webhook`, one deleted behind the bot's
  back :meth:`FakeDiscord.delete_webhook`;
* ``POST /webhooks/{id}/{token}?wait=&thread_id=`` (execute; no ``Authorization``, the token is
  in the path): recorded in :attr:`FakeDiscord.executions` (username, avatar_url, content,
  allowed_mentions), 404 code 10015 for a webhook that does not exist (any more); the message
  (``webhook_id`` set, its author the ``username`` with ``bot: true``, as Discord shows it) is
  stored in the thread or channel and echoed as ``MESSAGE_CREATE``; answered with it when
  ``wait`` is set, else 204.

Application commands and interactions: tests/fakes/discord_interactions.py
(:attr:`FakeDiscord.app_commands`).

Every REST request is recorded in :attr:`FakeDiscord.requests` with its body and the loop's
(monotonic) time it arrived, so tests and benchmarks can measure rates (:meth:`creates`,
:meth:`edits`, :meth:`deletes`, :meth:`throttled`).

Rate limits, per route and channel as Discord's (:class:`Bucket`): message edits have Discord's
5 requests per 5 s per channel unless told otherwise (``edit_limit``); creates and deletions
are unlimited unless given a bucket (``create_limit``, ``delete_limit``; Discord's creates are
5 per 5 s too, but tests that answer many messages in one channel would then wait on
discord.py's buckets). A fixed window starts with the first request; every answer of a
limited route carries ``X-RateLimit-Limit``, ``-Remaining``, ``-Reset``, ``-Reset-After`` and
``-Bucket``, and a request beyond the limit gets a 429 with ``retry_after`` in its JSON body
(the time left in the window) and the same headers, changing nothing.

CDN (``/attachments/{channel}/{attachment}/{filename}?ex=...``, no token): serves the bytes
of every :class:`Upload` (the ``url`` of the attachment objects), recorded in
:attr:`FakeDiscord.downloads`. Faults: :meth:`expire` (the URL answers 404 until the message
is fetched again), :meth:`fail_download` (a status, or ``"hang"``: no answer until the server
closes), :meth:`serve_chunked` (no Content-Length).

Payload kinds :meth:`post` can send besides text: attachments, voice messages
(:meth:`voice`), stickers, polls, replies with or without ``referenced_message``; and
:meth:`forward` (``message_snapshots``).

Gateway (``/gateway``): HELLO (op 10) on connect; heartbeats (op 1) acknowledged (op 11);
IDENTIFY (op 2) checked (token: close 4004; message-content intent while
``allow_message_content`` is False: close 4014) and answered with READY plus one GUILD_CREATE
per guild of the shard; RESUME (op 6) answered with the events queued by :meth:`reconnect`
then RESUMED. :meth:`dispatch` pushes any event with the next sequence number.

Known traps of discord.py this fake respects: JSON responses carry exactly
``Content-Type: application/json`` (no charset); member objects have a ``flags`` key; a 429
has a ``Via`` header and ``retry_after`` in its JSON body (otherwise discord.py takes it for a
Cloudflare ban and raises at once).
"""

from __future__ import annotations

import asyncio
import base64
import copy
import datetime
import itertools
import json
import math
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict, Unpack
from urllib.parse import quote

from aiohttp import WSMsgType, web

from tests.fakes.discord_interactions import FakeAppCommands
from tests.fakes.server import FakeServer, json_body

__all__ = [
    "Bucket",
    "FailureOptions",
    "FakeDiscord",
    "FakeFile",
    "FakeGuild",
    "FakeUser",
    "FakeWebhook",
    "RecordedExecution",
    "RecordedPost",
    "RecordedRequest",
    "ScriptedFailure",
    "Upload",
]

JSON = dict[str, Any]
MESSAGE_CONTENT_INTENT = 1 << 15
VOICE_MESSAGE_FLAG = 1 << 13
#: Whether a reply's payload includes the message it replies to (see :meth:`FakeDiscord.post`).
Referenced = Literal["included", "absent", "deleted"]
#: A scripted CDN answer: an HTTP status, or ``"hang"`` (headers never come).
Fault = int | Literal["hang"]
#: The routes on messages that have their own rate-limit bucket and scripted failures.
MessageRoute = Literal["create", "edit", "delete"]
#: Where a handler leaves the JSON body it read, for :attr:`FakeDiscord.requests`.
_BODY: web.RequestKey[Any] = web.RequestKey("fake_discord_body", object)
_EPOCH_MS = 1420070400000


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat()


def _snowflake_time(snowflake: int) -> str:
    moment = datetime.datetime.fromtimestamp(((snowflake >> 22) + _EPOCH_MS) / 1000, datetime.UTC)
    return moment.isoformat()


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """A JSON answer whose content type is exactly ``application/json`` (discord.py checks)."""
    return web.Response(
        body=json.dumps(data).encode(),
        status=status,
        headers={"Content-Type": "application/json", **(headers or {})},
    )


def _error(status: int, message: str, code: int = 0) -> web.Response:
    return _json({"message": message, "code": code}, status)


@dataclass(frozen=True, slots=True)
class FakeUser:
    """A Discord user of the fake world."""

    id: int
    name: str
    bot: bool = False

    def payload(self) -> JSON:
        """The user object."""
        data: JSON = {
            "id": str(self.id),
            "username": self.name.lower(),
            "global_name": self.name,
            "discriminator": "0",
            "avatar": None,
            "public_flags": 0,
        }
        if self.bot:
            data["bot"] = True
        return data


@dataclass
class FakeGuild:
    """A guild: its @everyone role, the bot's own role, text channels and threads."""

    id: int
    name: str
    bot_role: int
    general: int
    channels: dict[int, JSON] = field(default_factory=dict)
    threads: dict[int, JSON] = field(default_factory=dict)
    roles: list[JSON] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class RecordedPost:
    """One ``POST /channels/{id}/messages`` as received, with the status it was answered."""

    channel_id: int
    body: JSON
    status: int
    at: float
    files: tuple[tuple[str, bytes], ...] = ()

    @property
    def content(self) -> str:
        """The message text sent."""
        return str(self.body.get("content") or "")


@dataclass(frozen=True, slots=True)
class FakeWebhook:
    """An incoming webhook of a guild channel, and who made it."""

    id: int
    token: str
    channel_id: int
    guild_id: int
    name: str
    owner: FakeUser

    def payload(self) -> JSON:
        """The webhook object, as listing or creating it answers (token included)."""
        return {
            "id": str(self.id),
            "type": 1,
            "guild_id": str(self.guild_id),
            "channel_id": str(self.channel_id),
            "user": self.owner.payload(),
            "name": self.name,
            "avatar": None,
            "token": self.token,
            "application_id": None,
        }


@dataclass(frozen=True, slots=True)
class RecordedExecution:
    """One ``POST /webhooks/{id}/{token}`` as received, and the status it was answered."""

    webhook_id: int
    thread_id: int | None
    wait: bool
    body: JSON
    status: int
    channel_id: int | None = None  # where the message went (the thread when there is one)

    @property
    def content(self) -> str:
        """The message text sent."""
        return str(self.body.get("content") or "")

    @property
    def username(self) -> str | None:
        """The name the message was posted under."""
        return self.body.get("username")

    @property
    def avatar_url(self) -> str | None:
        """The avatar the message was posted with."""
        return self.body.get("avatar_url")


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One REST request (``/api/v10/...``) as received, and the status it was answered."""

    method: str
    path: str
    status: int
    at: float  # the event loop's (monotonic) time when it arrived
    body: JSON | None = None  # the JSON body, when the handler read one
    channel_id: int | None = None
    message_id: int | None = None

    @property
    def content(self) -> str:
        """The message text sent (creates and edits)."""
        return str((self.body or {}).get("content") or "")


@dataclass(frozen=True, slots=True)
class Bucket:
    """A per-route, per-channel rate limit: ``limit`` requests per ``window`` seconds."""

    limit: int = 5
    window: float = 5.0


@dataclass(frozen=True, slots=True)
class Upload:
    """A file a user attaches; the fake's CDN serves ``data`` at the attachment's URL."""

    filename: str
    content_type: str | None = "application/octet-stream"
    data: bytes = b"fake file bytes"
    width: int | None = None
    height: int | None = None
    duration: float | None = None
    voice: bool = False  # a voice message: duration and waveform, as Discord's client sends


@dataclass
class FakeFile:
    """An attachment on the fake CDN: its bytes, its URL's current signature, scripted faults.

    :meth:`FakeDiscord.expire` changes the signature: the URL handed out before answers 404
    (as Discord's expired signed URLs do) and the message fetched again carries the new one.
    """

    id: int
    channel_id: int
    upload: Upload
    signature: int = 1
    chunked: bool = False  # no Content-Length: the body's size is known only by reading it
    faults: deque[Fault] = field(default_factory=deque)


@dataclass(frozen=True, slots=True)
class ScriptedFailure:
    """An error answer queued for the next send to a channel."""

    status: int
    code: int = 0
    message: str = "scripted failure"
    retry_after: float | None = None


class FailureOptions(TypedDict, total=False):
    """The keywords of :meth:`FakeDiscord.fail_next` that its per-route shorthands pass on."""

    code: int
    message: str
    retry_after: float | None
    times: int


class FakeDiscord(FakeServer):
    """A fake Discord REST API and gateway; use as ``async with FakeDiscord(token=...)``."""

    def __init__(
        self,
        *,
        token: str,
        bot_name: str = "Mira",
        allow_message_content: bool = True,
        heartbeat_interval_ms: int = 41250,
        create_limit: Bucket | None = None,
        edit_limit: Bucket | None = Bucket(),
        delete_limit: Bucket | None = None,
    ) -> None:
        super().__init__()
        self.token = token
        self.allow_message_content = allow_message_content
        self._heartbeat_ms = heartbeat_interval_ms
        #: The rate limit of each message route (``None``: unlimited, no headers).
        self.limits: dict[MessageRoute, Bucket | None] = {
            "create": create_limit,
            "edit": edit_limit,
            "delete": delete_limit,
        }
        #: (route, channel) -> (start of the current window, requests counted in it).
        self._windows: dict[tuple[MessageRoute, int], tuple[float, int]] = {}
        #: Every REST request, in arrival order (see :class:`RecordedRequest`).
        self.requests: list[RecordedRequest] = []
        self._ids = itertools.count(1)
        self.bot = FakeUser(self._snowflake(), bot_name, bot=True)
        self.application_id = self._snowflake()
        self.users: dict[int, FakeUser] = {}
        self.guilds: dict[int, FakeGuild] = {}
        self.dm_channels: dict[int, FakeUser] = {}
        #: Users who do not accept DMs from the bot (Discord answers 403, code 50007).
        self.closed_dms: set[int] = set()
        self.messages: dict[int, list[JSON]] = {}
        self.posts: list[RecordedPost] = []
        self.typing: list[tuple[int, float]] = []
        self.identifies: list[JSON] = []
        self.resumes: list[JSON] = []
        self.unknown_routes: list[str] = []
        self.files: dict[int, FakeFile] = {}
        #: CDN requests: (attachment id, status answered; 0 for a request left hanging).
        self.downloads: list[tuple[int, int]] = []
        #: ``GET /channels/{c}/messages/{m}``: (channel id, message id).
        self.message_fetches: list[tuple[int, int]] = []
        self._hung = asyncio.Event()
        self._failures: dict[tuple[MessageRoute, int], deque[ScriptedFailure]] = {}
        self._late: dict[tuple[MessageRoute, int], deque[float]] = {}
        self._nonces: dict[tuple[int, str], JSON] = {}
        self._sockets: set[web.WebSocketResponse] = set()
        self._current: web.WebSocketResponse | None = None
        self._session_id: str | None = None
        self._seq = 0
        self._send_lock = asyncio.Lock()
        self._replay: list[tuple[str, JSON]] = []
        self._connected = asyncio.Event()
        self._answered = 0
        self._changed = asyncio.Condition()
        #: Webhooks by id (the bot's and anyone else's); deleted ones are gone from here.
        self.webhooks: dict[int, FakeWebhook] = {}
        #: Channels where the bot lacks Manage Webhooks (listing and creating answer 403).
        self.webhooks_denied: set[int] = set()
        self.executions: list[RecordedExecution] = []
        #: Application commands and interactions (tests/fakes/discord_interactions.py).
        self.app_commands = FakeAppCommands(self)

    # ------------------------------------------------------------------ world

    def _snowflake(self) -> int:
        """A realistic snowflake (discord.py only resolves mentions of 15-20 digit ids)."""
        return ((1_700_000_000_000 - _EPOCH_MS) << 22) + next(self._ids)

    def add_user(self, name: str, *, bot: bool = False) -> FakeUser:
        """A user who can write to the bot."""
        user = FakeUser(self._snowflake(), name, bot=bot)
        self.users[user.id] = user
        return user

    def add_guild(self, name: str) -> FakeGuild:
        """A guild with a ``#general`` channel, the bot as a member with its own role."""
        guild_id = self._snowflake()
        bot_role = self._snowflake()
        guild = FakeGuild(guild_id, name, bot_role, general=0)
        guild.roles = [_role(guild_id, "@everyone", 0), _role(bot_role, self.bot.name, 1)]
        guild.roles[1]["managed"] = True
        guild.roles[1]["tags"] = {"bot_id": str(self.bot.id)}
        self.guilds[guild_id] = guild
        guild.general = self.add_channel(guild, "general")
        return guild

    def add_role(self, guild: FakeGuild, name: str) -> int:
        """Another role of the guild (the bot does not have it)."""
        role_id = self._snowflake()
        guild.roles.append(_role(role_id, name, len(guild.roles)))
        return role_id

    def add_channel(self, guild: FakeGuild, name: str) -> int:
        """A guild text channel."""
        channel_id = self._snowflake()
        guild.channels[channel_id] = {
            "id": str(channel_id),
            "type": 0,
            "guild_id": str(guild.id),
            "name": name,
            "position": len(guild.channels),
            "permission_overwrites": [],
            "nsfw": False,
            "parent_id": None,
            "topic": None,
            "last_message_id": None,
            "rate_limit_per_user": 0,
        }
        return channel_id

    def add_thread(self, guild: FakeGuild, parent: int, name: str) -> int:
        """A public thread in a text channel."""
        thread_id = self._snowflake()
        guild.threads[thread_id] = {
            "id": str(thread_id),
            "type": 11,
            "guild_id": str(guild.id),
            "parent_id": str(parent),
            "owner_id": str(self.bot.id),
            "name": name,
            "last_message_id": None,
            "rate_limit_per_user": 0,
            "message_count": 0,
            "member_count": 1,
            "flags": 0,
            "thread_metadata": {
                "archived": False,
                "auto_archive_duration": 1440,
                "archive_timestamp": _now(),
                "locked": False,
            },
        }
        return thread_id

    def add_webhook(self, channel_id: int, name: str, owner: FakeUser) -> FakeWebhook:
        """A webhook in a guild channel, made by ``owner`` (a person, or the bot)."""
        guild = self._guild_of(channel_id)
        assert guild is not None and channel_id in guild.channels, "webhooks live in channels"
        hook_id = self._snowflake()
        hook = FakeWebhook(hook_id, f"token-{hook_id}", channel_id, guild.id, name, owner)
        self.webhooks[hook.id] = hook
        return hook

    def delete_webhook(self, webhook_id: int) -> None:
        """Someone deletes a webhook (executing it answers 404 code 10015 from now on)."""
        del self.webhooks[webhook_id]

    def deny_manage_webhooks(self, channel_id: int) -> None:
        """The bot lacks Manage Webhooks in a channel (its threads included)."""
        self.webhooks_denied.add(channel_id)

    def channel_webhooks(self, channel_id: int) -> list[FakeWebhook]:
        """The webhooks a channel has now, oldest first."""
        return [h for h in self.webhooks.values() if h.channel_id == channel_id]

    async def post_as_webhook(
        self, hook: FakeWebhook, username: str, content: str, *, thread_id: int | None = None
    ) -> JSON:
        """Someone posts through ``hook`` (as an integration would): MESSAGE_CREATE."""
        response, channel_id = await self._execute(
            hook.id, hook.token, {"content": content, "username": username}, thread_id
        )
        assert response.status == 200 and channel_id is not None, response.text
        return self.webhook_messages(channel_id)[-1]

    def webhook_messages(self, channel_id: int) -> list[JSON]:
        """Messages posted through webhooks in a channel or thread, in order."""
        return [m for m in self.messages.get(channel_id, []) if m.get("webhook_id")]

    def dm(self, user: FakeUser) -> int:
        """The DM channel between ``user`` and the bot (created on first use)."""
        for channel_id, other in self.dm_channels.items():
            if other == user:
                return channel_id
        channel_id = self._snowflake()
        self.dm_channels[channel_id] = user
        return channel_id

    def _guild_of(self, channel_id: int) -> FakeGuild | None:
        for guild in self.guilds.values():
            if channel_id in guild.channels or channel_id in guild.threads:
                return guild
        return None

    def _channel_payload(self, channel_id: int) -> JSON | None:
        guild = self._guild_of(channel_id)
        if guild is not None:
            return guild.channels.get(channel_id) or guild.threads[channel_id]
        user = self.dm_channels.get(channel_id)
        if user is None:
            return None
        return {
            "id": str(channel_id),
            "type": 1,
            "recipients": [user.payload()],
            "last_message_id": None,
        }

    def _guild_create(self, guild: FakeGuild) -> JSON:
        return {
            "id": str(guild.id),
            "name": guild.name,
            "unavailable": False,
            "owner_id": str(next(iter(self.users), self.bot.id)),
            "icon": None,
            "splash": None,
            "features": [],
            "roles": guild.roles,
            "emojis": [],
            "stickers": [],
            "channels": list(guild.channels.values()),
            "threads": list(guild.threads.values()),
            "members": [self._member(self.bot, guild, roles=[guild.bot_role])],
            "member_count": 1 + len(self.users),
            "large": False,
            "voice_states": [],
            "presences": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "soundboard_sounds": [],
            "joined_at": _now(),
            "premium_tier": 0,
            "preferred_locale": "en-US",
            "system_channel_flags": 0,
            "verification_level": 0,
            "default_message_notifications": 0,
            "explicit_content_filter": 0,
            "mfa_level": 0,
            "nsfw_level": 0,
        }

    def _member(self, user: FakeUser, guild: FakeGuild, roles: list[int] | None = None) -> JSON:
        # discord.py reads member["flags"] unconditionally: a member without it crashes parsing.
        return {
            "user": user.payload(),
            "roles": [str(r) for r in roles or []],
            "joined_at": _now(),
            "deaf": False,
            "mute": False,
            "flags": 0,
            "nick": None,
        }

    # ------------------------------------------------------------------ scripting

    def fail_next(
        self,
        route: MessageRoute,
        channel_id: int,
        status: int,
        *,
        code: int = 0,
        message: str = "scripted failure",
        retry_after: float | None = None,
        times: int = 1,
    ) -> None:
        """Answer the next ``times`` requests of ``route`` in ``channel_id`` with an error."""
        failure = ScriptedFailure(status, code, message, retry_after)
        self._failures.setdefault((route, channel_id), deque()).extend([failure] * times)

    def fail_next_send(self, channel_id: int, status: int, **how: Unpack[FailureOptions]) -> None:
        """Answer the next sends to ``channel_id`` with an error (see :meth:`fail_next`)."""
        self.fail_next("create", channel_id, status, **how)

    def fail_next_edit(self, channel_id: int, status: int, **how: Unpack[FailureOptions]) -> None:
        """Answer the next message edits in ``channel_id`` with an error."""
        self.fail_next("edit", channel_id, status, **how)

    def fail_next_delete(self, channel_id: int, status: int, **how: Unpack[FailureOptions]) -> None:
        """Answer the next message deletions in ``channel_id`` with an error."""
        self.fail_next("delete", channel_id, status, **how)

    def answer_late(self, route: MessageRoute, channel_id: int, seconds: float) -> None:
        """The next request of ``route`` in ``channel_id`` is carried out at once, but its answer
        comes ``seconds`` later (a slow network: the client may give up before it arrives)."""
        self._late.setdefault((route, channel_id), deque()).append(seconds)

    async def _answered_late(self, route: MessageRoute, channel_id: int) -> None:
        late = self._late.get((route, channel_id))
        if late:
            await asyncio.sleep(late.popleft())

    def _scripted(self, route: MessageRoute, channel_id: int) -> web.Response | None:
        """The scripted failure due for this request, if any (consumed)."""
        failures = self._failures.get((route, channel_id))
        return self._failure(failures.popleft()) if failures else None

    def expire(self, attachment_id: int | str) -> None:
        """The attachment's URL expires: it answers 404 until the message is fetched again."""
        self.files[int(attachment_id)].signature += 1

    def fail_download(self, attachment_id: int | str, fault: Fault, *, times: int = 1) -> None:
        """Answer the next ``times`` downloads of the attachment with ``fault``."""
        self.files[int(attachment_id)].faults.extend([fault] * times)

    def serve_chunked(self, attachment_id: int | str) -> None:
        """Serve the attachment without Content-Length (chunked), as some proxies do."""
        self.files[int(attachment_id)].chunked = True

    def file_url(self, attachment_id: int | str) -> str:
        """The attachment's current URL (what a fetched message carries now)."""
        file = self.files[int(attachment_id)]
        name = quote(file.upload.filename)
        return (
            f"http://127.0.0.1:{self.port}/attachments/{file.channel_id}/{file.id}/{name}"
            f"?ex={file.signature:08x}&hm=fake"
        )

    async def dispatch(self, event: str, data: JSON) -> int:
        """Send a DISPATCH event on the live connection; returns its sequence number."""
        async with self._send_lock:
            if self._current is None or self._current.closed:
                raise RuntimeError("no gateway connection")
            self._seq += 1
            await self._current.send_json({"op": 0, "t": event, "s": self._seq, "d": data})
            return self._seq

    async def send_raw(self, frame: Any) -> None:
        """Send any JSON value as one gateway frame on the live connection (a broken gateway's
        or proxy's)."""
        async with self._send_lock:
            if self._current is None or self._current.closed:
                raise RuntimeError("no gateway connection")
            await self._current.send_json(frame)

    async def post(
        self,
        channel_id: int,
        author: FakeUser,
        content: str,
        *,
        mention_bot: bool = False,
        mention_roles: tuple[int, ...] = (),
        mention_users: tuple[FakeUser, ...] = (),
        reply_to: JSON | None = None,
        referenced: Referenced = "included",
        attachments: tuple[Upload | tuple[str, str], ...] = (),
        stickers: tuple[tuple[str, int], ...] = (),
        poll: tuple[str, tuple[str, ...]] | None = None,
        flags: int = 0,
        dispatch: bool = True,
    ) -> JSON:
        """A user writes in a channel, thread or DM: MESSAGE_CREATE; returns the message.

        ``mention_users``: users in the payload's ``mentions`` (write ``<@id>`` in ``content``
        yourself); ``attachments``: :class:`Upload` files (or ``(filename, content_type)``
        pairs), served at 127.0.0.1 URLs; ``stickers``: ``(name, format_type)`` (1 PNG,
        2 APNG, 3 Lottie, 4 GIF); ``poll``: question and answers; ``referenced`` says whether a
        reply's payload includes the replied-to message (``absent``: Discord did not resolve
        it, ``deleted``: it is null). ``dispatch=False`` keeps the message off the gateway (a
        message in a channel the bot cannot see, for forwarding).
        """
        if mention_bot:
            content = f"<@{self.bot.id}> {content}"
        for role in mention_roles:
            content = f"<@&{role}> {content}"
        message = self._message(channel_id, author, content, reply_to=reply_to)
        if reply_to is not None and referenced == "absent":
            del message["referenced_message"]
        elif reply_to is not None and referenced == "deleted":
            message["referenced_message"] = None
        if mention_bot:
            message["mentions"].append(self._mention(self.bot, channel_id))
        message["mentions"] += [self._mention(user, channel_id) for user in mention_users]
        message["mention_roles"] = [str(r) for r in mention_roles]
        uploads = [a if isinstance(a, Upload) else Upload(a[0], a[1]) for a in attachments]
        message["attachments"] = [self._attachment(channel_id, u) for u in uploads]
        if any(u.voice for u in uploads):
            flags |= VOICE_MESSAGE_FLAG
        message["flags"] = flags
        if stickers:
            message["sticker_items"] = [
                {"id": str(self._snowflake()), "name": name, "format_type": fmt}
                for name, fmt in stickers
            ]
        if poll is not None:
            message["poll"] = _poll(*poll)
        self.messages.setdefault(channel_id, []).append(message)
        if dispatch:
            await self.dispatch("MESSAGE_CREATE", message)
        return message

    async def voice(
        self, channel_id: int, author: FakeUser, data: bytes, *, duration: float = 3.5
    ) -> JSON:
        """A voice message: one OGG attachment with a duration and waveform, flag 1 << 13."""
        upload = Upload("voice-message.ogg", "audio/ogg", data, duration=duration, voice=True)
        return await self.post(channel_id, author, "", attachments=(upload,))

    async def forward(self, channel_id: int, author: FakeUser, source: JSON) -> JSON:
        """``author`` forwards ``source`` into a channel: an empty message whose reference has
        type 1 (forward) and whose ``message_snapshots`` hold the source's content and files."""
        message = self._message(channel_id, author, "")
        message["message_reference"] = {
            "type": 1,
            "message_id": source["id"],
            "channel_id": source["channel_id"],
            **({"guild_id": source["guild_id"]} if "guild_id" in source else {}),
        }
        snapshot = {
            key: copy.deepcopy(source[key])
            for key in ("type", "content", "embeds", "attachments", "timestamp", "flags")
        }
        snapshot.update(edited_timestamp=source.get("edited_timestamp"), mentions=[])
        snapshot["mention_roles"] = []
        if "sticker_items" in source:
            snapshot["sticker_items"] = copy.deepcopy(source["sticker_items"])
        message["message_snapshots"] = [{"message": snapshot}]
        message["flags"] = 1 << 14  # HAS_SNAPSHOT
        self.messages.setdefault(channel_id, []).append(message)
        await self.dispatch("MESSAGE_CREATE", message)
        return message

    def hidden_channel(self) -> int:
        """A channel id the bot knows nothing of (a server it is not in)."""
        return self._snowflake()

    async def edit(self, message: JSON, content: str, *, mention_bot: bool = False) -> JSON:
        """The author edits a message: MESSAGE_UPDATE with the whole new message."""
        if mention_bot:
            content = f"<@{self.bot.id}> {content}"
            message["mentions"] = [
                *message["mentions"],
                self._mention(self.bot, int(message["channel_id"])),
            ]
        message.update(content=content, edited_timestamp=_now())
        await self.dispatch("MESSAGE_UPDATE", message)
        return message

    async def unfurl(self, message: JSON) -> JSON:
        """Discord adds a link preview: MESSAGE_UPDATE with an embed, ``edited_timestamp`` as is."""
        embed = {"type": "link", "url": "https://example.org", "title": "Example"}
        message["embeds"] = [*message["embeds"], embed]
        await self.dispatch("MESSAGE_UPDATE", message)
        return message

    async def delete(self, message: JSON) -> None:
        """A message is deleted: MESSAGE_DELETE (ids only, as Discord sends)."""
        data = {"id": message["id"], "channel_id": message["channel_id"]}
        if "guild_id" in message:
            data["guild_id"] = message["guild_id"]
        channel = self.messages.get(int(message["channel_id"]), [])
        channel[:] = [m for m in channel if m["id"] != message["id"]]
        await self.dispatch("MESSAGE_DELETE", data)

    async def reconnect(self, *, replay: list[tuple[str, JSON]]) -> None:
        """Ask the client to reconnect (op 7); on its RESUME, deliver ``replay`` again."""
        self._replay = list(replay)
        self._connected.clear()
        async with self._send_lock:
            assert self._current is not None
            await self._current.send_json({"op": 7, "d": None, "s": None, "t": None})

    def _message(
        self, channel_id: int, author: FakeUser, content: str, *, reply_to: JSON | None = None
    ) -> JSON:
        guild = self._guild_of(channel_id)
        message_id = self._snowflake()
        message: JSON = {
            "id": str(message_id),
            "channel_id": str(channel_id),
            "author": author.payload(),
            "content": content,
            "timestamp": _snowflake_time(message_id),  # as on Discord: the id's own time
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": "@everyone" in content or "@here" in content,
            "mentions": [],
            "mention_roles": [],
            "attachments": [],
            "embeds": [],
            "pinned": False,
            "type": 0,
            "flags": 0,
            "components": [],
        }
        if guild is not None:
            message["guild_id"] = str(guild.id)
            roles = [guild.bot_role] if author == self.bot else None
            member = self._member(author, guild, roles=roles)
            member.pop("user")
            message["member"] = member
        if reply_to is not None:
            message["type"] = 19
            message["message_reference"] = {
                "type": 0,
                "message_id": reply_to["id"],
                "channel_id": reply_to["channel_id"],
                **({"guild_id": str(guild.id)} if guild else {}),
            }
            message["referenced_message"] = reply_to
        return message

    def _attachment(self, channel_id: int, upload: Upload) -> JSON:
        """An attachment object; its file is served by the fake CDN."""
        file = FakeFile(self._snowflake(), channel_id, upload)
        self.files[file.id] = file
        data: JSON = {
            "id": str(file.id),
            "filename": upload.filename,
            "size": len(upload.data),
            "url": self.file_url(file.id),
            "proxy_url": self.file_url(file.id).replace("/attachments/", "/proxy/attachments/"),
        }
        if upload.content_type is not None:
            data["content_type"] = upload.content_type
        if upload.width is not None:
            data["width"] = upload.width
        if upload.height is not None:
            data["height"] = upload.height
        if upload.duration is not None:
            data["duration_secs"] = upload.duration
        if upload.voice:
            data["waveform"] = base64.b64encode(bytes(range(0, 256, 4))).decode()
        return data

    def _as_served(self, message: JSON) -> JSON:
        """A stored message as Discord serves it now: attachment URLs freshly signed."""
        fresh = copy.deepcopy(message)
        snapshots = [s["message"] for s in fresh.get("message_snapshots") or []]
        for holder in (fresh, *snapshots):
            for attachment in holder.get("attachments") or []:
                if int(attachment["id"]) in self.files:
                    attachment["url"] = self.file_url(attachment["id"])
        return fresh

    def _mention(self, user: FakeUser, channel_id: int) -> JSON:
        data = user.payload()
        guild = self._guild_of(channel_id)
        if guild is not None:
            member = self._member(user, guild)
            member.pop("user")
            data["member"] = member
        return data

    # ------------------------------------------------------------------ reading

    def bot_messages(self, channel_id: int) -> list[JSON]:
        """Messages the bot created in a channel, in order."""
        return [
            m for m in self.messages.get(channel_id, []) if m["author"]["id"] == str(self.bot.id)
        ]

    def edits(self, channel_id: int) -> list[RecordedRequest]:
        """Message edits (``PATCH``) requested in a channel, in order, whatever the answer."""
        return self._requests("PATCH", channel_id)

    def deletes(self, channel_id: int) -> list[RecordedRequest]:
        """Message deletions requested in a channel, in order, whatever the answer."""
        return self._requests("DELETE", channel_id)

    def creates(self, channel_id: int) -> list[RecordedRequest]:
        """Message creates (``POST .../messages``) requested in a channel, in order."""
        return [r for r in self._requests("POST", channel_id) if r.path.endswith("/messages")]

    def throttled(self) -> list[RecordedRequest]:
        """Every request answered 429 (rate limited), in order."""
        return [r for r in self.requests if r.status == 429]

    def _requests(self, method: str, channel_id: int) -> list[RecordedRequest]:
        return [r for r in self.requests if r.method == method and r.channel_id == channel_id]

    async def wait_for(self, predicate: Any, within: float = 15.0) -> None:
        """Wait until ``predicate()`` holds (re-checked on every request or event)."""
        async with asyncio.timeout(within), self._changed:
            await self._changed.wait_for(predicate)

    async def wait_for_bot_messages(
        self, channel_id: int, count: int, within: float = 15.0
    ) -> list[JSON]:
        """Wait until the bot created at least ``count`` messages in a channel."""
        await self.wait_for(lambda: len(self.bot_messages(channel_id)) >= count, within)
        return self.bot_messages(channel_id)

    @property
    def sessions(self) -> int:
        """Gateway sessions started so far (IDENTIFY and RESUME answered)."""
        return self._answered

    async def wait_identified(self, within: float = 15.0, *, after: int | None = None) -> None:
        """Wait until a client is connected (identified or resumed, guilds sent).

        ``after``: wait for a session started after that many (see :attr:`sessions`), so
        that a client that just disconnected is not taken for the next one.
        """
        async with asyncio.timeout(within):
            await self._connected.wait()
            if after is not None:
                async with self._changed:
                    await self._changed.wait_for(lambda: self.sessions > after)

    @staticmethod
    def pings(body: JSON) -> set[str]:
        """Who a message body would notify on Discord, given its content and allowed_mentions.

        Discord's rules: without ``allowed_mentions`` every mention in the content pings
        (users, roles, @everyone/@here) and a reply pings the replied-to author; with it, only
        the types listed in ``parse``, the ids in ``users``/``roles``, and the replied user
        when ``replied_user`` is true.
        """
        content = str(body.get("content") or "")
        allowed = body.get("allowed_mentions")
        if allowed is None:
            parse, users, roles = {"users", "roles", "everyone"}, set(), set()
            replied = True
        else:
            parse = set(allowed.get("parse", []))
            users = {str(u) for u in allowed.get("users", [])}
            roles = {str(r) for r in allowed.get("roles", [])}
            replied = bool(allowed.get("replied_user", False))
        pinged = set()
        if "everyone" in parse and re.search(r"@(everyone|here)\b", content):
            pinged.add("@everyone")
        for user in re.findall(r"<@!?(\d+)>", content):
            if "users" in parse or user in users:
                pinged.add(f"user:{user}")
        for role in re.findall(r"<@&(\d+)>", content):
            if "roles" in parse or role in roles:
                pinged.add(f"role:{role}")
        if body.get("message_reference") and replied:
            pinged.add("replied-user")
        return pinged

    # ------------------------------------------------------------------ server

    @property
    def api_base(self) -> str:
        """The REST base URL (``api_base`` of a bot entry)."""
        return f"{self.base_url}/api/v10"

    @property
    def gateway_url(self) -> str:
        """The gateway URL (``gateway_url`` of a bot entry)."""
        return f"ws://127.0.0.1:{self.port}/gateway"

    def _build_app(self) -> web.Application:
        app = web.Application(middlewares=[self._record])
        api = "/api/v10"
        app.router.add_get("/gateway", self._gateway)
        app.router.add_get(f"{api}/users/@me", self._me)
        app.router.add_get(f"{api}/oauth2/applications/@me", self._application)
        app.router.add_get(f"{api}/gateway/bot", self._gateway_bot)
        app.router.add_get(api + "/channels/{channel_id:\\d+}", self._get_channel)
        app.router.add_post(api + "/channels/{channel_id:\\d+}/messages", self._create_message)
        app.router.add_post(api + "/channels/{channel_id:\\d+}/typing", self._typing)
        message = api + "/channels/{channel_id:\\d+}/messages/{message_id:\\d+}"
        app.router.add_get(message, self._get_message)
        app.router.add_patch(message, self._edit_message)
        app.router.add_delete(message, self._delete_message)
        app.router.add_get(
            "/attachments/{channel_id:\\d+}/{attachment_id:\\d+}/{filename}", self._download
        )
        webhooks = api + "/channels/{channel_id:\\d+}/webhooks"
        app.router.add_get(webhooks, self._list_webhooks)
        app.router.add_post(webhooks, self._create_webhook)
        app.router.add_post(api + "/webhooks/{webhook_id:\\d+}/{token}", self._execute_webhook)
        app.router.add_get(api + "/users/{user_id:\\d+}", self._get_user)
        app.router.add_post(f"{api}/users/@me/channels", self._open_dm)
        self.app_commands.add_routes(app.router, api)
        app.router.add_route("*", "/{tail:.*}", self._unknown)
        return app

    async def _before_cleanup(self) -> None:
        """Close every gateway connection and end hanging downloads."""
        self._hung.set()
        for ws in list(self._sockets):
            await ws.close(code=1001)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # ------------------------------------------------------------------ REST handlers

    @web.middleware
    async def _record(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """Record every REST request with the time it arrived (gateway and CDN aside)."""
        at = asyncio.get_running_loop().time()
        response = await handler(request)
        if request.path.startswith("/api/"):
            ids = request.match_info
            channel, message = ids.get("channel_id"), ids.get("message_id")
            self.requests.append(
                RecordedRequest(
                    request.method,
                    request.path,
                    response.status,
                    at,
                    request.get(_BODY),
                    None if channel is None else int(channel),
                    None if message is None else int(message),
                )
            )
            await self._notify()
        return response

    def _authorized(self, request: web.Request) -> bool:
        return request.headers.get("Authorization") == f"Bot {self.token}"

    async def _me(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return _error(401, "401: Unauthorized")
        return _json({**self.bot.payload(), "verified": True, "mfa_enabled": False, "flags": 0})

    async def _application(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return _error(401, "401: Unauthorized")
        owner = FakeUser(self.application_id + 1, "Owner")
        return _json(
            {
                "id": str(self.application_id),
                "name": self.bot.name,
                "icon": None,
                "description": "",
                "rpc_origins": [],
                "bot_public": True,
                "bot_require_code_grant": False,
                "owner": owner.payload(),
                "team": None,
                "verify_key": "0" * 64,
                "flags": 0,
                "summary": "",
            }
        )

    async def _gateway_bot(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return _error(401, "401: Unauthorized")
        limit = {"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}
        return _json({"url": self.gateway_url, "shards": 1, "session_start_limit": limit})

    async def _get_channel(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return _error(401, "401: Unauthorized")
        payload = self._channel_payload(int(request.match_info["channel_id"]))
        if payload is None:
            return _error(404, "Unknown Channel", 10003)
        return _json(payload)

    async def _typing(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return _error(401, "401: Unauthorized")
        loop = asyncio.get_running_loop()
        self.typing.append((int(request.match_info["channel_id"]), loop.time()))
        await self._notify()
        return web.Response(status=204)

    async def _create_message(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return _error(401, "401: Unauthorized")
        channel_id = int(request.match_info["channel_id"])
        files: list[tuple[str, bytes]] = []
        if request.content_type.startswith("multipart/"):
            form = await request.post()
            body = json.loads(str(form["payload_json"]))
            for key, value in form.items():
                if isinstance(value, web.FileField) and key.startswith("files["):
                    files.append((value.filename, value.file.read()))
        else:
            body = await request.json()
        request[_BODY] = body
        response = await self._answer_create(channel_id, body, files)
        at = asyncio.get_running_loop().time()
        self.posts.append(RecordedPost(channel_id, body, response.status, at, tuple(files)))
        await self._notify()
        return response

    async def _get_message(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return _error(401, "401: Unauthorized")
        channel_id = int(request.match_info["channel_id"])
        message_id = request.match_info["message_id"]
        self.message_fetches.append((channel_id, int(message_id)))
        await self._notify()
        if self._channel_payload(channel_id) is None and channel_id not in self.messages:
            return _error(404, "Unknown Channel", 10003)
        for message in self.messages.get(channel_id, []):
            if message["id"] == message_id:
                return _json(self._as_served(message))
        return _error(404, "Unknown Message", 10008)

    async def _download(self, request: web.Request) -> web.StreamResponse:
        """The CDN: no token needed; an outdated signature is a 404, as when a URL expired."""
        file = self.files.get(int(request.match_info["attachment_id"]))
        if file is None or request.query.get("ex") != f"{file.signature:08x}":
            status = 404
            answer: web.StreamResponse = web.Response(status=404, text="content not available")
        elif file.faults:
            fault = file.faults.popleft()
            if fault == "hang":
                self.downloads.append((file.id, 0))
                await self._notify()
                await self._hung.wait()  # until the server closes
                return web.Response(status=503)
            status, answer = fault, web.Response(status=fault, text="scripted failure")
        elif file.chunked:
            self.downloads.append((file.id, 200))
            await self._notify()
            stream = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
            stream.enable_chunked_encoding()
            await stream.prepare(request)
            for start in range(0, len(file.upload.data), 4096):
                await stream.write(file.upload.data[start : start + 4096])
            await stream.write_eof()
            return stream
        else:
            kind = file.upload.content_type or "application/octet-stream"
            status, answer = 200, web.Response(body=file.upload.data, content_type=kind)
        self.downloads.append((file.id if file else 0, status))
        await self._notify()
        return answer

    async def _get_user(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return _error(401, "401: Unauthorized")
        user = self.users.get(int(request.match_info["user_id"]))
        if user is None:
            return _error(404, "Unknown User", 10013)
        return _json(user.payload())

    async def _open_dm(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return _error(401, "401: Unauthorized")
        body = await request.json()
        user = self.users.get(int(body.get("recipient_id", 0)))
        if user is None:
            return _error(400, "Invalid Recipient(s)", 50033)
        payload = self._channel_payload(self.dm(user))
        return _json(payload)

    async def _answer_create(
        self, channel_id: int, body: JSON, files: list[tuple[str, bytes]] | None = None
    ) -> web.Response:
        scripted = self._scripted("create", channel_id)
        if scripted is not None:
            return scripted
        throttled, limits = self._take("create", channel_id)
        if throttled is not None:
            return throttled
        response = await self._create(channel_id, body, files)
        response.headers.update(limits)
        await self._answered_late("create", channel_id)
        return response

    async def _create(
        self, channel_id: int, body: JSON, files: list[tuple[str, bytes]] | None
    ) -> web.Response:
        if self._channel_payload(channel_id) is None:
            return _error(404, "Unknown Channel", 10003)
        recipient = self.dm_channels.get(channel_id)
        if recipient is not None and recipient.id in self.closed_dms:
            return _error(403, "Cannot send messages to this user", 50007)
        content = str(body.get("content") or "")
        if (not content and not files) or len(content) > 2000:
            return _error(400, "Invalid Form Body", 50035)
        nonce = body.get("nonce")
        if nonce is not None and body.get("enforce_nonce"):
            earlier = self._nonces.get((channel_id, str(nonce)))
            if earlier is not None:
                return _json(earlier)  # Discord: same nonce, same author -> the same message
        message = self._message(channel_id, self.bot, content)
        message["attachments"] = [
            self._attachment(channel_id, Upload(name, None, data)) for name, data in files or []
        ]
        if nonce is not None:
            message["nonce"] = str(nonce)
            self._nonces[(channel_id, str(nonce))] = message
        if body.get("message_reference"):
            message["type"] = 19
            message["message_reference"] = body["message_reference"]
        self.messages.setdefault(channel_id, []).append(message)
        if self._current is not None and not self._current.closed:
            await self.dispatch("MESSAGE_CREATE", message)  # the bot hears itself
        return _json(message)

    async def _list_webhooks(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return _error(401, "401: Unauthorized")
        channel_id = int(request.match_info["channel_id"])
        if self._channel_payload(channel_id) is None:
            return _error(404, "Unknown Channel", 10003)
        if channel_id in self.webhooks_denied:
            return _error(403, "Missing Permissions", 50013)
        return _json([h.payload() for h in self.channel_webhooks(channel_id)])

    async def _create_webhook(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return _error(401, "401: Unauthorized")
        channel_id = int(request.match_info["channel_id"])
        body = await json_body(request)
        request[_BODY] = body
        guild = self._guild_of(channel_id)
        if guild is None or channel_id not in guild.channels:
            return _error(404, "Unknown Channel", 10003)  # no webhooks in DMs or on threads
        if channel_id in self.webhooks_denied:
            return _error(403, "Missing Permissions", 50013)
        name = str(body.get("name") or "")
        lowered = name.lower()
        if not 1 <= len(name) <= 80 or "clyde" in lowered or "discord" in lowered:
            return _error(400, "Invalid Form Body", 50035)
        if len(self.channel_webhooks(channel_id)) >= 15:
            return _error(400, "Maximum number of webhooks reached (15)", 30007)
        hook = self.add_webhook(channel_id, name, self.bot)
        await self._notify()
        return _json(hook.payload())

    async def _execute_webhook(self, request: web.Request) -> web.Response:
        """Post as the webhook: the message is the webhook's, under the name it was given."""
        body = await json_body(request)
        request[_BODY] = body
        hook_id = int(request.match_info["webhook_id"])
        if hook_id == self.application_id:  # an interaction's followup
            return await self.app_commands.followup(request.match_info["token"], body)
        wait = request.query.get("wait", "false").lower() in {"1", "true"}
        thread = request.query.get("thread_id")
        thread_id = int(thread) if thread else None
        response, channel_id = await self._execute(
            hook_id, request.match_info["token"], body, thread_id
        )
        if response.status == 200 and not wait:
            response = web.Response(status=204)
        recorded = RecordedExecution(hook_id, thread_id, wait, body, response.status, channel_id)
        self.executions.append(recorded)
        await self._notify()
        return response

    async def _execute(
        self, hook_id: int, token: str, body: JSON, thread_id: int | None
    ) -> tuple[web.Response, int | None]:
        hook = self.webhooks.get(hook_id)
        if hook is None:
            return _error(404, "Unknown Webhook", 10015), None
        if token != hook.token:
            return _error(401, "Invalid Webhook Token", 50027), None
        channel_id = hook.channel_id
        if thread_id is not None:
            guild = self.guilds[hook.guild_id]
            thread = guild.threads.get(thread_id)
            if thread is None:
                return _error(404, "Unknown Channel", 10003), None
            if thread["parent_id"] != str(hook.channel_id):
                return _error(400, "Invalid Form Body", 50035), None  # another channel's thread
            channel_id = thread_id
        content = str(body.get("content") or "")
        if not content or len(content) > 2000:
            return _error(400, "Invalid Form Body", 50035), None
        username = str(body.get("username") or hook.name)
        message = self._message(channel_id, FakeUser(hook.id, username, bot=True), content)
        # As Discord shows a webhook's message: its author is the name it was posted under
        # (the webhook's id, bot: true), no guild member, and webhook_id set.
        message["author"] = {
            "id": str(hook.id),
            "username": username,
            "global_name": None,
            "discriminator": "0000",
            "avatar": None,
            "bot": True,
        }
        message.pop("member", None)
        message["webhook_id"] = str(hook.id)
        message["mention_everyone"] = "@everyone" in self.pings(body)
        self.messages.setdefault(channel_id, []).append(message)
        if self._current is not None and not self._current.closed:
            await self.dispatch("MESSAGE_CREATE", message)  # the bot hears its webhook too
        return _json(message), channel_id

    async def _edit_message(self, request: web.Request) -> web.Response:
        """PATCH a message: only ``content`` is applied (what the bot edits)."""
        if not self._authorized(request):
            return _error(401, "401: Unauthorized")
        channel_id = int(request.match_info["channel_id"])
        body = await request.json()
        request[_BODY] = body
        scripted = self._scripted("edit", channel_id)
        if scripted is not None:
            return scripted
        throttled, limits = self._take("edit", channel_id)
        if throttled is not None:
            return throttled
        response = await self._edit(channel_id, request.match_info["message_id"], body)
        response.headers.update(limits)
        await self._answered_late("edit", channel_id)
        return response

    async def _edit(self, channel_id: int, message_id: str, body: JSON) -> web.Response:
        if self._channel_payload(channel_id) is None:
            return _error(404, "Unknown Channel", 10003)
        message = self._stored(channel_id, message_id)
        if message is None:
            return _error(404, "Unknown Message", 10008)
        if message["author"]["id"] != str(self.bot.id):
            return _error(403, "Cannot edit a message authored by another user", 50005)
        if "content" in body:
            content = str(body["content"] or "")
            if len(content) > 2000:
                return _error(400, "Invalid Form Body", 50035)
            if not content and not message["attachments"]:
                return _error(400, "Cannot send an empty message", 50006)
            everyone = "@everyone" in self.pings({**body, "content": content})
            message.update(content=content, mention_everyone=everyone)
        message["edited_timestamp"] = _now()
        if self._current is not None and not self._current.closed:
            await self.dispatch("MESSAGE_UPDATE", message)  # the whole message, as Discord does
        return _json(self._as_served(message))

    async def _delete_message(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return _error(401, "401: Unauthorized")
        channel_id = int(request.match_info["channel_id"])
        scripted = self._scripted("delete", channel_id)
        if scripted is not None:
            return scripted
        throttled, limits = self._take("delete", channel_id)
        if throttled is not None:
            return throttled
        message = self._stored(channel_id, request.match_info["message_id"])
        if message is None:
            response = _error(404, "Unknown Message", 10008)
        else:
            await self.delete(message)  # MESSAGE_DELETE, as when anyone deletes it
            response = web.Response(status=204)
        response.headers.update(limits)
        return response

    def _stored(self, channel_id: int, message_id: str) -> JSON | None:
        for message in self.messages.get(channel_id, []):
            if message["id"] == message_id:
                return message
        return None

    def _take(
        self, route: MessageRoute, channel_id: int
    ) -> tuple[web.Response | None, dict[str, str]]:
        """Count a request against its bucket: (a 429 when over the limit, the headers)."""
        bucket = self.limits[route]
        if bucket is None:
            return None, {}
        now = asyncio.get_running_loop().time()
        start, used = self._windows.get((route, channel_id), (now, 0))
        if now >= start + bucket.window:
            start, used = now, 0  # the window is over: a new one starts with this request
        allowed = used < bucket.limit
        if allowed:
            used += 1
        self._windows[(route, channel_id)] = (start, used)
        reset_after = max(0.0, start + bucket.window - now)
        headers = {
            "X-RateLimit-Limit": str(bucket.limit),
            "X-RateLimit-Remaining": str(bucket.limit - used),
            "X-RateLimit-Reset": f"{time.time() + reset_after:.3f}",
            "X-RateLimit-Reset-After": f"{reset_after:.3f}",
            "X-RateLimit-Bucket": f"fake-{route}-bucket",
        }
        if allowed:
            return None, headers
        body = {"message": "You are being rate limited.", "retry_after": round(reset_after, 3)}
        body["global"] = False
        headers.update(
            {
                "Via": "1.1 google",
                "Retry-After": str(max(1, math.ceil(reset_after))),
                "X-RateLimit-Scope": "user",
            }
        )
        return _json(body, 429, headers), headers

    def _failure(self, failure: ScriptedFailure) -> web.Response:
        if failure.status == 429:
            retry_after = failure.retry_after if failure.retry_after is not None else 0.1
            body = {"message": "You are being rate limited.", "retry_after": retry_after}
            body["global"] = False
            headers = {
                "Via": "1.1 google",
                "Retry-After": str(max(1, round(retry_after))),
                "X-RateLimit-Scope": "user",
            }
            return _json(body, 429, headers)
        return _error(failure.status, failure.message, failure.code)

    async def _unknown(self, request: web.Request) -> web.Response:
        self.unknown_routes.append(f"{request.method} {request.path}")
        return _error(404, "404: Not Found")

    # ------------------------------------------------------------------ gateway

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        self._sockets.add(ws)
        try:
            await ws.send_json({"op": 10, "d": {"heartbeat_interval": self._heartbeat_ms}})
            async for frame in ws:
                if frame.type != WSMsgType.TEXT:
                    continue
                await self._on_frame(ws, json.loads(frame.data))
        finally:
            self._sockets.discard(ws)
            if self._current is ws:
                self._current = None
                self._connected.clear()
        return ws

    async def _on_frame(self, ws: web.WebSocketResponse, payload: JSON) -> None:
        op = payload.get("op")
        if op == 1:
            await ws.send_json({"op": 11, "d": None})
        elif op == 2:
            await self._identify(ws, payload["d"])
        elif op == 6:
            await self._resume(ws, payload["d"])

    async def _identify(self, ws: web.WebSocketResponse, data: JSON) -> None:
        if data.get("token") != self.token:
            await ws.close(code=4004, message=b"Authentication failed.")
            return
        intents = int(data.get("intents", 0))
        self.identifies.append({k: v for k, v in data.items() if k != "token"})
        if intents & MESSAGE_CONTENT_INTENT and not self.allow_message_content:
            await ws.close(code=4014, message=b"Disallowed intent(s).")
            return
        shard = data.get("shard") or [0, 1]
        guilds = [g for g in self.guilds.values() if (g.id >> 22) % shard[1] == shard[0]]
        self._session_id = f"session-{next(self._ids)}"
        async with self._send_lock:
            self._current = ws
        ready = {
            "v": 10,
            "user": self.bot.payload(),
            "guilds": [{"id": str(g.id), "unavailable": True} for g in guilds],
            "session_id": self._session_id,
            "resume_gateway_url": self.gateway_url,
            "application": {"id": str(self.application_id), "flags": 0},
            "private_channels": [],
            "relationships": [],
        }
        if data.get("shard"):
            ready["shard"] = shard
        await self.dispatch("READY", ready)
        for guild in guilds:
            await self.dispatch("GUILD_CREATE", self._guild_create(guild))
        self._connected.set()
        self._answered += 1
        await self._notify()

    async def _resume(self, ws: web.WebSocketResponse, data: JSON) -> None:
        if data.get("token") != self.token or data.get("session_id") != self._session_id:
            await ws.send_json({"op": 9, "d": False})
            return
        self.resumes.append({k: v for k, v in data.items() if k != "token"})
        async with self._send_lock:
            self._current = ws
        replay, self._replay = self._replay, []
        for event, payload in replay:
            await self.dispatch(event, payload)
        await self.dispatch("RESUMED", {})
        self._connected.set()
        self._answered += 1
        await self._notify()


def _poll(question: str, answers: tuple[str, ...]) -> JSON:
    expiry = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=24)
    return {
        "question": {"text": question},
        "answers": [
            {"answer_id": i + 1, "poll_media": {"text": text}} for i, text in enumerate(answers)
        ],
        "expiry": expiry.isoformat(),
        "allow_multiselect": False,
        "layout_type": 1,
    }


def _role(role_id: int, name: str, position: int) -> JSON:
    return {
        "id": str(role_id),
        "name": name,
        "color": 0,
        "colors": {"primary_color": 0, "secondary_color": None, "tertiary_color": None},
        "hoist": False,
        "icon": None,
        "unicode_emoji": None,
        "position": position,
        "permissions": "0",
        "managed": False,
        "mentionable": True,
        "flags": 0,
    }
