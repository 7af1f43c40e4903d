"""Data exports (``/export``): one JSON file per request, built and sent off the inbound path.

The command only checks the person's rate limit and starts a task that :class:`Exports` owns,
so the inbound handler returns at once and an export never delays another chat's turn.

Invariants:
- the rate limit is a lease named after the person (``export:<platform>:<user>``), so it holds
  across processes: taken for ``claim_seconds`` while the export is built and sent, extended
  to the full interval once the file was delivered, released when nothing was delivered (the
  person may try again at once; a process that dies mid-export blocks them for the claim only);
- in a group nothing of the export is posted: the file goes to the person's private chat and
  the group hears only whether that worked;
- the file goes out through Delivery without an outbox row (a copy of everything about the
  person must not sit in the store); a crash mid-export loses it, and the claim above lets
  the person ask again. The answers in the chat are outbox rows like every command answer.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

from bot.core.clock import Clock
from bot.core.errors import AdapterError
from bot.core.events import Attachment, ConversationKey, Inbound, Lease, UserKey
from bot.core.i18n import N_, Texts
from bot.core.ports import Outlet
from bot.runtime.delivery import Delivery
from bot.runtime.languages import Languages
from bot.store.contracts import LeaseStore

log = logging.getLogger("personabot.exports")

# Marked here, translated where sent, in the asker's language (docs/i18n.md).
CAPTION: Final = N_("Your data export: everything I store about you, as JSON.")
SENT_PRIVATELY: Final = N_("I sent your data export to you in a private chat.")
#: Per platform: what the person must do before the bot may write to them privately.
PRIVATE_HINTS: Final = {
    "telegram": N_("open a private chat with me and press Start"),
    "discord": N_("allow direct messages from members of this server"),
}
FAILED: Final = N_("Sorry, I couldn't prepare your export just now. Please try again later.")

Builder = Callable[[UserKey, ConversationKey], Awaitable[str]]


@dataclass(frozen=True, slots=True)
class ExportPolicy:
    """How often a person may export (0: no limit) and how long a running export holds it."""

    every_seconds: float = 600.0
    claim_seconds: float = 120.0


class Exports:
    """Builds and sends exports in background tasks it owns; rate-limited per person."""

    def __init__(
        self,
        *,
        store: LeaseStore,
        clock: Clock,
        outlet_for: Callable[[str], Outlet | None],
        build: Builder,
        policy: ExportPolicy | None = None,
        holder: str | None = None,
        delivery: Delivery,
        languages: Languages | None = None,
    ) -> None:
        self._store = store
        self._languages = languages or Languages()
        self._clock = clock
        self._outlet_for = outlet_for
        self._delivery = delivery
        self._build = build
        self._policy = policy or ExportPolicy()
        self._holder = holder or f"export-{uuid.uuid4().hex[:12]}"
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    async def request(self, inbound: Inbound) -> str | None:
        """Start an export for the author; the text to answer now (a refusal), or None."""
        _ = self._languages.for_inbound(inbound)
        user = UserKey(inbound.conversation.platform, inbound.author_id)
        outlet = self._outlet_for(inbound.conversation.bot)
        if outlet is None or self._closed:
            return _(FAILED)
        lease = None
        if self._policy.every_seconds > 0:
            lease = await self._claim(user)
            if lease is None:
                return await self._refusal(user, _)
        task = asyncio.create_task(
            self._run(outlet, inbound, user, lease), name=f"export {user.platform}:{user.user_id}"
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return None

    def _lease_name(self, user: UserKey) -> str:
        return f"export:{user.platform}:{user.user_id}"

    async def _claim(self, user: UserKey) -> Lease | None:
        ttl = min(self._policy.claim_seconds, self._policy.every_seconds)
        return await self._store.acquire_lease(
            self._lease_name(user), self._holder, ttl, self._clock.now()
        )

    async def _refusal(self, user: UserKey, _: Texts) -> str:
        until = await self._store.lease_expires_at(self._lease_name(user))
        left = 0.0 if until is None else until - self._clock.now()
        minutes = max(1, math.ceil(left / 60))
        every = max(1, round(self._policy.every_seconds / 60))
        once = _.ngettext(
            "You can export your data once every {count} minute.",
            "You can export your data once every {count} minutes.",
            every,
        ).format(count=every)
        again = _.ngettext(
            "Please try again in {count} minute.", "Please try again in {count} minutes.", minutes
        ).format(count=minutes)
        return f"{once} {again}"

    async def _run(
        self, outlet: Outlet, inbound: Inbound, user: UserKey, lease: Lease | None
    ) -> None:
        """Build and send; settle the limit; only then tell a group where the file went (so
        a person who reads "try again" and does is never refused by a stale claim)."""
        delivered, answer = False, None
        try:
            delivered, answer = await self._deliver(outlet, inbound, user)
        finally:
            if lease is not None:
                await self._settle_limit(lease, delivered)
        if answer is not None:
            await self._tell(inbound, answer)

    async def _deliver(
        self, outlet: Outlet, inbound: Inbound, user: UserKey
    ) -> tuple[bool, str | None]:
        """Build the file and send it (privately); whether it was delivered, and what to say in
        the chat the command came from (never any data)."""
        _ = self._languages.for_inbound(inbound)
        conversation = inbound.conversation
        started = time.monotonic()
        try:
            target = conversation
            if not inbound.is_private:
                target = await outlet.private_conversation(conversation, user.user_id)
            body = await self._build(user, conversation)
            attachment = Attachment(_filename(user, self._clock.now()), body.encode("utf-8"))
            await self._delivery.send_file(target, _.finish(_(CAPTION)), attachment)
        except AdapterError as exc:
            log.warning("export for user %s not delivered: %s", user.user_id, exc)
            if inbound.is_private:
                return False, None  # the private chat itself refused: nowhere to say it
            hint = PRIVATE_HINTS.get(conversation.platform, N_("allow me to message you"))
            return False, _(
                "I couldn't send your data export to you privately. Please {hint}, "
                "then send /export again."
            ).format(hint=_(hint))
        except Exception:
            log.exception("export for user %s failed", user.user_id)
            return False, _(FAILED)
        log.info(
            "export for user %s sent (%d bytes, %.2fs)",
            user.user_id,
            len(attachment.data),
            time.monotonic() - started,
        )
        return True, None if inbound.is_private else _(SENT_PRIVATELY)

    async def _settle_limit(self, lease: Lease, delivered: bool) -> None:
        """Delivered: the person waits the full interval. Not delivered: they may retry now."""
        try:
            if delivered:
                await self._store.renew_lease(lease, self._policy.every_seconds, self._clock.now())
            else:
                await self._store.release_lease(lease)
        except Exception:
            log.exception("export rate limit of %s not updated", lease.name)

    async def _tell(self, inbound: Inbound, text: str) -> None:
        """A short answer in the chat the command came from (quoting it in groups), through
        the outbox like every command answer (a failed send is logged by Delivery)."""
        text = self._languages.for_inbound(inbound).finish(text)
        try:
            await self._delivery.send(
                inbound.conversation, text, kind="answer", reply_to=inbound.platform_message_id
            )
        except Exception:  # a background task: nobody else would see it
            log.exception("could not answer /export in %s", inbound.conversation)

    async def wait_idle(self) -> None:
        """Wait until no export is running (tests, benches)."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def aclose(self, grace: float = 5.0) -> None:
        """Take no more requests; let running exports finish for ``grace`` s, then cancel."""
        self._closed = True
        tasks = list(self._tasks)
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=grace)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)


def _filename(user: UserKey, now: float) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now))
    safe = "".join(c if c.isalnum() else "_" for c in user.user_id)[:40]
    return f"personabot-export-{user.platform}-{safe}-{stamp}.json"
