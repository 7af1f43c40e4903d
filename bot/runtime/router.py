"""Routes each inbound message: access check, plugin middleware, then commands at once and
everything else ingested."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextvars import ContextVar
from typing import Literal, Protocol

from bot.core.choices import PRESS_MEMORY, Answer, Choices, PressOutcome
from bot.core.clock import Clock
from bot.core.errors import SelfCancelled, StoreError
from bot.core.events import ConversationKey, Inbound, Lease, UserKey
from bot.core.i18n import N_, Texts
from bot.core.menu import CommandMenu, MenuEntry, NativeCommand, Suggestion
from bot.core.ports import Outlet
from bot.core.scenes import SceneRules, addressed
from bot.core.tasks import Background, cancelling
from bot.metrics import Metrics
from bot.queue import Ingestor
from bot.queue import lease as leases
from bot.runtime.access import AccessPolicy
from bot.runtime.commands import (
    PRIVATE_COMMANDS,
    PRIVATE_MENU,
    Commands,
    Refusal,
    parse_command,
)
from bot.runtime.delivery import Delivery, Kind
from bot.runtime.extensions import Command, Extensions, Middleware
from bot.runtime.native import native_command
from bot.runtime.streaming import StopSignals
from bot.store.contracts import CommandRecordStore, LeaseStore, OutboxStore
from memory.service import Memory

log = logging.getLogger("personabot.router")

DAY = 86400.0
#: How long a press's or command's claim holds unrenewed while its command runs: renewed
#: every third of it while the process lives, so a process that dies mid-command frees it
#: this soon, and the update redelivered after a restart runs (``Router._claim``).
CLAIM_SECONDS = 15.0
#: How long a command's claim (``Router._command``) is kept once it ran: the answer's outbox
#: row (``answered``) covers a later redelivery; this covers the moments around it.
COMMAND_MEMORY = 3600.0
# NUL (PostgreSQL text cannot hold it) and lone surrogates (no encoding can): a store refuses
# them every time, and an update that is never stored blocks every later one behind it.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


class RouterStore(OutboxStore, LeaseStore, CommandRecordStore, Protocol):
    """What the router asks the store itself: whether a command was answered already (and
    that it ran), the lease that tells a denied chat once a day, and the native commands a
    bot registered on its platform (docs/discord.md#sync)."""


#: The answer to a native command whose answer comes by itself (``/export``'s file): the
#: platform waits for one (docs/discord.md#7-commands).
ANSWERS_LATER = N_("On it: the answer comes in a separate message.")


@dataclasses.dataclass(slots=True)
class _Batch:
    """The messages routed inside ``Router.batch()`` and not stored yet (one adapter's)."""

    pending: list[Inbound] = dataclasses.field(default_factory=list)
    #: False once the batch ended: a message routed later (a middleware that calls
    #: ``call_next`` after it returned) is stored on its own, never into a stored batch.
    open: bool = True


# The batch of the adapter task routing now: a context variable, because one router serves
# every adapter of the process at once (and a middleware runs in a task of its own, which
# inherits the variable and so appends to the same batch).
_BATCH: ContextVar[_Batch | None] = ContextVar("personabot_router_batch", default=None)


class Router:
    """The InboundHandler every adapter of this process calls."""

    def __init__(
        self,
        *,
        ingestor: Ingestor,
        commands: Commands,
        outlets: Mapping[str, Outlet],
        store: RouterStore,
        clock: Clock,
        access: Mapping[str, AccessPolicy] | None = None,
        memory: Memory | None = None,
        metrics: Metrics | None = None,
        delivery: Delivery,
        extensions: Extensions = Extensions(),  # noqa: B008 - frozen, never mutated
        middleware_timeout: float = 10.0,
        stops: StopSignals | None = None,
        scenes: Mapping[str, SceneRules] | None = None,
        later: Background | None = None,
    ) -> None:
        # Work that outlives an event: a claim held by a run elsewhere (``_elsewhere``).
        self._later = later
        self._stops = stops
        # Bots whose personas speak together: naming one of them asks for a reply.
        self._scenes = dict(scenes or {})
        self._ingestor = ingestor
        self._commands = commands
        self._outlets = dict(outlets)
        # Every answer goes out as an outbox row, like replies (docs/architecture.md#delivery).
        self._delivery = delivery
        self._store = store
        self._clock = clock
        self._access = dict(access or {})
        self._memory = memory
        self._metrics = metrics or Metrics()
        self._extensions = extensions
        self._middleware: dict[str, tuple[Middleware, ...]] = {}
        self._decide_seconds = middleware_timeout

    @property
    def commands(self) -> tuple[tuple[str, str], ...]:
        """(name, description) of every built-in and global plugin chat command."""
        return tuple((spec.name, spec.description) for spec in self._commands.specs)

    def commands_for(self, bot: str) -> tuple[tuple[str, str], ...]:
        """(name, description) of every chat command of ``bot`` (for its platform menu)."""
        return tuple((spec.name, spec.description) for spec in self._commands.specs_for(bot))

    @property
    def admin_commands(self) -> tuple[str, ...]:
        """Names of the admin-only commands of any bot here (in no menu)."""
        return self._commands.admin_names()

    def admin_commands_for(self, bot: str) -> tuple[str, ...]:
        """Names of ``bot``'s admin-only commands (in no menu)."""
        return self._commands.admin_names(bot)

    def menu_for(self, bot: str) -> CommandMenu:
        """``bot``'s command menu by scope (docs/telegram.md#menus), and in each other
        language its personas use (docs/i18n.md)."""
        entries = [
            MenuEntry(s.name, s.description, private=s.name in PRIVATE_MENU)
            for s in self._commands.specs_for(bot)
        ]
        entries += [
            MenuEntry(s.name, s.description, admin=True) for s in self._commands.admin_specs(bot)
        ]
        policy = self._access.get(bot)
        admins = () if policy is None else tuple(sorted(policy.admins))
        # A built-in description is in the catalogs; a plugin's comes out as written.
        languages = tuple(
            (
                texts.language,
                tuple(dataclasses.replace(e, description=_described(texts, e)) for e in entries),
            )
            for texts in self._commands.languages.menu_languages(bot)
        )
        return CommandMenu(tuple(entries), admins, languages)

    def texts_for(self, bot: str, locale: str | None) -> Texts:
        """The texts ``bot`` answers a person in (its default persona's language, or with
        ``auto`` the person's platform language ``locale``)."""
        return self._commands.languages.texts(bot, None, locale)

    def native_commands_for(self, bot: str) -> tuple[NativeCommand, ...]:
        """Every command of ``bot`` as a native command (admin ones too: refused by the
        router to anyone else, as when typed)."""
        catalogs = self._commands.languages.menu_languages(bot)
        return tuple(
            native_command(s, plugin=p, catalogs=catalogs)
            for s, p in self._commands.every_spec(bot)
        )

    async def suggest(
        self, asker: Inbound, command: str, option: str, typed: str
    ) -> tuple[Suggestion, ...]:
        """Values for an option while ``asker`` types it; nothing for a person outside the
        bot's access lists (they may not use its commands at all)."""
        policy = self._access.get(asker.conversation.bot)
        if policy is not None and not _allowed(policy, asker):
            return ()
        return await self._commands.suggest(_storable(asker), command, option, typed)

    async def registered_commands(self, bot: str, scope: str) -> dict[str, str]:
        """The native commands ``bot`` recorded as its own in ``scope``."""
        return await self._store.registered_commands(bot, scope)

    async def command_scopes(self, bot: str) -> tuple[str, ...]:
        """The scopes where ``bot`` recorded native commands."""
        return await self._store.command_scopes(bot)

    async def record_commands(self, bot: str, scope: str, commands: dict[str, str]) -> None:
        """Record the native commands ``bot`` has in ``scope`` now."""
        await self._store.record_commands(bot, scope, commands)

    def for_bot(self, bot: str) -> BotHandler:
        """The InboundHandler of one hosted bot: its own command menu (per-bot plugins)."""
        return BotHandler(self, bot)

    def rejected(self, platform: str, bot: str, kind: str) -> None:
        """Count an update an adapter could not read."""
        self._metrics.rejected.labels(platform, bot, kind).inc()

    async def stopped(self, conversation: ConversationKey, draft_id: int) -> None:
        """A person pressed a draft's stop button: tell the turn writing it, in whichever
        process it runs (bot/runtime/streaming.py)."""
        if self._stops is not None:
            await self._stops.request(conversation, draft_id)

    @contextlib.asynccontextmanager
    async def batch(self) -> AsyncIterator[None]:
        """Messages routed inside are stored together, in one transaction, when it ends
        (docs/architecture.md#ingest-in-batches).

        Anything else routed inside (a command, an edit, a deletion) first stores the
        messages before it, so the order of arrival holds. A StoreError leaves the block
        (from the call that stored, or from here at its end) and then none of the messages
        still waiting is stored: the adapter acknowledges nothing of the batch and hands it
        over again; what was stored already is recognized as a second delivery. A nested
        batch is part of the outer one.
        """
        if _BATCH.get() is not None:
            yield
            return
        batch = _Batch()
        token = _BATCH.set(batch)
        try:
            yield
        finally:
            _BATCH.reset(token)
            batch.open = False
        await self._store_batch(batch)

    async def _store_batch(self, batch: _Batch | None) -> None:
        """Store what waits in ``batch`` (taken out first: a failure leaves nothing to retry
        twice)."""
        if batch is None or not batch.pending:
            return
        inbounds, batch.pending = batch.pending, []
        results = await self._ingestor.ingest_many(inbounds)
        for inbound, result in zip(inbounds, results, strict=True):
            counter = self._metrics.inbound if result.stored else self._metrics.duplicates
            counter.labels(*self._metrics.labels(inbound.conversation)).inc()

    async def __call__(self, inbound: Inbound) -> None:
        """Handle one message in arrival order."""
        if inbound.kind == "press":  # never stored, whoever hands it over this way
            await self.press(inbound)
            return
        inbound = self._to_cast(_storable(inbound))
        policy = self._access.get(inbound.conversation.bot)
        if policy is not None and not _allowed(policy, inbound):
            if inbound.kind == "message":
                # Stored nowhere (not even the answer: no outbox row), and no plugin sees it;
                # at most one answer per chat per day.
                self._metrics.denied.labels(*self._metrics.labels(inbound.conversation)).inc()
                await self._deny(inbound, policy)
                return
            # An edit or deletion from outside the allow lists: still applied to what is on
            # record (a deletion must remove a message kept while its author was allowed; an
            # unknown one changes nothing), but no plugin sees it (docs/plugins.md#middleware).
            # An edit never asks for a reply the person may no longer get.
            await self._route(dataclasses.replace(inbound, triggers_reply=False))
            return
        await self._through_middleware(inbound)

    def _to_cast(self, inbound: Inbound) -> Inbound:
        """In a scene, a group message that names a cast member or replies to one's line
        asks for a reply (and may be learned from), as a mention of the bot does
        (docs/scenes.md#director)."""
        scene = self._scenes.get(inbound.conversation.bot)
        if scene is None or inbound.triggers_reply or inbound.kind != "message":
            return inbound
        if addressed(inbound.text, inbound.quote, scene.cast):
            return dataclasses.replace(inbound, triggers_reply=True)
        return inbound

    async def _through_middleware(
        self, inbound: Inbound, last: Callable[[Inbound], Awaitable[None]] | None = None
    ) -> None:
        """Run the bot's middleware chain around ``last`` (default ``_route``; a press has
        its own, docs/plugins.md#middleware)."""
        final = last or self._route
        bot = inbound.conversation.bot
        chain = self._middleware.get(bot)
        if chain is None:
            chain = self._extensions.for_bot(bot).middleware
            self._middleware[bot] = chain
        if not chain:
            await final(inbound)
            return
        routed = False

        async def route(event: Inbound) -> None:
            nonlocal routed
            routed = True
            await final(event)

        await _run_chain(_Chain(chain, route, self._clock, self._decide_seconds), 0, inbound)
        if inbound.kind == "delete" and not routed:
            # A plugin may watch deletions, never veto one: what a person deleted on the
            # platform leaves the store (docs/privacy.md), whatever a middleware decided.
            log.warning("a middleware dropped a deletion in %s; applied", inbound.conversation)
            await self._route(inbound)

    async def _route(self, inbound: Inbound) -> None:
        inbound = _storable(inbound)  # a middleware may have put NUL back in
        batch = _BATCH.get()
        if inbound.kind in ("edit", "delete"):
            await self._store_batch(batch)  # an edit may concern a message of the batch
            # Authorised by the stored message, not by the event (Discord's delete events
            # carry no author): only a message that was let in is on record, and the store
            # touches it only for its own author. An unknown message changes nothing.
            await (self._ingestor.edit if inbound.kind == "edit" else self._delete)(inbound)
            return
        if inbound.command_only:
            # A native command (a Discord application command) is never stored, whatever its
            # text: one that is no command (forged) is dropped.
            if (native := parse_command(inbound.text)) is None:
                log.warning("a native command in %s is no command; dropped", inbound.conversation)
                return
            await self._store_batch(batch)
            await self._command(inbound, native)
            return
        if not inbound.text.strip() and not inbound.media and inbound.quote is None:
            return  # empty or whitespace-only, nothing attached: nothing to answer
        if (command := parse_command(inbound.text) if inbound.triggers_reply else None) is not None:
            await self._store_batch(batch)  # /forget, /new ... see what came before them
            await self._command(inbound, command)
        elif batch is not None and batch.open:
            batch.pending.append(inbound)
        else:
            result = await self._ingestor.ingest(inbound)
            counter = self._metrics.inbound if result.stored else self._metrics.duplicates
            counter.labels(*self._metrics.labels(inbound.conversation)).inc()

    async def _command(self, inbound: Inbound, command: Command) -> None:
        """Run a command once and answer it through the outbox, quoting it (in groups)."""
        mid = inbound.platform_message_id
        if mid is not None and await self._store.answered(inbound.conversation, mid):
            # Delivered again (a Telegram redelivery, a Discord resume): its answer's outbox
            # row exists, so it ran; the answer was sent, or is sent by recovery at start.
            log.info(
                "/%s in %s already answered; not run again", command.name, inbound.conversation
            )
            return
        # The answer is recorded only once the command ran: while it runs, the same message
        # seen by another process (two sessions of a shard during a deploy, a redelivery)
        # finds this claim taken and runs nothing; as a press does (``_pressed``).
        claim = None
        if mid is not None:
            name = f"command:{inbound.conversation}:{mid}"
            taken = await self._claim(name, "command")
            if taken == "elsewhere":
                self._elsewhere(name, lambda: self._command(inbound, command))
                return
            if taken == "done":
                log.info(
                    "/%s in %s was run by another process; not run again",
                    command.name,
                    inbound.conversation,
                )
                return
            claim = taken
        try:
            async with self._holding(claim):
                answer = await self._commands.handle(inbound, command)
                if answer is None and inbound.command_only:
                    # The platform waits for an answer to its native command.
                    texts = self._commands.languages.for_inbound(inbound)
                    answer = texts.finish(texts(ANSWERS_LATER))
                if answer is not None:
                    await self._answer(inbound, command, answer)
                elif mid is not None:
                    # It answered by itself (/export's file) or not at all: noted all the
                    # same, so a redelivery (a retried batch, a Telegram update not confirmed
                    # yet) skips it.
                    await self._store.record_ran(inbound.conversation, mid, self._clock.now())
        except BaseException:
            # Not done (a store fault): the update handed over again may run it.
            if claim is not None:
                with contextlib.suppress(Exception):
                    await self._store.release_lease(claim)
            raise
        if claim is not None:
            # Done, and recorded: kept a while all the same (retention prunes it later).
            with contextlib.suppress(Exception):
                await self._store.renew_lease(claim, COMMAND_MEMORY, self._clock.now())

    async def _answer(self, inbound: Inbound, command: Command, answer: str | Answer) -> None:
        """Send a command's answer through the outbox (its choices for the asker only)."""
        kind: Kind = "greeting" if command.name == "start" else "answer"
        mid, conversation = inbound.platform_message_id, inbound.conversation
        private = isinstance(answer, Refusal) or command.name in PRIVATE_COMMANDS
        if not isinstance(answer, Answer):
            await self._delivery.send(
                conversation, str(answer), kind=kind, reply_to=mid, private=private
            )
            return
        choices = Choices(inbound.author_id, answer.choices) if answer.choices else None
        await self._delivery.send(
            conversation, answer.text, kind=kind, reply_to=mid, private=private, choices=choices
        )

    # ------------------------------------------------------------------ button presses

    async def press(self, inbound: Inbound) -> PressOutcome:
        """A verified button press (docs/telegram.md#buttons): the command it stands for, run
        as a typed one (access lists, middleware, Commands), never stored and never for the
        model, and at most once per message and command whatever the processes.

        ``platform_message_id`` is the message that carries the buttons: the press's claim is
        a lease named by it and the command, taken before the command runs and kept for
        ``PRESS_MEMORY`` (longer than any button is accepted), so a second press (twice, from
        two devices, in another process) finds it taken and runs nothing.
        """
        inbound = _storable(dataclasses.replace(inbound, kind="press", triggers_reply=True))
        policy = self._access.get(inbound.conversation.bot)
        if policy is not None and not _allowed(policy, inbound):
            self._metrics.denied.labels(*self._metrics.labels(inbound.conversation)).inc()
            return "refused"
        outcome: PressOutcome = "dropped"

        async def route(event: Inbound) -> None:
            nonlocal outcome
            outcome = await self._pressed(_storable(event))

        await self._through_middleware(inbound, route)
        return outcome

    async def _pressed(self, inbound: Inbound) -> PressOutcome:
        """Run a press that came through the middleware (which may not change its kind)."""
        command = parse_command(inbound.text)
        if command is None or inbound.platform_message_id is None:
            # A middleware turned it into chatter: a press is never stored, never answered
            # by the model.
            log.warning("a press in %s is no command; dropped", inbound.conversation)
            return "dropped"
        await self._store_batch(_BATCH.get())  # what came before it, first
        return await self._press_once(inbound, command)

    async def _press_once(self, inbound: Inbound, command: Command) -> PressOutcome:
        """Run a press's command unless it ran (or runs) already (``_claim``)."""
        name = f"press:{inbound.conversation}:{inbound.platform_message_id}:{inbound.text}"
        claim = await self._claim(name, "press")
        if claim == "elsewhere":
            self._elsewhere(name, lambda: self._press_once(inbound, command))
            return "pending"
        if claim == "done":
            log.info("/%s in %s pressed before; not run", command.name, inbound.conversation)
            return "done"
        try:
            async with self._holding(claim):
                answer = await self._commands.handle(inbound, command)
                if answer is not None:
                    await self._answer(inbound, command, answer)
        except BaseException:
            # Not done: a press handed over again (a store fault) may run it.
            with contextlib.suppress(Exception):
                await self._store.release_lease(claim)
            raise
        # Done: remembered for longer than any button is accepted. Should this write fail,
        # the short claim still covers a second press now, and the answer went out.
        with contextlib.suppress(Exception):
            await self._store.renew_lease(claim, PRESS_MEMORY, self._clock.now())
        return "ran"

    async def _claim(self, name: str, holder: str) -> Lease | Literal["done", "elsewhere"]:
        """The claim to run a press or a command once; "done" when it ran already (its
        claim was kept for ``PRESS_MEMORY`` / ``COMMAND_MEMORY``, far past
        ``CLAIM_SECONDS``); "elsewhere" while it is held for a run: another process is
        running it (and renews it) or died running it (``_after_elsewhere``)."""
        now = self._clock.now()
        claim = await self._store.acquire_lease(name, holder, CLAIM_SECONDS, now)
        if claim is not None:
            return claim
        expires = await self._store.lease_expires_at(name)
        return "done" if _kept_done(expires, now) else "elsewhere"

    def _elsewhere(self, name: str, run: Callable[[], Awaitable[object]]) -> None:
        """A claim held by a run elsewhere: watched in the background (``_after_elsewhere``)
        rather than waited for here, which would hold up every later event of the batch."""
        log.info("%s is being run elsewhere; run here if that run never ends", name)
        if self._later is not None:
            self._later.start(self._after_elsewhere(name, run), name=f"after {name}")

    async def _after_elsewhere(self, name: str, run: Callable[[], Awaitable[object]]) -> None:
        """Once the claim is kept as done, nothing; once it comes free (that run failed, or
        its process died: its claim is no longer renewed), ``run`` here. So an update
        redelivered after a crash mid-command is answered, within ``CLAIM_SECONDS``, instead
        of skipped and acknowledged."""
        while True:
            await self._clock.sleep(CLAIM_SECONDS / 3)
            try:
                expires = await self._store.lease_expires_at(name)
                now = self._clock.now()
                if _kept_done(expires, now):
                    return
                if expires is None or expires <= now:
                    await run()  # takes the claim, or finds it taken again and watches anew
                    return
            except StoreError as exc:
                # The store failing for a moment (the run gave its claim back): look again.
                log.warning("%s: the store failed (%s); looking again", name, exc)

    @contextlib.asynccontextmanager
    async def _holding(self, claim: Lease | None) -> AsyncIterator[None]:
        """Renew ``claim`` while the body runs (``CLAIM_SECONDS``)."""
        if claim is None:
            yield
            return
        async with leases.renewing(self._store, claim, ttl=CLAIM_SECONDS, clock=self._clock):
            yield

    async def _delete(self, inbound: Inbound) -> None:
        removed = await self._ingestor.delete(inbound)
        if removed is not None and removed.role == "user" and self._memory is not None:
            user = UserKey(inbound.conversation.platform, removed.author_id)
            await self._memory.drop_sources(user, [removed.id])

    async def _deny(self, inbound: Inbound, policy: AccessPolicy) -> None:
        if not policy.denied_reply or inbound.kind != "message" or not inbound.triggers_reply:
            return  # in a group, only someone who addresses the bot hears it is not for them
        if inbound.command_only:
            # A native command is answered for the asker's eyes only: no chat hears it, so
            # it is not rationed; unanswered, the platform would show it failed.
            await self._delivery.send_unrecorded(
                inbound.conversation,
                policy.denied_reply,
                kind="denied",
                reply_to=inbound.platform_message_id,
                private=True,
            )
            return
        # A lease that lives a day remembers, across processes, that this chat was told.
        now = self._clock.now()
        lease = await self._store.acquire_lease(
            f"denied:{inbound.conversation}", "access", DAY, now
        )
        if lease is not None:
            await self._delivery.send_unrecorded(
                inbound.conversation, policy.denied_reply, kind="denied"
            )


def _described(texts: Texts, entry: MenuEntry) -> str:
    return texts.finish(texts(entry.description))


class BotHandler:
    """One bot's view of the router: the same handling, that bot's command menu."""

    def __init__(self, router: Router, bot: str) -> None:
        self._router = router
        self._bot = bot

    @property
    def commands(self) -> tuple[tuple[str, str], ...]:
        """(name, description) of every chat command of this bot."""
        return self._router.commands_for(self._bot)

    @property
    def admin_commands(self) -> tuple[str, ...]:
        """Names of this bot's admin-only commands (in no menu)."""
        return self._router.admin_commands_for(self._bot)

    @property
    def menu(self) -> CommandMenu:
        """This bot's command menu by scope and language (``Router.menu_for``)."""
        return self._router.menu_for(self._bot)

    def texts(self, locale: str | None) -> Texts:
        """The built-in texts this bot answers a person whose platform language is
        ``locale`` in (``bot.core.ports.PressHandler``; docs/i18n.md)."""
        return self._router.texts_for(self._bot, locale)

    def rejected(self, platform: str, bot: str, kind: str) -> None:
        """Count an update an adapter could not read."""
        self._router.rejected(platform, bot, kind)

    async def stopped(self, conversation: ConversationKey, draft_id: int) -> None:
        """A person pressed a draft's stop button."""
        await self._router.stopped(conversation, draft_id)

    async def press(self, inbound: Inbound) -> PressOutcome:
        """A verified button press (``Router.press``)."""
        return await self._router.press(inbound)

    async def __call__(self, inbound: Inbound) -> None:
        """Handle one message in arrival order."""
        await self._router(inbound)

    @property
    def native_commands(self) -> tuple[NativeCommand, ...]:
        """Every command of this bot as a native command (``bot.core.menu.NativeMenu``)."""
        return self._router.native_commands_for(self._bot)

    async def suggest(
        self, asker: Inbound, command: str, option: str, typed: str
    ) -> tuple[Suggestion, ...]:
        """Values for an option while ``asker`` types it."""
        return await self._router.suggest(asker, command, option, typed)

    async def registered_commands(self, scope: str) -> dict[str, str]:
        """The native commands this bot recorded as its own in ``scope``."""
        return await self._router.registered_commands(self._bot, scope)

    async def command_scopes(self) -> tuple[str, ...]:
        """The scopes where this bot recorded native commands."""
        return await self._router.command_scopes(self._bot)

    async def record_commands(self, scope: str, commands: dict[str, str]) -> None:
        """Record the native commands this bot has in ``scope`` now."""
        await self._router.record_commands(self._bot, scope, commands)

    def batch(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Store the messages handled inside in one transaction (``Router.batch``)."""
        return self._router.batch()


# What a middleware may not change: who wrote where, which message, and what kind of event
# (changing them would let a plugin forge authorship, or show a group's /memory as private).
_PINNED = ("conversation", "author_id", "platform_message_id", "is_private", "kind", "command_only")


@dataclasses.dataclass(frozen=True, slots=True)
class _Chain:
    """A bot's middleware around the route, with the time each may take to decide."""

    middleware: tuple[Middleware, ...]
    route: Callable[[Inbound], Awaitable[None]]
    clock: Clock
    decide_seconds: float


async def _run_chain(chain: _Chain, index: int, inbound: Inbound) -> None:
    """Run ``chain.middleware[index:]`` around the route.

    A store fault inside ``call_next`` always reaches the adapter (it retries the update), even
    when a middleware swallowed it. A middleware that itself raises before passing the event
    on is logged and skipped: the event goes on as it came, nothing acknowledged is lost. So is
    one that neither passes the event on nor returns within ``decide_seconds`` (it would hold
    the bot's whole update stream); once it called ``call_next`` it is never cut off, because
    the store write runs inside that call.
    """
    if index == len(chain.middleware):
        await chain.route(inbound)
        return
    middleware = chain.middleware[index]
    called = False
    inner: BaseException | None = None
    entered = asyncio.Event()

    async def call_next(event: Inbound) -> None:
        nonlocal called, inner
        if called:
            log.warning("middleware %s called call_next twice; ignored", _name(middleware))
            return
        called = True
        entered.set()
        try:
            await _run_chain(chain, index + 1, _pinned(inbound, event, middleware))
        except BaseException as exc:
            inner = exc
            raise

    try:
        await _decided(chain, middleware(inbound, call_next), entered)
    except _Undecided:
        log.error(
            "middleware %s neither passed the event on nor returned within %g s; skipped",
            _name(middleware),
            chain.decide_seconds,
        )
        await _run_chain(chain, index + 1, inbound)
        return
    except (Exception, asyncio.CancelledError) as exc:
        if isinstance(exc, asyncio.CancelledError):
            if cancelling():
                raise  # a real cancellation (shutdown): never swallowed
            if inner is not None or called:
                # Passed on as is, it would end the adapter's update loop like a shutdown.
                raise SelfCancelled(
                    f"middleware {_name(middleware)} raised CancelledError"
                ) from exc
        if inner is not None or called:
            raise
        log.exception("middleware %s failed; the event is passed on without it", _name(middleware))
        await _run_chain(chain, index + 1, inbound)
        return
    if inner is not None:
        raise inner


def _kept_done(expires: float | None, now: float) -> bool:
    """Whether a claim expiring at ``expires`` is kept as done (for ``PRESS_MEMORY`` or
    ``COMMAND_MEMORY``) rather than held for a run (``CLAIM_SECONDS``, renewed). Told apart
    with a wide margin: PostgreSQL's leases expire on the database's clock, which may run
    seconds ahead of this host's."""
    return expires is not None and expires - now > 10 * CLAIM_SECONDS


class _Undecided(Exception):
    """A middleware took too long to pass its event on or drop it."""


async def _decided(chain: _Chain, work: Awaitable[None], entered: asyncio.Event) -> None:
    """Await ``work``; raise _Undecided (``work`` cancelled) when it neither finished nor called
    ``call_next`` (``entered``) within the chain's ``decide_seconds`` on its clock."""
    task = asyncio.ensure_future(work)
    passed = asyncio.ensure_future(entered.wait())
    timer = asyncio.ensure_future(chain.clock.sleep(chain.decide_seconds))
    try:
        await asyncio.wait({task, passed, timer}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()  # shutdown: the middleware (and any store write inside it) with it
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        raise
    finally:
        passed.cancel()
        timer.cancel()
    if not task.done() and not entered.is_set():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        raise _Undecided
    await task  # finished, or inside call_next: never cut off from here on


def _pinned(original: Inbound, changed: Inbound, middleware: Middleware) -> Inbound:
    """``changed`` with the identity fields of ``original`` (a change there is logged)."""
    moved = [f for f in _PINNED if getattr(changed, f) != getattr(original, f)]
    if not moved:
        return changed
    log.error("middleware %s may not change %s; kept as received", _name(middleware), moved)
    return dataclasses.replace(changed, **{f: getattr(original, f) for f in moved})


def _name(middleware: Middleware) -> str:
    return getattr(middleware, "__qualname__", None) or repr(middleware)


def _allowed(policy: AccessPolicy, inbound: Inbound) -> bool:
    """Whether ``inbound`` comes from inside the allow lists (what plugins may see)."""
    if inbound.kind == "delete" and not inbound.author_id:
        # Discord's deletions carry no author (nor any text): only the chat rule can apply.
        return not policy.allow_chats or inbound.conversation.chat_id in policy.allow_chats
    return policy.allows(inbound)


def _storable(inbound: Inbound) -> Inbound:
    """``inbound`` with characters no store can hold shown as U+FFFD (text, name, the quote
    and media labels)."""
    text = _clean(inbound.text)
    name = _clean(inbound.display_name)
    quote = inbound.quote
    if quote is not None:
        quote = dataclasses.replace(quote, author=_clean(quote.author), text=_clean(quote.text))
    media = tuple(dataclasses.replace(m, label=_clean(m.label)) for m in inbound.media)
    if (text, name, quote, media) == (
        inbound.text,
        inbound.display_name,
        inbound.quote,
        inbound.media,
    ):
        return inbound
    return dataclasses.replace(inbound, text=text, display_name=name, quote=quote, media=media)


def _clean(text: str) -> str:
    return _UNSTORABLE.sub("\ufffd", text)
