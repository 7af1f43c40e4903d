"""The turn kernel: every message the persona writes runs one sequence.

    lease -> prompt -> model (the tool loop; streamed where the chat shows it) -> final check
          -> the voice, if spoken -> delivery -> deferred tool effects -> ``after_reply`` hooks

A reply (``Pipeline``, bot/runtime/pipeline.py and bot/runtime/reply.py), a check-in and a
reminder (``Proactive``, bot/runtime/initiatives.py) all run through :meth:`TurnKernel.run`
under :meth:`TurnKernel.hold`; what differs is their :class:`Job`: how the prompt is built (or
that no model call is needed), what the model's answer, its failure or a stop means, and which
final check the store makes (``finish_turn`` or ``finish_proactive``).

Invariants (docs/architecture.md#queue, #delivery, #streaming, #initiatives):
- the turn lease (``queue_rules.turn_lease``) is held for the whole sequence: taken by its CAS
  or handed over by a claim, renewed while the prompt is built and the model works (building
  may fetch media for longer than the lease), released on every path; a release the store
  refuses is retried in the background (bot/queue/lease.py), so the slot is free at once;
- nothing is sent unless the store's final check (one transaction) recorded it: a worker
  whose lease was taken over, or whose input went stale, never sends;
- a streamed preview is closed before the final check (nothing shown lands after the final
  message), taken back when its generation was not recorded, and off the record before the
  recorded reply is sent (a crash then may leave it beside the reply, never delete a reply);
- a reply is spoken (docs/voices.md) only once recorded, before its send is claimed, under
  the renewed lease (the conversation's next turn waits: replies keep their order) and the
  typing indicator; a synthesis that fails or is too slow sends the text;
- deferred tool effects and ``after_reply`` hooks run once the final check recorded the
  message, even when its delivery failed (the outbox sends it later); never for a message the
  final check discarded or fenced, nor for a failed model call;
- a job that names the conversation whose newer input cuts it (``Job.cut_key``: replies) is
  cut while it prompts and generates, as soon as this process stores input that its
  ``cut_by`` says the final check would discard it for (docs/architecture.md#queue rule 9):
  the model call is cancelled, its preview taken back, nothing recorded or sent, and the lease
  released like a discarded turn's. Once the model step returned, only the final check
  decides; a tool with side effects never ran before it (they are deferred), so a cut never
  leaves an effect half done.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from bot.core.clock import Clock
from bot.core.errors import ModelError
from bot.core.events import ConversationKey, FinishResult, Lease, OutboxItem, VoiceMessage
from bot.core.llm import (
    BaseLLM,
    ContentBlock,
    ModelRequest,
    ModelResult,
    TextBlock,
    ToolResult,
    ToolUse,
    Usage,
)
from bot.core.queue_rules import turn_lease
from bot.core.tasks import Background
from bot.metrics import Metrics
from bot.queue import lease as leases
from bot.queue.cutoff import Cut, Cutoffs, NewerInput, unless_cut
from bot.queue.lease import renewing
from bot.runtime.delivery import Delivery
from bot.runtime.extensions import AfterReply
from bot.runtime.hooks import after_reply
from bot.runtime.previews import Previews
from bot.runtime.streaming import Relay, streamed
from bot.runtime.tools import (
    CallLedger,
    CountCall,
    Effect,
    LoopResult,
    ToolLoop,
    ToolPolicy,
    ToolRegistry,
)
from bot.runtime.tools import apply as apply_effects
from bot.runtime.turn_context import TurnContext
from bot.runtime.usage import Accounting
from bot.runtime.voice import Voices
from bot.store.contracts import LeaseStore
from memory.service import Memory
from memory.tokens import estimate_tokens

O = TypeVar("O")  # noqa: E741 - the outcome a job ends with


@dataclass(frozen=True, slots=True)
class TurnParts:
    """What every turn needs, replies, check-ins and reminders alike. Of the store, the
    kernel asks only for the turn lease; each runner gets the rest of what it asks as its own
    narrow contract (``ReplyStore`` in bot/runtime/pipeline.py, ``ProactiveStore`` in
    bot/runtime/initiatives.py), and the composition root builds the parts
    (bot/app/build/turns.py ``turn_parts``)."""

    leases: LeaseStore
    llm: BaseLLM
    clock: Clock
    memory: Memory
    delivery: Delivery
    accounting: Accounting
    previews: Previews
    metrics: Metrics
    holder: str
    tools: ToolPolicy = field(default_factory=ToolPolicy)
    #: Running reply generations, cut by newer input (None: ``[queue] cut_stale = false``).
    cutoffs: Cutoffs | None = None
    #: The personas' voices (docs/voices.md; None: no persona here speaks).
    voices: Voices | None = None


@dataclass(frozen=True, slots=True)
class Ask:
    """The model step a job asks for: the request, whose words it reads (who pays, by
    bot/core/shares.py), the tools it may call and the preview it is shown on."""

    request: ModelRequest
    context: TurnContext
    purpose: str  # "reply", "initiative", "reminder": the accounting's label
    by: Mapping[str, int]
    tools: ToolRegistry = field(default_factory=ToolRegistry)
    relay: Relay | None = None
    # The record of effectful outside calls (a reply's: bot/runtime/ledger.py; None: such
    # tools are not offered).
    ledger: CallLedger | None = None


@dataclass(frozen=True, slots=True)
class Draft:
    """What the final check is asked to record (visible text), with what the model left."""

    text: str
    usage: Usage = field(default_factory=Usage)
    model: str | None = None
    effects: tuple[Effect, ...] = ()


class Job(abc.ABC, Generic[O]):
    """What differs between a reply, a check-in and a reminder; the kernel runs the rest.

    Each step returns the job's outcome ``O`` when the sequence ends there (nothing to ask,
    a skip, a retry later), else what the next step takes.
    """

    #: The ``after_reply`` hooks of a recorded message (with its effects, if any).
    hooks: Sequence[AfterReply] = ()
    #: The lease's lifetime while the job works (its renewals); read after :meth:`ready`.
    ttl: float = 30.0
    #: The conversation whose newer input may cut the model step (None: never cut; check-ins
    #: and reminders are not stale when the person writes).
    cut_key: ConversationKey | None = None
    #: Whether the recorded message is to be spoken (:meth:`voice_message`); set by the job
    #: by the time its prompt is built (docs/voices.md).
    spoken: bool = False

    async def ready(self) -> O | None:
        """Checks under the lease before the model step (and its renewals) starts; the
        outcome when the job ends there (nothing is due any more)."""
        return None

    def typing(self) -> contextlib.AbstractAsyncContextManager[object]:
        """Held while the prompt is built and the model works (a typing indicator)."""
        return contextlib.nullcontext()

    def speaking(self) -> contextlib.AbstractAsyncContextManager[object]:
        """Held while the recorded message is spoken (:meth:`voice_message`)."""
        return self.typing()

    @abc.abstractmethod
    async def prompt(self, lost: asyncio.Event) -> Ask | Draft | O:
        """The model step, or a text to record without one; under the renewed lease
        (``lost`` is set if it is lost)."""

    @abc.abstractmethod
    async def answered(self, answer: LoopResult) -> Draft | O:
        """What to record of the model's answer."""

    @abc.abstractmethod
    async def failed(self, exc: ModelError) -> Draft | O:
        """The model gave no answer."""

    async def stopped(self, ask: Ask) -> Draft | O:
        """The person stopped the streamed generation (only a job that streams)."""
        raise NotImplementedError

    def cut_by(self, newer: NewerInput) -> bool | None:
        """Whether the final check would discard this job's answer for ``newer`` input (only
        a job with a ``cut_key``; called synchronously by the ingestor, so no I/O); None:
        ask the store (:meth:`stale`)."""
        return False

    async def stale(self) -> bool:
        """Whether the store holds input that would make the final check discard this job's
        answer if it ran now (a job with a ``cut_key``; asked when another process announces
        input of the conversation, docs/architecture.md#queue rule 9)."""
        return False

    async def cut(self, ask: Ask | None, written: str | None, grown: int = 0) -> O:
        """Newer input cut the model step: charge what the cancelled call cost (``ask``: a
        model call was running, None when none was; ``written``: the text it streamed so far,
        None when it did not stream; ``grown``: the estimated tokens its request held beyond
        the first, a tool loop's steps) and end as the final check would have. Calls of a
        tool loop that answered were charged as they did."""
        raise NotImplementedError

    @abc.abstractmethod
    async def check(self, draft: Draft) -> FinishResult:
        """The store's final check: record the draft and its outbox row, or refuse."""

    @abc.abstractmethod
    async def dropped(self, finished: FinishResult) -> O:
        """The final check discarded or fenced the draft: nothing was recorded."""

    async def recorded(self, outbox: OutboxItem, draft: Draft) -> None:
        """The final check recorded the draft; called before it is delivered."""

    async def voice_message(self, outbox: OutboxItem, draft: Draft) -> VoiceMessage | None:
        """The recorded message spoken (only a job that set ``spoken``); None: as text."""
        return None

    @abc.abstractmethod
    async def delivered(self, sent: bool) -> O:
        """The recorded message went out (``sent``) or not (the outbox row says why)."""

    def context(self) -> TurnContext:
        """What tools' effects and the hooks see (needed only when there are some)."""
        raise NotImplementedError


