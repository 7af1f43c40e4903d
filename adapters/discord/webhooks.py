"""A scene's lines posted as their personas: one webhook per channel, owned by the bot.

docs/discord.md#webhooks and docs/scenes.md#platforms. A webhook message may carry any
``username`` and ``avatar_url``, so one webhook of a channel speaks for the whole cast.

Invariants:
- the webhook of a channel is one this bot made (its ``user`` is the bot), found again after a
  restart by listing the channel's webhooks; one someone else made is never used (whoever
  holds it could read or repoint what we post);
- a thread's lines go through its parent channel's webhook with ``thread=`` (threads have no
  webhooks of their own);
- a channel's decision (its webhook, or the bold name header on the bot's own account) is taken
  once per process under that channel's lock: two lines racing into a fresh channel (the
  channel and one of its threads share the webhook) must not both find none and create two;
- a 403 on listing or creating means no Manage Webhooks: the channel falls back to the header
  for the rest of the process and ``post`` says ``denied`` exactly once, so the adapter tells
  the channel once; anything else that fails (network, 5xx) decides nothing and is raised, so
  the outbox retries the line and the next attempt asks again;
- a webhook deleted behind our back (404, Unknown Webhook, on execute) is recreated once per
  channel and process; deleted again, the channel falls back to the header;
- Discord's execute-webhook takes no nonce, so a re-sent outbox row is made idempotent here,
  within the process only: the chunks of a row already posted are remembered and skipped. A
  crash between posting and confirming a row may still show a line twice after the restart.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict, defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final, Literal

import discord

from adapters.discord.preview import NETWORK_ERRORS
from bot.core.errors import AdapterError, DeliveryRefused
from bot.core.events import Voice

log = logging.getLogger("personabot.discord")

#: The name of the bot's webhook in each channel (Discord refuses names with "discord").
WEBHOOK_NAME: Final = "personabot"
#: Discord error codes: a webhook that does not exist, a channel that does not, and a channel
#: that has all the webhooks it may have (15).
UNKNOWN_WEBHOOK: Final = 10015
UNKNOWN_CHANNEL: Final = 10003
MAX_WEBHOOKS: Final = 30007
#: Channels whose webhooks can post (threads use their parent's).
_HOOKED: Final = (
    discord.TextChannel,
    discord.VoiceChannel,
    discord.StageChannel,
    discord.ForumChannel,
)
#: Rows whose posted chunks are remembered (a retry comes soon after the failed attempt).
_REMEMBERED_ROWS: Final = 1024

Outcome = Literal["posted", "header", "denied"]
HookedChannel = (
    discord.TextChannel | discord.VoiceChannel | discord.StageChannel | discord.ForumChannel
)


@dataclass(frozen=True, slots=True)
class Line:
    """A scene's line to post as ``voice``: its chunks, where, and its outbox row."""

    channel_id: int  # the channel whose webhook posts it (a thread's parent)
    thread_id: int | None
    voice: Voice
    chunks: Sequence[str]
    outbox_id: int | None


@dataclass(slots=True)
class Posted:
    """What ``post`` did: ``sent`` chunks went through the webhook; the rest (if any) are for
    the adapter to post under the name header, and ``outcome`` says why."""

    outcome: Outcome
    sent: int = 0


