"""A reply as a job of the turn kernel (bot/runtime/turn.py): what a reply adds to the sequence.

- Its prompt: the turn's messages assembled by memory, built under the renewed lease and the
  typing indicator (fetching a photo or transcribing a voice note may take longer than the
  lease, bot/runtime/media.py), the ``before_model`` hooks' context layer, the plugin tools,
  and a preview where the bot streams in this chat (docs/architecture.md#streaming).
- No empty, whitespace-only or invisible (zero-width) text is ever recorded or sent: a
  refusal gets the persona's refusal line.
- The person's stop: keep what they saw (``stop = "keep"``) or nothing; the turn is answered
  either way, so it does not run again.
- Newer input cuts it (docs/architecture.md#queue rule 9): the ingestor's signal is checked
  against this turn's session, ``v0``, messages and hard cap, so that a reply is cut only
  when its final check would discard it; a cut turn ends "discarded", its usage charged.
- Spoken (docs/voices.md) when its persona has a voice and the turn had a voice note (or
  the voice speaks always): then no text preview is shown, and the recorded reply is
  synthesised before it is sent (the text when that fails).
- Its final check is ``finish_turn``; the reminders the reply agreed to (the built-in
  ``remind_me`` calls) are stored by it, exactly once. A recorded reply arms the next check-in
  and wakes the agenda for new reminders (docs/initiatives.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from bot.core.agenda import NewReminder
from bot.core.errors import ModelError
from bot.core.events import FinishResult, Lease, OutboxItem, ToolCallRecord, Turn, VoiceMessage
from bot.core.llm import ModelResult, Usage
from bot.core.shares import weights
from bot.core.speech import VoiceOutlet
from bot.core.visible import has_visible_text
from bot.queue.cutoff import Edited, NewerInput
from bot.runtime.extensions import Extensions
from bot.runtime.hooks import context_layers
from bot.runtime.initiatives import Proactive, reminder_effects
from bot.runtime.ledger import TurnLedger
from bot.runtime.profiles import NO_STREAM, BotProfile, TurnOutcome
from bot.runtime.reminders import stored_reminders
from bot.runtime.tools import Effect, LoopResult
from bot.runtime.trouble import Trouble
from bot.runtime.turn import Ask, Draft, Job, TurnParts
from bot.runtime.turn_context import TurnContext
from bot.store.contracts import QueueStore, ToolCallStore
from memory.assemble import with_context
from memory.records import Summary
from memory.tokens import estimate_tokens

log = logging.getLogger("personabot.pipeline")


def _nothing() -> None:
    """No agenda scheduler to wake."""


@dataclass(frozen=True, slots=True)
class AgendaLink:
    """Check-ins and reminders as replies see them (docs/initiatives.md): a recorded reply
    arms the next check-in; reminders it agreed to are stored with it, then ``wake``."""

    proactive: Proactive
    wake: Callable[[], None] = field(default=_nothing)


@dataclass(frozen=True, slots=True)
class ReplyTurn:
    """One reply's turn under its lease, with what was read for it before the prompt."""

    turn: Turn
    lease: Lease
    profile: BotProfile  # of the persona the turn's session speaks as
    summary: Summary | None
    gap_notice: str | None = None  # the prompt's note of missing turns
    refusal: str | None = None  # the gap policy refuses: this text, no model call


class ReplyJobStore(QueueStore, ToolCallStore, Protocol):
    """What a reply job asks the store: the final check, newer input, its call ledger."""


