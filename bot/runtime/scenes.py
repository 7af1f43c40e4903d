"""Scenes at run time: one turn, several speakers, one lease (docs/scenes.md).

The coalescer closed a human burst and the pipeline holds the conversation's lease; here the
director plans 0..K speakers (bot/core/scenes.py) and each one's line runs through the turn
kernel as its own job, in order, each prompt with the lines before it.

Invariants:
- one lease for the whole plan: no other worker starts a turn of the conversation while a
  scene speaks, and a worker whose lease was taken over records nothing (fenced);
- the first line answers the burst (``finish_turn``: the queue's rules, hard cap included);
  every later line passes its own final check (``finish_line``): human input that arrived
  after the burst drops the rest of the plan, whatever the hard cap, and starts a new turn:
  nothing stale is sent. A crash between two lines loses the later ones and never repeats
  the first (it is recorded, its messages answered, its outbox row sent once);
- loops end: at most ``max_speakers`` lines per human turn; lines between personas without
  a human only when the scene enables it, and then at most ``max_autonomous_turns`` persona
  lines (every one counts) until a human writes; at most ``max_lines_per_hour`` a scene;
  ``breaker_trips`` caps within an hour mute the scene for ``mute_seconds`` (an admin's /stop
  mutes it at once). A muted scene closes its turns without a word;
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
from bot.core.events import NOT_SET, SessionKey, StoredMessage
from bot.core.scenes import (
    CAPS_KEY,
    MUTED_KEY,
    PLAN_KEY,
    Pick,
    SceneRules,
    addressed,
    named,
    plan,
    seeded,
)
from bot.core.shares import weights
from bot.queue.lease import renewing
from bot.runtime.director import Director, DirectorModel
from bot.runtime.profiles import Bots, TurnOutcome
from bot.runtime.scene_line import SceneLineJob, SceneRunStore, SceneTurn
from bot.runtime.trouble import Trouble
from bot.runtime.turn import TurnKernel, TurnParts
from memory.scene import Card, card_of

log = logging.getLogger("personabot.scenes")

#: Transcript lines the director reads back (who spoke since the last human message).
_LOOKBACK: Final = 60


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
        """The human burst answered by the planned speakers, then (when enabled) the
        personas talking on until a cap or a quiet moment ends it."""
        turn, rules = scene.turn, scene.rules
        now = self._parts.clock.now()
        if await self._muted(turn.session, now):
            return await self._quiet(scene, "scene muted")
        room = min(rules.max_speakers, await self._hourly_room(scene))
        if room <= 0:
            await self._capped(turn.session, "hourly cap", now)
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
        outcome: TurnOutcome = "closed"
        first = True
        done: list[tuple[Pick, str]] = []
        try:
            for pick in picks:
                result = await self._line(scene, pick, first=first)
                done.append((pick, result))
                if result == "sent":
                    first = False
                    outcome = "sent"
                elif result == "closed" and first:
                    continue  # nothing usable from this speaker: the next one answers
                else:
                    return result if first else outcome
        finally:
            await self._note_plan(turn.session, picks, done)
        if first:
            return await self._quiet(scene, "no character spoke")
        if rules.autonomous:
            await self._talk_on(scene)
        return outcome

    async def _note_plan(
        self, session: SessionKey, picks: Sequence[Pick], done: Sequence[tuple[Pick, str]]
    ) -> None:
        """The plan, why each speaker was chosen and what became of its line, for the
        console (a session note; never shown to the model)."""
        outcomes = {id(pick): result for pick, result in done}
        note = {
            "at": self._parts.clock.now(),
            "plan": [
                {
                    "persona": p.persona,
                    "reason": p.reason,
                    "outcome": outcomes.get(id(p), "dropped"),
                }
                for p in picks
            ],
        }
        now = self._parts.clock.now()
        with contextlib.suppress(StoreError):  # a note: never fails the turn
            await self._store.set_state(session, PLAN_KEY, json.dumps(note), now)

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

    # -- one line ------------------------------------------------------------------------------

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

    # -- personas talking on -------------------------------------------------------------------

    async def _talk_on(self, scene: SceneTurn) -> None:
        """Lines between personas without a human, one at a time after the scene's delay,
        until nobody takes the conversation up, a cap, or a person writes (the next turn)."""
        turn, rules, p = scene.turn, scene.rules, self._parts
        for step in range(1, rules.max_autonomous_turns + 1):
            if await self._muted(turn.session, p.clock.now()):
                return  # an admin's /stop
            lines = await self._since_human(turn.session)
            if len(lines) >= rules.max_autonomous_turns:
                await self._capped(turn.session, "autonomous cap", p.clock.now())
                return
            async with renewing(
                p.leases, scene.lease, ttl=scene.profile.lease_seconds, clock=p.clock
            ):
                await p.clock.sleep(rules.autonomous_delay)
            if await self._store.newer_input(turn.session, turn.version):
                return  # a person wrote: their turn answers
            if await self._hourly_room(scene) <= 0:
                await self._capped(turn.session, "hourly cap", p.clock.now())
                return
            last = lines[-1] if lines else None
            speaker = None if last is None else last.persona
            mentioned = () if last is None else named(last.text, rules.others(speaker or ""))
            picks = plan(
                rules,
                addressed=mentioned,
                last_speaker=speaker,
                spoken_since_human={m.persona for m in lines if m.persona},
                room=1,
                rng=seeded(turn.session, turn.version, step),
                human_turn=False,
                previous=speaker,
            )
            if not picks or await self._line(scene, picks[0], first=False) != "sent":
                return

    async def _since_human(self, session: SessionKey) -> list[StoredMessage]:
        """The persona lines after the last human message of the session, oldest first."""
        history = await self._store.history(session, _LOOKBACK)
        lines: list[StoredMessage] = []
        for message in reversed(history):
            if message.role == "user":
                break
            lines.insert(0, message)
        return lines

    # -- caps and the breaker ------------------------------------------------------------------

    async def _hourly_room(self, scene: SceneTurn) -> int:
        now = self._parts.clock.now()
        conversation = scene.turn.session.conversation
        spoken = await self._store.scene_lines_since(conversation, now - 3600)
        return scene.rules.max_lines_per_hour - spoken

    async def _muted(self, session: SessionKey, now: float) -> bool:
        value = await self._store.get_state(session, MUTED_KEY)
        if value is NOT_SET:
            return False
        try:
            return now < float(value)
        except ValueError:
            return False

    async def _capped(self, session: SessionKey, which: str, now: float) -> None:
        """A cap was hit: counted; the breaker mutes the scene after ``breaker_trips`` of them
        within an hour."""
        scene_rules = self._rules(session)
        raw = await self._store.get_state(session, CAPS_KEY)
        caps = [] if raw is NOT_SET else [t for t in _times(raw) if t > now - 3600]
        caps.append(now)
        log.info("%s: scene %s hit (%d cap(s) in the last hour)", session, which, len(caps))
        metrics = self._parts.metrics
        metrics.scene_caps.labels(*metrics.labels(session.conversation), which).inc()
        if scene_rules is not None and len(caps) >= scene_rules.breaker_trips:
            until = now + scene_rules.mute_seconds
            await self._store.set_state(session, MUTED_KEY, repr(until), now)
            log.warning(
                "%s: scene muted for %.0f minutes after %d caps within an hour",
                session,
                scene_rules.mute_seconds / 60,
                len(caps),
            )
            caps = []
        await self._store.set_state(session, CAPS_KEY, json.dumps(caps), now)

    def _rules(self, session: SessionKey) -> SceneRules | None:
        return self._bots.defaults[session.conversation.bot].scene

    async def _quiet(self, scene: SceneTurn, reason: str) -> TurnOutcome:
        """The burst handled without a line (kept as context, never asked again)."""
        if not await self._trouble.close_out(
            scene.turn, scene.lease, scene.profile, reason, "scene"
        ):
            return "fenced"
        return "closed"


def _times(raw: str) -> list[float]:
    try:
        loaded = json.loads(raw)
        return [float(t) for t in loaded] if isinstance(loaded, list) else []
    except (ValueError, TypeError):
        return []
