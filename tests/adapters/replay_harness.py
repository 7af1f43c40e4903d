"""Replaying other projects' recorded Telegram updates and Discord gateway events (issue 15).

The corpus is ``tests/data/{telegram,discord}/*.json``, one file per source repository, copied
as the sources have it (``tests/data/SOURCES.md``). Everything done to a payload at replay
time happens here, never in the files:

* Telegram: a bare ``Message`` becomes an update (``channel_post`` in a channel chat); update
  and message ids are fresh; a private chat's id (and its user's) becomes the known user's,
  so replies go to a chat the fake Bot API knows. A person's message in a group is replayed
  a second time as if sent in the bot's private chat (the ``private`` variant).
* Discord: ``guild_id``/``channel_id`` become the fake guild's and its ``#general`` (a DM
  event's channel the DM channel of a known user); message ids are fresh. A message event in
  a guild is replayed a second time as a DM (``guild_id`` and ``member`` removed).

:func:`telegram_expectation` and :func:`discord_expectation` say what a private chat's event
must give the runtime, or why nothing is required (the short allowlist of kinds ignored by
design).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
import json
import signal
import socket
import sys
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Generic, Literal, TypeVar

from adapters.telegram.adapter import TelegramAdapter, create_adapter
from bot.app.build import runtime
from bot.config import PersonaSettings, Secrets, Settings, TelegramBotSettings
from bot.core.events import Inbound, InboundKind
from bot.core.ports import InboundHandler
from bot.llm.offline import OfflineLLM
from tests.fakes.discord_api import FakeDiscord, FakeGuild, FakeUser
from tests.fakes.telegram_api import FakeTelegramAPI, TgChat, TgUser
from tests.processes import Running, clean_env, spawn

# discord.py imports the deprecated ``audioop`` (see tests/adapters/test_discord.py).
with warnings.catch_warnings():
    warnings.filterwarnings(
        "ignore", message="'audioop' is deprecated", category=DeprecationWarning
    )
    from adapters.discord.adapter import DiscordAdapter
    from adapters.discord.adapter import create_adapter as create_discord_adapter

DATA: Final = Path(__file__).parents[1] / "data"
JSON = dict[str, Any]

TG_TOKEN: Final = "123456789:AAHtest-Replay-token-0123456789abcdef"
DC_TOKEN: Final = "MTIzNDU2Nzg5MDEyMzQ1Njc4.GfAkEt.replay-corpus-token-never-logged"
TG_BOT: Final = "replay-telegram"
DC_BOT: Final = "replay-discord"
WEBHOOK_SECRET: Final = "replay-hook-secret"
PERSONA: Final = PersonaSettings(
    id="companion",
    name="Mira",
    system="You are Mira.",
    first_message=["Hi, I am Mira."],
    model="test-model",
)
#: The person of the replayed private chats (Telegram).
ANN: Final = TgUser(1001, "Ann")


# ------------------------------------------------------------------------------ corpus


@dataclass(frozen=True, slots=True)
class Recorded:
    """One payload of the corpus and where it came from."""

    repository: str
    name: str
    path: str
    entry: JSON

    @property
    def id(self) -> str:
        """``repository-name:payload-name``: what a failing test is called by."""
        return f"{self.repository.split('/')[1]}:{self.name}"


def load(platform: Literal["telegram", "discord"]) -> list[Recorded]:
    """Every payload of one platform, file by file."""
    found = []
    for path in sorted((DATA / platform).glob("*.json")):
        source = json.loads(path.read_text(encoding="utf-8"))
        for entry in source["payloads"]:
            found.append(Recorded(source["repository"], entry["name"], entry["path"], entry))
    return found


@dataclass(frozen=True, slots=True)
class Case:
    """One replay: a payload as recorded, or one of its variants (see the module doc)."""

    recorded: Recorded
    variant: Literal["recorded", "private", "dm"]

    @property
    def id(self) -> str:
        """The test id: the payload's, with the variant unless it is the recording itself."""
        suffix = "" if self.variant == "recorded" else f"[{self.variant}]"
        return f"{self.recorded.id}{suffix}"