class ReplyJob(Job[TurnOutcome]):
    """The kernel's job for one reply."""

    def __init__(
        self,
        *,
        store: ReplyJobStore,
        parts: TurnParts,
        trouble: Trouble,
        extensions: Extensions,
        agenda: AgendaLink | None,
        reply: ReplyTurn,
    ) -> None:
        self._store = store
        self._parts = parts
        self._trouble = trouble
        self._extensions = extensions
        self._agenda = agenda
        self._reply = reply
        self._turn = reply.turn
        self._profile = reply.profile
        self.hooks = extensions.after_reply
        self.ttl = reply.profile.lease_seconds
        self.cut_key = reply.turn.session.conversation
        self._ledger = TurnLedger(
            store=store,
            queue=store,
            leases=parts.leases,
            clock=parts.clock,
            turn=reply.turn,
            lease=reply.lease,
            ttl=reply.profile.lease_seconds,
            max_wait=reply.profile.queue.max_wait,
        )
        self._context: TurnContext | None = None
        self._reminders: list[NewReminder] = []
        self._prompt_tokens = 0
        self._stopped = False

    def context(self) -> TurnContext:
        """What turn hooks and tools see of this turn (made once)."""
        if self._context is None:
            profile = self._profile
            self._context = TurnContext(
                conversation=self._turn.session.conversation,
                session=self._turn.session,
                bot=profile.key,
                persona_id=profile.persona_id or profile.pin.name,
                messages=self._turn.messages,
                now=self._parts.clock.now(),
            )
        return self._context

    def typing(self) -> contextlib.AbstractAsyncContextManager[object]:
        """The typing indicator while the model writes (none for a refusal without it)."""
        if self._reply.refusal is not None:
            return contextlib.nullcontext()
        return self._profile.outlet.typing(self._turn.session.conversation)

    def speaking(self) -> contextlib.AbstractAsyncContextManager[object]:
        """Shows "recording a voice message" while the reply is spoken, where the platform can."""
        outlet = self._profile.outlet
        if isinstance(outlet, VoiceOutlet):
            return outlet.recording(self._turn.session.conversation)
        return self.typing()

    async def prompt(self, lost: asyncio.Event) -> Ask | Draft | TurnOutcome:
        """The assembled turn with the hooks' context layer, the tools, the preview."""
        if self._reply.refusal is not None:
            # No preview of its own: what a cut generation handed over goes now.
            await self._parts.previews.clear(self._turn.session, self._profile.outlet)
            return await self._draft(self._reply.refusal, Usage(), None)
        p, turn, profile = self._parts, self._turn, self._profile
        context = self.context()
        assembled = await p.memory.build(
            turn,
            profile.pin,
            gap_notice=self._reply.gap_notice,
            summary=self._reply.summary,
            policy=profile.memory,
            persona=profile.persona_id or None,
        )
        log.debug(
            "turn %s v0=%d messages=%d prompt~%d tokens",
            turn.session,
            turn.version,
            len(turn.messages),
            assembled.total_tokens,
        )
        layers = await context_layers(
            self._extensions.before_model,
            context,
            clock=p.clock,
            seconds=p.tools.hook_timeout_seconds,
        )
        tools = self._extensions.tools_for(context.bot, context.persona_id)
        if any(t.commits for t in tools.tools):
            # What an interrupted attempt of this turn already did outside (ledger.py).
            earlier = await self._ledger.load_earlier()
            if earlier:  # first: the context block is cut at its size, hooks' layers after
                layers = (_earlier_calls(earlier), *layers)
        prompted = with_context(assembled, layers)
        self._prompt_tokens = prompted.total_tokens
        stream = profile.stream
        if self._speaks():
            # A spoken reply shows no text preview (a draft would linger beside the voice
            # message; an edited message cannot become one): what a cut generation handed
            # over goes now (docs/voices.md#streaming).
            self.spoken, stream = True, NO_STREAM
            if profile.stream.mode != "off":
                await p.previews.clear(turn.session, profile.outlet)
        relay = await p.previews.open(turn, profile.outlet, stream, lost)
        by = weights(turn.messages)
        return Ask(prompted.request, context, "reply", by, tools, relay, self._ledger)

    async def answered(self, answer: LoopResult) -> Draft:
        """The answer's text, or the refusal line when it has none."""
        await self._trouble.recovered(self._turn)
        result = answer.result
        if answer.steps:
            log.info(
                "turn %s: %d tool step(s), %d call(s), %d deferred effect(s)%s",
                self._turn.session,
                answer.steps,
                answer.calls,
                len(answer.effects),
                f"; stopped at the {answer.bound} bound" if answer.bound else "",
            )
        text = result.text
        if result.stop_reason == "refusal" or not has_visible_text(text):
            conversation = self._turn.session.conversation
            log.warning(
                "model gave no answer for %s (stop_reason %s, %d characters); "
                "sending the refusal line",
                conversation,
                result.stop_reason,
                len(text),
            )
            metrics = self._parts.metrics
            metrics.refusals.labels(*metrics.labels(conversation)).inc()
            text = self._profile.refusal_message
        return await self._draft(text, answer.usage, result.model, answer.effects)

    async def _draft(
        self, text: str, usage: Usage, model: str | None, effects: Sequence[Effect] = ()
    ) -> Draft:
        """A visible text to record; the built-in reminder calls set aside for the final
        check, which stores them itself, exactly once (bot/runtime/tools.py runs the rest)."""
        if not has_visible_text(text):  # e.g. an operator's blank refusal_message
            text = self._profile.refusal
        if self._agenda is not None and effects:
            mine, effects = reminder_effects(effects)
            if mine:
                self._reminders = await stored_reminders(
                    self._agenda.proactive, mine, self.context()
                )
        return Draft(text, usage, model, tuple(effects))

    def _speaks(self) -> bool:
        """Whether this turn's reply is to be spoken (bot/runtime/voice.py)."""
        voices = self._parts.voices
        if voices is None:
            return False
        profile, turn = self._profile, self._turn
        persona = profile.persona_id or profile.pin.name
        return voices.speaks(persona, turn.messages, profile.outlet, turn.session.conversation)

    async def voice_message(self, outbox: OutboxItem, draft: Draft) -> VoiceMessage | None:
        """The recorded reply spoken (None: sent as text), charged to whom it answers."""
        voices = self._parts.voices
        if voices is None or self._stopped:
            return None
        profile, turn = self._profile, self._turn
        persona = profile.persona_id or profile.pin.name
        by = weights(turn.messages)
        return await voices.speak(persona, draft.text, turn.session.conversation, by)

    async def failed(self, exc: ModelError) -> TurnOutcome:
        """Retry later, close the turn out, or park it (bot/runtime/trouble.py)."""
        return await self._trouble.model_failed(self._turn, self._reply.lease, self._profile, exc)

    async def stopped(self, ask: Ask) -> Draft | TurnOutcome:
        """Keep what the person saw (``stop = "keep"``) or close the turn out."""
        relay = ask.relay
        assert relay is not None  # only a streamed generation is stopped
        await relay.close()
        turn, profile = self._turn, self._profile
        kept = relay.shown if profile.stream.stop == "keep" else ""
        # The cancelled call reported no usage: charge the prompt as assembled (images
        # included) and what was shown, so that stopping early never makes generations free.
        usage = Usage(input_tokens=self._prompt_tokens, output_tokens=estimate_tokens(relay.shown))
        model = ask.request.model
        await self._parts.accounting.charge(
            turn.session.conversation, "reply", ModelResult(kept, usage, model, "stopped"), ask.by
        )
        log.info(
            "%s: generation stopped by the person (%d characters kept)", turn.session, len(kept)
        )
        self._stopped = True
        if has_visible_text(kept):
            return Draft(kept, usage, model)
        await relay.discard()
        reason = "stopped by the person"
        if not await self._trouble.close_out(turn, self._reply.lease, profile, reason, "stopped"):
            return "fenced"
        return "stopped"

    def cut_by(self, newer: NewerInput) -> bool | None:
        """Whether the final check would discard this reply for ``newer`` input: pending
        input of the turn's session newer than ``v0``, stored before the hard cap (rule 6:
        past it, the final check records, and a person who never stops typing still gets
        answers). An edit: only the store knows whether it re-armed a pending message (new
        text) or changed a context message, so it asks (None: :meth:`stale` runs)."""
        turn = self._turn
        if self._ledger.committed:
            return False  # an effectful call was made: the reply reports it (ledger.py)
        if newer.at >= turn.first_pending_at + self._profile.queue.max_wait:
            return False
        if isinstance(newer, Edited):
            return None
        # Input up to v0 is this turn's own (its signal may arrive after the snapshot);
        # input in another session (after /new, an idle timeout) is the next turn's.
        return newer.session == turn.session and newer.version > turn.version

    async def stale(self) -> bool:
        """The final check's verdict if it ran now, read without its locks: newer pending
        input in the turn's session, before the hard cap (another process stored it)."""
        turn = self._turn
        if self._ledger.committed:
            return False
        if self._parts.clock.now() >= turn.first_pending_at + self._profile.queue.max_wait:
            return False
        stale = await self._store.newer_input(turn.session, turn.version)
        return stale and not self._ledger.committed  # committed while it read

    async def cut(self, ask: Ask | None, written: str | None, grown: int = 0) -> TurnOutcome:
        """Discarded, as the final check would have; the cancelled call is charged (it
        reported no usage): the prompt as assembled and what it streamed, so that cutting
        never makes generations free. The timer the newer input armed stands."""
        turn = self._turn
        if ask is not None:
            usage = Usage(
                input_tokens=self._prompt_tokens + grown,
                output_tokens=estimate_tokens(written) if written else 0,
            )
            result = ModelResult(written or "", usage, ask.request.model, "cut")
            await self._parts.accounting.charge(turn.session.conversation, "reply", result, ask.by)
            self._parts.metrics.cut_usage(turn.session.conversation, ask.request.model, usage)
        log.info(
            "%s: newer input; generation cut (v%d, %d characters written)",
            turn.session,
            turn.version,
            len(written or ""),
        )
        return "discarded"

    async def check(self, draft: Draft) -> FinishResult:
        """``finish_turn``: fencing, the version check, then the reply and its outbox row."""
        p = self._parts
        return await self._store.finish_turn(
            self._turn,
            self._reply.lease,
            draft.text,
            p.clock.now(),
            self._profile.queue,
            draft.usage,
            draft.model,
            self._reminders,
            committed=self._ledger.committed,
        )

    async def dropped(self, finished: FinishResult) -> TurnOutcome:
        """Fenced (the lease was taken over) or discarded (newer input): nothing is sent."""
        conversation = self._turn.session.conversation
        if finished.outcome == "fenced":
            log.warning("lease on %s was taken over; reply dropped", conversation)
            return "fenced"
        log.debug(
            "newer input in %s (v%d > v%d); reply discarded",
            conversation,
            finished.current_version,
            self._turn.version,
        )
        return "discarded"

    async def recorded(self, outbox: OutboxItem, draft: Draft) -> None:
        """Logged; the next check-in armed, the agenda woken for new reminders."""
        turn, usage = self._turn, draft.usage
        log.info(
            "turn %s: %d message(s), in=%d out=%d cache_write=%d cache_read=%d, "
            "%.2fs after the first message",
            turn.session,
            len(turn.messages),
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_creation_input_tokens,
            usage.cache_read_input_tokens,
            self._parts.clock.now() - turn.first_pending_at,
        )
        if self._agenda is not None:
            await self._agenda.proactive.replied(turn.session.conversation, turn.persona)
            if self._reminders:
                self._agenda.wake()

    async def delivered(self, sent: bool) -> TurnOutcome:
        """Answered: the outbox row is sent, or failed for a reason it keeps."""
        return "stopped" if self._stopped else "sent"


def _earlier_calls(records: Sequence[ToolCallRecord]) -> str:
    """The prompt's note of the outside actions an interrupted attempt of this turn took."""
    outcome = {"started": "outcome unknown", "done": "done", "failed": "failed"}
    lines = [
        f"- {r.tool}: {outcome[r.status]}" + (f"; result: {r.result[:300]}" if r.result else "")
        for r in records
    ]
    return (
        "Before an interruption, your answer to these messages already took these actions "
        "(they cannot be undone; do not take them again, tell the person what was done):\n"
        + "\n".join(lines)
    )
