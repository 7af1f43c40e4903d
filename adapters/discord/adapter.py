"""Discord adapter on discord.py 2: DMs, guild text channels and threads.

Inside this module ``import discord`` is the discord.py library, not this file: imports are
absolute, and this module is only ever imported as ``adapters.discord.adapter``.

Invariants:
- discord.py objects never leave ``adapters/``: the runtime gets ``Inbound`` events and gives
  ``Reply`` objects;
- gateway events are handled one at a time in arrival order (one consumer task), so a burst
  is stored in the order people wrote it;
- every send and every edit carries ``AllowedMentions.none()``: model output never pings
  anyone;
- a reply with an outbox id is sent with one nonce per chunk (``enforce_nonce``), so re-sending
  the same outbox row after a crash or retry returns the message already posted instead of
  posting it twice; that is why ``idempotent_send`` is True. A reply that replaces a streamed
  preview (``Reply.replaces``) edits its first chunk into that message, which is idempotent as
  it is, and posts that chunk with its nonce when the message is gone;
- a streamed preview (``stream = "edit"``) is a posted message edited in place
  (adapters/discord/preview.py); it never waits on discord.py's rate-limit buckets and leaves
  the last request of each bucket window to the final reply;
- the typing indicator task is cancelled on every path out of ``typing()``;
- a replied-to message is looked up over REST at most once per message and for at most
  ``REFERENCE_TIMEOUT`` seconds (events wait behind it, in gateway order);
- with ``webhook_voices``, a scene's line goes out as its persona through the channel's webhook
  (adapters/discord/webhooks.py); where the bot may not manage webhooks it goes out under the
  bold name header, and the channel is told why once per process.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
from collections.abc import AsyncIterator, Collection, Sequence
from typing import Any, Final, Literal

import discord

from adapters.base import required_secret
from adapters.discord.app_commands import SyncPolicy, sync_commands
from adapters.discord.client import Event, QueueingClient, default_intents, quiet_voice_notes
from adapters.discord.downloads import STALL_TIMEOUT, DiscordMedia
from adapters.discord.endpoints import SharedEndpoints, endpoints_for
from adapters.discord.inbound import GroupTrigger, InboundBuilder, Place, known_place
from adapters.discord.interactions import ACK_WITHIN, Interactions, interaction_id
from adapters.discord.preview import (
    MESSAGE_LIMIT,
    NETWORK_ERRORS,
    PREVIEW_TIMEOUT,
    EditPreview,
    delete_message,
)
from adapters.discord.webhooks import Line, Outcome, WebhookVoices
from adapters.streaming import StreamingAdapter
from adapters.text import split_text
from bot.config import BotSettings, DiscordBotSettings, PersonaSettings, Secrets
from bot.core.clock import Clock, SystemClock
from bot.core.errors import AdapterError, ConfigError, DeliveryRefused, StoreError
from bot.core.events import ConversationKey, Inbound, Reply, Voice, voiced
from bot.core.media import MediaSource
from bot.core.menu import NativeMenu
from bot.core.ports import InboundHandler, Preview, StreamSettings
from bot.core.tasks import running

log = logging.getLogger("personabot.discord")

#: Discord shows "typing" for 10 s after each trigger; re-trigger before it lapses.
TYPING_INTERVAL: Final = 8.0
NONCE_LIMIT: Final = 25
#: Discord error code for a channel that no longer exists.
UNKNOWN_CHANNEL: Final = 10003
#: Discord error code when no more edits of messages older than an hour are allowed for now.
OLD_MESSAGE_EDITS: Final = 30046
#: Gateway close codes that no reconnect can fix, with what the operator should do.
FATAL_CLOSE: Final = {
    4004: "Discord rejected the bot token",
    4010: "invalid shard_id for this shard_count",
    4011: "this bot is in too many guilds for one connection: set shard_id and shard_count "
    "(one process per shard)",
    4013: "invalid gateway intents",
}
_NETWORK_ERRORS: Final = NETWORK_ERRORS
_STORE_RETRY_START: Final = 1.0
_STORE_RETRY_MAX: Final = 30.0
# At most this many queued events are handed over (and their messages stored) as one batch.
_BATCH_EVENTS: Final = 100
#: Seconds the lookup of a replied-to message that Discord did not include may take.
REFERENCE_TIMEOUT: Final = 5.0
#: What a channel is told once per process when scene lines cannot go out as their personas.
NO_WEBHOOKS_NOTICE: Final = (
    "I need the Manage Webhooks permission to post each persona under its own name; until "
    "then the names are shown in bold."
)


def nonce_for(outbox_id: int | None, index: int) -> str | None:
    """The nonce of chunk ``index`` of an outbox row (None: discord.py picks a random one)."""
    if outbox_id is None:
        return None
    nonce = f"{outbox_id}-{index}"
    if len(nonce) > NONCE_LIMIT:
        raise AdapterError(f"outbox id {outbox_id} is too long for a Discord nonce")
    return nonce


class DiscordAdapter(StreamingAdapter):
    """One Discord bot account: gateway events in, replies out through the REST API.

    ``media`` is this account's ``MediaSource`` (bot/core/media.py): it downloads the
    attachments and stickers its ``Inbound.media`` refer to (adapters/discord/downloads.py).
    It works before ``run()`` (it logs in over REST when needed) and is closed by ``aclose()``.
    ``webhook_voices``: a scene's lines go out as their personas through webhooks
    (``[bots.scene] voices = "auto"``); otherwise under their bold name headers.
    """

    idempotent_send = True

    def __init__(
        self,
        *,
        bot_key: str,
        token: str,
        token_variable: str = "DISCORD_BOT_TOKEN",
        group_trigger: GroupTrigger = "mention",
        guilds: Collection[int] = (),
        shard_id: int | None = None,
        shard_count: int | None = None,
        media_stall_timeout: float = STALL_TIMEOUT,
        preview_timeout: float = PREVIEW_TIMEOUT,
        webhook_voices: bool = False,
        app_commands: SyncPolicy = "global",
        command_guilds: Collection[int] = (),
        clock: Clock | None = None,
        ack_within: float = ACK_WITHIN,
    ) -> None:
        super().__init__(bot_key=bot_key)
        self._sync_policy: SyncPolicy = app_commands
        self._command_guilds = tuple(command_guilds)
        self._token = token
        self._token_variable = token_variable
        self._shard = (shard_id, shard_count)
        self._preview_timeout = preview_timeout
        self._events: asyncio.Queue[Event] = asyncio.Queue()
        self._client: QueueingClient | None = None
        self._logged_in = False
        self._closed = False
        self._login_lock = asyncio.Lock()
        self._dm_channels: set[int] = set()
        self._handler: InboundHandler | None = None
        self._voices = WebhookVoices(client=self._logged_in_client) if webhook_voices else None
        self._inbound = InboundBuilder(
            bot_key=bot_key,
            group_trigger=group_trigger,
            guilds=guilds,
            fetch_place=self._fetch,
            fetch_message=self._fetch_message,
            is_our_webhook=self._is_our_webhook if webhook_voices else None,
        )
        self._media = DiscordMedia(client=self._logged_in_client, stall_timeout=media_stall_timeout)
        self._interactions = Interactions(
            bot_key=bot_key,
            clock=clock or SystemClock(),
            place=self._inbound.place,
            allowed=self._inbound.allowed,
            ack_within=ack_within,
        )
        #: The last command sync's task (run by ``run()``; tests wait for it).
        self.synced: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"DiscordAdapter(bot_key={self.bot_key!r})"  # never the token

    # ------------------------------------------------------------------ lifecycle

    async def run(self, handler: InboundHandler) -> None:
        """Connect to the gateway and hand every relevant event to ``handler`` until closed."""
        self._inbound.command_names = frozenset(
            name.lower() for name in (*(n for n, _ in handler.commands), *handler.admin_commands)
        )
        self._handler = handler
        menu = handler if isinstance(handler, NativeMenu) else None
        self._interactions.menu = menu
        consumer = asyncio.create_task(self._consume(handler), name=f"discord {self.bot_key}")
        if menu is not None:
            self.synced = asyncio.create_task(self._sync(menu), name=f"discord sync {self.bot_key}")
        try:
            await self._connect()
        finally:
            for task in (consumer, self.synced):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task

    async def _sync(self, menu: NativeMenu) -> None:
        """Register the bot's commands as application commands (docs/discord.md#sync); a
        failure is logged and the bot serves on (typed commands keep working); a store fault
        too: the commands created before it are recorded already (``_sync_scope``), and
        what the task raised would come out of ``run()`` at shutdown instead."""
        try:
            client = await self._logged_in_client()
            await sync_commands(client, menu, self._sync_policy, self._command_guilds)
        except (AdapterError, StoreError, discord.HTTPException, *_NETWORK_ERRORS) as exc:
            log.error("Discord commands of %s not synced: %s", self.bot_key, exc)

    @property
    def media(self) -> MediaSource:
        """Downloads the media of this bot's inbound messages (see the class docstring)."""
        return self._media

    @property
    def connected(self) -> bool:
        """Whether the gateway session is up and discord.py's cache is ready (for /readyz)."""
        client = self._client
        return client is not None and client.is_ready() and not client.is_closed()

    async def aclose(self) -> None:
        """Close the gateway and HTTP session; give back the shared endpoints."""
        if self._closed:
            return
        self._closed = True
        try:
            await self._media.aclose()
            await self._interactions.aclose()
            if self._client is not None:
                await self._client.close()
        finally:
            SharedEndpoints.release()

    async def _connect(self) -> None:
        """Run the gateway connection (discord.py reconnects and resumes by itself)."""
        while not self._closed:
            client = await self._logged_in_client()
            try:
                await client.connect(reconnect=True)
                return  # closed by aclose()
            except discord.PrivilegedIntentsRequired:
                if not client.intents.message_content:
                    raise AdapterError("Discord refused the gateway intents") from None
                await self._without_message_content(client)
            except discord.ConnectionClosed as exc:
                reason = FATAL_CLOSE.get(exc.code or 0, "the gateway closed the connection")
                raise AdapterError(f"Discord: {reason} (close code {exc.code})") from exc
            except (discord.GatewayNotFound, discord.HTTPException, *_NETWORK_ERRORS) as exc:
                raise AdapterError(f"Discord gateway unreachable: {exc}") from exc

    async def _without_message_content(self, client: QueueingClient) -> None:
        """Carry on without the privileged intent: DMs and mentions still carry content."""
        log.error(
            "the Message Content Intent is not enabled for this bot (%s): continuing without "
            "it, so in guilds the bot only sees messages that mention it or reply to it. "
            "Enable it in the Discord Developer Portal (your application > Bot > Privileged "
            "Gateway Intents > Message Content Intent) and restart.",
            self.bot_key,
        )
        async with self._login_lock:
            await client.close()
            self._client = self._new_client(message_content=False)
            self._logged_in = False
        self._inbound.message_content_intent = False

    def _new_client(self, *, message_content: bool = True) -> QueueingClient:
        intents = default_intents(message_content=message_content)
        quiet_voice_notes()
        shard_id, shard_count = self._shard
        return QueueingClient(
            queue=self._events,
            on_unreadable=self._unreadable,
            on_interaction=self._interactions.arrived,
            intents=intents,
            allowed_mentions=discord.AllowedMentions.none(),
            shard_id=shard_id,
            shard_count=shard_count,
            chunk_guilds_at_startup=False,
            member_cache_flags=discord.MemberCacheFlags.from_intents(intents),
        )

    async def _logged_in_client(self) -> QueueingClient:
        """The client, logged in over REST (sending works before the gateway is up)."""
        async with self._login_lock:
            if self._closed:
                raise AdapterError("the Discord adapter is closed")
            if self._client is None:
                self._client = self._new_client()
            if not self._logged_in:
                await self._login(self._client)
            return self._client

    async def _login(self, client: QueueingClient) -> None:
        try:
            await client.login(self._token)
        except discord.LoginFailure as exc:
            raise AdapterError(
                f"Discord rejected the bot token in {self._token_variable} (401 Unauthorized)"
            ) from exc
        except (discord.HTTPException, *_NETWORK_ERRORS) as exc:
            raise AdapterError(f"Discord login failed: {exc}") from exc
        self._logged_in = True

    # ------------------------------------------------------------------ inbound

    def _unreadable(self, event: str) -> None:
        if self._handler is not None:
            self._handler.rejected("discord", self.bot_key, event.lower())

    async def _consume(self, handler: InboundHandler) -> None:
        """Normalize and hand over queued events in order; one bad event never stops it.

        Events that queued up together (a burst, or a backlog behind a store fault) are
        handed over as one batch, their messages stored in one transaction.
        """
        while True:
            events = [await self._events.get()]
            while len(events) < _BATCH_EVENTS and not self._events.empty():
                events.append(self._events.get_nowait())
            inbounds: list[Inbound] = []
            for event in events:
                try:
                    inbounds.extend(await self._normalize(event))
                except Exception:
                    log.exception("could not handle a Discord %s event", type(event).__name__)
            await self._until_stored(handler, inbounds)

    async def _until_stored(self, handler: InboundHandler, inbounds: Sequence[Inbound]) -> None:
        """Hand a batch over; a store fault hands it all over again with backoff until it
        clears (what was stored before the fault is then a second delivery, a no-op).

        The gateway cannot be asked again for an event, so it is kept here; later events wait
        behind it (gateway order) and queue up in memory meanwhile. Any other failure of one
        event is logged and that event skipped.
        """
        if not inbounds:
            return
        delay = _STORE_RETRY_START
        while True:
            try:
                async with handler.batch():
                    for inbound in inbounds:
                        await self._hand_over(handler, inbound)
                return
            except StoreError as exc:
                log.error(
                    "Discord messages %s-%s not stored (%s); retrying in %.0fs",
                    inbounds[0].platform_message_id,
                    inbounds[-1].platform_message_id,
                    exc,
                    delay,
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, _STORE_RETRY_MAX)

    async def _hand_over(self, handler: InboundHandler, inbound: Inbound) -> None:
        try:
            await handler(inbound)
        except StoreError:
            raise
        except Exception:
            log.exception("could not handle Discord message %s", inbound.platform_message_id)
        if (interaction := interaction_id(inbound.platform_message_id)) is not None:
            await self._interactions.handed_over(interaction)

    async def _normalize(self, event: Event) -> list[Inbound]:
        client = self._client
        if client is None or client.user is None:
            return []
        if isinstance(event, discord.Interaction):
            command = await self._interactions.inbound(event)
            return [] if command is None else [command]
        if isinstance(event, discord.Message):
            found = await self._inbound.message(event, client.user, client)
            if found is not None and found.is_private:
                self._dm_channels.add(event.channel.id)
            return [] if found is None else [found]
        if isinstance(event, discord.RawMessageUpdateEvent):
            edited = await self._inbound.edit(event, client.user, client)
            return [] if edited is None else [edited]
        channel = client.get_channel(event.channel_id)
        if isinstance(event, discord.RawMessageDeleteEvent):
            ids: Collection[int] = (event.message_id,)
        else:
            ids = event.message_ids
        return await self._inbound.deletions(channel, event.channel_id, event.guild_id, ids)

    async def _fetch(self, channel_id: int) -> Place | None:
        """Ask Discord what an uncached guild channel is (a thread's key needs its parent)."""
        client = self._client
        if client is None:
            return None
        try:
            channel = await client.fetch_channel(channel_id)
        except (discord.HTTPException, *_NETWORK_ERRORS) as exc:
            log.warning("could not look up Discord channel %d: %s", channel_id, exc)
            return None
        return known_place(channel)

    async def _fetch_message(self, channel_id: int, message_id: int) -> discord.Message | None:
        """A replied-to message Discord did not include; None when it cannot be read now."""
        client = self._client
        if client is None:
            return None
        try:
            async with asyncio.timeout(REFERENCE_TIMEOUT):
                channel = client.get_partial_messageable(channel_id)
                return await channel.fetch_message(message_id)
        except (discord.HTTPException, *_NETWORK_ERRORS) as exc:
            log.info("replied-to Discord message %d unavailable: %r", message_id, exc)
            return None

    async def _is_our_webhook(self, channel_id: int, webhook_id: int) -> bool:
        """Whether a replied-to webhook message is ours (False when that cannot be told now)."""
        assert self._voices is not None
        try:
            async with asyncio.timeout(REFERENCE_TIMEOUT):
                return await self._voices.is_ours(channel_id, webhook_id)
        except (TimeoutError, AdapterError) as exc:
            log.info("could not tell whose webhook %d is: %r", webhook_id, exc)
            return False

    # ------------------------------------------------------------------ outbound

    async def send(self, reply: Reply) -> None:
        """Post a reply in 2000-character chunks, pinging nobody, idempotent per outbox row;
        a scene's line as its persona where the channel's webhook can post it."""
        if interaction_id(reply.reply_to_platform_message_id) is not None:
            # An answer to an application command: only through the interaction, never in
            # the channel (it may be someone's /memory): adapters/discord/interactions.py.
            await self._interactions.answer(reply)
            return
        if reply.attachment is not None:
            await self._send_file(reply)
            return
        if reply.voice_message is not None and reply.voice is None and reply.replaces is None:
            await self._send_spoken(reply)
            return
        voice, line = reply.voice, reply.line
        # A line replacing a streamed preview keeps the bot's own account: the preview is the
        # bot's message (scene lines are not streamed, so this is a fallback, not a path).
        if self._voices is not None and voice and line is not None and reply.replaces is None:
            outcome = await self._send_voiced(reply, voice, line)
            if outcome == "posted":
                return
            if outcome == "denied":  # first found out now: said once per channel and process
                await self._tell_no_webhooks(reply.conversation)
        await self._send_text(reply)

    async def _send_voiced(self, reply: Reply, voice: Voice, line: str) -> Outcome:
        """A scene's line through the webhook; else ``header``/``denied``: nothing was posted
        and the caller posts ``reply.text``. Chunks leave room for the header, so a webhook
        lost in the middle of a long line has its remaining chunks posted under it here."""
        assert self._voices is not None
        conversation = reply.conversation
        if _channel_id(conversation) in self._dm_channels:
            return "header"  # DMs have no webhooks
        header = voiced("", voice)
        chunks = split_text(line, MESSAGE_LIMIT - len(header))
        thread = int(conversation.thread_id) if conversation.thread_id else None
        where = Line(int(conversation.chat_id), thread, voice, chunks, reply.outbox_id)
        posted = await self._voices.post(where)
        if posted.outcome == "posted" or posted.sent == 0:
            return posted.outcome
        client = await self._logged_in_client()
        channel = client.get_partial_messageable(_channel_id(conversation))
        for index in range(posted.sent, len(chunks)):
            nonce = nonce_for(reply.outbox_id, index)
            await self._post(channel, header + chunks[index], nonce=nonce, reference=None)
        return "posted"

    async def _tell_no_webhooks(self, conversation: ConversationKey) -> None:
        """Tell the channel (a thread: that thread) why names are shown in bold; a failure
        is logged and never stops the line."""
        client = await self._logged_in_client()
        channel = client.get_partial_messageable(_channel_id(conversation))
        try:
            await self._post(channel, NO_WEBHOOKS_NOTICE, nonce=None, reference=None)
        except AdapterError as exc:
            log.warning("could not tell %s about Manage Webhooks: %s", conversation, exc)

    async def _send_text(self, reply: Reply) -> None:
        """``reply.text`` on the bot's own account, its first chunk quoting the message."""
        client = await self._logged_in_client()
        channel_id = _channel_id(reply.conversation)
        channel = client.get_partial_messageable(channel_id)
        reference = self._reference(reply.reply_to_platform_message_id, channel_id)
        replaces = reply.replaces if reply.replaces and reply.replaces.isdigit() else None
        stale: int | None = None  # a preview that could not become the reply: deleted after
        for index, chunk in enumerate(_chunks(reply)):
            if index == 0 and replaces is not None:
                outcome = await self._replace(channel, int(replaces), chunk)
                if outcome == "edited":
                    continue
                if outcome == "stale":
                    stale = int(replaces)
            await self._post(
                channel,
                chunk,
                nonce=nonce_for(reply.outbox_id, index),
                reference=reference if index == 0 else None,
            )
        if stale is not None:
            await delete_message(self._logged_in_client, channel_id, stale)

    async def _replace(
        self, channel: discord.PartialMessageable, message_id: int, text: str
    ) -> Literal["edited", "gone", "stale"]:
        """Edit a streamed preview into a reply's first chunk. ``gone``: it was deleted
        meanwhile (or is no message the bot may edit); ``stale``: Discord allows no more edits
        of old messages for now (error 30046, e.g. a reply recovered long after a crash).
        Either way the chunk is posted instead, and that post decides whether the channel
        refuses the bot; a stale preview is deleted after, so no half reply stays."""
        message = channel.get_partial_message(message_id)
        try:
            await message.edit(content=text, allowed_mentions=discord.AllowedMentions.none())
        except discord.HTTPException as exc:
            gone = isinstance(exc, discord.Forbidden) or (
                isinstance(exc, discord.NotFound) and exc.code != UNKNOWN_CHANNEL
            )
            if gone:
                log.info(
                    "preview %d in channel %d cannot become the reply: %s",
                    message_id,
                    channel.id,
                    exc,
                )
                return "gone"
            if exc.code == OLD_MESSAGE_EDITS:
                log.info("preview %d in channel %d cannot be edited now", message_id, channel.id)
                return "stale"
            raise _send_error(channel, exc) from exc
        except _NETWORK_ERRORS as exc:
            raise AdapterError(f"Discord send to channel {channel.id} failed: {exc!r}") from exc
        return "edited"

    async def _send_file(self, reply: Reply) -> None:
        """One message with the attachment as a file and the text (cut to fit) as content."""
        assert reply.attachment is not None
        client = await self._logged_in_client()
        channel = client.get_partial_messageable(_channel_id(reply.conversation))
        upload = discord.File(io.BytesIO(reply.attachment.data), filename=reply.attachment.filename)
        text = reply.text[:MESSAGE_LIMIT]
        await self._post(
            channel, text, nonce=nonce_for(reply.outbox_id, 0), reference=None, file=upload
        )

    def sends_voice(self, conversation: ConversationKey) -> bool:
        """Every channel takes a spoken reply as an audio file (bot.core.speech.VoiceOutlet)."""
        return True

    def recording(
        self, conversation: ConversationKey
    ) -> contextlib.AbstractAsyncContextManager[None]:
        """Discord has no "recording" indicator: the typing one while a voice is made."""
        return self.typing(conversation)

    async def _send_spoken(self, reply: Reply) -> None:
        """A spoken reply (docs/voices.md): the audio attached to its first chunk (discord.py
        sends no voice-message flag, so it is an ``.ogg`` file the client plays inline), the
        same nonces as text; a channel that refuses files (no Attach Files permission:
        nothing was posted) gets the text instead."""
        voice = reply.voice_message
        assert voice is not None
        client = await self._logged_in_client()
        channel_id = _channel_id(reply.conversation)
        channel = client.get_partial_messageable(channel_id)
        reference = self._reference(reply.reply_to_platform_message_id, channel_id)
        chunks = split_text(reply.text, MESSAGE_LIMIT) if voice.with_text else [""]
        extension = "mp3" if voice.media_type == "audio/mpeg" else "ogg"
        upload = discord.File(io.BytesIO(voice.audio), filename=f"voice.{extension}")
        try:
            await self._post(
                channel,
                chunks[0],
                nonce=nonce_for(reply.outbox_id, 0),
                reference=reference,
                file=upload,
            )
        except AdapterError as exc:
            # Refused, so nothing was posted: no Attach Files permission (403), a file over
            # the upload limit (413) or one Discord will not take (400). The text goes
            # instead; nothing here may lose a reply (docs/voices.md). Anything else (a
            # network fault, a 5xx) is the send's failure, retried as any send is.
            cause = exc.__cause__
            refused = isinstance(exc, DeliveryRefused) or (
                isinstance(cause, discord.HTTPException) and 400 <= cause.status < 500
            )
            if not refused:
                raise
            log.warning("channel %d refused the voice file (%s); sending the text", channel_id, exc)
            await self._send_text(reply)
            return
        for index in range(1, len(chunks)):
            nonce = nonce_for(reply.outbox_id, index)
            await self._post(channel, chunks[index], nonce=nonce, reference=None)

    async def private_conversation(
        self, conversation: ConversationKey, user_id: str
    ) -> ConversationKey:
        """Open (or find) the DM channel with a user; DeliveryRefused if Discord will not."""
        client = await self._logged_in_client()
        try:
            user = client.get_user(int(user_id)) or await client.fetch_user(int(user_id))
            channel = await user.create_dm()
        except (discord.Forbidden, discord.NotFound) as exc:
            raise DeliveryRefused(f"Discord will not open a DM with user {user_id}: {exc}") from exc
        except (discord.HTTPException, *_NETWORK_ERRORS) as exc:
            raise AdapterError(f"Discord DM with user {user_id} failed: {exc}") from exc
        self._dm_channels.add(channel.id)
        return ConversationKey("discord", str(channel.id), None, conversation.bot)

    def _reference(self, target: str | None, channel_id: int) -> discord.MessageReference | None:
        """Quote the triggering message in guilds (never in DMs); a deleted one is no error."""
        if target is None or channel_id in self._dm_channels:
            return None
        return discord.MessageReference(
            message_id=int(target), channel_id=channel_id, fail_if_not_exists=False
        )

    async def _post(
        self,
        channel: discord.PartialMessageable,
        text: str,
        *,
        nonce: str | None,
        reference: discord.MessageReference | None,
        file: discord.File | None = None,
    ) -> None:
        """One message; Discord errors translated once, here (429s are waited by discord.py)."""
        options: dict[str, Any] = {"allowed_mentions": discord.AllowedMentions.none()}
        if file is not None:
            options["file"] = file
        if nonce is not None:
            options["nonce"] = nonce  # discord.py sends enforce_nonce with every nonce
        if reference is not None:
            options["reference"] = reference
            options["mention_author"] = False
        try:
            await channel.send(text, **options)
        except discord.HTTPException as exc:
            raise _send_error(channel, exc) from exc
        except _NETWORK_ERRORS as exc:
            raise AdapterError(f"Discord send to channel {channel.id} failed: {exc!r}") from exc

    # ------------------------------------------------------------------ streaming

    def _open_preview(
        self,
        conversation: ConversationKey,
        settings: StreamSettings,
        reply_to: str | None,
        draft_id: int | None,
    ) -> Preview | None:
        """A message edited in place while the reply is written (``edit`` mode; Discord has no
        drafts, so any other mode shows the typing indicator only). It quotes ``reply_to`` in
        guilds, as the reply would."""
        if settings.mode != "edit":
            return None
        channel_id = _channel_id(conversation)
        return EditPreview(
            client=self._logged_in_client,
            channel_id=channel_id,
            reference=self._reference(reply_to, channel_id),
            timeout=self._preview_timeout,
        )

    async def retract(self, conversation: ConversationKey, message_id: str) -> bool:
        """Delete a preview a cut or crashed generation left behind; never raises (failures
        logged). False: worth trying again later."""
        if not message_id.isdigit():
            log.warning("not a Discord message id: %r", message_id)
            return True
        return await delete_message(
            self._logged_in_client, _channel_id(conversation), int(message_id)
        )

    @contextlib.asynccontextmanager
    async def typing(self, conversation: ConversationKey) -> AsyncIterator[None]:
        """Show "typing" in the conversation's channel for the body; stopped on every path."""
        typing = self._keep_typing(_channel_id(conversation))
        async with running(typing, name=f"discord typing {conversation}"):
            yield

    async def _keep_typing(self, channel_id: int) -> None:
        """Trigger typing every few seconds; a failure only ends the indicator, never the turn."""
        try:
            client = await self._logged_in_client()
            channel = client.get_partial_messageable(channel_id)
            while True:
                await channel.typing()
                await asyncio.sleep(TYPING_INTERVAL)
        except (AdapterError, discord.HTTPException, *_NETWORK_ERRORS) as exc:
            log.debug("typing indicator in channel %d stopped: %s", channel_id, exc)