class WebhookVoices:
    """Posts scene lines through the bot's webhook of each channel (see the module docstring).

    ``client`` gives the logged-in discord.py client (the adapter's).
    """

    def __init__(self, *, client: Callable[[], Awaitable[discord.Client]]) -> None:
        self._client = client
        # channel id -> its webhook, or None: the header. Absent: not decided yet.
        self._decided: dict[int, discord.Webhook | None] = {}
        self._locks: defaultdict[int, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._recreated: set[int] = set()
        # Ids of the webhooks this bot owns (seen listed or created), and the channels listed.
        self._ours: set[int] = set()
        self._listed: set[int] = set()
        self._posted: OrderedDict[int, set[int]] = OrderedDict()

    async def post(self, line: Line) -> Posted:
        """Post ``line``'s chunks as its voice; stop at the first the webhook cannot take."""
        done = self._posted.setdefault(line.outbox_id, set()) if line.outbox_id else set()
        sent = 0
        for index, chunk in enumerate(line.chunks):
            if index not in done:
                outcome = await self._post_chunk(line, chunk)
                if outcome != "posted":
                    return Posted(outcome, sent)
                done.add(index)
                self._forget_old_rows()
            sent += 1
        return Posted("posted", sent)

    async def _post_chunk(self, line: Line, chunk: str) -> Outcome:
        """One chunk through the channel's webhook; a deleted webhook is recreated once."""
        for _attempt in range(2):
            hook, outcome = await self._webhook(line.channel_id)
            if hook is None:
                return outcome
            try:
                await self._execute(hook, line, chunk)
                return "posted"
            except discord.NotFound as exc:
                if exc.code != UNKNOWN_WEBHOOK:
                    raise _translated(line, exc) from exc
                await self._lost(line.channel_id, hook)
            except discord.HTTPException as exc:
                raise _translated(line, exc) from exc
            except NETWORK_ERRORS as exc:
                raise AdapterError(
                    f"Discord webhook post to {line.channel_id} failed: {exc!r}"
                ) from exc
        return "header"

    @staticmethod
    async def _execute(hook: discord.Webhook, line: Line, chunk: str) -> None:
        # Webhooks cannot reply to a message: the line follows the message it answers, and
        # the first chunk quotes nothing. wait=True: Discord confirms the message was created
        # (without it an execute that fails after the 204 is silent).
        thread = (
            discord.Object(id=line.thread_id)
            if line.thread_id is not None
            else discord.utils.MISSING
        )
        await hook.send(
            chunk,
            username=line.voice.name,
            avatar_url=line.voice.avatar_url or discord.utils.MISSING,
            allowed_mentions=discord.AllowedMentions.none(),
            thread=thread,
            wait=True,
        )

    async def _lost(self, channel_id: int, hook: discord.Webhook) -> None:
        """The webhook was deleted: forget it; recreate it once, then use the header."""
        async with self._locks[channel_id]:
            if self._decided.get(channel_id) is not hook:
                return  # another line found out first and decided again
            self._ours.discard(hook.id)
            if channel_id in self._recreated:
                log.warning(
                    "the webhook of Discord channel %d was deleted again; scene lines there go "
                    "out under bold name headers until the next start",
                    channel_id,
                )
                self._decided[channel_id] = None
                return
            self._recreated.add(channel_id)
            log.info("the webhook of Discord channel %d was deleted; making a new one", channel_id)
            del self._decided[channel_id]

    async def _webhook(self, channel_id: int) -> tuple[discord.Webhook | None, Outcome]:
        """The channel's webhook (None: post under the header, and why)."""
        if channel_id in self._decided:
            return self._decided[channel_id], "header"
        async with self._locks[channel_id]:
            if channel_id in self._decided:  # decided while we waited for the lock
                return self._decided[channel_id], "header"
            try:
                hook = await self._find_or_create(channel_id)
            except discord.Forbidden as exc:
                log.warning(
                    "no Manage Webhooks permission in Discord channel %d (%s): scene lines "
                    "there go out under bold name headers",
                    channel_id,
                    exc.text or exc.status,
                )
                self._decided[channel_id] = None
                return None, "denied"
            except discord.HTTPException as exc:
                if exc.code not in (MAX_WEBHOOKS, UNKNOWN_CHANNEL):
                    raise AdapterError(f"Discord webhooks of channel {channel_id}: {exc}") from exc
                log.warning("no webhook in Discord channel %d: %s", channel_id, exc)
                hook = None
            except NETWORK_ERRORS as exc:
                raise AdapterError(f"Discord webhooks of channel {channel_id}: {exc!r}") from exc
            self._decided[channel_id] = hook
            return hook, "header"

    async def _find_or_create(self, channel_id: int) -> discord.Webhook | None:
        """The bot's webhook of the channel, made when there is none (None: no webhooks here,
        e.g. a DM)."""
        channel = await self._channel(channel_id)
        if channel is None:
            return None
        hook = await self._find(channel)
        if hook is None:
            hook = await channel.create_webhook(
                name=WEBHOOK_NAME, reason="scene personas post under their own names"
            )
            self._ours.add(hook.id)
            log.info("made webhook %d in Discord channel %d", hook.id, channel_id)
        return hook

    async def _channel(self, channel_id: int) -> HookedChannel | None:
        client = await self._client()
        channel = client.get_channel(channel_id) or await client.fetch_channel(channel_id)
        return channel if isinstance(channel, _HOOKED) else None

    async def _find(self, channel: HookedChannel) -> discord.Webhook | None:
        """The oldest usable webhook of the channel that this bot made (its ids noted)."""
        client = await self._client()
        me = client.user
        hooks = await channel.webhooks()
        self._listed.add(channel.id)
        mine = sorted(
            (
                h
                for h in hooks
                if me is not None
                and h.user is not None
                and h.user.id == me.id
                and h.type is discord.WebhookType.incoming
                and h.token is not None
            ),
            key=lambda h: h.id,
        )
        self._ours.update(h.id for h in mine)
        return mine[0] if mine else None

    async def is_ours(self, channel_id: int, webhook_id: int) -> bool:
        """Whether ``webhook_id`` is this bot's webhook of ``channel_id`` (a thread's parent).

        A webhook not seen yet in this process is looked up by listing the channel once
        (a reply to a line posted before a restart); a failed listing answers False.
        """
        if webhook_id in self._ours:
            return True
        if channel_id in self._listed:
            return False
        async with self._locks[channel_id]:
            if channel_id not in self._listed:
                try:
                    channel = await self._channel(channel_id)
                    if channel is not None:
                        await self._find(channel)
                except (discord.HTTPException, *NETWORK_ERRORS) as exc:
                    log.info("webhooks of Discord channel %d unreadable: %s", channel_id, exc)
                self._listed.add(channel_id)
        return webhook_id in self._ours

    def _forget_old_rows(self) -> None:
        while len(self._posted) > _REMEMBERED_ROWS:
            self._posted.popitem(last=False)


def _translated(line: Line, exc: discord.HTTPException) -> AdapterError:
    """A webhook post's HTTP error (DeliveryRefused when it will never work)."""
    where = line.thread_id or line.channel_id
    if isinstance(exc, discord.Forbidden):
        return DeliveryRefused(
            f"Discord refuses webhook posts to {where}: {exc.text or exc.status}"
        )
    if isinstance(exc, discord.NotFound) and exc.code == UNKNOWN_CHANNEL:
        return DeliveryRefused(f"Discord channel {where} no longer exists")
    return AdapterError(f"Discord webhook post to {where} failed: {exc}")
