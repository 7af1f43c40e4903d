"""A reply turn that cannot be answered never blocks the conversation behind it
(docs/architecture.md#queue, the list after the rules): the model unavailable (retry with
backoff, one notice per outage), the request rejected for good (closed out, told), every
request rejected (parked), a limit holding an author back (closed out as context, told once),
turns missing from the session (counted, noted, told once)."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Protocol

from bot.core.console import GAP_NOTICED_KEY
from bot.core.errors import ModelError, ModelUnavailable, RateLimited, RequestRejected
from bot.core.events import NOT_SET, ConversationKey, Lease, Turn
from bot.runtime.limits import Admission
from bot.runtime.profiles import BotProfile, ReplyPolicies, TurnOutcome
from bot.runtime.turn import TurnParts
from bot.store.contracts import QueueStore, SessionStore
from memory.retention.gaps import Gap, describe

log = logging.getLogger("personabot.pipeline")

GAP_TOLD_KEY = "personabot:gap_told"
TROUBLE_KEY = "personabot:trouble_told"


class TroubleStore(QueueStore, SessionStore, Protocol):
    """What Trouble asks the store: a turn closed out, its timer cleared or moved, and the
    session's notes of what the chat was told."""


class Trouble:
    """Closes out, parks or re-arms the turns of replies that cannot be answered now."""

    def __init__(self, *, store: TroubleStore, parts: TurnParts, policies: ReplyPolicies) -> None:
        self._parts = parts
        self._store = store
        self._clock = parts.clock
        self._metrics = parts.metrics
        self._policies = policies
        self._failures: dict[ConversationKey, int] = {}
        #: Gap notices by policy (``gap_note``, ...), for tests and benchmarks.
        self.counters: Counter[str] = Counter()

    async def close_out(
        self, turn: Turn, lease: Lease, profile: BotProfile, reason: str, kind: str
    ) -> bool:
        """Mark the turn's messages handled without a reply, with the reason (stored, logged
        and counted); False when fenced."""
        if not await self._store.skip_turn(
            turn, lease, self._clock.now(), profile.queue, reason=reason
        ):
            return False
        labels = self._metrics.labels(turn.session.conversation)
        self._metrics.closed_out.labels(*labels, kind).inc(len(turn.messages))
        log.warning(
            "%s: %d message(s) closed out without a reply (%s)",
            turn.session,
            len(turn.messages),
            reason,
        )
        return True

    async def hold_back(
        self, held: Turn, lease: Lease, profile: BotProfile, admission: Admission
    ) -> bool:
        """Keep limited people's messages as context, unanswered; tell each of them once."""
        limit = admission.limit or "unknown"
        if not await self.close_out(held, lease, profile, f"limited: {limit}", "limited"):
            return False
        conversation = held.session.conversation
        self._metrics.limit_hits.labels(*self._metrics.labels(conversation), limit).inc()
        if admission.notice:
            await self._parts.delivery.send(conversation, admission.notice, kind="notice")
        return True

    async def count_gap(self, turn: Turn, gaps: tuple[Gap, ...]) -> None:
        """Count, log and note the gap; the note (a session value) is written when the gap
        is first found or grows, so the console lists when each was found, from any process."""
        policy = self._policies.gaps.policy
        self.counters[f"gap_{policy}"] += 1
        labels = self._metrics.labels(turn.session.conversation)
        self._metrics.gap_notices.labels(*labels, policy).inc()
        log.warning(
            "%s: turns %s are missing (gap policy %s)", turn.session, describe(gaps), policy
        )
        noted = f"turns {describe(gaps)} missing; gap policy {policy}"
        if await self._store.get_state(turn.session, GAP_NOTICED_KEY) != noted:
            await self._store.set_state(turn.session, GAP_NOTICED_KEY, noted, self._clock.now())

    async def tell_once(self, turn: Turn, gaps: tuple[Gap, ...]) -> None:
        """Tell the user about missing turns once per session (and again if the gap grows)."""
        told = await self._store.get_state(turn.session, GAP_TOLD_KEY)
        if told == describe(gaps):
            return
        texts = self._policies.languages.texts(turn.session.conversation.bot, turn.persona)
        text = texts(self._policies.gaps.tell_user_message).format(
            first=gaps[0].first, last=gaps[-1].last, turns=describe(gaps)
        )
        text = texts.finish(text)
        await self._parts.delivery.send(turn.session.conversation, text, kind="notice")
        await self._store.set_state(turn.session, GAP_TOLD_KEY, describe(gaps), self._clock.now())

    async def model_failed(
        self, turn: Turn, lease: Lease, profile: BotProfile, exc: ModelError
    ) -> TurnOutcome:
        """The model gave no answer: retry later, close the turn out, or park it."""
        conversation = turn.session.conversation
        if isinstance(exc, ModelUnavailable):
            return await self._retry_later(turn, exc)
        log.error("model rejected the turn of %s: %s", conversation, exc)
        if isinstance(exc, RequestRejected):
            # This request can never succeed: close the turn out so that it is never sent
            # again (the next message gets a turn of its own), and say so.
            if not await self.close_out(turn, lease, profile, f"rejected: {exc}", "rejected"):
                return "fenced"
            if profile.rejected_notice:
                texts = self._policies.languages.texts(conversation.bot, turn.persona)
                notice = texts.finish(texts(profile.rejected_notice))
                await self._parts.delivery.send(conversation, notice, kind="notice")
            return "closed"
        # Not about this turn (authentication, permission, unknown model): park these
        # messages (they stay stored and pending; the next message's turn covers them again,
        # once the operator fixed the cause) rather than loop.
        await self._store.clear_timer(conversation, turn.version, only_if_idle=False)
        return "failed"

    async def _retry_later(self, turn: Turn, exc: ModelUnavailable) -> TurnOutcome:
        """Keep the messages pending and retry with bounded exponential backoff; tell the user
        once per outage that the answer is coming."""
        conversation = turn.session.conversation
        attempt = self._failures.get(conversation, 0)
        self._failures[conversation] = attempt + 1
        delay = min(self._policies.retry_max_seconds, 2.0 * 2**attempt)
        if isinstance(exc, RateLimited) and exc.retry_after is not None:
            delay = max(delay, exc.retry_after)
        log.warning("model unavailable for %s (%s); retry in %.1fs", conversation, exc, delay)
        await self._store.rearm_timer(conversation, self._clock.now() + delay)
        notice = self._policies.trouble_notice
        # Session state, not process memory: another process that retries the same
        # conversation during the same outage does not notify again.
        if notice and await self._store.get_state(turn.session, TROUBLE_KEY) is NOT_SET:
            await self._store.set_state(turn.session, TROUBLE_KEY, "1", self._clock.now())
            texts = self._policies.languages.texts(conversation.bot, turn.persona)
            notice = texts.finish(texts(notice))
            await self._parts.delivery.send(conversation, notice, kind="notice")
        return "retry"

    async def recovered(self, turn: Turn) -> None:
        """The model answered: the outage (if any) is over."""
        self._failures.pop(turn.session.conversation, None)
        if (
            self._policies.trouble_notice
            and await self._store.get_state(turn.session, TROUBLE_KEY) != NOT_SET
        ):
            await self._store.delete_state(turn.session, TROUBLE_KEY)
