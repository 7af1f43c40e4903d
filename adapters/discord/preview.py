"""Replies shown while they are written: a message posted once, then edited in place
(``stream = "edit"``, docs/architecture.md#streaming). Discord has no drafts.

Rate limits. discord.py waits on its per-route buckets by itself (it reads the
``X-RateLimit-*`` headers): a request that finds its bucket empty waits until the bucket
resets, and a request that takes a bucket's last request sleeps until the reset before it
returns. discord.py 2 has no per-request way to refuse such waits. Its one knob, the client's
``max_ratelimit_timeout``, is at least 30 s and applies to every request of the client, so final
sends would raise ``RateLimited`` instead of waiting: it is not used. Instead, before each
preview call :func:`held_back` reads discord.py's own bucket for the call's route, and when the
call would wait for the bucket or take its last request, it does not go ahead:
``PreviewThrottled`` with the time until the bucket resets (the relay skips updates until
then). So a preview never waits on a bucket discord.py knows of, and it leaves the last request
of every window to the final message (the edit of ``Reply.replaces`` is the same route).
What cannot be foreseen (a 429 because another process of the same bot used the bucket, a
global rate limit, discord.py's retries after a 5xx) is bounded by a timeout on the call
(``PREVIEW_TIMEOUT``), then ``PreviewThrottled`` too. A post cut off that way may still arrive:
the post carries one nonce per preview, so trying it again returns the message already posted.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

import aiohttp
import discord
from discord.http import HTTPClient, Route

from adapters.streaming import PostedPreview
from bot.core.errors import AdapterError, PreviewThrottled, PreviewUnavailable

log = logging.getLogger("personabot.discord")

#: Discord counts message length in Unicode code points (its API is Python), as ``len`` does.
MESSAGE_LIMIT: Final = 2000
#: What a preview of a text too long for one message starts with (its tail follows).
ELLIPSIS: Final = "…"
#: The longest a preview call may take, whatever discord.py waits for, in seconds (about 2 s
#: of rate-limit waits Discord did not announce, and the request itself).
PREVIEW_TIMEOUT: Final = 3.0
NETWORK_ERRORS: Final = (aiohttp.ClientError, OSError, asyncio.TimeoutError)

ClientSource = Callable[[], Awaitable[discord.Client]]
T = TypeVar("T")


def preview_text(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """``text`` as one message shows it: whole, or its tail after "…" when too long."""
    if len(text) <= limit:
        return text
    return ELLIPSIS + text[len(text) - limit + len(ELLIPSIS) :]


def held_back(http: HTTPClient, route: Route) -> float:
    """Seconds until the bucket of ``route`` resets, when a request on it now would wait for
    the reset or take the bucket's last request; 0 when it can go at once without either.

    This reads discord.py's own bucket state (``HTTPClient._bucket_hashes`` and ``_buckets``,
    the keys ``HTTPClient.request`` uses): no public API tells it. Should a discord.py release
    rename them, this answers 0 and the call timeout still bounds every preview call.
    """
    try:
        bucket_hash = http._bucket_hashes.get(route.key, route.key)
        bucket = http._buckets.get(f"{bucket_hash}:{route.major_parameters}")
        if bucket is None or bucket.expires is None:
            return 0.0  # no headers seen yet: nothing known to wait for
        left = bucket.expires - asyncio.get_running_loop().time()
        if left <= 0 or bucket.remaining > 1:
            return 0.0  # reset already (discord.py refills it), or requests to spare
        return left  # the last request (or none) is left: it is the final message's
    except AttributeError:
        return 0.0


async def delete_message(client: ClientSource, channel_id: int, message_id: int) -> bool:
    """Delete one of the bot's messages (a preview); a failure is logged, never raised.
    False: it may still be there and a later try may work (network, 5xx, not logged in);
    True: it is gone, or Discord refused for good (no permission, an unknown channel)."""
    try:
        found = await client()
        message = found.get_partial_messageable(channel_id).get_partial_message(message_id)
        await message.delete()
    except discord.NotFound:
        log.info("preview message %d in channel %d was already deleted", message_id, channel_id)
    except discord.HTTPException as exc:
        log.warning(
            "could not delete preview message %d in channel %d: %r", message_id, channel_id, exc
        )
        return exc.status < 500 and exc.status != 429
    except (AdapterError, discord.DiscordException, *NETWORK_ERRORS) as exc:
        log.warning(
            "could not delete preview message %d in channel %d: %r", message_id, channel_id, exc
        )
        return False
    return True


class EditPreview(PostedPreview):
    """One generation's reply as a message in a channel, posted by the first ``show`` and
    edited by the later ones; nothing it shows notifies anyone (``AllowedMentions.none()`` on
    the post and on every edit). Only the relay calls it, one call at a time."""

    def __init__(
        self,
        *,
        client: ClientSource,
        channel_id: int,
        reference: discord.MessageReference | None,
        timeout: float = PREVIEW_TIMEOUT,
    ) -> None:
        self._client = client
        self._channel_id = channel_id
        self._reference = reference
        self._timeout = timeout
        self._message_id: int | None = None
        self._shown: str | None = None
        # The text of a post that went out but whose answer never came (it may have arrived):
        # None once a post was answered.
        self._unanswered: str | None = None
        # Within Discord's 25 characters; kept until the post is known to have arrived.
        self._nonce = f"preview-{secrets.token_hex(8)}"

    async def show(self, text: str) -> None:
        """Post or edit the message to show ``text`` (its tail when too long); no call when
        that is what it shows already, or when there is nothing to show."""
        shown = preview_text(text)
        if shown == self._shown or not shown.strip():
            return
        client = await self._client()
        channel = client.get_partial_messageable(self._channel_id)
        posted = self._message_id
        if posted is None:
            route = Route("POST", "/channels/{channel_id}/messages", channel_id=self._channel_id)
            message = await self._call(client, route, lambda: self._post(channel, shown))
            self._message_id, self._shown = message.id, message.content
            if message.content.strip() == shown.strip():  # Discord trims what it stores
                self._shown = shown
                return
            # The nonce handed back a post of this preview that arrived after its call gave
            # up, with the older text: bring it up to date.
            posted = message.id
        route = Route(
            "PATCH",
            "/channels/{channel_id}/messages/{message_id}",
            channel_id=self._channel_id,
            message_id=posted,
        )
        edited = channel.get_partial_message(posted)
        await self._call(
            client,
            route,
            lambda: edited.edit(content=shown, allowed_mentions=discord.AllowedMentions.none()),
        )
        self._shown = shown

    async def discard(self) -> None:
        """Delete the posted message, if any, also one whose post gave up waiting for its
        answer (found by its nonce); never raises (a failure is logged)."""
        if self._message_id is None and self._unanswered is not None:
            self._message_id = await self._find_unanswered(self._unanswered)
        if self._message_id is not None:
            await delete_message(self._client, self._channel_id, self._message_id)

    async def _find_unanswered(self, text: str) -> int | None:
        """The message of a post cut off before its answer: it may have arrived, and posting
        again with the same nonce hands it back (or posts it now, to be deleted right after),
        so no half reply is left behind unseen."""
        try:
            client = await self._client()
            channel = client.get_partial_messageable(self._channel_id)
            async with asyncio.timeout(self._timeout):
                message = await self._post(channel, text)
        except (AdapterError, discord.DiscordException, *NETWORK_ERRORS) as exc:
            log.warning(
                "could not look up a preview posted in channel %d: %r", self._channel_id, exc
            )
            return None
        return message.id

    async def _post(self, channel: discord.PartialMessageable, text: str) -> discord.Message:
        self._unanswered = text  # from here on the post may arrive, answered or not
        message = await self._send(channel, text)
        self._unanswered = None
        return message

    async def _send(self, channel: discord.PartialMessageable, text: str) -> discord.Message:
        if self._reference is None:
            return await channel.send(
                text, nonce=self._nonce, allowed_mentions=discord.AllowedMentions.none()
            )
        return await channel.send(
            text,
            nonce=self._nonce,
            allowed_mentions=discord.AllowedMentions.none(),
            reference=self._reference,
            mention_author=False,
        )

    async def _call(
        self, client: discord.Client, route: Route, call: Callable[[], Awaitable[T]]
    ) -> T:
        """One preview request: held back, bounded in time, its errors translated once."""
        where = f"channel {self._channel_id}"
        left = held_back(client.http, route)
        if left > 0:
            raise PreviewThrottled(
                f"Discord rate limit on {route.method} in {where} for {left:.1f}s", retry_after=left
            )
        timeout = asyncio.timeout(self._timeout)
        try:
            async with timeout:
                return await call()
        except TimeoutError as exc:
            if not timeout.expired():
                raise AdapterError(f"Discord preview in {where} failed: {exc!r}") from exc
            raise PreviewThrottled(
                f"Discord took over {self._timeout:.1f}s for a preview in {where}",
                retry_after=self._timeout,
            ) from exc
        except discord.RateLimited as exc:
            raise PreviewThrottled(
                f"Discord rate limit in {where}", retry_after=exc.retry_after
            ) from exc
        except (discord.Forbidden, discord.NotFound) as exc:
            raise PreviewUnavailable(
                f"Discord refuses the preview in {where}: {exc.text or exc.status}"
            ) from exc
        except discord.HTTPException as exc:
            raise AdapterError(f"Discord preview in {where} failed: {exc}") from exc
        except NETWORK_ERRORS as exc:
            raise AdapterError(f"Discord preview in {where} failed: {exc!r}") from exc