@dataclass(frozen=True, slots=True)
class Expect:
    """What the runtime must receive for one replay (``kind``), or why nothing (``reason``)."""

    kind: InboundKind | None
    reason: str = ""

    @property
    def required(self) -> bool:
        """Whether an Inbound must reach the runtime."""
        return self.kind is not None


NOT_PRIVATE: Final = Expect(None, "not a message in a private chat")


# ------------------------------------------------------------------------------ Telegram

#: Update kinds whose payload is a Message.
TG_MESSAGE_KINDS: Final = (
    "message",
    "edited_message",
    "channel_post",
    "edited_channel_post",
    "business_message",
    "edited_business_message",
)
#: Telegram's service messages: notices Telegram writes itself, nothing a person said.
TG_SERVICE_FIELDS: Final = frozenset(
    {
        "new_chat_members",
        "left_chat_member",
        "new_chat_title",
        "new_chat_photo",
        "delete_chat_photo",
        "group_chat_created",
        "supergroup_chat_created",
        "channel_chat_created",
        "message_auto_delete_timer_changed",
        "migrate_to_chat_id",
        "migrate_from_chat_id",
        "pinned_message",
        "successful_payment",
        "refunded_payment",
        "users_shared",
        "chat_shared",
        "connected_website",
        "write_access_allowed",
        "passport_data",
        "proximity_alert_triggered",
        "boost_added",
        "chat_background_set",
        "forum_topic_created",
        "forum_topic_edited",
        "forum_topic_closed",
        "forum_topic_reopened",
        "general_forum_topic_hidden",
        "general_forum_topic_unhidden",
        "giveaway_created",
        "giveaway_completed",
        "video_chat_scheduled",
        "video_chat_started",
        "video_chat_ended",
        "video_chat_participants_invited",
        "web_app_data",
        "gift",
        "unique_gift",
        "paid_message_price_changed",
        "checklist_tasks_done",
        "checklist_tasks_added",
    }
)
#: Fields of a Message that are not its content (who, where, when, how it is shown).
TG_ENVELOPE: Final = frozenset(
    {
        "message_id",
        "message_thread_id",
        "date",
        "chat",
        "from",
        "sender_chat",
        "sender_boost_count",
        "sender_business_bot",
        "business_connection_id",
        "edit_date",
        "has_protected_content",
        "is_automatic_forward",
        "is_topic_message",
        "is_from_offline",
        "author_signature",
        "effect_id",
        "show_caption_above_media",
        "has_media_spoiler",
        "link_preview_options",
        "reply_markup",
        "via_bot",
        "entities",
        "caption_entities",
        "media_group_id",
    }
)
#: The allowlist: private-chat messages the adapter ignores by design, and why.
TG_IGNORED: Final = {
    "business": "a business message is written to a business account the bot manages, not "
    "to the bot; personabot does not subscribe to them (adapters/telegram ALLOWED_UPDATES)",
    "no person": "no person sent it (no sender, or the sender is a bot)",
    "service": "a service message (a notice Telegram writes itself), nothing a person said",
    "empty": "the message carries nothing at all (no text, caption, media or service field)",
}


def tg_cases() -> list[Case]:
    """Every Telegram payload as recorded, and group messages again in a private chat."""
    cases = []
    for recorded in load("telegram"):
        cases.append(Case(recorded, "recorded"))
        if _groupable(as_update(recorded)):
            cases.append(Case(recorded, "private"))
    return cases


def as_update(recorded: Recorded) -> JSON:
    """The recorded payload as an update without ``update_id`` (a copy)."""
    entry = recorded.entry
    payload = copy.deepcopy(entry["payload"])
    if entry["kind"] == "update":
        payload.pop("update_id", None)
        return dict(payload)
    if entry["kind"] == "callback_query":
        return {"callback_query": payload}
    chat = payload.get("chat") if isinstance(payload, dict) else None
    kind = "channel_post" if isinstance(chat, dict) and chat.get("type") == "channel" else "message"
    return {kind: payload}


