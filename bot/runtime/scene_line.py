"""One speaker's line of a scene as a job of the turn kernel (bot/runtime/turn.py;
docs/scenes.md#turns): its prompt (memory/scene.py), what is cleaned of the answer
(memory/voices.py), its cut by newer input and its final check.

- The first line of a turn answers the burst: ``finish_turn`` (queue rules 5 and 6, the hard
  cap included); a failed call is the reply's trouble (retry, close out, park).
- A later line answers no message: ``finish_line`` (no hard cap: newer human input always
  discards it); a failed call ends the plan, the turn being answered already.
- A line with nothing usable once cleaned ends "closed": the next speaker goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from bot.core.errors import ModelError
from bot.core.events import FinishResult, Lease, OutboxItem, SceneLine, Turn
from bot.core.llm import ModelResult, Usage
from bot.core.scenes import CastMember, SceneRules
from bot.core.shares import weights
from bot.core.visible import has_visible_text
from bot.queue.cutoff import Edited, NewerInput
from bot.runtime.profiles import BotProfile, TurnOutcome
from bot.runtime.tools import LoopResult
from bot.runtime.trouble import Trouble, TroubleStore
from bot.runtime.turn import Ask, Draft, Job, TurnParts
from bot.runtime.turn_context import TurnContext
from bot.store.contracts import ConversationReads, SceneStore, TranscriptReads
from memory.records import Summary
from memory.scene import Card
from memory.tokens import estimate_tokens
from memory.voices import clean_line

log = logging.getLogger("personabot.scenes")


class SceneRunStore(TroubleStore, SceneStore, TranscriptReads, ConversationReads, Protocol):
    """What a scene asks the store: the reply side's (final checks, closing a turn out, the
    session's notes), its next lines and hourly count, and the transcript the director reads."""


@dataclass(frozen=True, slots=True)
class SceneTurn:
    """A scene's turn under its lease, with what the pipeline read for it."""

    turn: Turn
    lease: Lease
    profile: BotProfile  # the bot's default persona's (its queue, lease, outlet)
    rules: SceneRules
    summary: Summary | None  # read once by the pipeline (its gap check read the same)
    gap_notice: str | None = None


