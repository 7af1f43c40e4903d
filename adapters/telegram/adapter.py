"""Telegram through aiogram 3: long polling or a webhook; private chats, groups, forum topics.

aiogram objects never leave this package: a Telegram message becomes an :class:`Inbound`
(:func:`to_inbound`), a :class:`Reply` goes out as HTML chunks
(:mod:`adapters.telegram.format`), media are fetched by :class:`TelegramMedia`.

Invariants:
- the bot token is part of every request URL; nothing this module logs or raises contains it
  (:class:`~adapters.telegram.session.RedactingSession` scrubs it from transport errors);
- a reply is sent chunk by chunk, in order; a flood limit (429) retries only the chunk it hit,
  so no chunk is ever sent twice by this adapter;
- every message, file and edit waits for its chat's turn in the pacer
  (:mod:`adapters.telegram.pacing`, shareable by several accounts posting into one group) and
  keeps the turn while it is sent and retried; a 429 pauses its chat for every sender;
- the typing task is cancelled on every exit of :meth:`TelegramAdapter.typing`;
- a reply that ``replaces`` a streamed preview edits that message into its first chunk
  (posted anew when the preview is gone), so the chat never shows the answer twice;
- a scene's line goes out from its persona's own account when it has a usable one
  (:mod:`adapters.telegram.accounts`), else under the name header from this one; a line the
  persona's account could not post (not in the group, token rejected: nothing was sent) is
  posted from this account instead, so a line is never lost to a missing account nor sent
  twice.

Streamed previews (drafts, edited messages) are :mod:`adapters.telegram.preview`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import re
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar

from aiogram import Bot, Dispatcher
from aiogram.client.telegram import PRODUCTION, TelegramAPIServer
from aiogram.exceptions import (
    ClientDecodeError,
    TelegramAPIError,
    TelegramBadRequest,
    TelegramForbiddenError,
    TelegramNetworkError,
    TelegramRetryAfter,
    TelegramServerError,
    TelegramUnauthorizedError,
)
from aiogram.methods import EditMessageText, SendChatAction, SendDocument, SendMessage
from aiogram.methods.base import TelegramMethod, TelegramType
from aiogram.types import (
    BufferedInputFile,
    CallbackQuery,
    InlineKeyboardMarkup,
    Message,
    MessageGenerationStopped,
    ReplyParameters,
    Update,
)
from aiogram.utils.token import TokenValidationError
from aiohttp import web

from adapters.base import required_secret
from adapters.streaming import StreamingAdapter
from adapters.telegram.accounts import (
    AccountToken,
    AccountUnusable,
    PersonaAccount,
    PersonaAccounts,
    unusable,
)
from adapters.telegram.buttons import ButtonSigner
from adapters.telegram.format import (
    MESSAGE_LIMIT,
    Chunk,
    plain_chunks,
    render_html,
    split_message,
    without_mentions,
)
from adapters.telegram.inbound import (
    Albums,
    BotIdentity,
    GroupTrigger,
    InboundRules,
    NonText,
    stop_conversation,
    to_inbound,
)
from adapters.telegram.media import TelegramMedia
from adapters.telegram.menus import flat_menu, set_menus
from adapters.telegram.pacing import TelegramPacer
from adapters.telegram.presses import PressDesk
from adapters.telegram.preview import (
    NOT_EDITABLE,
    NOT_MODIFIED,
    REFUSALS,
    DraftPreview,
    EditPreview,
    PreviewContext,
    delete_message,
)
from adapters.telegram.session import RedactingSession, scrub
from adapters.telegram.updates import GetRawUpdates, ParsedUpdate, parse_update
from adapters.telegram.voice import send_voice, voice_caption
from adapters.text import utf16_len
from bot.config import BotSettings, PersonaSettings, Secrets, TelegramBotSettings
from bot.core.choices import typed
from bot.core.clock import Clock
from bot.core.errors import AdapterError, ConfigError, DeliveryRefused, StoreError
from bot.core.events import ConversationKey, PlatformProblem, Reply, Voice, voiced
from bot.core.menu import MenuSource, NativeMenu
from bot.core.pacing import Pacer
from bot.core.ports import InboundHandler, Preview, StreamSettings
from bot.core.tasks import running

log = logging.getLogger("personabot.telegram")

SECRET_HEADER: Final = "X-Telegram-Bot-Api-Secret-Token"
ALLOWED_UPDATES: Final = (
    "message",
    "edited_message",
    "stopped_message_generation",
    "callback_query",  # presses of our buttons (adapters/telegram/presses.py)
)
#: Telegram's limit for a document's caption, in characters.
CAPTION_LIMIT: Final = 1024


_TELEGRAM_ERRORS: Final = (TelegramAPIError, ClientDecodeError)
_SECRET = re.compile(r"^[A-Za-z0-9_-]{1,256}$")
_REFUSALS: Final = REFUSALS
_SEEN_UPDATES: Final = 2048
_DRAFTLESS_CHATS: Final = 4096
_POLL_BACKOFF_START: Final = 1.0
_POLL_BACKOFF_MAX: Final = 30.0
_T = TypeVar("_T")
#: The session's old name (tests/adapters/test_telegram_responses.py imports it from here).
_RedactingSession = RedactingSession


@dataclass(frozen=True, slots=True)
class WebhookSettings:
    """Where Telegram posts updates and where this process listens for them."""

    url: str
    secret: str
    host: str = "127.0.0.1"
    port: int = 8080
    path: str = "/telegram/webhook"


@dataclass(frozen=True, slots=True)
class _Target:
    """Where a message goes: the chat and, in a forum, the topic."""

    chat_id: int
    thread_id: int | None

    @classmethod
    def of(cls, conversation: ConversationKey) -> _Target:
        try:
            thread = None if conversation.thread_id is None else int(conversation.thread_id)
            return cls(int(conversation.chat_id), thread)
        except ValueError:
            raise AdapterError(f"not a Telegram conversation: {conversation}") from None

    @property
    def private(self) -> bool:
        """Private chats have positive ids; groups and channels negative ones."""
        return self.chat_id > 0


@dataclass(frozen=True, slots=True)
class _Unposted:
    """What a persona's account could not post of a line (the rest goes out under the
    header), whether some of it was posted, and the notice the chat is to be told."""

    rest: str
    started: bool
    notice: str | None


# --------------------------------------------------------------------------------- adapter


class TelegramAdapter(StreamingAdapter):
    r"""One Telegram bot account: receives updates, sends replies and typing actions.

    ``media`` is the account's ``bot.core.media.MediaSource`` (:class:`TelegramMedia`): the
    runtime fetches the files of the ``MediaRef``\ s this adapter put on its Inbound events
    through it (``getFile`` and the download from the configured API server, each fetch
    bounded by ``download_timeout`` seconds).
    """

    #: Telegram has no idempotency key: a send that may have happened is never retried.
    idempotent_send = False

    def __init__(
        self,
        *,
        bot_key: str,
        token: str,
        api_server: str | None = None,
        group_trigger: GroupTrigger = "mention",
        non_text: NonText = "placeholder",
        webhook: WebhookSettings | None = None,
        typing_interval: float = 4.0,
        polling_timeout: int = 10,
        flood_retries: int = 5,
        max_flood_wait: float = 120.0,
        download_timeout: float = 30.0,
        clock: Clock | None = None,
        pacer: Pacer[int] | None = None,
        accounts: Sequence[AccountToken] = (),
    ) -> None:
        super().__init__(bot_key=bot_key)
        server = PRODUCTION if api_server is None else TelegramAPIServer.from_base(api_server)
        self._session = RedactingSession(api=server)
        if clock is not None:
            self._session.now = clock.now
        try:
            self._bot = Bot(token, session=self._session)
        except TokenValidationError:
            raise ConfigError([f"telegram bot {bot_key!r}: the token is malformed"]) from None
        self._token = token
        # Our buttons' callback data is signed with a key derived from the token (never the
        # token itself): adapters/telegram/buttons.py.
        self._signer = ButtonSigner(token)
        # A scene's persona accounts (send only): same API server, their own redacting
        # sessions, and this adapter's pacer (every send below draws from it).
        self._accounts = PersonaAccounts(
            accounts,
            bot_key=bot_key,
            own_token=token,
            server=server,
            now=self._session.now,
        )
        self._tokens = (token, *self._accounts.tokens)
        self._group_trigger: GroupTrigger = group_trigger
        self._non_text: NonText = non_text
        self._webhook = webhook
        self._typing_interval = typing_interval
        self._polling_timeout = polling_timeout
        self._flood_retries = flood_retries
        self._max_flood_wait = max_flood_wait
        self._rules = InboundRules(
            bot_key, BotIdentity(self._bot.id, ""), voices=self._accounts.voices
        )
        self._seen: OrderedDict[int, None] = OrderedDict()
        # Update ids handled inside the batch being stored: remembered as handled only once
        # the batch is (a failed batch is handed over again, every update of it).
        self._batch_seen: list[int] | None = None
        self._albums = Albums()
        #: Fetches the files of this bot's media (``bot.core.media.MediaSource``).
        self.media = TelegramMedia(self._bot, timeout=download_timeout)
        self._prepared: Dispatcher | None = None
        # Every send into a chat waits for its turn here, previews and final replies alike;
        # pass one pacer to several adapters that post into the same groups (a scene).
        self._pacer: Pacer[int] = pacer or TelegramPacer(clock=clock)
        self._previews = PreviewContext(self._bot, bot_key, self._redact, self._pacer)
        self._draftless: OrderedDict[int, None] = OrderedDict()  # chats that refused drafts
        self._presses = PressDesk(
            bot=self._bot,
            bot_key=bot_key,
            signer=self._signer,
            now=self._session.now,
            redact=self._redact,
        )
        #: The port the webhook server listens on (known once it started; useful with port 0).
        self.webhook_port: int | None = None

    @property
    def exclusive(self) -> bool:
        """Polling: Telegram allows one ``getUpdates`` per token, so one process polls."""
        return self._webhook is None

    @property
    def connected(self) -> bool:
        """Started (identified, webhook served) and Telegram answered the last request."""
        serving = self._webhook is None or self.webhook_port is not None
        return bool(self._rules.me.username) and serving and self._session.reachable

    @property
    def last_problem(self) -> PlatformProblem | None:
        """The last request failure that made Telegram unreachable (the token scrubbed)."""
        return self._session.problem

    @property
    def identity(self) -> BotIdentity:
        """The bot's id and username (the username is known once ``run`` started)."""
        return self._rules.me

    # ---------------------------------------------------------------------- receiving

    async def prepare(self, handler: InboundHandler) -> None:
        """Identify the bot and register its commands (no updates are received yet).

        A standby process does this before it is elected to poll, so that a takeover only
        has to start polling.
        """
        self._prepared = await self._identify(handler)

    async def run(self, handler: InboundHandler) -> None:
        """Identify the bot (unless prepared), then poll or serve the webhook until cancelled."""
        dispatcher = self._prepared or await self._identify(handler)
        if self._webhook is None:
            await self._poll(dispatcher, handler)
        else:
            await self._serve_webhook(dispatcher, self._webhook, handler)

    async def _identify(self, handler: InboundHandler) -> Dispatcher:
        """getMe, the inbound rules, setMyCommands and the dispatcher."""
        me = await self._startup_call("getMe", self._bot.me)  # cached for the dispatcher
        # Every command this bot takes unaddressed in a group: the menu's and the admins'.
        commands = frozenset(name for name, _ in handler.commands) | set(handler.admin_commands)
        self._rules = InboundRules(
            self.bot_key,
            BotIdentity(me.id, me.username or ""),
            self._group_trigger,
            self._non_text,
            commands,
            self._accounts.voices,
        )
        # Every scope's menu, in each language of the bot's personas (adapters/telegram/
        # menus.py; docs/i18n.md).
        menu = handler.menu if isinstance(handler, MenuSource) else flat_menu(handler.commands)
        records = handler if isinstance(handler, NativeMenu) else None
        await set_menus(self._bot, menu, bot_key=self.bot_key, redact=self._redact, records=records)
        await self._accounts.identify()  # never fatal: a persona without one uses the header
        dispatcher = self._dispatcher(handler)
        log.info("telegram bot %s is @%s", self.bot_key, self._rules.me.username)
        return dispatcher

    async def _startup_call(self, what: str, call: Callable[[], Awaitable[_T]]) -> _T:
        """A call the bot cannot start without: transient failures are retried with backoff."""
        delay = 1.0
        while True:
            try:
                return await call()
            except TelegramUnauthorizedError as exc:
                raise AdapterError(f"telegram bot {self.bot_key}: token rejected ({what})") from exc
            except (TelegramNetworkError, TelegramServerError, TelegramRetryAfter) as exc:
                if isinstance(exc, TelegramRetryAfter):
                    delay = max(delay, float(exc.retry_after))
                log.warning(
                    "telegram bot %s: %s failed (%s); retrying in %.0fs",
                    self.bot_key,
                    what,
                    self._redact(exc.message),
                    delay,
                )
            except _TELEGRAM_ERRORS as exc:
                raise AdapterError(
                    f"telegram bot {self.bot_key}: {what} failed: {self._redact(str(exc))}"
                ) from exc
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)

    def _dispatcher(self, handler: InboundHandler) -> Dispatcher:
        """An aiogram dispatcher whose only handlers turn messages into Inbound events."""
        dispatcher = Dispatcher(disable_fsm=True, name=f"personabot-{self.bot_key}")

        async def on_message(message: Message, event_update: Update) -> None:
            await self._receive(handler, message, event_update.update_id, edited=False)

        async def on_edit(edited_message: Message, event_update: Update) -> None:
            await self._receive(handler, edited_message, event_update.update_id, edited=True)

        async def on_stop(
            stopped_message_generation: MessageGenerationStopped, event_update: Update
        ) -> None:
            await self._stopped(handler, stopped_message_generation, event_update.update_id)

        dispatcher.message.register(on_message)
        dispatcher.edited_message.register(on_edit)

        async def on_press(callback_query: CallbackQuery, event_update: Update) -> None:
            await self._pressed(handler, callback_query, event_update.update_id)

        dispatcher.stopped_message_generation.register(on_stop)
        dispatcher.callback_query.register(on_press)
        return dispatcher

    async def _pressed(self, handler: InboundHandler, query: CallbackQuery, update_id: int) -> None:
        """A press of one of our buttons, handled once (a StoreError leaves it unacknowledged,
        so it is taken again)."""
        if self._was_handled(update_id):
            return
        await self._presses.handle(handler, query)
        self._handled(update_id)

    async def _stopped(
        self, handler: InboundHandler, stopped: MessageGenerationStopped, update_id: int
    ) -> None:
        """A draft's stop button: tell the handler once (a StoreError leaves it unacknowledged,
        so it is taken again)."""
        if self._was_handled(update_id):
            return
        await handler.stopped(stop_conversation(stopped, self.bot_key), stopped.draft_id)
        self._handled(update_id)

    async def _receive(
        self, handler: InboundHandler, message: Message, update_id: int, *, edited: bool
    ) -> None:
        """Normalize one message and hand it over; a redelivered update is handled once."""
        if self._was_handled(update_id):
            log.debug("telegram bot %s: update %d already handled", self.bot_key, update_id)
            return
        inbound = to_inbound(message, self._rules, edited=edited)
        if inbound is not None:
            inbound = self._albums.apply(message, inbound)
        else:
            log.debug("telegram bot %s: update %d ignored", self.bot_key, update_id)
        try:
            if inbound is not None:
                await handler(inbound)
        except AdapterError as exc:  # a safety net: Delivery logs and records failed sends
            log.error(
                "telegram bot %s: answer to update %d failed: %s", self.bot_key, update_id, exc
            )
        # Only now: an update whose handling raised is taken again when Telegram redelivers it.
        self._handled(update_id)

    def _was_handled(self, update_id: int) -> bool:
        """Handled before, or earlier in the batch being handled (Telegram may hand the same
        update out twice, even in one answer)."""
        return update_id in self._seen or (
            self._batch_seen is not None and update_id in self._batch_seen
        )

    def _handled(self, update_id: int) -> None:
        if self._batch_seen is not None:
            self._batch_seen.append(update_id)
            return
        self._seen[update_id] = None
        while len(self._seen) > _SEEN_UPDATES:
            self._seen.popitem(last=False)

    async def _poll(self, dispatcher: Dispatcher, handler: InboundHandler) -> None:
        """Long polling, one ``getUpdates`` batch at a time, its updates in order, until
        cancelled.

        Our loop, not aiogram's: each update is validated alone (:mod:`adapters.telegram.updates`)
        and the batch's messages are stored in one transaction (``handler.batch()``); the
        offset moves past the batch only once it was stored, so an update is never
        acknowledged before it is. A store fault keeps the offset where it is and hands the
        whole batch over again with backoff; later updates wait (order matters).
        """
        try:
            await self._bot.delete_webhook(drop_pending_updates=False)
        except _TELEGRAM_ERRORS as exc:
            log.warning(
                "telegram bot %s: deleteWebhook failed: %s", self.bot_key, self._redact(str(exc))
            )
        offset: int | None = None
        delay = _POLL_BACKOFF_START
        while True:
            request = GetRawUpdates(
                offset=offset,
                timeout=self._polling_timeout,
                allowed_updates=list(ALLOWED_UPDATES),
            )
            try:
                raws = await self._bot(
                    request, request_timeout=int(self._session.timeout + self._polling_timeout)
                )
            except _TELEGRAM_ERRORS as exc:
                if isinstance(exc, TelegramRetryAfter):
                    delay = max(delay, float(exc.retry_after))
                log.warning(
                    "telegram bot %s: getUpdates failed (%s); retrying in %.0fs",
                    self.bot_key,
                    self._redact(getattr(exc, "message", None) or str(exc)),
                    delay,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, _POLL_BACKOFF_MAX)
                continue
            before = offset
            updates, offset = self._parse_batch(raws, offset, handler)
            await self._feed_until_stored(dispatcher, handler, updates)
            if not raws or offset != before:
                delay = _POLL_BACKOFF_START
                continue
            # Nothing could be confirmed (every entry lacked a readable update id): the server
            # hands the same entries out again, so wait instead of spinning on them.
            log.warning(
                "telegram bot %s: getUpdates returned %d entries without a readable update id; "
                "retrying in %.0fs",
                self.bot_key,
                len(raws),
                delay,
            )
            await asyncio.sleep(delay)
            delay = min(delay * 2, _POLL_BACKOFF_MAX)

    def _parse_batch(
        self, raws: Sequence[object], offset: int | None, handler: InboundHandler
    ) -> tuple[list[Update], int | None]:
        """The updates of a ``getUpdates`` answer that could be read (each validated alone),
        and the offset past every entry with a readable update id (sent with the next
        ``getUpdates``, which waits for the batch to be stored)."""
        updates: list[Update] = []
        for raw in raws:
            parsed = parse_update(raw, self._bot)
            if parsed.update is not None:
                self._repaired(parsed)
                updates.append(parsed.update)
            else:
                self._rejected(handler, parsed)
            if parsed.update_id is not None:
                offset = max(offset or 0, parsed.update_id + 1)
        return updates, offset

    async def _feed_until_stored(
        self, dispatcher: Dispatcher, handler: InboundHandler, updates: Sequence[Update]
    ) -> None:
        """Handle a batch of updates, its messages stored in one transaction; a store fault
        hands the whole batch over again, with backoff, until it clears (what was stored
        before the fault is then a second delivery, a no-op).

        Any other failure of one update is logged and that update skipped: one update never
        stops the bot.
        """
        if not updates:
            return
        delay = _POLL_BACKOFF_START
        while True:
            self._batch_seen = []
            try:
                async with handler.batch():
                    for update in updates:
                        await self._feed(dispatcher, update)
            except StoreError as exc:
                log.error(
                    "telegram bot %s: updates %d-%d not stored (%s); not acknowledged, "
                    "retrying in %.0fs",
                    self.bot_key,
                    updates[0].update_id,
                    updates[-1].update_id,
                    exc,
                    delay,
                )
            else:
                handled, self._batch_seen = self._batch_seen, None
                for update_id in handled or ():
                    self._handled(update_id)
                return
            finally:
                self._batch_seen = None
            await asyncio.sleep(delay)
            delay = min(delay * 2, _POLL_BACKOFF_MAX)

    async def _feed(self, dispatcher: Dispatcher, update: Update) -> None:
        """One update of a batch: a StoreError goes to the batch, anything else is logged."""
        try:
            await dispatcher.feed_update(self._bot, update)
        except StoreError:
            raise
        except Exception:
            log.exception(
                "telegram bot %s: handling update %d failed; skipped",
                self.bot_key,
                update.update_id,
            )

    def _rejected(self, handler: InboundHandler, parsed: ParsedUpdate) -> None:
        """An update that cannot be read: logged once (no content), counted, skipped."""
        log.warning(
            "telegram bot %s: skipped an update aiogram cannot read: %s",
            self.bot_key,
            parsed.describe(),
        )
        handler.rejected("telegram", self.bot_key, parsed.kind)

    def _repaired(self, parsed: ParsedUpdate) -> None:
        if parsed.dropped:
            log.warning(
                "telegram bot %s: update %s kept without %s.%s (%s)",
                self.bot_key,
                parsed.update_id,
                parsed.kind,
                ", ".join(parsed.dropped),
                "; ".join(parsed.errors),
            )

    async def _serve_webhook(
        self, dispatcher: Dispatcher, hook: WebhookSettings, handler: InboundHandler
    ) -> None:
        """Serve ``hook.path``, then ``setWebhook`` with the secret; until cancelled."""

        async def receive(request: web.Request) -> web.Response:
            return await self._on_webhook(dispatcher, hook, request, handler)

        app = web.Application()
        app.router.add_post(hook.path, receive)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        try:
            await web.TCPSite(runner, hook.host, hook.port).start()
            self.webhook_port = int(runner.addresses[0][1])
            log.info(
                "telegram bot %s: webhook on %s:%d%s",
                self.bot_key,
                hook.host,
                self.webhook_port,
                hook.path,
            )
            await self._startup_call(
                "setWebhook",
                lambda: self._bot.set_webhook(
                    url=hook.url, secret_token=hook.secret, allowed_updates=list(ALLOWED_UPDATES)
                ),
            )
            await asyncio.get_running_loop().create_future()  # serve until cancelled
        finally:
            await runner.cleanup()

    async def _on_webhook(
        self,
        dispatcher: Dispatcher,
        hook: WebhookSettings,
        request: web.Request,
        handler: InboundHandler,
    ) -> web.Response:
        """One update from Telegram: 401 without the right secret, nothing processed.

        An update that cannot be read is answered 200 (logged once): redelivering it would
        not help. A store fault answers 503 (any other failure 500), so Telegram delivers it again.
        """
        given = request.headers.get(SECRET_HEADER, "")
        if not hmac.compare_digest(given.encode(), hook.secret.encode()):
            log.warning("telegram bot %s: webhook call without the right secret", self.bot_key)
            return web.Response(status=401, text="Unauthorized")
        try:
            raw = await request.json()
        except ValueError:
            # Not Telegram's doing (it sends JSON): nothing to redeliver, so acknowledged.
            log.warning(
                "telegram bot %s: webhook body is not JSON (%d bytes); acknowledged, skipped",
                self.bot_key,
                request.content_length or 0,
            )
            handler.rejected("telegram", self.bot_key, "not_json")
            return web.json_response({})
        parsed = parse_update(raw, self._bot)
        if parsed.update is None:
            self._rejected(handler, parsed)
            return web.json_response({})
        self._repaired(parsed)
        try:
            await dispatcher.feed_update(self._bot, parsed.update)
        except StoreError as exc:
            # Not stored, so not acknowledged: any non-2xx answer makes Telegram redeliver.
            log.error(
                "telegram bot %s: update %d not stored (%s); answered 503, Telegram will "
                "deliver it again",
                self.bot_key,
                parsed.update.update_id,
                exc,
            )
            return web.Response(status=503, text="Service Unavailable")
        return web.json_response({})

    # ------------------------------------------------------------------------ sending

    async def send(self, reply: Reply) -> None:
        """Send a reply as HTML chunks of at most 4096 UTF-16 units, in order (or a file)."""
        if reply.attachment is not None:
            await self._send_document(reply)
            return
        if reply.voice_message is not None and reply.voice is None:
            await self._send_voice(reply)
            return
        target = _Target.of(reply.conversation)
        # In groups the first message quotes the turn's last user message (if it still exists).
        reply_to = None
        if not target.private and (reply.reply_to_platform_message_id or "").isdigit():
            reply_to = int(reply.reply_to_platform_message_id or "")
        edit = _message_number(reply.replaces)
        markup, text = self._keyboard(target, reply)
        # A scene's line from its persona's own account (no preview to replace: scenes do
        # not stream, and another account could not edit this one's message anyway).
        account, line = None, reply.line
        if reply.voice is not None and line is not None and edit is None:
            account = await self._accounts.speaker(reply.voice.persona, target.chat_id)
        if account is None or line is None:
            if line is not None and reply.voice is not None and edit is None:
                # Every part of a long line under the header: a reply to any part is for
                # its persona (bot.core.scenes.replied_to reads the header).
                await self._send_text(target, line, reply_to, voice=reply.voice)
            else:
                await self._send_text(target, text, reply_to, edit, markup=markup)
            return
        unposted = await self._send_as(account, target, line, reply_to)
        if unposted is None:
            return
        # What the account could not post goes out under the header from here, then (once
        # per persona and chat) the notice that explains why.
        reply_to = None if unposted.started else reply_to
        await self._send_text(target, unposted.rest, reply_to, voice=reply.voice)
        if unposted.notice is not None:
            await self._notify(target, unposted.notice)

    def _keyboard(self, target: _Target, reply: Reply) -> tuple[InlineKeyboardMarkup | None, str]:
        """The buttons of the reply's choices and the text to send with them; without
        buttons (the asker is no Telegram user, the data would not fit), the text with the
        typed commands (adapters/telegram/buttons.py)."""
        choices = reply.choices
        if choices is None:
            return None, reply.text
        markup = self._signer.keyboard(
            target.chat_id, choices.asker, choices.items, self._session.now()
        )
        return markup, reply.text if markup is not None else typed(reply.text, choices.items)

    def shows_choices(self, conversation: ConversationKey) -> bool:
        """Every Telegram chat shows inline keyboards (``bot.core.ports.ShowsChoices``)."""
        return True

    async def _send_text(
        self,
        target: _Target,
        text: str,
        reply_to: int | None,
        edit: int | None = None,
        bot: Bot | None = None,
        voice: Voice | None = None,
        markup: InlineKeyboardMarkup | None = None,
    ) -> None:
        """Send ``text`` as HTML chunks from ``bot`` (this account by default); with
        ``edit``, a streamed preview (docs/architecture.md#streaming) becomes the first;
        with ``voice``, each chunk under the persona's bold name header; ``markup`` (buttons)
        under the last message."""
        # Nothing the bot says may notify anyone (the model may write "@name" or a mention link).
        chunks = _voiced_chunks(without_mentions(text), voice)
        try:
            for index, chunk in enumerate(chunks):
                first = reply_to if index == 0 else None
                last = markup if index == len(chunks) - 1 else None
                await self._send_chunk(
                    target, chunk, first, MESSAGE_LIMIT, edit if index == 0 else None, bot, last
                )
        except TelegramBadRequest as exc:
            raise self._failure(target, exc) from exc
        log.debug(
            "telegram bot %s: %d message(s) to chat %s", self.bot_key, len(chunks), target.chat_id
        )

    async def _send_as(
        self, account: PersonaAccount, target: _Target, line: str, reply_to: int | None
    ) -> _Unposted | None:
        """Post a scene's line from its persona's account, chunk by chunk as ``_send_text``
        does, the first quoting ``reply_to``. None when all of it went out; else what the
        account could not post (not a member of the group, token rejected: Telegram refused
        before sending, so nothing is posted twice)."""
        chunks = split_message(without_mentions(line))
        for index, chunk in enumerate(chunks):
            try:
                first = reply_to if index == 0 else None
                await self._send_chunk(target, chunk, first, MESSAGE_LIMIT, bot=account.bot)
            except TelegramBadRequest as exc:
                raise self._failure(target, exc) from exc
            except AccountUnusable as exc:
                notice = None
                if exc.why == "rejected":
                    self._accounts.rejected(account)
                elif self._accounts.absent(account, target.chat_id):
                    notice = self._accounts.notice(account)
                rest = "\n\n".join(c.markdown for c in chunks[index:])
                return _Unposted(rest, started=index > 0, notice=notice)
        return None

    async def _notify(self, target: _Target, text: str) -> None:
        """A notice of ours (fixed text, never in the transcript: its @username of a bot
        is left clickable) from this account; a failure is only logged: the line it
        explains went out already."""
        try:
            await self._deliver(target, text, None, None)
        except (TelegramBadRequest, AdapterError) as exc:
            log.warning(
                "telegram bot %s: a notice to chat %s was not sent: %s",
                self.bot_key,
                target.chat_id,
                self._redact(str(exc)),
            )

    async def _send_document(self, reply: Reply) -> None:
        """``sendDocument``: the attachment as one file, the text as its plain caption."""
        assert reply.attachment is not None
        target = _Target.of(reply.conversation)
        method = SendDocument(
            chat_id=target.chat_id,
            document=BufferedInputFile(reply.attachment.data, filename=reply.attachment.filename),
            caption=reply.text[:CAPTION_LIMIT] or None,
            message_thread_id=target.thread_id,
        )
        try:
            await self._call(method, target)
        except TelegramBadRequest as exc:
            raise self._failure(target, exc) from exc

    def sends_voice(self, conversation: ConversationKey) -> bool:
        """Every Telegram chat takes voice messages (bot.core.speech.VoiceOutlet)."""
        return True

    async def _send_voice(self, reply: Reply) -> None:
        """A spoken reply (adapters/telegram/voice.py): ``sendVoice`` quoting the message in
        groups, the text as its caption or after it; a chat that refuses voice messages
        (nothing was sent) gets the text instead."""
        voice = reply.voice_message
        assert voice is not None
        target = _Target.of(reply.conversation)
        reply_to = None
        if not target.private and (reply.reply_to_platform_message_id or "").isdigit():
            reply_to = int(reply.reply_to_platform_message_id or "")
        caption, rest = voice_caption(reply.text if voice.with_text else "")
        method = send_voice(target.chat_id, target.thread_id, voice, caption, reply_to)
        try:
            await self._call(method, target)
        except (TelegramBadRequest, DeliveryRefused) as exc:
            log.warning(
                "telegram bot %s: chat %s refused the voice message (%s); sending the text",
                self.bot_key,
                target.chat_id,
                self._redact(getattr(exc, "message", None) or str(exc)),
            )
            await self._send_text(target, reply.text, reply_to)
            return
        if rest:
            await self._send_text(target, rest, None)

    async def private_conversation(
        self, conversation: ConversationKey, user_id: str
    ) -> ConversationKey:
        """A private chat's id is the user's; Telegram refuses it until they started the bot."""
        return ConversationKey("telegram", user_id, None, conversation.bot)

    async def _send_chunk(
        self,
        target: _Target,
        chunk: Chunk,
        reply_to: int | None,
        limit: int,
        edit: int | None = None,
        bot: Bot | None = None,
        markup: InlineKeyboardMarkup | None = None,
    ) -> None:
        """One chunk as HTML from ``bot`` (default: this account); as plain text if Telegram
        rejects the entities. With ``edit``, its first message is an edit of that message (a
        preview) instead of a new one; ``markup`` goes under its last message.

        Raises TelegramBadRequest for any other bad request (``send`` translates it).
        """
        try:
            await self._deliver(target, chunk.html, "HTML", reply_to, edit, bot, markup)
            return
        except TelegramBadRequest as exc:
            problem = exc.message.lower()
            if "can't parse entities" in problem:
                log.warning(
                    "telegram bot %s: chat %s rejected the formatting (%s); sent as plain text",
                    self.bot_key,
                    target.chat_id,
                    self._redact(exc.message),
                )
                parts = plain_chunks(chunk.markdown, limit)
                for index, part in enumerate(parts):
                    last = markup if index == len(parts) - 1 else None
                    await self._deliver(target, part, None, reply_to, edit, bot, last)
                    reply_to = edit = None
                return
            if "message is too long" in problem and limit >= 512:
                # Our measure disagreed with the server's (e.g. a self-hosted limit): halve.
                halves = split_message(chunk.markdown, limit // 2)
                for index, half in enumerate(halves):
                    last = markup if index == len(halves) - 1 else None
                    await self._send_chunk(target, half, reply_to, limit // 2, edit, bot, last)
                    reply_to = edit = None
                return
            raise

    async def _deliver(
        self,
        target: _Target,
        text: str,
        parse_mode: str | None,
        reply_to: int | None,
        edit: int | None = None,
        bot: Bot | None = None,
        markup: InlineKeyboardMarkup | None = None,
    ) -> None:
        """``sendMessage`` from ``bot`` (default: this account; or, with ``edit``,
        ``editMessageText`` of this account's message, sent as a new message when it is
        gone), with ``markup`` (buttons; never on an edit: a streamed reply asks no choice);
        a reply to a deleted message is sent without the reply."""
        if edit is not None and await self._edit(target, edit, text, parse_mode):
            return
        reply = None
        if reply_to is not None:
            reply = ReplyParameters(message_id=reply_to, allow_sending_without_reply=True)
        method = SendMessage(
            chat_id=target.chat_id,
            text=text,
            parse_mode=parse_mode,
            message_thread_id=target.thread_id,
            reply_parameters=reply,
            reply_markup=markup,
        )
        await self._call(method, target, bot=bot)

    async def _edit(
        self, target: _Target, message_id: int, text: str, parse_mode: str | None
    ) -> bool:
        """Edit a message to ``text``: True when it shows that text now, False when it can no
        longer be edited (deleted, too old)."""
        method = EditMessageText(
            chat_id=target.chat_id, message_id=message_id, text=text, parse_mode=parse_mode
        )
        try:
            await self._call(method, target, message=False)
        except TelegramBadRequest as exc:
            problem = exc.message.lower()
            if NOT_MODIFIED in problem:
                return True  # the preview already showed exactly this
            if any(gone in problem for gone in NOT_EDITABLE):
                log.info(
                    "telegram bot %s: preview %d in chat %s is gone (%s); sending anew",
                    self.bot_key,
                    message_id,
                    target.chat_id,
                    self._redact(exc.message),
                )
                return False
            raise
        return True

    async def _call(
        self,
        method: TelegramMethod[TelegramType],
        target: _Target,
        *,
        message: bool = True,
        bot: Bot | None = None,
    ) -> TelegramType:
        """Call a method as ``bot`` (default: this account) in the chat's turn
        (``message=False``: an edit, not spaced like a new message), waiting out flood
        limits a bounded number of times. Every account takes its turn in the same pacer:
        Telegram's limits are per group, whoever posts.

        Raises TelegramBadRequest (the caller decides), DeliveryRefused, AdapterError, or,
        for a persona's account, AccountUnusable (it cannot post here; nothing was sent).
        """
        sender = bot or self._bot
        chat = target.chat_id
        if (paused := self._pacer.paused_for(chat)) > self._max_flood_wait:
            # A 429 (maybe another sender's) paused the chat longer than this adapter waits.
            raise AdapterError(
                f"telegram bot {self.bot_key}: sending to chat {chat} failed: "
                f"Flood control: the chat is paused for another {paused:.0f}s"
            )
        async with self._pacer.turn(chat, spaced=message) as turn:
            attempt = 0
            while True:
                try:
                    return await sender(method)
                except TelegramRetryAfter as exc:
                    # The chat's pause, not this send's: every sender of the chat honours it.
                    self._pacer.pause(chat, float(exc.retry_after))
                    attempt += 1
                    if attempt > self._flood_retries or exc.retry_after > self._max_flood_wait:
                        raise self._failure(target, exc) from exc
                    log.warning(
                        "telegram bot %s: flood limit in chat %s; retry %d in %ds",
                        self.bot_key,
                        chat,
                        attempt,
                        exc.retry_after,
                    )
                    await turn.again()  # still this send's turn: nobody overtakes the retry
                except (
                    TelegramBadRequest,
                    TelegramForbiddenError,
                    TelegramUnauthorizedError,
                ) as exc:
                    if sender is not self._bot and (why := unusable(exc)) is not None:
                        raise AccountUnusable(why) from exc
                    if not isinstance(exc, TelegramBadRequest):
                        raise self._failure(target, exc) from exc
                    if any(refusal in exc.message.lower() for refusal in _REFUSALS):
                        raise self._failure(target, exc) from exc
                    raise
                except _TELEGRAM_ERRORS as exc:
                    raise self._failure(target, exc) from exc

    def _failure(self, target: _Target, exc: Exception) -> AdapterError:
        """The framework's error for a failed send: DeliveryRefused when the chat refuses."""
        detail = self._redact(getattr(exc, "message", None) or str(exc))
        text = f"telegram bot {self.bot_key}: sending to chat {target.chat_id} failed: {detail}"
        refused = isinstance(exc, TelegramForbiddenError) or any(
            refusal in detail.lower() for refusal in _REFUSALS
        )
        return DeliveryRefused(text) if refused else AdapterError(text)

    def _redact(self, text: str) -> str:
        for token in self._tokens:
            text = scrub(text, token)
        return text

    # ---------------------------------------------------------------------- streaming

    def _open_preview(
        self,
        conversation: ConversationKey,
        settings: StreamSettings,
        reply_to: str | None,
        draft_id: int | None,
    ) -> Preview | None:
        """A draft in a private chat (any mode but ``off``; ``draft_id`` continues a cut
        generation's draft); in a group, a posted message edited in place (mode ``edit``
        only; Telegram has no drafts there), else None."""
        target = _Target.of(conversation)
        if target.private:
            if target.chat_id in self._draftless:
                return None
            return DraftPreview(
                self._previews,
                target.chat_id,
                target.thread_id,
                settings,
                on_refused=lambda: self._refuse_drafts(target.chat_id),
                draft_id=draft_id,
            )
        if settings.mode != "edit":
            return None
        quoted = _message_number(reply_to)
        return EditPreview(
            self._previews,
            target.chat_id,
            target.thread_id,
            reply_to=quoted,
        )

    async def retract(self, conversation: ConversationKey, message_id: str) -> bool:
        """Delete a posted preview a cut or crashed generation left behind; never raises
        (failures logged). False: worth trying again later."""
        number = _message_number(message_id)
        if number is None:
            log.warning("telegram bot %s: not a message id: %r", self.bot_key, message_id)
            return True
        try:
            chat_id = _Target.of(conversation).chat_id
        except AdapterError as exc:
            log.warning("telegram bot %s: %s", self.bot_key, exc)
            return True
        return await delete_message(self._previews, chat_id, number)

    def _refuse_drafts(self, chat_id: int) -> None:
        """Telegram refused drafts in this chat: no more previews there (bounded memory)."""
        if chat_id not in self._draftless:
            log.info("telegram bot %s: chat %s refuses drafts", self.bot_key, chat_id)
        self._draftless[chat_id] = None
        self._draftless.move_to_end(chat_id)
        while len(self._draftless) > _DRAFTLESS_CHATS:
            self._draftless.popitem(last=False)

    # ------------------------------------------------------------------------- typing

    @contextlib.asynccontextmanager
    async def typing(self, conversation: ConversationKey) -> AsyncIterator[None]:
        """Send ``typing`` every few seconds while the body runs; always stopped after."""
        target = _Target.of(conversation)
        async with running(self._keep_typing(target), name=f"telegram typing {target}"):
            yield

    @contextlib.asynccontextmanager
    async def recording(self, conversation: ConversationKey) -> AsyncIterator[None]:
        """Shows "recording a voice message" while a spoken reply is made (docs/voices.md)."""
        target = _Target.of(conversation)
        work = self._keep_typing(target, "record_voice")
        async with running(work, name=f"telegram recording {target}"):
            yield

    async def _keep_typing(self, target: _Target, kind: str = "typing") -> None:
        """The typing loop: failures are logged and never end the turn."""
        action = SendChatAction(
            chat_id=target.chat_id, action=kind, message_thread_id=target.thread_id
        )
        while True:
            pause = self._typing_interval
            try:
                await self._bot(action)
            except TelegramRetryAfter as exc:
                pause = max(pause, float(exc.retry_after))
                self._pacer.pause(target.chat_id, float(exc.retry_after))  # for the messages too
            except TelegramForbiddenError:
                return  # the reply itself will report the refusal
            except _TELEGRAM_ERRORS as exc:
                log.debug(
                    "telegram bot %s: typing failed: %s", self.bot_key, self._redact(str(exc))
                )
            await asyncio.sleep(pause)

    async def aclose(self) -> None:
        """Close the HTTP sessions (the persona accounts' too)."""
        await self._bot.session.close()
        await self._accounts.aclose()


def _message_number(message_id: str | None) -> int | None:
    """A platform message id as Telegram's integer (None when absent or not one)."""
    return int(message_id) if message_id is not None and message_id.isdigit() else None


# ---------------------------------------------------------------------------------- factory


def create_adapter(
    entry: BotSettings,
    persona: PersonaSettings,
    secrets: Secrets,
    *,
    names: Mapping[str, str] | None = None,
) -> TelegramAdapter:
    """The adapter of a ``[[bots]] platform = "telegram"`` entry (tokens from the environment).

    ``names``: persona id -> name, for a scene's persona accounts (a reply to Bob's account
    names Bob); a persona missing from it is called by its id, ``persona`` by its name.
    """
    if not isinstance(entry, TelegramBotSettings):
        raise ConfigError([f"bots ({entry.key}): not a telegram entry"])
    token = required_secret(secrets, entry.token_variable, f"token of bot {entry.key!r}")
    known = {persona.id: persona.name, **(names or {})}
    return TelegramAdapter(
        bot_key=entry.key,
        token=token,
        api_server=entry.api_server,
        group_trigger=entry.group_trigger,
        non_text=entry.non_text,
        webhook=_webhook_settings(entry, secrets) if entry.mode == "webhook" else None,
        accounts=_account_tokens(entry, secrets, known),
    )


def _account_tokens(
    entry: TelegramBotSettings, secrets: Secrets, names: Mapping[str, str]
) -> tuple[AccountToken, ...]:
    """The scene's persona accounts (``voices = "auto"``), each token read from the
    environment as the bot's own is (an unset one named, never a value)."""
    scene = entry.scene
    if scene is None or scene.voices != "auto":
        return ()
    return tuple(
        AccountToken(
            persona,
            names.get(persona, persona),
            required_secret(
                secrets, variable, f"token of persona {persona!r} of bot {entry.key!r}"
            ),
        )
        for persona, variable in scene.accounts.items()
    )


def _webhook_settings(entry: TelegramBotSettings, secrets: Secrets) -> WebhookSettings:
    """Webhook mode needs a secret: without one anybody could post updates to the bot."""
    where = f"bots ({entry.key})"
    if entry.secret_token_env is None:
        raise ConfigError([f"{where}.secret_token_env: required when mode = 'webhook'"])
    secret = required_secret(
        secrets, entry.secret_token_env, f"webhook secret of bot {entry.key!r}"
    )
    if not _SECRET.match(secret):
        raise ConfigError(
            [
                f"{entry.secret_token_env}: the webhook secret must be 1-256 characters of "
                "A-Z, a-z, 0-9, _ and -"
            ]
        )
    assert entry.webhook_url is not None  # the settings validator requires it in webhook mode
    path = entry.webhook_path if entry.webhook_path.startswith("/") else f"/{entry.webhook_path}"
    return WebhookSettings(
        url=entry.webhook_url,
        secret=secret,
        host=entry.listen_host,
        port=entry.listen_port,
        path=path,
    )


def _voiced_chunks(text: str, voice: Voice | None) -> list[Chunk]:
    """``text`` in chunks that fit a message, each under ``voice``'s header when given."""
    if voice is None:
        return split_message(text)
    header = voiced("", voice)
    room = MESSAGE_LIMIT - utf16_len(render_html(header)) - 8
    return [
        Chunk(voiced(part.markdown, voice), render_html(voiced(part.markdown, voice)))
        for part in split_message(text, room)
    ]