def _send_error(channel: discord.PartialMessageable, exc: discord.HTTPException) -> AdapterError:
    """A send's or an edit's HTTP error, translated (DeliveryRefused when it will never work)."""
    if isinstance(exc, discord.Forbidden):
        return DeliveryRefused(
            f"Discord refuses messages to channel {channel.id}: {exc.text or exc.status}"
        )
    if isinstance(exc, discord.NotFound) and exc.code == UNKNOWN_CHANNEL:
        return DeliveryRefused(f"Discord channel {channel.id} no longer exists")
    return AdapterError(f"Discord send to channel {channel.id} failed: {exc}")


def _channel_id(conversation: ConversationKey) -> int:
    """The channel a conversation posts in: its thread, else its chat."""
    return int(conversation.thread_id or conversation.chat_id)


def create_adapter(
    entry: BotSettings, persona: PersonaSettings, secrets: Secrets
) -> DiscordAdapter:
    """Build the adapter of one ``[[bots]] platform = "discord"`` entry (reads its token)."""
    if not isinstance(entry, DiscordBotSettings):
        raise ConfigError([f"bots.{entry.key}: not a Discord bot entry"])
    where = f"bots.{entry.key}"
    token = required_secret(secrets, entry.token_variable, f"token of bot {entry.key!r}")
    # shard_id / shard_count are checked with the settings (DiscordBotSettings).
    endpoints = endpoints_for(entry.api_base, entry.gateway_url, where=where)
    SharedEndpoints.acquire(endpoints, where=where)
    log.debug("bot %s (persona %s) uses %s", entry.key, persona.id, endpoints.api_base)
    return DiscordAdapter(
        bot_key=entry.key,
        token=token,
        token_variable=entry.token_variable,
        group_trigger=entry.group_trigger,
        guilds=entry.guilds,
        shard_id=entry.shard_id,
        shard_count=entry.shard_count,
        webhook_voices=entry.scene is not None and entry.scene.voices == "auto",
        app_commands=entry.app_commands.sync,
        command_guilds=entry.command_guilds,
    )


def _chunks(reply: Reply) -> list[str]:
    """The reply's messages; a scene's line (not replacing a preview) has every part under
    its persona's bold header, so a reply to any part is for that persona."""
    if reply.voice is None or reply.line is None or reply.replaces is not None:
        return split_text(reply.text, MESSAGE_LIMIT)
    header = voiced("", reply.voice)
    return [header + part for part in split_text(reply.line, MESSAGE_LIMIT - len(header))]