class SceneLineJob(Job[TurnOutcome]):
    """The kernel's job for one speaker's line of a scene."""

    def __init__(
        self,
        *,
        store: SceneRunStore,
        parts: TurnParts,
        trouble: Trouble,
        scene: SceneTurn,
        member: CastMember,
        profile: BotProfile,
        cards: Sequence[Card],
        first: bool,
        reason: str,
    ) -> None:
        self._store = store
        self._parts = parts
        self._trouble = trouble
        self._scene = scene
        self._turn = scene.turn
        self._member = member
        self._profile = profile
        self._cards = tuple(cards)
        self._first = first
        self._reason = reason
        self._people: tuple[str, ...] = ()
        self._prompt_tokens = 0
        self.ttl = scene.profile.lease_seconds
        self.cut_key = scene.turn.session.conversation

    def context(self) -> TurnContext:
        turn = self._turn
        return TurnContext(
            conversation=turn.session.conversation,
            session=turn.session,
            bot=self._profile.key,
            persona_id=self._member.id,
            messages=turn.messages if self._first else (),
            now=self._parts.clock.now(),
        )

    def typing(self) -> contextlib.AbstractAsyncContextManager[object]:
        return self._profile.outlet.typing(self._turn.session.conversation)

    async def prompt(self, lost: asyncio.Event) -> Ask | Draft | TurnOutcome:
        """The speaker's request: the scene, the transcript with the lines before it, its pin."""
        turn, scene, member = self._turn, self._scene, self._member
        built = await self._parts.memory.prompts.build_scene(
            turn.session,
            turn.messages if self._first else (),
            member,
            self._profile.pin,
            self._cards,
            summary=scene.summary
            if self._first
            else await self._parts.memory.summary(turn.session),
            gap_notice=scene.gap_notice if self._first else None,
            policy=self._profile.memory,
        )
        assembled, self._people = built.assembled, built.people
        self._prompt_tokens = assembled.total_tokens
        log.info(
            "%s: %s speaks (%s), prompt~%d tokens",
            turn.session,
            member.id,
            self._reason,
            assembled.total_tokens,
        )
        # Who pays: the burst's people, for each line of it (lines between personas too).
        return Ask(assembled.request, self.context(), "reply", weights(turn.messages))

    async def answered(self, answer: LoopResult) -> Draft | TurnOutcome:
        """The line, cleaned of other speakers' words; nothing usable: the next speaker."""
        if self._first:
            await self._trouble.recovered(self._turn)
        result = answer.result
        others = [n for m in self._scene.rules.others(self._member.id) for n in m.names]
        text = clean_line(result.text, own=self._member.names, others=[*others, *self._people])
        if result.stop_reason == "refusal" or not has_visible_text(text):
            log.info(
                "%s: %s wrote nothing usable (%d characters before cleaning); next speaker",
                self._turn.session,
                self._member.id,
                len(result.text),
            )
            return "closed"
        return Draft(text, answer.usage, result.model)

    async def failed(self, exc: ModelError) -> TurnOutcome:
        if self._first:
            return await self._trouble.model_failed(
                self._turn, self._scene.lease, self._scene.profile, exc
            )
        log.warning(
            "%s: %s's line failed (%s); the scene stops here",
            self._turn.session,
            self._member.id,
            exc,
        )
        return "failed"

    def cut_by(self, newer: NewerInput) -> bool | None:
        turn = self._turn
        if isinstance(newer, Edited):
            return None
        if newer.session != turn.session or newer.version <= turn.version:
            return False
        # The first line keeps the queue's hard cap (a person who never stops typing still
        # gets answers); a later one is never worth a stale line.
        return not self._first or newer.at < turn.first_pending_at + self._profile.queue.max_wait

    async def stale(self) -> bool:
        turn = self._turn
        if (
            self._first
            and self._parts.clock.now() >= turn.first_pending_at + self._profile.queue.max_wait
        ):
            return False
        return await self._store.newer_input(turn.session, turn.version)

    async def cut(self, ask: Ask | None, written: str | None, grown: int = 0) -> TurnOutcome:
        if ask is not None:
            usage = Usage(
                input_tokens=self._prompt_tokens + grown,
                output_tokens=estimate_tokens(written) if written else 0,
            )
            result = ModelResult(written or "", usage, ask.request.model, "cut")
            conversation = self._turn.session.conversation
            await self._parts.accounting.charge(conversation, "reply", result, ask.by)
            self._parts.metrics.cut_usage(conversation, ask.request.model, usage)
        log.info("%s: newer input; %s's line cut", self._turn.session, self._member.id)
        return "discarded"

    async def check(self, draft: Draft) -> FinishResult:
        p, turn, lease = self._parts, self._turn, self._scene.lease
        if self._first:
            return await self._store.finish_turn(
                turn,
                lease,
                draft.text,
                p.clock.now(),
                self._profile.queue,
                draft.usage,
                draft.model,
                line=SceneLine(self._member.id),
            )
        return await self._store.finish_line(
            turn,
            lease,
            draft.text,
            p.clock.now(),
            SceneLine(self._member.id),
            draft.usage,
            draft.model,
        )

    async def dropped(self, finished: FinishResult) -> TurnOutcome:
        if finished.outcome == "fenced":
            log.warning(
                "lease on %s was taken over; %s's line dropped", self._turn.session, self._member.id
            )
            return "fenced"
        log.info("%s: newer input; %s's line discarded", self._turn.session, self._member.id)
        return "discarded"

    async def recorded(self, outbox: OutboxItem, draft: Draft) -> None:
        metrics = self._parts.metrics
        conversation = self._turn.session.conversation
        metrics.scene_lines.labels(*metrics.labels(conversation), self._member.id).inc()
        usage = draft.usage
        log.info(
            "scene %s: %s said a line (%s), in=%d out=%d cache_write=%d cache_read=%d",
            self._turn.session,
            self._member.id,
            self._reason,
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_creation_input_tokens,
            usage.cache_read_input_tokens,
        )

    async def delivered(self, sent: bool) -> TurnOutcome:
        return "sent"