def tg_message(update: JSON) -> tuple[str, JSON] | None:
    """(kind, message) of an update whose payload is a Message."""
    for kind in TG_MESSAGE_KINDS:
        message = update.get(kind)
        if isinstance(message, dict):
            return kind, message
    return None


def _person(message: JSON) -> JSON | None:
    sender = message.get("from")
    if not isinstance(sender, dict) or sender.get("is_bot") or "sender_chat" in message:
        return None
    return sender


def _groupable(update: JSON) -> bool:
    found = tg_message(update)
    if found is None or found[0] not in ("message", "edited_message"):
        return False
    chat = found[1].get("chat")
    person = _person(found[1])
    return isinstance(chat, dict) and chat.get("type") in ("group", "supergroup") and bool(person)


def tg_replay(case: Case, message_id: int) -> JSON:
    """The update to deliver for a case: variant applied, private chat ids remapped to ANN."""
    update = as_update(case.recorded)
    found = tg_message(update)
    if found is None:
        return update
    _, message = found
    if case.variant == "private":
        person = _person(message)
        assert person is not None
        group = message["chat"]
        private = {"id": person["id"], "type": "private", "first_name": person.get("first_name")}
        _replace_chat(message, group.get("id"), private)
    chat = message.get("chat")
    if isinstance(chat, dict) and chat.get("type") == "private":
        ids = {chat.get("id")}
        if (person := _person(message)) is not None:
            ids.add(person.get("id"))
        _remap_ids(message, ids, ANN.id)
    message["message_id"] = message_id
    return update


