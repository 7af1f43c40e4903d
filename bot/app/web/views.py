"""What each console page shows, as JSON-able data (docs/web.md).

The HTML pages and the JSON API (``/api/...``) are built from the same dictionaries, so
what an operator scripts against is what they see. Everything here reads, except the
person actions (forget an item, forget everything, export), which go through the same
code as the person's own ``/forget`` and ``/export`` and are written to the audit log with
every view of a person's memory.
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from adapters.web import PLATFORM
from bot.app.web.playground import OPERATOR, PREFIX
from bot.config import PersonaSettings, Settings
from bot.core.clock import Clock
from bot.core.console import ConsoleEvent, ConversationRow, TopMeasure, UsageBucket
from bot.core.events import (
    ConversationKey,
    PlatformProblem,
    SessionKey,
    StoredMessage,
    UserKey,
)
from bot.core.llm import ImageBlock, TextBlock
from bot.core.queue_rules import turn_lease
from bot.metrics import Metrics
from bot.store.console import ConsoleStore
from bot.store.contracts import PendingReads, SummaryReads, TranscriptReads, UsageReads
from memory.assemble import Assembled
from memory.retention.worker import Retention
from memory.service import Memory

DAY = 86400.0
HOUR = 3600.0
#: Messages on one page of a conversation's transcript (the newest first shown).
TRANSCRIPT_PAGE = 200
#: Sessions, deletions and gaps a conversation page lists (the newest; the rest counted).
LIST_PAGE = 50
#: How many people the overview lists under each per-person daily limit, and how many events.
NEAREST = 5
EVENTS = 10


class ConsoleReads(ConsoleStore, UsageReads, PendingReads, TranscriptReads, SummaryReads, Protocol):
    """What the console reads from the store: its own contract, and the runtime's reads of a
    turn, a transcript, a summary and usage (bot/store/contracts.py)."""


#: The prompt a conversation would get now, and its title (``bot.app.preview.preview_prompt``
#: over the whole store: wired by ``bot.app.web.console_data``).
PromptPreview = Callable[
    [ConversationKey, PersonaSettings, float], Awaitable[tuple[str, Assembled] | None]
]


class NotFound(LookupError):
    """A page for something that does not exist (HTTP 404)."""


@dataclass(frozen=True, slots=True)
class BotState:
    """A bot's connection as the overview shows it (inside ``personabot run``)."""

    state: str  # connected, not connected
    problem: PlatformProblem | None  # its last failure, if any (even when connected again)


@dataclass(frozen=True, slots=True)
class Viewer:
    """Who is looking (the audit log's actor) and from where."""

    actor: str
    address: str


