"""The prompt the model would get now in a conversation, read and never written: what
``personabot prompt`` prints and the console's conversation page shows (docs/web.md). Its own
module so that the console needs nothing of the admin commands (issue 36: the
admin -> app -> serve -> web -> admin import cycle)."""

from __future__ import annotations

from typing import Protocol

from bot.app.build import initiative_policy, memory_policy, pin_for, scene_rules
from bot.config import PersonaSettings, Settings
from bot.core.agenda import CheckinCap
from bot.core.events import ConversationKey, SessionKey, StoredMessage, Turn
from bot.core.scenes import SceneRules, addressed, plan, seeded
from bot.runtime.initiatives import check_in_prompt, due_check_in
from bot.store.console import PendingCounts
from bot.store.contracts import AgendaStore, PendingReads, SessionReads, TranscriptReads
from memory.assemble import Assembled
from memory.records import Summary
from memory.retention.gaps import Gap, gap_notice
from memory.scene import card_of
from memory.service import Memory


class PreviewStore(
    SessionReads, PendingReads, TranscriptReads, PendingCounts, AgendaStore, Protocol
):
    """What the preview reads: the open session, its pending turn and backlog, the history
    of the last person who spoke, and the check-in rules' state (docs/initiatives.md)."""


async def preview_prompt(
    settings: Settings,
    store: PreviewStore,
    memory: Memory,
    conversation: ConversationKey,
    persona: PersonaSettings,
    now: float,
    message: str | None = None,
) -> tuple[str, Assembled] | None:
    """The prompt the model would get now in ``conversation`` (None: no open session), and
    what it is for: a pending turn's, a due check-in's, or the next message's (``message``,
    or a placeholder) from the last person who spoke. ``personabot prompt`` and the console
    show it; it reads, never writes.

    A pending turn is the one the pipeline would take: the oldest ``max_turn_messages``, with
    the gap notice it would carry; the title says how many more wait for later turns. (All
    of a backlog of thousands, read and fitted on the bots' event loop, froze every chat.)"""
    session = await store.current_session(conversation)
    if session is None:
        return None
    # The chat's own persona (docs/personas.md#several-personas), when it switched.
    if session.persona and session.persona in {p.id for p in settings.personas}:
        persona = settings.persona(session.persona)
    policy = memory_policy(settings, persona)
    turn = await store.pending_turn(conversation, settings.queue_for(persona).max_turn_messages)
    due = (
        None
        if turn is not None
        else await due_check_in(
            store,
            memory,
            initiative_policy(persona),
            conversation,
            now,
            settings.schedule.timezone,
            CheckinCap(settings.schedule.max_checkins_per_day),
        )
    )
    if due is not None:
        # A check-in is due: show what its decision would be asked (docs/initiatives.md).
        state, tz = due
        assert state.session_no is not None
        key_now = SessionKey(conversation, state.session_no)
        assembled = await check_in_prompt(
            memory, pin_for(persona), key_now, state, tz, now, persona=persona.id
        )
        return f"check-in for {key_now}", assembled
    if turn is None:
        # No input pending: preview with a placeholder from the last person who spoke.
        users = [m for m in await store.history(session.key, 50) if m.role == "user"]
        author, name, private = (
            (users[-1].author_id, users[-1].display_name, users[-1].is_private)
            if users
            else ("?", "?", True)
        )
        placeholder = StoredMessage(
            0,
            session.key,
            0,
            "user",
            author,
            name,
            message or "(the next message)",
            now,
            is_private=private,
        )
        turn = Turn(session.key, 0, (placeholder,), now, persona=session.persona)
        title = f"prompt for {turn.session}"
    else:
        waiting = await store.pending_count(conversation) - len(turn.messages)
        title = f"prompt for {turn.session}: the next turn, {len(turn.messages)} message(s)"
        if waiting > 0:
            title += f"; {waiting} more wait for the turns after it"
    summary = await memory.summary(turn.session)
    gaps = await memory.gaps(turn.session, summary)
    entry = next((b for b in settings.bots if b.key == conversation.bot), None)
    scene = None if entry is None else scene_rules(settings, entry)
    if scene is not None:
        history = await store.history(turn.session, 50)
        speaker, reason, assembled = await _scene_prompt(
            settings, memory, scene, turn, summary, gaps, history
        )
        return f"{title}; {speaker} speaks first ({reason})", assembled
    assembled = await memory.build(
        turn,
        pin_for(persona),
        gap_notice=gap_notice(gaps) if gaps else None,
        summary=summary,
        policy=policy,
        persona=persona.id,
    )
    return title, assembled


async def _scene_prompt(
    settings: Settings,
    memory: Memory,
    scene: SceneRules,
    turn: Turn,
    summary: Summary | None,
    gaps: tuple[Gap, ...],
    history: list[StoredMessage],
) -> tuple[str, str, Assembled]:
    """The first speaker's request of a scene's turn, as the director would plan it now
    (docs/scenes.md): who, why, and the request."""
    said = tuple(p for m in reversed(turn.messages) for p in addressed(m.text, m.quote, scene.cast))
    picks = plan(
        scene,
        addressed=said,
        last_speaker=None,
        spoken_since_human=(),
        room=scene.max_speakers,
        rng=seeded(turn.session, turn.version),
        human_turn=True,
        previous=next((m.persona for m in reversed(history) if m.persona), None),
    )
    member, reason = (
        (scene.member(picks[0].persona), picks[0].reason)
        if picks
        else (scene.cast[0], "nobody would speak; shown for the first cast member")
    )
    assert member is not None
    persona = settings.persona(member.id)
    cards = [card_of(m, pin_for(settings.persona(m.id)), turn.session) for m in scene.cast]
    built = await memory.prompts.build_scene(
        turn.session,
        turn.messages,
        member,
        pin_for(persona),
        cards,
        summary=summary,
        gap_notice=gap_notice(gaps) if gaps else None,
        policy=memory_policy(settings, persona, scene),
    )
    return member.name, reason, built.assembled