def _replace_chat(value: Any, chat_id: Any, chat: JSON) -> None:
    """Every ``chat`` object with ``chat_id`` (the message's and its reply's) becomes ``chat``."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "chat" and isinstance(item, dict) and item.get("id") == chat_id:
                value[key] = dict(chat)
            else:
                _replace_chat(item, chat_id, chat)
    elif isinstance(value, list):
        for item in value:
            _replace_chat(item, chat_id, chat)


def _remap_ids(value: Any, old: set[Any], new: int) -> None:
    """User and chat objects whose ``id`` is in ``old`` get ``new`` (nothing else changes)."""
    if isinstance(value, dict):
        if value.get("id") in old and ({"type", "first_name", "is_bot"} & value.keys()):
            value["id"] = new
        for item in value.values():
            _remap_ids(item, old, new)
    elif isinstance(value, list):
        for item in value:
            _remap_ids(item, old, new)


def telegram_expectation(update: JSON) -> Expect:
    """What a replayed update must give the runtime (see :data:`TG_IGNORED`)."""
    found = tg_message(update)
    if found is None:
        return NOT_PRIVATE
    kind, message = found
    chat = message.get("chat")
    if not isinstance(chat, dict) or chat.get("type") != "private":
        return NOT_PRIVATE
    if kind in ("business_message", "edited_business_message"):
        return Expect(None, TG_IGNORED["business"])
    if _person(message) is None:
        return Expect(None, TG_IGNORED["no person"])
    content = set(message) - TG_ENVELOPE - {"reply_to_message", "quote", "external_reply"}
    if content and content <= TG_SERVICE_FIELDS:
        return Expect(None, f"{TG_IGNORED['service']} ({', '.join(sorted(content))})")
    if not content and not {"reply_to_message", "quote", "external_reply"} & message.keys():
        return Expect(None, TG_IGNORED["empty"])
    return Expect("edit" if kind == "edited_message" else "message")


# ------------------------------------------------------------------------------- Discord

#: Discord message types that are a person's chat message (default, reply).
DC_CHAT_TYPES: Final = frozenset({0, 19})
DC_MESSAGE_EVENTS: Final = frozenset({"MESSAGE_CREATE", "MESSAGE_UPDATE", "MESSAGE_DELETE"})
#: The allowlist: DM message events the adapter ignores by design, and why.
DC_IGNORED: Final = {
    "system": "a system message (Discord's own notice, not message type 0 or 19)",
    "bot": "a bot wrote it (bots never talk to each other through personabot)",
    "webhook": "a webhook posted it (no person behind it)",
    "partial": "a partial MESSAGE_UPDATE without the author: not a person's edit",
    "not edited": "MESSAGE_UPDATE without edited_timestamp: an unfurl, pin or flag change",
}


def dc_event(recorded: Recorded) -> tuple[str, JSON]:
    """(event name, data) of a recorded frame or event payload (a copy)."""
    entry = recorded.entry
    if "frame" in entry:
        frame = entry["frame"]
        return str(frame["t"]), copy.deepcopy(frame["d"])
    return str(entry["event"]), copy.deepcopy(entry["data"])


def dc_cases() -> list[Case]:
    """Every Discord event as recorded, and guild message events again as DMs."""
    cases = []
    for recorded in load("discord"):
        cases.append(Case(recorded, "recorded"))
        name, data = dc_event(recorded)
        if name in DC_MESSAGE_EVENTS and isinstance(data, dict) and "guild_id" in data:
            cases.append(Case(recorded, "dm"))
    return cases


_snowflakes = itertools.count(((1_750_000_000_000 - 1420070400000) << 22) + 1)


def snowflake() -> str:
    """A fresh, realistic Discord id."""
    return str(next(_snowflakes))


def dc_replay(case: Case, *, guild: FakeGuild, dm_channel: int) -> tuple[str, JSON]:
    """(event, data) to dispatch for a case: ids remapped, the DM variant applied."""
    name, data = dc_event(case.recorded)
    if not isinstance(data, dict) or name == "GUILD_CREATE":
        return name, data
    if case.variant == "dm":
        data.pop("guild_id", None)
        data.pop("member", None)
    in_guild = "guild_id" in data
    if in_guild:
        data["guild_id"] = str(guild.id)
    if "channel_id" in data:
        data["channel_id"] = str(guild.general if in_guild else dm_channel)
    if name in DC_MESSAGE_EVENTS and "id" in data:
        data["id"] = snowflake()
    if name == "MESSAGE_DELETE_BULK" and isinstance(data.get("ids"), list):
        data["ids"] = [snowflake() for _ in data["ids"]]
    return name, data


def discord_expectation(name: str, data: JSON) -> Expect:
    """What a replayed event must give the runtime (see :data:`DC_IGNORED`)."""
    if name not in DC_MESSAGE_EVENTS or not isinstance(data, dict) or "guild_id" in data:
        return NOT_PRIVATE
    if name == "MESSAGE_DELETE":
        return Expect("delete")
    author = data.get("author")
    if not isinstance(author, dict):
        return Expect(None, DC_IGNORED["partial"])
    if data.get("type", 0) not in DC_CHAT_TYPES:
        return Expect(None, f"{DC_IGNORED['system']} (type {data.get('type')})")
    if author.get("bot"):
        return Expect(None, DC_IGNORED["bot"])
    if data.get("webhook_id"):
        return Expect(None, DC_IGNORED["webhook"])
    if name == "MESSAGE_UPDATE":
        return (
            Expect("edit")
            if data.get("edited_timestamp")
            else Expect(None, DC_IGNORED["not edited"])
        )
    return Expect("message")


# ------------------------------------------------------------------------------ handlers


class Recorder:
    """The InboundHandler given to the adapter: keeps what the runtime was handed, then
    hands it to the real router (a real delegating handler, not a mock)."""

    def __init__(self, inner: InboundHandler) -> None:
        self._inner = inner
        self.seen: list[Inbound] = []

    @property
    def commands(self) -> tuple[tuple[str, str], ...]:
        """The router's commands."""
        return self._inner.commands

    @property
    def admin_commands(self) -> tuple[str, ...]:
        """The router's admin-only commands."""
        return self._inner.admin_commands

    def rejected(self, platform: str, bot: str, kind: str) -> None:
        """Counted by the router."""
        self._inner.rejected(platform, bot, kind)

    def batch(self) -> contextlib.AbstractAsyncContextManager[None]:
        """The router's batch (one transaction for a getUpdates batch)."""
        return self._inner.batch()

    async def __call__(self, inbound: Inbound) -> None:
        self.seen.append(inbound)
        await self._inner(inbound)

    def of(self, message_id: str | int) -> list[Inbound]:
        """What arrived for one platform message."""
        return [i for i in self.seen if i.platform_message_id == str(message_id)]


