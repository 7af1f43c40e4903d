"""One turn of a conversation: lease -> pending turn -> assemble -> model -> final check -> send.

With plugins (bot/runtime/extensions.py), ``before_model`` hooks add a context layer to the
prompt, the model step is the tool loop (bot/runtime/tools.py: model and tool calls until a
text answer, bounded, all inside the lease and before the final check), and once the final
check recorded the reply its deferred side effects run, then the ``after_reply`` hooks.

Invariants (docs/architecture.md#queue):
- the model is asked once per attempt (a tool loop's calls are that one answer's steps), with
  the oldest pending messages up to v0 (at most ``max_turn_messages``; the rest wait for the
  next turn);
- nothing is sent unless the final check (one store transaction) recorded the reply, so a
  worker whose lease was taken over, or whose input went stale, never sends;
- no empty, whitespace-only or invisible (zero-width) text is ever recorded or sent: a
  refusal gets the persona's refusal line;
- a turn is submitted until it is answered or closed out (the model rejected it, a limit holds
  its author back): a closed-out message is never submitted again, so no conversation can get
  stuck behind one bad turn, before or after /new;
- a tool's side effect, and the ``after_reply`` hooks, happen only for a recorded reply: never
  for a turn the final check discarded or fenced;
- the typing indicator and the lease are released on every path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final, Literal

from bot.core.agenda import NewReminder
from bot.core.clock import Clock
from bot.core.console import GAP_NOTICED_KEY
from bot.core.errors import (
    ModelError,
    ModelUnavailable,
    RateLimited,
    RequestRejected,
    StoreError,
)
from bot.core.events import (
    NOT_SET,
    ClaimedTurn,
    Claims,
    ConversationKey,
    Lease,
    QueuePolicy,
    Turn,
)
from bot.core.llm import BaseLLM, ModelRequest, ModelResult, Usage
from bot.core.ports import Outlet, Streams, StreamSettings
from bot.core.queue_rules import turn_lease
from bot.core.shares import weights
from bot.core.tasks import Background
from bot.core.visible import has_visible_text
from bot.metrics import Metrics
from bot.queue import lease as leases
from bot.queue.lease import renewing
from bot.runtime.delivery import Delivery
from bot.runtime.extensions import Extensions, TurnContext
from bot.runtime.hooks import after_reply, context_layers
from bot.runtime.initiatives import Proactive, reminder_effects
from bot.runtime.limits import Admission, Limits
from bot.runtime.reminders import stored_reminders
from bot.runtime.streaming import PREVIEW_KEY, Relay, StopSignals
from bot.runtime.tools import CountCall, Effect, LoopResult, ToolLoop, ToolPolicy, apply
from bot.runtime.usage import Accounting
from bot.store.base import BaseStore
from memory.assemble import PersonaPin, with_context
from memory.records import Summary
from memory.retention.gaps import Gap, describe, gap_notice
from memory.service import Memory, MemoryPolicy
from memory.tokens import estimate_tokens

log = logging.getLogger("personabot.pipeline")

TurnOutcome = Literal[
    "sent",
    "discarded",
    "fenced",
    "busy",
    "idle",
    "failed",
    "retry",
    "limited",
    "closed",
    "stopped",
]
NO_STREAM: Final = StreamSettings(mode="off")
GAP_TOLD_KEY = "personabot:gap_told"
TROUBLE_KEY = "personabot:trouble_told"
DEFAULT_REFUSAL: Final = "I'd rather not answer that. Shall we talk about something else?"
DEFAULT_REJECTED: Final = (
    "Sorry, I couldn't answer your last message (it was refused as too long or malformed). "
    "It is kept; please write it again in shorter parts, or send /new to start over."
)


@dataclass(frozen=True, slots=True)
class GapPolicy:
    """What to do when turns of a session are missing (docs/architecture.md#retention rule 3);
    the messages may name ``{turns}`` (e.g. ``15-16, 39-40``) or ``{first}`` and ``{last}``."""

    policy: Literal["note", "tell_user", "refuse"] = "note"
    tell_user_message: str = "Some messages (turns {turns}) are no longer available."
    refuse_message: str = "Part of this conversation (turns {turns}) is unavailable."


@dataclass(frozen=True, slots=True)
class BotProfile:
    """What one bot entry needs per turn: persona pin, queue policy, budget, outlet."""

    key: str
    pin: PersonaPin
    queue: QueuePolicy
    memory: MemoryPolicy
    outlet: Outlet
    lease_seconds: float = 30.0
    max_turn_messages: int = 50
    refusal_message: str = DEFAULT_REFUSAL
    rejected_notice: str = DEFAULT_REJECTED
    persona_id: str = ""  # the persona's id, for turn hooks and tools ("" = the pin's name)
    # Replies shown while written, where the outlet can (docs/architecture.md#streaming).
    stream: StreamSettings = NO_STREAM


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
        limits: Limits | None = None,
        metrics: Metrics | None = None,
        trouble_notice: str = "",
        retry_max_seconds: float = 60.0,
        accounting: Accounting | None = None,
        extensions: Extensions | None = None,
        tool_policy: ToolPolicy | None = None,
        stops: StopSignals | None = None,
        proactive: Proactive | None = None,
        agenda_wake: Callable[[], None] | None = None,
        personas: Mapping[tuple[str, str], BotProfile] | None = None,
    ) -> None:
        self._store = store
        self._llm = llm
        self._clock = clock
        self._memory = memory
        self._profiles = dict(profiles)
        # A bot's other personas, by (bot, persona id): a session says which one answers
        # (docs/personas.md#several-personas); ``profiles`` holds each bot's default.
        self._personas = dict(personas or {})
        self.holder = holder or f"worker-{uuid.uuid4().hex[:12]}"
        #: Lease releases the store refused at the end of a turn, retried in the background.
        self.releases = Background()
        self._retry_max = retry_max_seconds
        self._failures: dict[ConversationKey, int] = {}
        self._gap_policy = gap_policy or GapPolicy()
        self._limits = limits
        self.metrics = metrics or Metrics()
        self._trouble_notice = trouble_notice
        self.counters: Counter[str] = Counter()
        self._accounting = accounting or Accounting(
            store=store, clock=clock, metrics=self.metrics, limits=limits
        )
        self.delivery = Delivery(store=store, clock=clock, outlet_for=self._outlet_for)
        self._extensions = extensions or Extensions()
        self._per_bot: dict[str, Extensions] = {}
        self._tool_policy = tool_policy or ToolPolicy()
        #: Stop requests of streamed drafts (shared with the router, which hears of them).
        self.stops = stops or StopSignals(store=store, clock=clock)
        # Check-ins and reminders (docs/initiatives.md): a recorded reply arms the next
        # check-in; reminders the reply agreed to are stored with it, then their scheduler
        # is woken.
        self._proactive = proactive
        self._agenda_wake = agenda_wake or (lambda: None)
        # A claim takes the leases of several bots' turns at once: the longest lease of
        # them (each turn's renewals then keep its own bot's).
        self._claim_ttl = max(
            (p.lease_seconds for p in (*self._profiles.values(), *self._personas.values())),
            default=30.0,
        )

    def _extensions_for(self, bot: str) -> Extensions:
        """What plugins registered that applies to ``bot``: global ones and its own."""
        found = self._per_bot.get(bot)
        if found is None:
            found = self._per_bot[bot] = self._extensions.for_bot(bot)
        return found

    def _counter(self, conversation: ConversationKey) -> CountCall:
        """Counts a conversation's tool calls in the metrics."""
        labels = self.metrics.labels(conversation)

        def count(tool: str, outcome: str) -> None:
            self.metrics.tool_calls.labels(*labels, tool, outcome).inc()

        return count

    def _context(self, turn: Turn, profile: BotProfile) -> TurnContext:
        """What turn hooks and tools see of this turn."""
        return TurnContext(
            conversation=turn.session.conversation,
            session=turn.session,
            bot=profile.key,
            persona_id=profile.persona_id or profile.pin.name,
            messages=turn.messages,
            now=self._clock.now(),
        )

    def _outlet_for(self, bot: str) -> Outlet | None:
        profile = self._profiles.get(bot)
        return None if profile is None else profile.outlet

    @property
    def bots(self) -> tuple[str, ...]:
        """Keys of the bots hosted here."""
        return tuple(self._profiles)

    def profile(self, bot: str, persona: str | None = None) -> BotProfile:
        """The profile of a hosted bot speaking as ``persona`` (an id; None: its default).
        A persona the configuration no longer has answers as the default, logged."""
        default = self._profiles[bot]
        if persona is None or persona == default.persona_id:
            return default
        found = self._personas.get((bot, persona))
        if found is None:
            log.warning("%s: persona %r is not configured; its default answers", bot, persona)
            return default
        return found

    async def run_turn(self, conversation: ConversationKey) -> TurnOutcome:
        """Try to answer the conversation's pending input once (racing for its lease)."""
        profile = self._profiles[conversation.bot]
        lease = await leases.acquire(
            self._store,
            turn_lease(conversation),
            holder=self.holder,
            ttl=profile.lease_seconds,
            clock=self._clock,
        )
        if lease is None:
            self.metrics.lease_conflicts.labels(*self.metrics.labels(conversation)).inc()
            return "busy"  # another worker holds it: back off, do nothing
        return await self._run(conversation, profile, lease)

    # -- claim mode (the scheduler's TurnClaims; docs/scaling.md#claims) ------------------------

    async def claim(self, now: float, limit: int, skip: Sequence[ConversationKey]) -> Claims:
        """Due turns of the hosted bots handed to this process, their leases taken."""
        return await self._store.claim_due_turns(
            now,
            limit,
            holder=self.holder,
            ttl=self._claim_ttl,
            bots=self.bots,
            skip=[turn_lease(key) for key in skip],
        )

    async def next_claim_at(self, now: float, skip: Sequence[ConversationKey]) -> float | None:
        """When a claim could next take a turn of the hosted bots."""
        return await self._store.next_claim_at(now, self.bots, [turn_lease(k) for k in skip])

    async def run_claimed(self, turn: ClaimedTurn) -> TurnOutcome:
        """Run a turn the store handed over with its lease (released at the end)."""
        profile = self._profiles[turn.conversation.bot]
        return await self._run(turn.conversation, profile, turn.lease)

    async def _run(
        self, conversation: ConversationKey, profile: BotProfile, lease: Lease
    ) -> TurnOutcome:
        labels = self.metrics.labels(conversation)
        started = self._clock.now()
        try:
            outcome = await self._with_lease(conversation, profile, lease)
        finally:
            # A release the store refuses now is retried in the background: this slot is
            # free at once, and the next turn of the conversation waits only as long as the
            # store does, not until the lease expires.
            await leases.release(
                self._store,
                lease,
                ttl=profile.lease_seconds,
                clock=self._clock,
                later=self.releases,
            )
        self.metrics.turns.labels(*labels, outcome).inc()
        if outcome == "sent":
            self.metrics.turn_latency.labels(*labels).observe(self._clock.now() - started)
        elif outcome == "discarded":
            self.metrics.discarded.labels(*labels).inc()
        return outcome

    async def _with_lease(
        self, conversation: ConversationKey, profile: BotProfile, lease: Lease
    ) -> TurnOutcome:
        # The oldest session first: what was pending when /new closed a session is answered
        # there, in a turn of its own; it never joins a turn of the new session.
        turn = await self._store.pending_turn(conversation, profile.max_turn_messages)
        if turn is None:
            await self._store.clear_timer(
                conversation, await self._store.conversation_version(conversation)
            )
            return "idle"
        # The turn's session says who answers: its persona's pin, model, budget and texts.
        profile = self.profile(conversation.bot, turn.persona)
        summary = await self._memory.summary(turn.session)  # read once for gaps and prompt
        gaps = await self._memory.gaps(turn.session, summary)
        if gaps and self._gap_policy.policy == "refuse":
            await self._count_gap(turn, gaps)
            first, last = gaps[0].first, gaps[-1].last
            text = self._gap_policy.refuse_message.format(
                first=first, last=last, turns=describe(gaps)
            )
            return await self._record_and_send(turn, lease, profile, text, Usage(), None)
        admission = Admission(True)
        if self._limits is not None:
            admission = await self._limits.admit(turn)
            if not admission.granted:
                return await self._limited(turn, lease, profile, admission)
        held = _only(turn, admission.held) if admission.held else None
        if held is not None:
            # Only the limited people's messages wait; everyone else is answered. They are
            # left out of this prompt (still pending, so not history) and closed out as
            # context after the reply, so the model does not answer them in passing.
            turn = _only(turn, tuple(a for a in turn.authors if a not in admission.held))
        outcome = await self._generate(turn, lease, profile, gaps, summary)
        if outcome != "sent" and self._limits is not None:
            await self._limits.release(admission)
        if (
            held is not None
            and outcome != "fenced"
            and not await self._hold_back(held, lease, profile, admission)
        ):
            return "fenced"
        return outcome

    async def _close_out(
        self, turn: Turn, lease: Lease, profile: BotProfile, reason: str, kind: str
    ) -> bool:
        """Mark the turn's messages handled without a reply, with the reason (stored, logged
        and counted); False when fenced."""
        conversation = turn.session.conversation
        if not await self._store.skip_turn(
            turn, lease, self._clock.now(), profile.queue, reason=reason
        ):
            return False
        labels = self.metrics.labels(conversation)
        self.metrics.closed_out.labels(*labels, kind).inc(len(turn.messages))
        log.warning(
            "%s: %d message(s) closed out without a reply (%s)",
            turn.session,
            len(turn.messages),
            reason,
        )
        return True

    async def _hold_back(
        self, held: Turn, lease: Lease, profile: BotProfile, admission: Admission
    ) -> bool:
        """Keep limited people's messages as context, unanswered; tell each of them once."""
        limit = admission.limit or "unknown"
        if not await self._close_out(held, lease, profile, f"limited: {limit}", "limited"):
            return False
        labels = self.metrics.labels(held.session.conversation)
        self.metrics.limit_hits.labels(*labels, limit).inc()
        if admission.notice:
            await self.delivery.send(held.session.conversation, admission.notice, kind="notice")
        return True

    async def _limited(
        self, turn: Turn, lease: Lease, profile: BotProfile, admission: Admission
    ) -> TurnOutcome:
        """A limit holds everyone back: keep the messages as context, tell once, no model call."""
        if not await self._hold_back(turn, lease, profile, admission):
            return "fenced"
        return "limited"

    async def _count_gap(self, turn: Turn, gaps: tuple[Gap, ...]) -> None:
        """Count, log and note the gap; the note (a session value) is written when the gap
        is first found or grows, so the console lists when each was found, from any process."""
        policy = self._gap_policy.policy
        self.counters[f"gap_{policy}"] += 1
        labels = self.metrics.labels(turn.session.conversation)
        self.metrics.gap_notices.labels(*labels, policy).inc()
        log.warning(
            "%s: turns %s are missing (gap policy %s)", turn.session, describe(gaps), policy
        )
        noted = f"turns {describe(gaps)} missing; gap policy {policy}"
        if await self._store.get_state(turn.session, GAP_NOTICED_KEY) != noted:
            await self._store.set_state(turn.session, GAP_NOTICED_KEY, noted, self._clock.now())

    async def _generate(
        self,
        turn: Turn,
        lease: Lease,
        profile: BotProfile,
        gaps: tuple[Gap, ...],
        summary: Summary | None,
    ) -> TurnOutcome:
        """Assemble, get the model's answer (through the tool loop), record and send it."""
        conversation = turn.session.conversation
        notice = None
        if gaps:
            await self._count_gap(turn, gaps)
            notice = gap_notice(gaps)
            if self._gap_policy.policy == "tell_user":
                await self._tell_once(turn, gaps, profile)
        context = self._context(turn, profile)
        extensions = self._extensions_for(conversation.bot)
        policy = self._tool_policy
        by = weights(turn.messages)

        async def charge(result: ModelResult) -> None:
            # Each step of the loop is charged as it answers, like any reply.
            await self._accounting.charge(conversation, "reply", result, by)

        loop = ToolLoop(
            llm=self._llm,
            clock=self._clock,
            registry=extensions.tools,
            policy=policy,
            context=context,
            charge=charge,
            count=self._counter(conversation),
        )
        relay: Relay | None = None
        try:
            async with (
                profile.outlet.typing(conversation),
                self._renewing(lease, profile) as lost,
            ):
                # Built under the renewed lease and the typing indicator: fetching a photo or
                # transcribing a voice note may take longer than the lease (bot/runtime/media.py).
                assembled = await self._memory.build(
                    turn, profile.pin, gap_notice=notice, summary=summary, policy=profile.memory
                )
                log.debug(
                    "turn %s v0=%d messages=%d prompt~%d tokens",
                    turn.session,
                    turn.version,
                    len(turn.messages),
                    assembled.total_tokens,
                )
                layers = await context_layers(
                    extensions.before_model,
                    context,
                    clock=self._clock,
                    seconds=policy.hook_timeout_seconds,
                )
                prompted = with_context(assembled, layers)
                request = prompted.request
                relay = await self._relay(turn, profile, lost)
                if relay is None:
                    answered = await loop.run(request)
                else:
                    streamed = await self._streamed(loop, request, relay)
                    if streamed is None:
                        return await self._stopped(
                            turn, lease, profile, relay, request.model, prompted.total_tokens, by
                        )
                    answered = streamed
        except ModelError as exc:
            await _discard(relay)
            return await self._model_failed(turn, lease, profile, exc)
        except BaseException:
            await _discard(relay)  # cancelled (shutdown) or a bug: nothing half-written stays
            raise
        if relay is not None:
            await relay.close()  # nothing more is shown: the final message comes next
        await self._recovered(turn)
        result = answered.result
        if answered.steps:
            log.info(
                "turn %s: %d tool step(s), %d call(s), %d deferred effect(s)%s",
                turn.session,
                answered.steps,
                answered.calls,
                len(answered.effects),
                f"; stopped at the {answered.bound} bound" if answered.bound else "",
            )
        text = result.text
        if result.stop_reason == "refusal" or not has_visible_text(text):
            log.warning(
                "model gave no answer for %s (stop_reason %s, %d characters); "
                "sending the refusal line",
                conversation,
                result.stop_reason,
                len(text),
            )
            self.metrics.refusals.labels(*self.metrics.labels(conversation)).inc()
            text = profile.refusal_message
        return await self._record_and_send(
            turn,
            lease,
            profile,
            text,
            answered.usage,
            result.model,
            effects=answered.effects,
            context=context,
            relay=relay,
        )

    async def _model_failed(
        self, turn: Turn, lease: Lease, profile: BotProfile, exc: ModelError
    ) -> TurnOutcome:
        """The model gave no answer: retry later, close the turn out, or park it."""
        conversation = turn.session.conversation
        if isinstance(exc, ModelUnavailable):
            return await self._retry_later(turn, profile, exc)
        log.error("model rejected the turn of %s: %s", conversation, exc)
        if isinstance(exc, RequestRejected):
            # This request can never succeed: close the turn out so that it is never sent
            # again (the next message gets a turn of its own), and say so.
            if not await self._close_out(turn, lease, profile, f"rejected: {exc}", "rejected"):
                return "fenced"
            if profile.rejected_notice:
                await self.delivery.send(conversation, profile.rejected_notice, kind="notice")
            return "closed"
        # Not about this turn (authentication, permission, unknown model): park these
        # messages (they stay stored and pending; the next message's turn covers them again,
        # once the operator fixed the cause) rather than loop.
        await self._store.clear_timer(conversation, turn.version, only_if_idle=False)
        return "failed"

    async def _relay(self, turn: Turn, profile: BotProfile, lost: asyncio.Event) -> Relay | None:
        """The preview of this generation, when the bot streams in this chat (else None)."""
        outlet = profile.outlet
        if profile.stream.mode == "off" or not isinstance(outlet, Streams):
            return None
        conversation = turn.session.conversation
        if profile.stream.mode == "edit":
            await self._retract_orphan(turn, outlet)
        reply_to = turn.messages[-1].platform_message_id if turn.messages else None
        preview = outlet.preview(conversation, profile.stream, reply_to=reply_to)
        if preview is None:
            return None
        session = turn.session

        async def posted(message_id: str) -> None:
            # A posted preview is on record until the reply replaces it or it is deleted, so
            # that a crash in between leaves no half reply behind (bot/runtime/delivery.py).
            try:
                await self._store.set_state(session, PREVIEW_KEY, message_id, self._clock.now())
            except StoreError as exc:
                log.warning("%s: preview %s not on record: %s", session, message_id, exc)

        relay = Relay(
            preview,
            clock=self._clock,
            interval=profile.stream.interval,
            conversation=conversation,
            stops=self.stops if profile.stream.stop != "off" else None,
            lost=lost,
            on_posted=posted,
        )
        relay.start()
        return relay

    async def _retract_orphan(self, turn: Turn, outlet: Streams) -> None:
        """A preview still on record here was left by a generation that never finished (a
        crash before its final check): delete it, so no half reply stays in the chat."""
        orphan = await self._store.get_state(turn.session, PREVIEW_KEY)
        if isinstance(orphan, str):
            log.info("%s: deleting preview %s left by an earlier attempt", turn.session, orphan)
            await outlet.retract(turn.session.conversation, orphan)
            await self._store.delete_state(turn.session, PREVIEW_KEY)

    async def _streamed(
        self, loop: ToolLoop, request: ModelRequest, relay: Relay
    ) -> LoopResult | None:
        """The tool loop with its text shown as it comes; None when the person stopped it."""
        work = asyncio.ensure_future(loop.run(request, stream=relay.text))
        stop = asyncio.ensure_future(relay.stopped.wait())
        try:
            await asyncio.wait({work, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not work.done():
                work.cancel()
                await asyncio.gather(work, return_exceptions=True)
        if not work.cancelled():
            return work.result()  # the whole answer arrived (or its error is raised here)
        return None

    async def _stopped(
        self,
        turn: Turn,
        lease: Lease,
        profile: BotProfile,
        relay: Relay,
        model: str,
        prompt_tokens: int,
        by: Mapping[str, int],
    ) -> TurnOutcome:
        """The person pressed stop: keep what they saw (``stop = "keep"``) or nothing; the
        turn is answered either way, so it does not run again."""
        await relay.close()
        conversation = turn.session.conversation
        kept = relay.shown if profile.stream.stop == "keep" else ""
        # The cancelled call reported no usage: charge the prompt as assembled (images
        # included) and what was shown, so that stopping early never makes generations free.
        usage = Usage(input_tokens=prompt_tokens, output_tokens=estimate_tokens(relay.shown))
        await self._accounting.charge(
            conversation, "reply", ModelResult(kept, usage, model, "stopped"), by
        )
        log.info(
            "%s: generation stopped by the person (%d characters kept)", turn.session, len(kept)
        )
        if has_visible_text(kept):
            outcome = await self._record_and_send(
                turn, lease, profile, kept, usage, model, relay=relay
            )
            return "stopped" if outcome == "sent" else outcome
        await relay.discard()
        if not await self._close_out(turn, lease, profile, "stopped by the person", "stopped"):
            return "fenced"
        return "stopped"

    async def _record_and_send(
        self,
        turn: Turn,
        lease: Lease,
        profile: BotProfile,
        text: str,
        usage: Usage,
        model: str | None,
        *,
        effects: Sequence[Effect] = (),
        context: TurnContext | None = None,
        relay: Relay | None = None,
    ) -> TurnOutcome:
        """The final check, then delivery of a recorded reply, its side effects and hooks.

        Effects and ``after_reply`` hooks run only here, after ``finish_turn`` recorded the
        reply: a discarded or fenced turn returns before them (bot/runtime/tools.py)."""
        conversation = turn.session.conversation
        if not has_visible_text(text):  # e.g. an operator's blank refusal_message
            text = (
                profile.refusal_message.strip()
                if has_visible_text(profile.refusal_message)
                else DEFAULT_REFUSAL
            )
        reminders: list[NewReminder] = []
        if self._proactive is not None and effects:
            # The built-in reminder calls are stored by the final check itself, exactly once.
            mine, effects = reminder_effects(effects)
            if mine:
                context = context or self._context(turn, profile)
                reminders = await stored_reminders(self._proactive, mine, context)
        finished = await self._store.finish_turn(
            turn, lease, text, self._clock.now(), profile.queue, usage, model, reminders
        )
        if finished.outcome != "recorded" and relay is not None:
            # Not this generation's reply: take back what it showed (docs/architecture.md
            # #streaming); the next generation shows its own.
            await relay.discard()
            await self._forget_preview(turn, relay)
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
            "turn %s: %d message(s), in=%d out=%d cache_write=%d cache_read=%d, "
            "%.2fs after the first message",
            turn.session,
            len(turn.messages),
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_creation_input_tokens,
            usage.cache_read_input_tokens,
            self._clock.now() - turn.first_pending_at,
        )
        self._memory.schedule_compaction(turn.session)
        if self._proactive is not None:
            await self._proactive.replied(conversation, turn.persona)
            if reminders:
                self._agenda_wake()
        replaces = None if relay is None else relay.preview.message_id
        if relay is not None:
            # Off the record before the send: a crash after it may leave the preview
            # beside a re-sent reply, but the next turn can never delete a delivered reply.
            await self._forget_preview(turn, relay)
        try:
            await self.delivery.deliver(finished.outbox, replaces=replaces)
        except Exception:
            # The reply is recorded (the outbox sends it later): its effects happen all the same.
            await self._after_recorded(turn, profile, text, effects, context)
            raise
        finally:
            if relay is not None and replaces is None:
                await relay.take_back_unknown()  # a preview post that arrived unanswered
        await self._after_recorded(turn, profile, text, effects, context)
        return "sent"

    async def _forget_preview(self, turn: Turn, relay: Relay) -> None:
        """The posted preview was replaced or deleted: no longer on record."""
        if relay.preview.message_id is not None:
            await self._store.delete_state(turn.session, PREVIEW_KEY)

    async def _after_recorded(
        self,
        turn: Turn,
        profile: BotProfile,
        text: str,
        effects: Sequence[Effect],
        context: TurnContext | None,
    ) -> None:
        """A recorded reply's side effects, then the ``after_reply`` hooks (none may raise)."""
        extensions = self._extensions_for(profile.key)
        if not effects and not extensions.after_reply:
            return
        context = context or self._context(turn, profile)
        await apply(
            effects,
            clock=self._clock,
            policy=self._tool_policy,
            context=context,
            count=self._counter(turn.session.conversation),
        )
        await after_reply(
            extensions.after_reply,
            context,
            text,
            clock=self._clock,
            seconds=self._tool_policy.hook_timeout_seconds,
        )

    async def _tell_once(self, turn: Turn, gaps: tuple[Gap, ...], profile: BotProfile) -> None:
        """Tell the user about missing turns once per session (and again if the gap grows)."""
        told = await self._store.get_state(turn.session, GAP_TOLD_KEY)
        if told == describe(gaps):
            return
        text = self._gap_policy.tell_user_message.format(
            first=gaps[0].first, last=gaps[-1].last, turns=describe(gaps)
        )
        await self.delivery.send(turn.session.conversation, text, kind="notice")
        await self._store.set_state(turn.session, GAP_TOLD_KEY, describe(gaps), self._clock.now())

    async def _retry_later(
        self, turn: Turn, profile: BotProfile, exc: ModelUnavailable
    ) -> TurnOutcome:
        """Keep the messages pending and retry with bounded exponential backoff; tell the user
        once per outage that the answer is coming."""
        conversation = turn.session.conversation
        attempt = self._failures.get(conversation, 0)
        self._failures[conversation] = attempt + 1
        delay = min(self._retry_max, 2.0 * 2**attempt)
        if isinstance(exc, RateLimited) and exc.retry_after is not None:
            delay = max(delay, exc.retry_after)
        log.warning("model unavailable for %s (%s); retry in %.1fs", conversation, exc, delay)
        await self._store.rearm_timer(conversation, self._clock.now() + delay)
        if self._trouble_notice:
            # Session state, not process memory: another process that retries the same
            # conversation during the same outage does not notify again.
            told = await self._store.get_state(turn.session, TROUBLE_KEY)
            if told is NOT_SET:
                await self._store.set_state(turn.session, TROUBLE_KEY, "1", self._clock.now())
                await self.delivery.send(conversation, self._trouble_notice, kind="notice")
        return "retry"

    async def _recovered(self, turn: Turn) -> None:
        """The model answered: the outage (if any) is over."""
        self._failures.pop(turn.session.conversation, None)
        if (
            self._trouble_notice
            and await self._store.get_state(turn.session, TROUBLE_KEY) != NOT_SET
        ):
            await self._store.delete_state(turn.session, TROUBLE_KEY)

    @contextlib.asynccontextmanager
    async def _renewing(self, lease: Lease, profile: BotProfile) -> AsyncIterator[asyncio.Event]:
        """Renew the lease while the body runs (bot.queue.lease); yields "lost"."""
        async with renewing(
            self._store, lease, ttl=profile.lease_seconds, clock=self._clock
        ) as lost:
            yield lost

    async def aclose(self) -> None:
        """The process stops: stop retrying releases (their leases expire by themselves)."""
        await self.releases.aclose()

    async def recover_outbox(self, older_than: float) -> int:
        """Deliver replies recorded but not sent before a crash (see bot.runtime.delivery)."""
        return await self.delivery.recover(older_than)


async def _discard(relay: Relay | None) -> None:
    """Take back a failed generation's preview (nothing when there is none)."""
    if relay is not None:
        await relay.discard()


def _only(turn: Turn, authors: tuple[str, ...]) -> Turn:
    """The part of a turn written by these authors."""
    return replace(turn, messages=tuple(m for m in turn.messages if m.author_id in authors))