class TurnKernel:
    """Runs jobs through the one sequence; each runner has its own (and its own releases)."""

    def __init__(self, parts: TurnParts) -> None:
        self.parts = parts
        #: Lease releases the store refused at the end of a turn, retried in the background.
        self.releases = Background()

    async def aclose(self) -> None:
        """The process stops: stop retrying releases (their leases expire by themselves) and
        waiting for hand-overs (the next generation of their session takes them over)."""
        await self.releases.aclose()
        await self.parts.previews.aclose()

    @contextlib.asynccontextmanager
    async def hold(
        self, conversation: ConversationKey, ttl: float, lease: Lease | None = None
    ) -> AsyncIterator[Lease | None]:
        """The conversation's turn lease for the body: taken by its CAS unless a claim
        handed it over (``lease``); None when another worker holds it (back off, do nothing).
        Released on every path: a release the store refuses now is retried in the
        background, so the next turn waits only as long as the store does."""
        p = self.parts
        if lease is None:
            name = turn_lease(conversation)
            lease = await leases.acquire(p.leases, name, holder=p.holder, ttl=ttl, clock=p.clock)
            if lease is None:
                yield None
                return
        try:
            yield lease
        finally:
            await leases.release(p.leases, lease, ttl=ttl, clock=p.clock, later=self.releases)

    async def run(self, job: Job[O], lease: Lease) -> O:
        """The sequence under a held lease: prompt and model (renewed), final check,
        delivery, effects and hooks."""
        early = await job.ready()
        if early is not None:
            return early
        step = await self._model_step(job, lease)
        ask, decided = step
        if not isinstance(decided, Draft):
            return decided
        relay = None if ask is None else ask.relay
        finished = await job.check(decided)
        if finished.outcome != "recorded" or finished.outbox is None:
            if ask is not None and relay is not None:
                await self.parts.previews.discard(ask.context.session, relay)
            return await job.dropped(finished)
        outbox = finished.outbox
        await job.recorded(outbox, decided)
        self.parts.memory.schedule_compaction(outbox.session)
        voice = await self._spoken(job, decided, outbox, lease)
        return await job.delivered(await self._deliver(job, decided, outbox, relay, voice))

    async def _spoken(
        self, job: Job[O], draft: Draft, outbox: OutboxItem, lease: Lease
    ) -> VoiceMessage | None:
        """The recorded message's voice, when its job speaks it (docs/voices.md): before the
        send is claimed (a crash meanwhile leaves the row unsent: recovery sends its text),
        under the renewed lease (the next turn of the conversation waits, so replies keep
        their order) and the job's indicator (Telegram: "recording a voice message")."""
        if not job.spoken:
            return None
        p = self.parts
        async with job.speaking(), renewing(p.leases, lease, ttl=job.ttl, clock=p.clock):
            return await job.voice_message(outbox, draft)

    async def _model_step(self, job: Job[O], lease: Lease) -> tuple[Ask | None, Draft | O]:
        """Prompt and model under the renewed lease (and the job's typing indicator), cut
        by newer input if the job can be."""
        p = self.parts
        ask: Ask | None = None
        answer: LoopResult | Cut | None
        with self._watch(job) as cut:
            try:
                async with (
                    job.typing(),
                    renewing(p.leases, lease, ttl=job.ttl, clock=p.clock) as lost,
                ):
                    planned = await job.prompt(lost)
                    if not isinstance(planned, Ask):
                        return None, planned
                    ask = planned
                    loop = self._loop(ask)
                    if cut is None:
                        answer = await self._ask(ask, loop)
                    else:
                        answer = await unless_cut(self._ask(ask, loop), cut)
            except ModelError as exc:
                if ask is not None and ask.relay is not None:
                    # Its preview and what it took over from a cut generation: no trace.
                    await p.previews.discard(ask.context.session, ask.relay)
                return None, await job.failed(exc)
            except BaseException:
                await _discard(ask)  # cancelled (shutdown) or a bug: nothing half-written stays
                raise
        if isinstance(answer, Cut):
            return None, await self._cut(job, ask, loop)
        if answer is None:
            return ask, await job.stopped(ask)
        if ask.relay is not None:
            await ask.relay.close()  # nothing more is shown: the final message comes next
        return ask, await job.answered(answer)

    def _watch(self, job: Job[O]) -> contextlib.AbstractContextManager[asyncio.Event | None]:
        """The job's cut signal for the model step (None: it is never cut)."""
        cutoffs = self.parts.cutoffs
        if cutoffs is None or job.cut_key is None:
            return contextlib.nullcontext()
        return cutoffs.watch(job.cut_key, job.cut_by, job.stale)

    async def _cut(self, job: Job[O], ask: Ask, loop: ToolLoop) -> O:
        """The generation was cut (``loop.asking``: the model call it cancelled, if one was
        running; the calls that answered are charged already): counted, the job ends it, its
        preview handed over to the next generation (bot/runtime/previews.py)."""
        p = self.parts
        relay = ask.relay
        asking = loop.asking
        written = None if relay is None or asking is None else relay.written(asking)
        # A tool loop's later call asked with the steps before it (tool uses and results).
        grown = 0
        if asking and loop.asked is not None:
            steps = loop.asked.messages[len(ask.request.messages) :]
            grown = sum(_block_tokens(b) for m in steps for b in m.blocks)
        conversation = ask.context.conversation
        p.metrics.generations_cut.labels(*p.metrics.labels(conversation)).inc()
        # Counted and charged before the preview is taken back: a store blip there must not
        # make the cut call free (the turn then fails out; the next one answers it all).
        try:
            return await job.cut(None if asking is None else ask, written, grown)
        finally:
            if relay is not None:
                await p.previews.hand_over(ask.context.session, relay)

    def _loop(self, ask: Ask) -> ToolLoop:
        """The tool loop of a model step (one model call when no tool is registered:
        check-ins, reminders), each call charged as soon as it answered."""
        p = self.parts
        conversation = ask.context.conversation

        async def charge(result: ModelResult) -> None:
            # Each model call is charged as soon as it answered, a tool loop's steps too.
            await p.accounting.charge(conversation, ask.purpose, result, ask.by, ask.request.model)

        return ToolLoop(
            llm=p.llm,
            clock=p.clock,
            registry=ask.tools,
            policy=p.tools,
            context=ask.context,
            charge=charge,
            count=self.counter(conversation),
            ledger=ask.ledger,
        )

    async def _ask(self, ask: Ask, loop: ToolLoop) -> LoopResult | None:
        """The tool loop, streamed into the relay, if any. None: the person stopped it."""
        if ask.relay is None:
            return await loop.run(ask.request)
        return await streamed(loop.run(ask.request, stream=ask.relay.text), ask.relay)

    async def _deliver(
        self,
        job: Job[O],
        draft: Draft,
        outbox: OutboxItem,
        relay: Relay | None,
        voice: VoiceMessage | None = None,
    ) -> bool:
        """Send the recorded message (into its preview, if one was posted); then its
        effects and hooks, which happen even when the send raised: it is recorded."""
        replaces = None if relay is None else relay.preview.message_id
        if relay is not None:
            # Off the record before the send: a crash after it may leave the preview
            # beside a re-sent reply, but the next turn can never delete a delivered reply.
            await self.parts.previews.forget(outbox.session, relay)
        try:
            sent = await self.parts.delivery.deliver(outbox, replaces=replaces, voice_message=voice)
        except Exception:
            await self._after(job, draft)
            raise
        finally:
            if relay is not None:
                if replaces is None:
                    await relay.take_back_unknown()  # a preview post that arrived unanswered
                # What it took over from a cut generation (and could not delete yet) goes
                # once the reply is out.
                await self.parts.previews.settle(outbox.session, relay)
        await self._after(job, draft)
        return sent

    async def _after(self, job: Job[O], draft: Draft) -> None:
        """A recorded message's deferred tool effects, then the ``after_reply`` hooks (none
        may raise: bot/runtime/tools.py, bot/runtime/hooks.py)."""
        if not draft.effects and not job.hooks:
            return
        p = self.parts
        context = job.context()
        count = self.counter(context.conversation)
        await apply_effects(
            draft.effects, clock=p.clock, policy=p.tools, context=context, count=count
        )
        await after_reply(
            job.hooks, context, draft.text, clock=p.clock, seconds=p.tools.hook_timeout_seconds
        )

    def counter(self, conversation: ConversationKey) -> CountCall:
        """Counts a conversation's tool calls in the metrics."""
        metrics = self.parts.metrics
        labels = metrics.labels(conversation)

        def count(tool: str, outcome: str) -> None:
            metrics.tool_calls.labels(*labels, tool, outcome).inc()

        return count


async def _discard(ask: Ask | None) -> None:
    """Take back a failed generation's preview (nothing when there is none)."""
    if ask is not None and ask.relay is not None:
        await ask.relay.discard()


def _block_tokens(block: ContentBlock) -> int:
    """Estimated input tokens of a tool loop's step block (images are not counted)."""
    if isinstance(block, TextBlock):
        return estimate_tokens(block.text)
    if isinstance(block, ToolResult):
        return estimate_tokens(block.content)
    if isinstance(block, ToolUse):
        return estimate_tokens(block.name + json.dumps(dict(block.input)))
    return 0