def describe(inbound: Inbound) -> str:
    """What the handler got, in one line (for reports and failure messages)."""
    media = ", ".join(f"{m.kind}:{m.label}" for m in inbound.media)
    quote = "" if inbound.quote is None else f" quote={inbound.quote.origin}:{inbound.quote.text!r}"
    return f"{inbound.kind} text={inbound.text!r} media=[{media}]{quote}"


def is_empty(inbound: Inbound) -> bool:
    """An event with nothing for the model: no text, no media, no quote (never a valid turn)."""
    return not inbound.text.strip() and not inbound.media and inbound.quote is None


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _settings(db: Path) -> Settings:
    return Settings.model_validate(
        {
            "storage": {"url": f"sqlite:///{db}"},
            "llm": {"provider": "offline"},
            "queue": {
                "debounce_seconds": 0.05,
                "max_wait_seconds": 0.2,
                "scan_interval_seconds": 0.2,
                "shutdown_grace_seconds": 1.0,
            },
            "personas": [PERSONA.model_dump()],
        }
    )


async def _until(check: Callable[[], object], within: float, what: str) -> None:
    """Poll ``check`` until it holds; AssertionError naming ``what`` after ``within`` s."""
    deadline = asyncio.get_running_loop().time() + within
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what}")
        await asyncio.sleep(0.02)


# ------------------------------------------------------------------------- Telegram rig


@dataclass
class TelegramRig:
    """A Telegram bot on the real runtime, receiving by polling or through its webhook."""

    api: FakeTelegramAPI
    adapter: TelegramAdapter
    recorder: Recorder
    task: asyncio.Task[None]
    mode: Literal["polling", "webhook"]
    update_ids: Iterator[int] = field(default_factory=lambda: itertools.count(100_000))
    message_ids: Iterator[int] = field(default_factory=lambda: itertools.count(500_000))

    @property
    def chat(self) -> TgChat:
        """The private chat the replayed private messages come from."""
        return TgChat.private(ANN)

    async def deliver(self, update: JSON) -> int | None:
        """Hand an update to the bot; the webhook's HTTP status (None when polling)."""
        if self.mode == "polling":
            self.api.push(TG_TOKEN, update)
            return None
        return await self.api.deliver_webhook(
            TG_TOKEN, {**update, "update_id": next(self.update_ids)}
        )

    async def answers(self, text: str, within: float = 15.0) -> None:
        """A plain text message from ANN is answered (the bot still serves)."""
        update = self.api.message_update(self.chat, ANN, text)
        if self.mode == "polling":
            self.api.push(TG_TOKEN, update)
        else:
            status = await self.api.deliver_webhook(TG_TOKEN, update)
            assert status == 200, f"the webhook answered {status} to a plain text message"
        await _until(
            lambda: (
                self.task.done()
                or any(text in c.visible_text for c in self.api.sent_messages(TG_TOKEN))
            ),
            within,
            "the answer",
        )
        assert not self.task.done(), f"the adapter stopped: {self.task.exception()!r}"


