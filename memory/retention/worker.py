"""The retention worker and audit (docs/architecture.md#retention): delete only what the policy
allows, never leave a session half-compacted, and find sessions that would lose messages.

Session mode: a closed session expires as a unit, ``days`` after it closed; an open session's
messages never age. Message mode: messages older than ``days`` are deleted, open sessions'
ones only after the summary covers them (summary first, then deletion: a crash in between
leaves rows that the summary already covers, and the next run deletes them). Closed sessions
expire as units in both modes, so no session ever keeps just a tail of its messages.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Literal, Protocol

from bot.core.clock import Clock
from bot.core.events import SessionKey
from bot.metrics import Metrics
from bot.store.contracts import LeaseStore, RetentionStore
from memory.retention.gaps import Gap
from memory.service import Memory

log = logging.getLogger("personabot.retention")

DAY = 86400.0
LEASE = "retention"

#: Leases that only mark something as done until they expire (a button's press, the denied
#: reply of the day, an export's or a limit notice's period, a draft's stop request, a
#: command that ran). Each name holds a message, a chat or a person's id: without this they
#: stayed forever, one row per press, chat and person (a person's id even after /forget).
#: Leases that fence or are claimed (``turn:`` rows PostgreSQL's claim locks, the elections,
#: the jobs, this worker's) keep their rows: their tokens must keep growing.
MARKER_LEASES = ("press:", "denied:", "export:", "limit-notice:", "stop:", "command:")
#: How long after its expiry a marker lease is deleted: clocks of processes (and the
#: database's, which PostgreSQL's leases follow) never disagree by that much.
MARKER_GRACE = DAY


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """The retention rules in force."""

    mode: Literal["session", "message"] = "session"
    days: float = 30.0
    batch_size: int = 500
    # Pause between two write transactions: SQLite has no fair lock, and a worker writing
    # back to back would starve other processes' writers (their busy handler sleeps 1-100 ms
    # between tries). A few ms per batch leave the lock free most of the time.
    pause_seconds: float = 0.005
    # Delivered outbox rows are kept this long (for inspection), then pruned.
    outbox_days: float = 1.0


@dataclass(frozen=True, slots=True)
class RetentionReport:
    """What one run deleted (or would delete, in a dry run)."""

    dry_run: bool
    expired_sessions: int = 0
    deleted_messages: int = 0
    summarised_sessions: int = 0
    skipped: str | None = None
    lines: tuple[str, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class AtRisk:
    """An open session whose prompt would miss turns that no summary covers."""

    session: SessionKey
    first_turn: int
    last_turn: int
    age_days: float
    reason: str


class RetentionWorkerStore(RetentionStore, LeaseStore, Protocol):
    """What the worker uses: the retention statements, and the lease that keeps it to one
    process at a time."""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Retention:
    """Runs the policy against the store; one worker at a time across processes (lease)."""

    store: RetentionWorkerStore
    memory: Memory
    clock: Clock
    policy: RetentionPolicy
    holder: str = "retention"
    lease_seconds: float = 600.0
    metrics: Metrics | None = None

    async def run_once(
        self, *, dry_run: bool = False, max_sessions: int | None = None
    ) -> RetentionReport:
        """Apply the policy once; a dry run only reports (on at most ``max_sessions`` open
        sessions in message mode, then a line says there may be more: the console's page)."""
        if self.policy.days <= 0:
            return RetentionReport(dry_run, skipped="retention is disabled (days = 0)")
        now = self.clock.now()
        # A dry run writes nothing, so it takes no lease: the console's retention page (a
        # dry run per view) must not make the real run skip its turn, nor wait for it.
        lease = (
            None
            if dry_run
            else await self.store.acquire_lease(LEASE, self.holder, self.lease_seconds, now)
        )
        if lease is None and not dry_run:
            return RetentionReport(dry_run, skipped="another retention worker is running")
        try:
            cutoff = now - self.policy.days * DAY
            expired, deleted, lines = await self._expire_closed(cutoff, dry_run)
            summarised = 0
            if self.policy.mode == "message":
                more, summarised, more_lines = await self._age_open(
                    cutoff, dry_run, None if not dry_run else max_sessions
                )
                deleted += more
                lines += more_lines
            if not dry_run:
                await self.store.prune_outbox(now - self.policy.outbox_days * DAY)
                await self.store.prune_leases(now - MARKER_GRACE, MARKER_LEASES)
        finally:
            if lease is not None:
                await self.store.release_lease(lease)
        log.info(
            "retention%s: %d session(s) expired, %d message(s) deleted",
            " (dry run)" if dry_run else "",
            expired,
            deleted,
        )
        return RetentionReport(dry_run, expired, deleted, summarised, lines=tuple(lines))

    async def _expire_closed(self, cutoff: float, dry_run: bool) -> tuple[int, int, list[str]]:
        sessions = deleted = 0
        lines: list[str] = []
        seen: set[SessionKey] = set()
        while batch := [s for s in await self.store.expired_sessions(cutoff, 100) if s not in seen]:
            for session in batch:
                seen.add(session)
                if dry_run:
                    bounds = await self.store.session_bounds(session)
                    count = 0 if bounds is None else bounds[1] - bounds[0] + 1
                else:
                    count = await self.store.expire_session(session, self.clock.now())
                    await self._breathe()
                sessions += 1
                deleted += count
                lines.append(f"{session}: session expired ({count} message(s))")
            if dry_run:
                break
        return sessions, deleted, lines

    async def _breathe(self) -> None:
        await asyncio.sleep(self.policy.pause_seconds)

    async def _age_open(
        self, cutoff: float, dry_run: bool, max_sessions: int | None = None
    ) -> tuple[int, int, list[str]]:
        deleted = summarised = 0
        lines: list[str] = []
        done: set[SessionKey] = set()
        while True:
            # Only open sessions are listed (closed ones expire as units, never by a prefix);
            # page until every one was handled once.
            page = [
                s
                for s in await self.store.sessions_with_old_messages(cutoff, len(done) + 500)
                if s not in done
            ]
            if not page:
                return deleted, summarised, lines
            for session in page:
                if max_sessions is not None and len(done) >= max_sessions:
                    lines.append(f"(only the first {max_sessions} open sessions were looked at)")
                    return deleted, summarised, lines
                done.add(session)
                result = await self._age_session(session, cutoff, dry_run)
                deleted += result[0]
                summarised += result[1]
                lines += result[2]

    async def _age_session(
        self, session: SessionKey, cutoff: float, dry_run: bool
    ) -> tuple[int, int, list[str]]:
        """Summarise, then delete, one open session's old messages: (deleted, summarised,
        report lines)."""
        old = await self.store.old_messages(session, cutoff)
        if old is None:
            return 0, 0, []
        if dry_run:
            return (
                old.count,
                0,
                [
                    f"{session}: turns {old.first_turn}-{old.last_turn} would be summarised and "
                    f"deleted ({old.count} message(s))"
                ],
            )
        # Summary first: the rows go only once the summary covers them.
        summarised = int(await self.memory.compact(session, through_turn=old.last_turn) > 0)
        summary = await self.memory.summary(session)
        covered = 0 if summary is None else min(summary.last_turn, old.last_turn)
        if covered < old.first_turn:
            log.warning(
                "%s: old turns %d-%d kept: the summary does not cover them yet",
                session,
                old.first_turn,
                old.last_turn,
            )
            return 0, summarised, []
        count = 0
        # The store deletes only what the summary it reads in the same transaction covers
        # (never below its first turn), so a summary changed meanwhile cannot make a hole.
        while n := await self.store.delete_old_messages(
            session, covered, cutoff, self.clock.now(), self.policy.batch_size
        ):
            count += n
            await self._breathe()
        if not count:
            log.warning(
                "%s: old turns %d-%d kept: the summary (turns %d-%d) does not cover them",
                session,
                old.first_turn,
                old.last_turn,
                summary.first_turn if summary else 0,
                summary.last_turn if summary else 0,
            )
            return 0, summarised, []
        line = f"{session}: turns {old.first_turn}-{covered} summarised and deleted"
        return count, summarised, [f"{line} ({count} message(s))"]

    async def audit(self, policy: RetentionPolicy | None = None) -> list[AtRisk]:
        """Open sessions whose next prompt would miss turns that no summary covers, under
        ``policy`` (default: the one in force). Deletes nothing."""
        risks: list[AtRisk] = []
        cursor = 0
        while True:
            page, cursor = await self.audit_page(policy, cursor=cursor, limit=500)
            risks += page
            if not cursor:
                return risks

    async def audit_page(
        self, policy: RetentionPolicy | None = None, *, cursor: int = 0, limit: int = 200
    ) -> tuple[list[AtRisk], int]:
        """The audit of one page of open sessions (``limit`` of them after ``cursor``) and
        where the next page starts (0: this was the last): what the console shows per view,
        where the whole audit is a query or two per open session."""
        policy = policy or self.policy
        now = self.clock.now()
        cutoff = now - policy.days * DAY if policy.days > 0 else None
        risks: list[AtRisk] = []
        page, cursor = await self.store.sessions_page("open", cursor, limit)
        for info in page:
            risks += await self._session_risks(info.key, policy, cutoff, now)
        return risks, cursor

    async def _session_risks(
        self, session: SessionKey, policy: RetentionPolicy, cutoff: float | None, now: float
    ) -> list[AtRisk]:
        risks = [
            AtRisk(session, gap.first, gap.last, 0.0, "already missing")
            for gap in await self.memory.gaps(session)
        ]
        if policy.mode != "message" or cutoff is None:
            return risks
        old = await self.store.old_messages(session, cutoff)
        if old is None:
            return risks
        summary = await self.memory.summary(session)
        covered = 0 if summary is None else summary.last_turn
        uncovered = Gap(max(old.first_turn, covered + 1), old.last_turn)
        if uncovered.first <= uncovered.last:
            risks.append(
                AtRisk(
                    session,
                    uncovered.first,
                    uncovered.last,
                    (now - old.oldest_at) / DAY,
                    "older than the policy, no summary",
                )
            )
        return risks
