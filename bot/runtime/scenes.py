"""Scenes at run time: one turn, several speakers, one lease (docs/scenes.md).

The coalescer closed a human burst and the pipeline holds the conversation's lease; here the
director plans 0..K speakers (bot/core/scenes.py) and each one's line runs through the turn
kernel as its own job (bot/runtime/scene_line.py), in order, each prompt with the lines
before it. Lines between personas without a human are turns of their own, one line each,
started by the conversation's timer (``talk_on``).

Invariants:
- one lease for the whole plan: no other worker starts a turn of the conversation while a
  scene speaks, and a worker whose lease was taken over records nothing (fenced);
- the first line answers the burst (``finish_turn``: the queue's rules, hard cap included);
  every later line passes its own final check (``finish_line``): human input that arrived
  after the burst (or a /new) drops the rest of the plan, whatever the hard cap, and starts a
  new turn: nothing stale is sent. A crash between two lines loses the later ones and never
  repeats the first (it is recorded, its messages answered, its outbox row sent once);
- loops end: at most ``max_speakers`` lines per human turn; lines between personas only when
  the scene enables it, and then at most ``max_autonomous_turns`` persona lines (every one
  counts, the ones answering the human too) until a human writes; at most
  ``max_lines_per_hour`` a scene; ``breaker_trips`` hourly caps within an hour mute the
  scene for ``mute_seconds`` (an admin's /stop mutes it at once). A muted scene closes its
  turns without a word. The mute and the caps belong to the conversation, not its session
  (/new must not end them: migration 21);
- a line between personas is never waited for under the lease: the timer brings the next
  one ``autonomous_delay`` later, and a person who writes meanwhile arms an earlier timer
  (kept: ``rearm_timer(keep_earlier=True)``), whose turn answers them first;
- what a speaker writes is cleaned before its final check (memory/voices.py): a leading own
  name removed, anything after another speaker's or a person's name prefix cut off; a line
  with nothing left is not sent (the next speaker goes on);
- status and error texts never enter the transcript: only lines that passed their final check
  are recorded.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Sequence
from typing import Final

from bot.core.errors import StoreError
from bot.core.events import ConversationKey, Lease, SessionKey, StoredMessage, Turn
from bot.core.scenes import Pick, SceneRules, addressed, named, plan, seeded
from bot.core.shares import weights
from bot.runtime.director import Director, DirectorModel
from bot.runtime.profiles import BotProfile, Bots, TurnOutcome
from bot.runtime.scene_line import SceneLineJob, SceneRunStore, SceneTurn
from bot.runtime.trouble import Trouble
from bot.runtime.turn import TurnKernel, TurnParts
from memory.scene import Card, card_of

log = logging.getLogger("personabot.scenes")

#: Transcript lines the director reads back (who spoke since the last human message).
_LOOKBACK: Final = 60
HOUR: Final = 3600.0


class Scenes:
    """Plays scene turns through the turn kernel."""

    def __init__(
        self,
        *,
        store: SceneRunStore,
        parts: TurnParts,
        kernel: TurnKernel,
        bots: Bots,
        trouble: Trouble,
    ) -> None:
        self._store = store
        self._parts = parts
        self._director = Director(llm=parts.llm, accounting=parts.accounting)
        self._kernel = kernel
        self._bots = bots
        self._trouble = trouble

    async def play(self, scene: SceneTurn) -> TurnOutcome:
        """The human burst answered by the planned speakers; with autonomy on, the next line
        between personas scheduled."""
        turn, rules = scene.turn, scene.rules
        conversation = turn.session.conversation
        now = self._parts.clock.now()
        if (await self._store.scene_state(conversation)).muted(now):
            return await self._quiet(scene, "scene muted")
        room = min(rules.max_speakers, await self._hourly_room(conversation, rules))
        if rules.autonomous:
            room = min(room, rules.max_autonomous_turns)  # every persona line counts
        if room <= 0:
            await self._capped(conversation, rules, "hourly cap", now)
            return await self._quiet(scene, "scene hourly cap")
        said = tuple(
            p for m in reversed(turn.messages) for p in addressed(m.text, m.quote, rules.cast)
        )
        picks = None
        if not said and rules.director_model and rules.strategy in ("natural", "pooled"):
            picks = await self._directed(scene, room)
        if picks is None:
            recent = await self._store.history(turn.session, _LOOKBACK)
            picks = plan(
                rules,
                addressed=said,
                last_speaker=None,
                spoken_since_human=(),
                room=room,
                rng=seeded(turn.session, turn.version),
                human_turn=True,
                previous=next((m.persona for m in reversed(recent) if m.persona), None),
            )
        outcome: TurnOutcome | None = None
        done: list[tuple[Pick, str]] = []
        try:
            for pick in picks:
                result = await self._line(scene, pick, first=outcome is None)
                done.append((pick, result))
                if result == "sent":
                    outcome = "sent"
                elif result != "closed":  # "closed": nothing usable, the next one speaks
                    return outcome or result
        finally:
            await self._note_plan(conversation, picks, done)
        if outcome is None:
            return await self._quiet(scene, "no character spoke")
        if rules.autonomous:
            await self._next_line_later(conversation, rules)
        return outcome

    async def talk_on(
        self, conversation: ConversationKey, profile: BotProfile, lease: Lease
    ) -> TurnOutcome | None:
        """The conversation's timer came with nothing pending: the next line between
        personas, when the scene has one to say (None: nothing to say; the timer goes)."""
        rules = profile.scene
        if rules is None or not rules.autonomous:
            return None
        p = self._parts
        now = p.clock.now()
        session = await self._store.current_session(conversation)
        if session is None or (await self._store.scene_state(conversation)).muted(now):
            return None  # an admin's /stop (or the breaker) ends the chain here
        lines = await self._since_human(session.key)
        if not lines:
            return None  # a chain starts only after lines answering a person
        if len(lines) >= rules.max_autonomous_turns:
            # The chain's designed end: counted, not a trouble for the breaker.
            p.metrics.scene_caps.labels(*p.metrics.labels(conversation), "autonomous cap").inc()
            log.info("%s: the scene's autonomous cap ends the chain", session.key)
            return None
        if await self._hourly_room(conversation, rules) <= 0:
            await self._capped(conversation, rules, "hourly cap", now)
            return None
        last = lines[-1]
        speaker = last.persona
        picks = plan(
            rules,
            addressed=named(last.text, rules.others(speaker or "")),
            last_speaker=speaker,
            spoken_since_human={m.persona for m in lines if m.persona},
            room=1,
            rng=seeded(session.key, len(lines), last.id),
            human_turn=False,
            previous=speaker,
        )
        if not picks:
            return None
        version = await self._store.conversation_version(conversation)
        turn = Turn(session.key, version, (), now)
        scene = SceneTurn(turn, lease, profile, rules, summary=None)
        result = await self._line(scene, picks[0], first=False)
        await self._note_plan(conversation, picks, [(picks[0], result)])
        if result == "sent":
            await self._next_line_later(conversation, rules)
        return result if result != "closed" else None

    # -- one line ------------------------------------------------------------------------------

    async def _directed(self, scene: SceneTurn, room: int) -> tuple[Pick, ...] | None:
        """The model director's choice (None: it could not say; the rules decide)."""
        rules, turn = scene.rules, scene.turn
        assert rules.director_model is not None
        history = await self._store.history(turn.session, _LOOKBACK)
        return await self._director.choose(
            turn.session.conversation,
            DirectorModel(rules.director_model, rules.director_provider),
            rules.cast,
            (*history, *turn.messages),
            room,
            weights(turn.messages),
        )

    async def _line(self, scene: SceneTurn, pick: Pick, *, first: bool) -> TurnOutcome:
        member = scene.rules.member(pick.persona)
        assert member is not None  # the director picks from the cast
        job = SceneLineJob(
            store=self._store,
            parts=self._parts,
            trouble=self._trouble,
            scene=scene,
            member=member,
            profile=self._bots.profile(scene.profile.key, member.id),
            cards=self._cards(scene),
            first=first,
            reason=pick.reason,
        )
        return await self._kernel.run(job, scene.lease)

    def _cards(self, scene: SceneTurn) -> tuple[Card, ...]:
        key = scene.profile.key
        session = scene.turn.session
        return tuple(
            card_of(m, self._bots.profile(key, m.id).pin, session) for m in scene.rules.cast
        )

    async def _since_human(self, session: SessionKey) -> list[StoredMessage]:
        """The persona lines after the last human message of the session, oldest first."""
        history = await self._store.history(session, _LOOKBACK)
        lines: list[StoredMessage] = []
        for message in reversed(history):
            if message.role == "user":
                break
            lines.insert(0, message)
        return lines

    async def _next_line_later(self, conversation: ConversationKey, rules: SceneRules) -> None:
        """The timer for the next line between personas; an earlier one (a person wrote
        meanwhile) is kept, so their turn comes first."""
        due = self._parts.clock.now() + rules.autonomous_delay
        await self._store.rearm_timer(conversation, due, keep_earlier=True)

    # -- caps and the breaker ------------------------------------------------------------------

    async def _hourly_room(self, conversation: ConversationKey, rules: SceneRules) -> int:
        now = self._parts.clock.now()
        spoken = await self._store.scene_lines_since(conversation, now - HOUR)
        return rules.max_lines_per_hour - spoken

    async def _capped(
        self, conversation: ConversationKey, rules: SceneRules, which: str, now: float
    ) -> None:
        """The hourly cap was hit: counted; ``breaker_trips`` of them within an hour mute the
        scene for ``mute_seconds``."""
        state = await self._store.scene_state(conversation)
        caps = [t for t in state.caps if t > now - HOUR] + [now]
        log.info("%s: scene %s hit (%d in the last hour)", conversation, which, len(caps))
        metrics = self._parts.metrics
        metrics.scene_caps.labels(*metrics.labels(conversation), which).inc()
        if len(caps) >= rules.breaker_trips:
            await self._store.mute_scene(conversation, now + rules.mute_seconds, now)
            log.warning(
                "%s: scene muted for %.0f minutes after %d caps within an hour",
                conversation,
                rules.mute_seconds / 60,
                len(caps),
            )
            caps = []
        await self._store.note_scene(conversation, now, caps=caps)

    async def _note_plan(
        self, conversation: ConversationKey, picks: Sequence[Pick], done: Sequence[tuple[Pick, str]]
    ) -> None:
        """The plan, why each speaker was chosen and what became of its line, for the
        console (never shown to the model)."""
        outcomes = {id(pick): result for pick, result in done}
        now = self._parts.clock.now()
        note = {
            "at": now,
            "plan": [
                {
                    "persona": p.persona,
                    "reason": p.reason,
                    "outcome": outcomes.get(id(p), "dropped"),
                }
                for p in picks
            ],
        }
        with contextlib.suppress(StoreError):  # a note: never fails the turn
            await self._store.note_scene(conversation, now, last_plan=json.dumps(note))

    async def _quiet(self, scene: SceneTurn, reason: str) -> TurnOutcome:
        """The burst handled without a line (kept as context, never asked again)."""
        if not await self._trouble.close_out(
            scene.turn, scene.lease, scene.profile, reason, "scene"
        ):
            return "fenced"
        return "closed"