@contextlib.asynccontextmanager
async def telegram_rig(
    tmp: Path, mode: Literal["polling", "webhook"]
) -> AsyncIterator[TelegramRig]:
    """A fresh fake Bot API, runtime and Telegram adapter; closed in order on exit."""
    async with FakeTelegramAPI() as api:
        api.add_bot(TG_TOKEN, "mira_bot", "Mira")
        api.message_update(TgChat.private(ANN), ANN, "registers the chat")  # a chat it knows
        if mode == "webhook":
            port = free_port()
            entry = TelegramBotSettings(
                platform="telegram",
                id=TG_BOT,
                persona=PERSONA.id,
                mode="webhook",
                api_server=api.base_url,
                webhook_url=f"http://127.0.0.1:{port}/tg/hook",
                listen_port=port,
                webhook_path="/tg/hook",
                secret_token_env="TG_WEBHOOK_SECRET",
            )
            secrets = Secrets({"TELEGRAM_BOT_TOKEN": TG_TOKEN, "TG_WEBHOOK_SECRET": WEBHOOK_SECRET})
            adapter = create_adapter(entry, PERSONA, secrets)
        else:
            adapter = TelegramAdapter(bot_key=TG_BOT, token=TG_TOKEN, api_server=api.base_url)
        async with runtime(
            _settings(tmp / "telegram.sqlite3"),
            llm=OfflineLLM(),
            adapters={TG_BOT: (PERSONA, adapter)},
        ) as rt:
            recorder = Recorder(rt.router.for_bot(TG_BOT))
            task = asyncio.create_task(adapter.run(recorder), name=f"replay telegram {mode}")
            try:
                await _until(
                    lambda: task.done() or api.polls_started(TG_TOKEN) or api.webhook(TG_TOKEN)[0],
                    15,
                    "the bot to start",
                )
                assert not task.done(), task.exception()
                yield TelegramRig(api, adapter, recorder, task, mode)
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                await adapter.aclose()


# -------------------------------------------------------------------------- Discord rig


@dataclass
class DiscordRig:
    """A Discord bot on the real runtime, connected to the fake gateway."""

    fake: FakeDiscord
    adapter: DiscordAdapter
    recorder: Recorder
    task: asyncio.Task[None]
    user: FakeUser
    guild: FakeGuild
    dm_channel: int
    sentinels: Iterator[int] = field(default_factory=itertools.count)

    async def deliver(self, name: str, data: JSON) -> None:
        """Dispatch one event on the live gateway connection."""
        await self.fake.dispatch(name, data)

    async def answers(self, within: float = 15.0) -> None:
        """A DM from the known user is answered (the bot still serves); in gateway order, so
        every event dispatched before it was handled by then."""
        text = f"still there? {next(self.sentinels)}"
        await self.fake.post(self.dm_channel, self.user, text)

        def answered() -> bool:
            return self.task.done() or any(
                text in str(m.get("content", "")) for m in self.fake.bot_messages(self.dm_channel)
            )

        await _until(answered, within, "the answer")
        assert not self.task.done(), f"the adapter stopped: {self.task.exception()!r}"


@contextlib.asynccontextmanager
async def discord_rig(tmp: Path) -> AsyncIterator[DiscordRig]:
    """A fresh fake Discord, runtime and Discord adapter; closed in order on exit."""
    async with FakeDiscord(token=DC_TOKEN) as fake:
        user = fake.add_user("Ada")
        guild = fake.add_guild("Cafe")
        dm_channel = fake.dm(user)
        entry = Settings.model_validate(
            {
                "bots": [
                    {
                        "platform": "discord",
                        "id": DC_BOT,
                        "persona": PERSONA.id,
                        "api_base": fake.api_base,
                        "gateway_url": fake.gateway_url,
                    }
                ],
                "personas": [PERSONA.model_dump()],
            }
        ).bots[0]
        adapter = create_discord_adapter(entry, PERSONA, Secrets({"DISCORD_BOT_TOKEN": DC_TOKEN}))
        try:
            async with runtime(
                _settings(tmp / "discord.sqlite3"),
                llm=OfflineLLM(),
                adapters={DC_BOT: (PERSONA, adapter)},
            ) as rt:
                recorder = Recorder(rt.router.for_bot(DC_BOT))
                before = fake.sessions
                task = asyncio.create_task(adapter.run(recorder), name="replay discord")
                try:
                    await fake.wait_identified(after=before)
                    yield DiscordRig(fake, adapter, recorder, task, user, guild, dm_channel)
                finally:
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
        finally:
            await adapter.aclose()


