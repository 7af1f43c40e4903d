"""One turn of a conversation: lease -> pending turn -> assemble -> model -> final check -> send.

Invariants (SPEC section 4):
- the model is called at most once per attempt, with every pending message up to v0;
- nothing is sent unless the final check (one store transaction) recorded the reply, so a
  worker whose lease was taken over, or whose input went stale, never sends;
- the typing indicator and the lease are released on every path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from bot.clock import Clock
from bot.errors import AdapterError, DeliveryRefused, ModelRejected, ModelUnavailable, RateLimited
from bot.events import ConversationKey, Lease, OutboxItem, QueuePolicy, Reply, Turn
from bot.llm.base import BaseLLM, Usage
from bot.ports import Outlet
from bot.store.base import BaseStore
from memory.assemble import PersonaPin
from memory.retention import Gap, describe, gap_notice
from memory.service import Memory, MemoryPolicy

log = logging.getLogger("personabot.pipeline")

TurnOutcome = Literal["sent", "discarded", "fenced", "busy", "idle", "failed", "retry"]
GAP_TOLD_KEY = "personabot:gap_told"


@dataclass(frozen=True, slots=True)
class GapPolicy:
    """What to do when early turns of a session are missing (SPEC section 6, rule 3)."""

    policy: Literal["note", "tell_user", "refuse"] = "note"
    tell_user_message: str = "Earlier messages (turns {first}-{last}) were removed."
    refuse_message: str = "Part of this conversation (turns {first}-{last}) is unavailable."


@dataclass(frozen=True, slots=True)
class BotProfile:
    """What one bot entry needs per turn: persona pin, queue policy, budget, outlet."""

    key: str
    pin: PersonaPin
    queue: QueuePolicy
    memory: MemoryPolicy
    outlet: Outlet
    lease_seconds: float = 30.0


def lease_name(conversation: ConversationKey) -> str:
    """The lease that serializes turns of one conversation across workers and processes."""
    return f"turn:{conversation}"


class Pipeline:
    """Runs turns for the bots this process hosts."""

    def __init__(
        self,
        *,
        store: BaseStore,
        llm: BaseLLM,
        clock: Clock,
        memory: Memory,
        profiles: Mapping[str, BotProfile],
        holder: str | None = None,
        gap_policy: GapPolicy | None = None,
        retry_backoff: Callable[[int], float] = lambda n: min(60.0, 2.0 * 2**n),
    ) -> None:
        self._store = store
        self._llm = llm
        self._clock = clock
        self._memory = memory
        self._profiles = dict(profiles)
        self.holder = holder or f"worker-{uuid.uuid4().hex[:12]}"
        self._retry_backoff = retry_backoff
        self._failures: dict[ConversationKey, int] = {}
        self._gap_policy = gap_policy or GapPolicy()
        self.counters: Counter[str] = Counter()

    @property
    def bots(self) -> tuple[str, ...]:
        """Keys of the bots hosted here."""
        return tuple(self._profiles)

    def profile(self, bot: str) -> BotProfile:
        """The profile of a hosted bot."""
        return self._profiles[bot]

    async def run_turn(self, conversation: ConversationKey) -> TurnOutcome:
        """Try to answer the conversation's pending input once."""
        profile = self._profiles[conversation.bot]
        lease = await self._store.acquire_lease(
            lease_name(conversation), self.holder, profile.lease_seconds, self._clock.now()
        )
        if lease is None:
            return "busy"  # another worker holds it: back off, do nothing
        try:
            return await self._with_lease(conversation, profile, lease)
        finally:
            await self._store.release_lease(lease)

    async def _with_lease(
        self, conversation: ConversationKey, profile: BotProfile, lease: Lease
    ) -> TurnOutcome:
        turn = await self._store.pending_turn(conversation)
        if turn is None or not turn.messages:
            await self._store.clear_timer(
                conversation, await self._store.conversation_version(conversation)
            )
            return "idle"
        notice = None
        gaps = await self._memory.gaps(turn.session)
        if gaps:
            policy = self._gap_policy
            self.counters[f"gap_{policy.policy}"] += 1
            log.warning(
                "%s: turns %s are missing (gap policy %s)",
                turn.session,
                describe(gaps),
                policy.policy,
            )
            first, last = gaps[0].first, gaps[-1].last
            if policy.policy == "refuse":
                text = policy.refuse_message.format(first=first, last=last)
                return await self._record_and_send(turn, lease, profile, text, Usage())
            notice = gap_notice(gaps)
            if policy.policy == "tell_user":
                await self._tell_once(turn, gaps, profile)
        assembled = await self._memory.build(turn, profile.pin, gap_notice=notice)
        log.debug(
            "turn %s v0=%d messages=%d prompt~%d tokens",
            turn.session,
            turn.version,
            len(turn.messages),
            assembled.total_tokens,
        )
        try:
            async with profile.outlet.typing(conversation), self._renewing(lease, profile):
                result = await self._llm.complete(assembled.request)
        except ModelUnavailable as exc:
            return await self._retry_later(conversation, exc)
        except ModelRejected as exc:
            log.error("model rejected the turn of %s: %s", conversation, exc)
            # Do not loop on a request that cannot succeed: park these messages (they stay
            # stored and pending; the next message's turn covers them again).
            await self._store.clear_timer(conversation, turn.version, only_if_idle=False)
            return "failed"
        self._failures.pop(conversation, None)
        return await self._record_and_send(turn, lease, profile, result.text, result.usage)

    async def _record_and_send(
        self, turn: Turn, lease: Lease, profile: BotProfile, text: str, usage: Usage
    ) -> TurnOutcome:
        """The final check, then delivery of a recorded reply."""
        conversation = turn.session.conversation
        finished = await self._store.finish_turn(
            turn, lease, text, self._clock.now(), profile.queue, usage
        )
        if finished.outcome == "fenced":
            log.warning("lease on %s was taken over; reply dropped", conversation)
            return "fenced"
        if finished.outcome == "discarded":
            log.debug(
                "newer input in %s (v%d > v%d); reply discarded",
                conversation,
                finished.current_version,
                turn.version,
            )
            return "discarded"
        assert finished.outbox is not None
        log.info(
            "turn %s: %d message(s), in=%d out=%d cache_write=%d cache_read=%d",
            turn.session,
            len(turn.messages),
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_creation_input_tokens,
            usage.cache_read_input_tokens,
        )
        self._memory.schedule_compaction(turn.session)
        await self.deliver(finished.outbox, profile.outlet)
        return "sent"

    async def _tell_once(self, turn: Turn, gaps: tuple[Gap, ...], profile: BotProfile) -> None:
        """Tell the user about missing turns once per session (and again if the gap grows)."""
        told = await self._store.get_state(turn.session, GAP_TOLD_KEY)
        if told == describe(gaps):
            return
        text = self._gap_policy.tell_user_message.format(first=gaps[0].first, last=gaps[-1].last)
        await profile.outlet.send(Reply(turn.session.conversation, text))
        await self._store.set_state(turn.session, GAP_TOLD_KEY, describe(gaps), self._clock.now())

    async def _retry_later(
        self, conversation: ConversationKey, exc: ModelUnavailable
    ) -> TurnOutcome:
        attempt = self._failures.get(conversation, 0)
        self._failures[conversation] = attempt + 1
        delay = self._retry_backoff(attempt)
        if isinstance(exc, RateLimited) and exc.retry_after is not None:
            delay = max(delay, exc.retry_after)
        log.warning("model unavailable for %s (%s); retry in %.1fs", conversation, exc, delay)
        await self._store.rearm_timer(conversation, self._clock.now() + delay)
        return "retry"

    @contextlib.asynccontextmanager
    async def _renewing(self, lease: Lease, profile: BotProfile) -> AsyncIterator[None]:
        """Renew the lease every third of its time while the body runs."""

        async def renew() -> None:
            current: Lease | None = lease
            while current is not None:
                await self._clock.sleep(profile.lease_seconds / 3)
                current = await self._store.renew_lease(
                    current, profile.lease_seconds, self._clock.now()
                )
            log.warning("lost lease %s while generating", lease.name)

        task = asyncio.create_task(renew())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def deliver(self, item: OutboxItem, outlet: Outlet) -> bool:
        """Send one outbox row: claim the attempt, send, confirm. False if not sent."""
        if not await self._store.begin_send(item, self._clock.now()):
            return False  # another worker claimed this attempt
        reply = Reply(
            conversation=item.conversation,
            text=item.text,
            outbox_id=item.id,
            reply_to_platform_message_id=item.reply_to_platform_message_id,
        )
        try:
            await outlet.send(reply)
        except DeliveryRefused as exc:
            log.warning(
                "%s refuses delivery (%s); conversation marked inactive", item.conversation, exc
            )
            await self._store.mark_failed(item.id, self._clock.now(), str(exc))
            await self._store.set_conversation_status(item.conversation, False, str(exc))
            return False
        except AdapterError as exc:
            log.error("could not deliver reply %d to %s: %s", item.id, item.conversation, exc)
            await self._store.mark_failed(item.id, self._clock.now(), str(exc))
            return False
        await self._store.mark_sent(item.id, self._clock.now())
        return True

    async def recover_outbox(self, older_than: float) -> int:
        """Deliver replies recorded but not sent before a crash; return how many were sent.

        A row that was attempted but never confirmed is re-sent only through an outlet whose
        send is idempotent; otherwise it is marked failed: a possible lost reply is logged
        rather than risking a duplicate (the failure the queue exists to prevent).
        """
        sent = 0
        for item in await self._store.unsent_outbox(older_than):
            profile = self._profiles.get(item.conversation.bot)
            if profile is not None and await self.deliver(item, profile.outlet):
                sent += 1
        for item in await self._store.uncertain_outbox(older_than):
            profile = self._profiles.get(item.conversation.bot)
            if profile is None:
                continue
            if profile.outlet.idempotent_send:
                if await self.deliver(item, profile.outlet):
                    sent += 1
            else:
                log.warning(
                    "reply %d to %s may not have been delivered (crash mid-send); "
                    "not re-sent to avoid a duplicate",
                    item.id,
                    item.conversation,
                )
                await self._store.mark_failed(item.id, self._clock.now(), "uncertain delivery")
        return sent