class ConsoleData:
    """The console's reads and actions on one store."""

    def __init__(
        self,
        *,
        settings: Settings,
        store: ConsoleReads,
        memory: Memory,
        clock: Clock,
        page_size: int,
        preview: PromptPreview,
        retention: Callable[[], Retention],
        adapters_state: Callable[[str], BotState] | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self._settings = settings
        self._store = store
        self._memory = memory
        self._preview = preview
        self._retention = retention
        self._clock = clock
        self._page = page_size
        # Bot key -> its connection, when the console runs inside ``personabot run``.
        self._adapters_state = adapters_state
        self._defaults = bot_personas(settings)
        # The bots' counters, when the console runs inside ``personabot run``.
        self._metrics = metrics
        self._started = clock.now()
        self._admins = _admins(settings)

    # -- overview ---------------------------------------------------------------------------

    async def overview(self) -> dict[str, Any]:
        """Bots, the queue, spend today against the limits, the last day's chart."""
        now = self._clock.now()
        today = now - (now % DAY)
        limits = self._settings.limits
        bots = []
        for entry in self._settings.bots:
            usage = await self._store.usage_since(today, entry.key)
            bots.append(
                {
                    "key": entry.key,
                    "platform": entry.platform,
                    "personas": list(entry.persona_ids),
                    **self._state_of(entry.key),
                    "last_update": await self._store.console_last_inbound(entry.key),
                    "tokens_today": usage.input_tokens + usage.output_tokens,
                    "tokens_per_day": limits.bot_tokens_per_day or None,
                    "cost_today": round(usage.cost, 4),
                    "dollars_per_day": limits.bot_dollars_per_day or None,
                    "turns_today": usage.turns,
                }
            )
        queue = await self._store.console_queue(now)
        # The current clock hour and the 23 before it, each one bar (an hour without a call
        # too: the axis has all 24, not only the hours that had traffic).
        since = now - now % HOUR - DAY + HOUR
        buckets = await self._store.console_usage(since, HOUR)
        by_hour = {round((b.start - since) / HOUR): b for b in buckets}
        read = sum(b.cache_read_tokens for b in buckets)
        fresh = sum(b.input_tokens for b in buckets)
        retention = await self._store.retention_log(5)
        return {
            "now": now,
            "bots": bots,
            "queue": {
                "pending_conversations": queue.timers,
                "due_now": queue.due,
                "oldest_due_age_seconds": None
                if queue.oldest_due_at is None
                else round(now - queue.oldest_due_at, 1),
                "turn_leases": [{"holder": h, "held": n} for h, n in queue.leases],
            },
            "last_24h": {
                "replies": sum(b.replies for b in buckets),
                "model_calls": sum(b.calls for b in buckets),
                "input_tokens": fresh,
                "output_tokens": sum(b.output_tokens for b in buckets),
                "cache_hit_rate": round(read / (read + fresh), 3) if read + fresh else None,
                "since": since,
                "hours": [_hour(since + i * HOUR, by_hour.get(i)) for i in range(24)],
            },
            "person_limits": await self._person_limits(today),
            "events": [_trouble(e) for e in await self._store.console_events(EVENTS)],
            "this_process": None if self._metrics is None else self._counts(now),
            "retention_events": [
                {
                    "at": e.at,
                    "conversation": str(e.session.conversation),
                    "session": e.session.session_id,
                    "turns": [e.first_turn, e.last_turn],
                    "messages": e.messages,
                    "reason": e.reason,
                }
                for e in retention
            ],
        }

    async def _person_limits(self, today: float) -> list[dict[str, Any]]:
        """Each per-person daily limit set, with the people nearest it today (most used
        first; admins are marked, the limits do not hold them on the bots they administer)."""
        limits = self._settings.limits
        found = []
        measures: tuple[tuple[str, float, TopMeasure], ...] = (
            ("user_input_tokens_per_day", limits.user_input_tokens_per_day, "input_tokens"),
            ("user_turns_per_day", limits.user_turns_per_day, "turns"),
            ("user_dollars_per_day", limits.user_dollars_per_day, "cost"),
        )
        for name, per_day, measure in measures:
            if not per_day:
                continue
            found.append(
                {
                    "limit": name,
                    "per_day": per_day,
                    "people": [
                        {
                            "platform": u.user.platform,
                            "user_id": u.user.user_id,
                            "used": round(u.used, 4) if isinstance(u.used, float) else u.used,
                            "share": round(u.used / per_day, 3),
                            "admin": (u.user.platform, u.user.user_id) in self._admins,
                        }
                        for u in await self._store.console_top(measure, today, NEAREST)
                    ],
                }
            )
        return found

    def _counts(self, now: float) -> dict[str, Any]:
        """Turns by outcome, gap notices, model rejections and limits since this process
        started (its Prometheus counters), with their rate per minute."""
        assert self._metrics is not None
        minutes = max(1.0, (now - self._started) / 60.0)

        def totals(counter: Any, label: str) -> dict[str, int]:
            found: dict[str, int] = {}
            for metric in counter.collect():
                for sample in metric.samples:
                    if sample.name.endswith("_total"):
                        key = sample.labels.get(label, "all")
                        found[key] = found.get(key, 0) + int(sample.value)
            return found

        def amount(counter: Any) -> float:
            return sum(
                float(sample.value)
                for metric in counter.collect()
                for sample in metric.samples
                if sample.name.endswith("_total")
            )

        turns = totals(self._metrics.turns, "outcome")
        errors = sum(n for k, n in turns.items() if k not in ("sent", "idle", "busy", "discarded"))
        return {
            "minutes": round(minutes, 1),
            "turns": turns,
            "turns_per_minute": round(sum(turns.values()) / minutes, 2),
            "errors_per_minute": round(errors / minutes, 2),
            "gap_notices": totals(self._metrics.gap_notices, "policy"),
            "limit_hits": totals(self._metrics.limit_hits, "limit"),
            "closed_out": totals(self._metrics.closed_out, "reason"),
            "cut": {
                "generations": int(amount(self._metrics.generations_cut)),
                "tokens": totals(self._metrics.cut_tokens, "kind"),
                "cost": round(amount(self._metrics.cut_cost), 4),
            },
            # Each MCP server: whether it is up now, and its calls by outcome (docs/tools.md).
            "mcp_servers": {
                sample.labels["server"]: {
                    "up": bool(sample.value),
                    "calls": {
                        outcome: n
                        for (server, outcome), n in self._mcp_calls().items()
                        if server == sample.labels["server"]
                    },
                }
                for metric in self._metrics.mcp_server_up.collect()
                for sample in metric.samples
            },
        }

    def _mcp_calls(self) -> dict[tuple[str, str], int]:
        assert self._metrics is not None
        found: dict[tuple[str, str], int] = {}
        for metric in self._metrics.mcp_calls.collect():
            for sample in metric.samples:
                if sample.name.endswith("_total"):
                    key = (sample.labels["server"], sample.labels["outcome"])
                    found[key] = found.get(key, 0) + int(sample.value)
        return found

    def _state_of(self, bot: str) -> dict[str, Any]:
        """``state``, and ``last_error`` (its message and time, or None)."""
        if self._adapters_state is None:
            return {"state": "not in this process", "last_error": None}
        found = self._adapters_state(bot)
        problem = found.problem
        return {
            "state": found.state,
            "last_error": None
            if problem is None
            else {"message": problem.message, "at": problem.at},
        }

    # -- conversations ----------------------------------------------------------------------

    async def conversations(self, search: str = "", after: str = "") -> dict[str, Any]:
        """A page of the conversation list (``after``: the previous page's cursor)."""
        keyset = _cursor(after)
        rows = await self._store.console_conversations(
            search=search[:200], after=keyset, limit=self._page + 1
        )
        more = len(rows) > self._page
        rows = rows[: self._page]
        return {
            "search": search,
            "conversations": [
                {**_row(r), "persona": r.persona or self._defaults.get(r.key.bot)} for r in rows
            ],
            "next": rows[-1].cursor if more and rows else None,
        }

    async def conversation(
        self,
        conversation_id: int,
        session_no: int | None,
        viewer: Viewer,
        before_turn: int | None = None,
    ) -> dict[str, Any]:
        """A conversation: its sessions, one page of a session's transcript (the newest
        ``TRANSCRIPT_PAGE`` messages before ``before_turn``), summary, gaps, the pending
        turn and the prompt that would be built now; audited (the transcript and the prompt
        show what is remembered about its people).

        Everything read is bounded, whatever the session holds: a page of the transcript,
        the count of pending messages and the one turn the pipeline would take (a model
        outage piles up thousands; reading and rendering them all froze the bots)."""
        key = await self._store.console_conversation(conversation_id)
        if key is None:
            raise NotFound(f"no conversation {conversation_id}")
        sessions = await self._store.list_sessions(key, LIST_PAGE + 1)
        if not sessions:
            raise NotFound(f"conversation {conversation_id} has no session")
        older_sessions = len(sessions) > LIST_PAGE
        sessions = sessions[-LIST_PAGE:]
        asked = (
            None
            if session_no is None or session_no >= 2**31
            else await self._store.get_session(SessionKey(key, session_no))
        )
        chosen = asked or sessions[-1]
        # One message more than the page says whether there are earlier ones.
        messages = await self._store.messages(
            chosen.key, before_turn=before_turn, limit=TRANSCRIPT_PAGE + 1
        )
        more = len(messages) > TRANSCRIPT_PAGE
        messages = messages[-TRANSCRIPT_PAGE:]
        # The newest few: /forget of one of many people leaves a range per message of theirs.
        tombstones = await self._store.tombstones(chosen.key, LIST_PAGE + 1)
        older_tombstones = len(tombstones) > LIST_PAGE
        tombstones = tombstones[-LIST_PAGE:]
        summary = await self._store.get_summary(chosen.key)
        gaps = await self._memory.gaps(chosen.key)
        pending = await self._store.pending_turn(key, 1)
        waiting = 0 if pending is None else await self._store.pending_count(key)
        now = self._clock.now()
        lease = await self._store.console_lease(turn_lease(key), now)
        edits = await self._store.console_edits(chosen.key)
        await self._store.record_audit(
            viewer.actor,
            "view conversation",
            f"conversation {conversation_id}",
            f"session {chosen.key.session_id} from {viewer.address}",
            now,
        )
        prompt = None
        if chosen.status == "open":
            persona = self._persona_of(key.bot)
            preview = await self._preview(key, persona, now)
            prompt = None if preview is None else _prompt(*preview)
        return {
            "id": conversation_id,
            "conversation": _key(key),
            "sessions": [
                {
                    "number": s.key.session_id,
                    "status": s.status,
                    "opened_at": s.opened_at,
                    "last_activity_at": s.last_activity_at,
                    "close_reason": s.close_reason,
                    "persona": s.persona or self._defaults.get(key.bot),
                }
                for s in sessions
            ],
            "session": chosen.key.session_id,
            "transcript": [{**_message(m), "edited_at": edits.get(m.id)} for m in messages],
            # The page before this one starts below this turn (None: this is the first).
            "earlier_before_turn": messages[0].turn if more else None,
            "newest_page": before_turn is None,
            "older_sessions": older_sessions,
            "deleted": [
                {"turns": [t.first_turn, t.last_turn], "reason": t.reason, "at": t.at}
                for t in tombstones
            ],
            "older_deleted": older_tombstones,
            "summary": None
            if summary is None
            else {
                "covers_turns": [summary.first_turn, summary.last_turn],
                "updated_at": summary.updated_at,
                "body": summary.body,
            },
            "gaps": [[g.first, g.last] for g in gaps[:LIST_PAGE]],
            "more_gaps": max(0, len(gaps) - LIST_PAGE),
            "gap_policy": self._settings.retention.gap_policy,
            "pending_turn": None
            if pending is None
            else {
                "session": pending.session.session_id,
                "messages": waiting,
                "first_pending_at": pending.first_pending_at,
            },
            "turn_lease": None if lease is None else {"holder": lease[0], "until": lease[1]},
            "prompt": prompt,
            "scene": await self._scene(key, now),
        }

    async def _scene(self, key: ConversationKey, now: float) -> dict[str, Any] | None:
        """A scene's cast, its last plan (who spoke and why), the caps of the last hour and
        the mute (docs/scenes.md); None for a chat that is no scene."""
        entry = next((b for b in self._settings.bots if b.key == key.bot), None)
        if entry is None or entry.scene is None:
            return None
        names = {p.id: p.name for p in self._settings.personas}
        state = await self._store.console_scene(key)
        plan = _json(state.last_plan)
        steps = plan.get("plan", []) if isinstance(plan, dict) else []
        return {
            "cast": [{"id": p, "name": names.get(p, p)} for p in entry.personas],
            "strategy": entry.scene.strategy,
            "last_plan_at": plan.get("at") if isinstance(plan, dict) else None,
            "last_plan": [
                {**step, "name": names.get(str(step.get("persona")), step.get("persona"))}
                for step in steps
                if isinstance(step, dict)
            ],
            "caps_last_hour": sum(1 for t in state.caps if t > now - 3600),
            "muted_until": state.muted_until if state.muted(now) else None,
        }

    def _persona_of(self, bot: str) -> PersonaSettings:
        return self._settings.persona(self._defaults.get(bot))

    # -- people -------------------------------------------------------------------------------

    async def person(self, user: UserKey, viewer: Viewer) -> dict[str, Any]:
        """What is remembered about a person (scope and provenance) and their spend today."""
        record = await self._memory.user_memory(user)
        view = await self._store.console_person(
            user, [i for item in record.items for i in item.sources], chats=LIST_PAGE
        )
        if not view.known:
            # A typo'd id: nothing of them is stored (not an empty page, nor an audit entry).
            raise NotFound(f"no person {user.platform}:{user.user_id} is known here")
        said = view.sources
        now = self._clock.now()
        await self._store.record_audit(
            viewer.actor, "view person", _who(user), f"from {viewer.address}", now
        )
        limits = self._settings.limits
        return {
            "person": {"platform": user.platform, "user_id": user.user_id},
            "names": list(view.names),
            "facts": [
                {
                    "section": item.section,
                    "field": item.field,
                    "value": item.value,
                    "scope": "private chat"
                    if item.private or item.scope is None
                    else f"group {item.scope}",
                    "mentioned_at": item.mentioned_at,
                    "sources": [_source(i, said.get(i)) for i in item.sources],
                }
                for item in record.items
            ],
            "forgotten_at": record.forgotten_at,
            "messages": view.messages,
            # The newest conversations they wrote in (``more_conversations``: not all listed).
            "conversations": [
                {
                    "id": c.id,
                    **_key(c.key),
                    "last_message_at": c.last_at,
                    "messages": c.messages,
                }
                for c in view.chats
            ],
            "more_conversations": view.more_chats,
            "input_tokens_today": await self._store.input_tokens_since(user, now - (now % DAY)),
            "input_tokens_per_day": limits.user_input_tokens_per_day or None,
            "cost_today": round(await self._store.cost_since(user, now - (now % DAY)), 4),
            "dollars_per_day": limits.user_dollars_per_day or None,
            "turns_per_day": limits.user_turns_per_day or None,
        }

    async def forget_item(
        self, user: UserKey, section: str, field: str, value: str, viewer: Viewer
    ) -> bool:
        """Erase one item; audited."""
        done = await self._memory.forget_item(user, section, field, value)
        await self._store.record_audit(
            viewer.actor,
            "forget item" if done else "forget item (not found)",
            _who(user),
            f"{section}.{field}",
            self._clock.now(),
        )
        return done

    async def forget_all(self, user: UserKey, viewer: Viewer) -> dict[str, Any]:
        """Everything /forget erases, through the same code; audited."""
        report = await self._memory.erase(
            user, delete_messages=self._settings.retention.forget_deletes_messages
        )
        await self._store.record_audit(
            viewer.actor, "forget everything", _who(user), report.describe(), self._clock.now()
        )
        return {"items": report.items, "reminders": report.reminders, "report": report.describe()}

    async def export(self, user: UserKey, viewer: Viewer) -> dict[str, Any]:
        """The /export document; audited."""
        document = await self._memory.export_all(user, self._defaults)
        await self._store.record_audit(viewer.actor, "export", _who(user), "", self._clock.now())
        return document

    # -- retention and audit ------------------------------------------------------------------

    async def retention(self, after: int = 0) -> dict[str, Any]:
        """The retention log, the audit of one page of open sessions (the page size, after
        row ``after``), what the next run would do (its first page of open sessions). The
        whole audit costs a query or two per open session: 5,000 of them took a page a
        second (review 34), so it is paged here; ``personabot retention audit`` walks all."""
        worker = self._retention()
        risks, cursor = await worker.audit_page(cursor=after, limit=self._page)
        dry = await worker.run_once(dry_run=True, max_sessions=self._page)
        return {
            "policy": {
                "mode": self._settings.retention.mode,
                "days": self._settings.retention.days,
            },
            "at_risk": [
                {
                    "conversation": str(r.session.conversation),
                    "session": r.session.session_id,
                    "turns": [r.first_turn, r.last_turn],
                    "age_days": round(r.age_days, 1),
                    "reason": r.reason,
                }
                for r in risks
            ],
            "audited_after": after,
            "audit_page": self._page,
            "audit_next": cursor or None,
            "next_run": {"skipped": dry.skipped, "lines": list(dry.lines)},
            "log": [
                {
                    "at": e.at,
                    "conversation": str(e.session.conversation),
                    "session": e.session.session_id,
                    "turns": [e.first_turn, e.last_turn],
                    "messages": e.messages,
                    "reason": e.reason,
                }
                for e in await self._store.retention_log(self._page)
            ],
        }

    async def audit(self, before: int | None = None) -> dict[str, Any]:
        """The operator audit log, newest first."""
        entries = await self._store.audit_log(before=before, limit=self._page)
        return {
            "entries": [
                {
                    "id": e.id,
                    "at": e.at,
                    "actor": e.actor,
                    "action": e.action,
                    "target": e.target,
                    "detail": e.detail,
                }
                for e in entries
            ],
            "next": entries[-1].id if len(entries) == self._page else None,
        }


def bot_personas(settings: Settings) -> dict[str, str]:
    """The default persona of every bot key the store may hold chats of: each ``[[bots]]``
    entry's, the terminal chat's ``console-<persona>`` (bot/app/chat.py) and the
    playground's ``web-<persona>``. A chat held with ``chat --persona seraphina`` was shown
    as the default persona's, its prompt built with the default pin (issue 35)."""
    found = {f"console-{p.id}": p.id for p in settings.personas}
    found |= {f"{PREFIX}{p.id}": p.id for p in settings.personas}
    return found | {b.key: b.default_persona for b in settings.bots}


def _admins(settings: Settings) -> frozenset[tuple[str, str]]:
    """(platform, user id) of every bot's admins, and the playground's operator."""
    found = {(PLATFORM, OPERATOR)}
    for entry in settings.bots:
        admins = settings.access.admins if entry.admins is None else entry.admins
        found.update((entry.platform, str(a)) for a in admins)
    return frozenset(found)


def _hour(start: float, bucket: UsageBucket | None) -> dict[str, Any]:
    """One hour of the overview's chart (zeros when nothing was charged in it)."""
    if bucket is None:
        return {"start": start, "replies": 0, "calls": 0, "tokens": 0}
    return {
        "start": start,
        "replies": bucket.replies,
        "calls": bucket.calls,
        "tokens": bucket.input_tokens + bucket.output_tokens,
    }


def _trouble(event: ConsoleEvent) -> dict[str, Any]:
    return {
        "at": event.at,
        "kind": event.kind,
        "conversation_id": event.conversation_id,
        **_key(event.key),
        "session": event.session_no,
        "turns": list(event.turns),
        "detail": event.detail,
    }


def _cursor(text: str) -> tuple[float, int] | None:
    """A page cursor (``activity:row``); a malformed one starts from the top."""
    at, _, row = text.partition(":")
    try:
        cursor = (float(at), int(row)) if text else None
    except ValueError:
        return None
    # Beyond SQL's 64-bit integers (the driver would fail) or not a number: from the top.
    if cursor is None or not math.isfinite(cursor[0]) or not 0 <= cursor[1] < 2**62:
        return None
    return cursor


def _key(key: ConversationKey) -> dict[str, Any]:
    return {
        "bot": key.bot,
        "platform": key.platform,
        "chat_id": key.chat_id,
        "thread_id": key.thread_id,
    }


def _row(row: ConversationRow) -> dict[str, Any]:
    return {
        "id": row.id,
        **_key(row.key),
        "session": row.session_no,
        "status": row.status,
        "last_activity_at": row.last_activity_at,
        "persona": row.persona,
        "participants": list(row.participants),
    }


def _message(m: StoredMessage) -> dict[str, Any]:
    return {
        "id": m.id,
        "turn": m.turn,
        "role": m.role,
        "author_id": m.author_id,
        "display_name": m.display_name,
        "text": m.text,
        "at": m.created_at,
        "answered": m.answered,
        "addressed": m.addressed,
        "origin": m.origin,
        "media": [x.ref.kind for x in m.media],
        "persona": m.persona,
    }


def _json(text: str | None) -> Any:
    """A scene note as stored (None when missing or unreadable: a note, never an error)."""
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _source(message_id: int, message: StoredMessage | None) -> dict[str, Any]:
    if message is None:
        return {"message": message_id, "text": None}
    return {
        "message": message_id,
        "text": message.text[:300],
        "at": message.created_at,
        "chat": str(message.session.conversation),
    }


def _who(user: UserKey) -> str:
    return f"{user.platform}:{user.user_id}"


def _prompt(title: str, assembled: Assembled) -> dict[str, Any]:
    """The prompt layer by layer, as ``personabot prompt`` prints it."""
    request = assembled.request
    blocks: list[dict[str, Any]] = [
        {"where": f"system {i}", "cache": b.cache, "text": b.text}
        for i, b in enumerate(request.system)
    ]
    for message in request.messages:
        for b in message.blocks:
            if isinstance(b, TextBlock):
                blocks.append({"where": message.role, "cache": b.cache, "text": b.text})
            elif isinstance(b, ImageBlock):
                blocks.append(
                    {"where": message.role, "cache": False, "text": f"[image {b.media_type}]"}
                )
    lore = assembled.lore
    listed, counted = ((), 0) if lore is None else lore.listed()
    return {
        "title": title,
        "model": request.model,
        "layers": [{"name": n, "tokens": t} for n, t in assembled.breakdown],
        "total_tokens": assembled.total_tokens,
        "blocks": blocks,
        "lorebook": None
        if lore is None
        else {
            "fired": [{"entry": f.label, "why": f.why, "tokens": f.tokens} for f in lore.fired],
            "skipped": [{"entry": s.label, "reason": s.reason, "detail": s.detail} for s in listed],
            # Entries whose keys did not come up, counted rather than listed (a big book).
            "not_triggered": counted,
        },
    }
