"""Replies: the entry of a reply turn (the scheduler's ``run_turn``, or a claimed turn), what is
read before its prompt, and what holds it back; the sequence itself is the turn kernel's.

    lease (bot/runtime/turn.py) -> pending turn -> gaps, limits -> the reply job
    (bot/runtime/reply.py: prompt, model with the tool loop, final check, send)

Invariants (docs/architecture.md#queue):
- the model is asked once per attempt (a tool loop's calls are that one answer's steps), with
  the oldest pending messages up to v0 (at most ``max_turn_messages``; the rest wait for the
  next turn);
- nothing is sent unless the final check (one store transaction) recorded the reply, so a
  worker whose lease was taken over, or whose input went stale, never sends;
- a turn is submitted until it is answered or closed out (the model rejected it, a limit holds
  its author back; bot/runtime/trouble.py): a closed-out message is never submitted again, so
  no conversation can get stuck behind one bad turn, before or after /new;
- the people a limit holds back are left out of the prompt and closed out as context after
  the reply (so the model does not answer them in passing); everyone else is answered;
- the typing indicator and the lease are released on every path.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol

from bot.core.events import ClaimedTurn, Claims, ConversationKey, Lease, Turn
from bot.core.queue_rules import turn_lease
from bot.core.tasks import Background
from bot.metrics import Metrics
from bot.queue.cutoff import Cutoffs
from bot.runtime.delivery import Delivery
from bot.runtime.extensions import Extensions
from bot.runtime.limits import Admission, Limits
from bot.runtime.profiles import (
    DEFAULT_REFUSAL,
    DEFAULT_REJECTED,
    NO_STREAM,
    BotProfile,
    Bots,
    GapPolicy,
    ReplyPolicies,
    TurnOutcome,
)
from bot.runtime.reply import AgendaLink, ReplyJob, ReplyTurn
from bot.runtime.scene_line import SceneRunStore, SceneTurn
from bot.runtime.scenes import Scenes
from bot.runtime.streaming import StopSignals
from bot.runtime.trouble import GAP_TOLD_KEY, TROUBLE_KEY, Trouble, TroubleStore
from bot.runtime.turn import TurnKernel, TurnParts
from bot.store.contracts import ConversationReads, ToolCallStore
from memory.retention.gaps import Gap, describe, gap_notice

log = logging.getLogger("personabot.pipeline")

__all__ = [
    "DEFAULT_REFUSAL",
    "DEFAULT_REJECTED",
    "GAP_TOLD_KEY",
    "NO_STREAM",
    "TROUBLE_KEY",
    "AgendaLink",
    "BotProfile",
    "Bots",
    "GapPolicy",
    "Pipeline",
    "ReplyPolicies",
    "ReplyStore",
    "TurnOutcome",
    "TurnParts",
]


class ReplyStore(TroubleStore, ConversationReads, ToolCallStore, Protocol):
    """What the reply side asks the store: due turns claimed, the pending turn and the
    conversation's version, its timer, the final check (``finish_turn``), a turn closed out,
    and the session's notes (the turn lease is the kernel's: ``TurnParts.leases``; a scene's
    lines are asked of the ``scenes`` store, bot/runtime/scenes.py)."""


class Pipeline:
    """Runs reply turns for the bots this process hosts, through the turn kernel."""

    def __init__(
        self,
        *,
        store: ReplyStore,
        parts: TurnParts,
        bots: Bots,
        policies: ReplyPolicies | None = None,
        limits: Limits | None = None,
        extensions: Extensions | None = None,
        agenda: AgendaLink | None = None,
        scenes: SceneRunStore | None = None,
    ) -> None:
        """``scenes``: the store of scenes' turns (the same store as ``store``, by its own
        contract; None: no bot here is a scene)."""
        self._store = store
        self._parts = parts
        self._kernel = TurnKernel(parts)
        self._bots = bots
        self._policies = policies or ReplyPolicies()
        self._limits = limits
        self._extensions = extensions or Extensions()
        self._per_bot: dict[str, Extensions] = {}
        # Check-ins and reminders (docs/initiatives.md), when some bot uses them.
        self._agenda = agenda
        self._trouble = Trouble(store=store, parts=parts, policies=self._policies)
        self._scenes = (
            None
            if scenes is None
            else Scenes(
                store=scenes, parts=parts, kernel=self._kernel, bots=bots, trouble=self._trouble
            )
        )

    @property
    def holder(self) -> str:
        """The name this process holds leases by."""
        return self._parts.holder

    @property
    def releases(self) -> Background:
        """Lease releases the store refused at the end of a turn, retried in the background."""
        return self._kernel.releases

    @property
    def metrics(self) -> Metrics:
        """The process's metrics."""
        return self._parts.metrics

    @property
    def counters(self) -> Counter[str]:
        """Gap notices by policy (tests, benchmarks)."""
        return self._trouble.counters

    @property
    def stops(self) -> StopSignals:
        """Stop requests of streamed drafts (shared with the router, which hears of them)."""
        return self._parts.previews.stops

    @property
    def cutoffs(self) -> Cutoffs | None:
        """Its running generations, for the ingestor to cut (None: never cut)."""
        return self._parts.cutoffs

    @property
    def delivery(self) -> Delivery:
        """The one outbound path (bot/runtime/delivery.py)."""
        return self._parts.delivery

    @property
    def bots(self) -> tuple[str, ...]:
        """Keys of the bots hosted here."""
        return self._bots.keys

    def profile(self, bot: str, persona: str | None = None) -> BotProfile:
        """The profile of a hosted bot speaking as ``persona`` (an id; None: its default).
        A persona the configuration no longer has answers as the default, logged."""
        return self._bots.profile(bot, persona)

    def _extensions_for(self, bot: str) -> Extensions:
        """What plugins registered that applies to ``bot``: global ones and its own."""
        found = self._per_bot.get(bot)
        if found is None:
            found = self._per_bot[bot] = self._extensions.for_bot(bot)
        return found

    async def run_turn(self, conversation: ConversationKey) -> TurnOutcome:
        """Try to answer the conversation's pending input once (racing for its lease)."""
        return await self._run(conversation, None)

    # -- claim mode (the scheduler's TurnClaims; docs/scaling.md#claims) ------------------------

    async def claim(self, now: float, limit: int, skip: Sequence[ConversationKey]) -> Claims:
        """Due turns of the hosted bots handed to this process, their leases taken."""
        return await self._store.claim_due_turns(
            now,
            limit,
            holder=self.holder,
            ttl=self._bots.claim_ttl,
            bots=self.bots,
            skip=[turn_lease(key) for key in skip],
        )

    async def next_claim_at(self, now: float, skip: Sequence[ConversationKey]) -> float | None:
        """When a claim could next take a turn of the hosted bots."""
        skipped = [turn_lease(k) for k in skip]
        return await self._store.next_claim_at(now, self.bots, skipped)

    async def run_claimed(self, turn: ClaimedTurn) -> TurnOutcome:
        """Run a turn the store handed over with its lease (released at the end)."""
        return await self._run(turn.conversation, turn.lease)

    async def _run(self, conversation: ConversationKey, claimed: Lease | None) -> TurnOutcome:
        profile = self._bots.defaults[conversation.bot]
        clock, metrics = self._parts.clock, self.metrics
        labels = metrics.labels(conversation)
        async with self._kernel.hold(conversation, profile.lease_seconds, claimed) as lease:
            if lease is None:
                metrics.lease_conflicts.labels(*labels).inc()
                return "busy"  # another worker holds it: back off, do nothing
            started = clock.now()
            outcome = await self._with_lease(conversation, profile, lease)
        metrics.turns.labels(*labels, outcome).inc()
        if outcome == "sent":
            metrics.turn_latency.labels(*labels).observe(clock.now() - started)
        elif outcome == "discarded":
            metrics.discarded.labels(*labels).inc()
        return outcome

    async def _with_lease(
        self, conversation: ConversationKey, profile: BotProfile, lease: Lease
    ) -> TurnOutcome:
        store, memory = self._store, self._parts.memory
        # The oldest session first: what was pending when /new closed a session is answered
        # there, in a turn of its own; it never joins a turn of the new session.
        turn = await store.pending_turn(conversation, profile.max_turn_messages)
        if turn is None and self._scenes is not None and profile.scene is not None:
            # Nothing pending: a scene's timer may bring the next line between personas.
            spoke = await self._scenes.talk_on(conversation, profile, lease)
            if spoke is not None:
                return spoke
        if turn is None:
            version = await store.conversation_version(conversation)
            await store.clear_timer(conversation, version)
            return "idle"
        # The turn's session says who answers: its persona's pin, model, budget and texts.
        profile = self.profile(conversation.bot, turn.persona)
        summary = await memory.summary(turn.session)  # read once for gaps and prompt
        gaps = await memory.gaps(turn.session, summary)
        reply = ReplyTurn(turn, lease, profile, summary)
        gap_policy = self._policies.gaps
        if gaps and gap_policy.policy == "refuse":
            await self._trouble.count_gap(turn, gaps)
            texts = self._policies.languages.texts(conversation.bot, turn.persona)
            text = texts(gap_policy.refuse_message).format(
                first=gaps[0].first, last=gaps[-1].last, turns=describe(gaps)
            )
            text = texts.finish(text)
            return await self._reply(replace(reply, refusal=text))
        return await self._admitted(reply, gaps)

    async def _admitted(self, reply: ReplyTurn, gaps: tuple[Gap, ...]) -> TurnOutcome:
        """The turn within the limits: those a limit holds back wait, everyone else is
        answered."""
        turn, lease, profile = reply.turn, reply.lease, reply.profile
        admission = Admission(True)
        if self._limits is not None:
            admission = await self._limits.admit(turn)
            if not admission.granted:
                # A limit holds everyone back: messages kept as context, told once, no model.
                held_back = await self._trouble.hold_back(turn, lease, profile, admission)
                # No preview follows: what a cut generation handed over goes now.
                await self._parts.previews.clear(turn.session, profile.outlet)
                return "limited" if held_back else "fenced"
        held = _only(turn, admission.held) if admission.held else None
        if held is not None:
            # Only the limited people's messages wait; everyone else is answered. They are
            # left out of this prompt (still pending, so not history) and closed out as
            # context after the reply, so the model does not answer them in passing.
            turn = _only(turn, tuple(a for a in turn.authors if a not in admission.held))
        outcome = await self._answer(replace(reply, turn=turn), gaps)
        if outcome != "sent" and self._limits is not None:
            await self._limits.release(admission)
        if (
            held is not None
            and outcome != "fenced"
            and not await self._trouble.hold_back(held, lease, profile, admission)
        ):
            return "fenced"
        return outcome

    async def _answer(self, reply: ReplyTurn, gaps: tuple[Gap, ...]) -> TurnOutcome:
        """Note missing turns (and tell, by the gap policy), then the reply job."""
        if not gaps:
            return await self._reply(reply)
        await self._trouble.count_gap(reply.turn, gaps)
        if self._policies.gaps.policy == "tell_user":
            await self._trouble.tell_once(reply.turn, gaps)
        return await self._reply(replace(reply, gap_notice=gap_notice(gaps)))

    async def _reply(self, reply: ReplyTurn) -> TurnOutcome:
        scene = reply.profile.scene
        if scene is not None and self._scenes is not None and reply.refusal is None:
            # Several speakers under this one lease (docs/scenes.md).
            return await self._scenes.play(
                SceneTurn(
                    reply.turn, reply.lease, reply.profile, scene, reply.summary, reply.gap_notice
                )
            )
        job = ReplyJob(
            store=self._store,
            parts=self._parts,
            trouble=self._trouble,
            extensions=self._extensions_for(reply.profile.key),
            agenda=self._agenda,
            reply=reply,
        )
        return await self._kernel.run(job, reply.lease)

    async def aclose(self) -> None:
        """The process stops: stop retrying releases (their leases expire by themselves)."""
        await self._kernel.aclose()

    async def recover_outbox(self, older_than: float) -> int:
        """Deliver replies recorded but not sent before a crash (see bot.runtime.delivery)."""
        return await self.delivery.recover(older_than)


def _only(turn: Turn, authors: tuple[str, ...]) -> Turn:
    """The part of a turn written by these authors."""
    return replace(turn, messages=tuple(m for m in turn.messages if m.author_id in authors))