R = TypeVar("R")


class Pool(Generic[R]):
    """One running rig shared by a module's tests, rebuilt after a test that failed with it
    (so one payload that breaks the bot fails its own test, not every later one)."""

    def __init__(self, make: Callable[[], contextlib.AbstractAsyncContextManager[R]]) -> None:
        self._make = make
        self._stack: contextlib.AsyncExitStack | None = None
        self._rig: R | None = None
        self.broken = False

    async def rig(self) -> R:
        """The running rig (a fresh one after a failure)."""
        if self._rig is None or self.broken:
            await self.close()
            stack = contextlib.AsyncExitStack()
            self._rig = await stack.enter_async_context(self._make())
            self._stack = stack
            self.broken = False
        return self._rig

    async def close(self) -> None:
        """Stop the current rig, if any."""
        stack, self._stack, self._rig = self._stack, None, None
        if stack is not None:
            with contextlib.suppress(Exception):
                await stack.aclose()


@contextlib.asynccontextmanager
async def used(pool: Pool[R]) -> AsyncIterator[R]:
    """The pool's rig for one test; marked for a rebuild when the test fails."""
    rig = await pool.rig()
    try:
        yield rig
    except BaseException:
        pool.broken = True
        raise


# ------------------------------------------------------------------- personabot run


@dataclass
class Process:
    """A running ``personabot run`` hosting a Telegram (webhook) and a Discord bot."""

    proc: Running
    log: Path

    def output(self) -> str:
        """What the process logged so far."""
        return self.log.read_text(encoding="utf-8", errors="replace")


def _run_config(tmp: Path, api: FakeTelegramAPI, fake: FakeDiscord, port: int) -> Path:
    path = tmp / "personabot.toml"
    path.write_text(
        f"""
[storage]
url = "sqlite:///{tmp / "bots.sqlite3"}"

[llm]
provider = "offline"

[queue]
debounce_seconds = 0.05
max_wait_seconds = 0.2
scan_interval_seconds = 0.2
shutdown_grace_seconds = 1.0

[logging]
level = "INFO"

[[bots]]
id = "{TG_BOT}"
platform = "telegram"
persona = "companion"
token_env = "REPLAY_TG_TOKEN"
api_server = "{api.base_url}"
mode = "webhook"
webhook_url = "http://127.0.0.1:{port}/tg/hook"
listen_port = {port}
webhook_path = "/tg/hook"
secret_token_env = "REPLAY_TG_SECRET"

[[bots]]
id = "{DC_BOT}"
platform = "discord"
persona = "companion"
token_env = "REPLAY_DC_TOKEN"
api_base = "{fake.api_base}"
gateway_url = "{fake.gateway_url}"
""",
        encoding="utf-8",
    )
    return path


@contextlib.asynccontextmanager
async def personabot_run(
    tmp: Path, api: FakeTelegramAPI, fake: FakeDiscord
) -> AsyncIterator[Process]:
    """``personabot run`` with both bots, started and connected; SIGTERMed on exit."""
    config = _run_config(tmp, api, fake, free_port())
    env = clean_env(
        REPLAY_TG_TOKEN=TG_TOKEN, REPLAY_TG_SECRET=WEBHOOK_SECRET, REPLAY_DC_TOKEN=DC_TOKEN
    )
    log = tmp / "run.log"
    with log.open("wb") as err:
        proc = await spawn(
            sys.executable, "-m", "bot", "run", "--config", str(config),
            cwd=tmp, env=env, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
    running = Process(proc, log)
    try:
        await _until(
            lambda: proc.returncode is not None or (api.webhook(TG_TOKEN)[0] and fake.sessions),
            40,
            "both bots to connect",
        )
        assert proc.returncode is None, running.output()[-3000:]
        yield running
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), timeout=20)
        except TimeoutError:
            proc.kill()
            await proc.wait()
