"""docs/architecture.md#retention: retention never makes the model hallucinate (the 80-day SLA
case)."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import sys
from pathlib import Path

import asyncpg
import pytest

from bot.app.build import memory_on
from bot.config import load_settings
from bot.core.clock import ManualClock
from bot.core.errors import ConfigError, ModelUnavailable, StoreError
from bot.core.events import ConversationKey, Inbound, QueuePolicy, SessionKey
from bot.core.llm import BaseLLM, ModelRequest, ModelResult
from bot.llm.offline import OfflineLLM
from bot.runtime.pipeline import GapPolicy
from bot.store.base import BaseStore
from bot.store.sqlite import SQLiteStore
from memory.assemble import Budget
from memory.retention.gaps import Gap
from memory.retention.worker import DAY, Retention, RetentionPolicy
from memory.service import Memory, MemoryPolicy
from tests.backends import StoreFactory
from tests.fakes.llm import GatedLLM
from tests.harness import harness
from tests.processes import spawn
from tests.store.helpers import close_session

SUPPORT = ConversationKey("telegram", "support-1")
HEALTHY = ConversationKey("telegram", "healthy-1")
SLA = "we agreed on a 99.9% SLA"
POLICY = QueuePolicy(debounce=1.0, max_wait=5.0)


async def exchange(
    store: BaseStore,
    clock: ManualClock,
    conv: ConversationKey,
    text: str,
    n: int,
    *,
    author: str = "u1",
) -> None:
    """One answered user message (two turns)."""
    await store.ingest(
        Inbound(conv, author, "Client", text, f"{conv.chat_id}-{n}"), clock.now(), POLICY
    )
    turn = await store.pending_turn(conv)
    lease = await store.acquire_lease(f"t:{conv}", "setup", 30, clock.now())
    assert turn is not None and lease is not None
    result = await store.finish_turn(turn, lease, f"noted ({n})", clock.now(), POLICY)
    assert result.outcome == "recorded"
    await store.release_lease(lease)


async def support_session(store: BaseStore, clock: ManualClock) -> None:
    """Opened 80 days ago, still active: 40 turns (turn 3 holds the SLA), spread evenly."""
    for n in range(20):
        text = SLA if n == 1 else f"question {n} about the rollout"
        await exchange(store, clock, SUPPORT, text, n)
        await clock.advance(4 * DAY)


def memory_for(store: BaseStore, clock: ManualClock, llm: BaseLLM | None = None) -> Memory:
    policy = MemoryPolicy(budget=Budget(window_messages=8), summary_model="m")
    return memory_on(store=store, llm=llm or OfflineLLM(), clock=clock, policy_for=lambda _: policy)


def retention(
    store: BaseStore, clock: ManualClock, memory: Memory, mode: str, days: float = 30
) -> Retention:
    return Retention(
        store=store, memory=memory, clock=clock, policy=RetentionPolicy(mode=mode, days=days)
    )  # type: ignore[arg-type]


async def test_session_mode_keeps_the_open_session_and_the_sla(
    store: BaseStore, clock: ManualClock
) -> None:
    await support_session(store, clock)
    memory = memory_for(store, clock)
    report = await retention(store, clock, memory, "session").run_once()
    assert report.deleted_messages == 0
    session = SessionKey(SUPPORT, 1)
    assert len(await store.messages(session)) == 40
    llm = GatedLLM()
    async with harness(store, clock, llm) as h:
        await h.say(SUPPORT, "what SLA did we agree?")
        await h.advance(2)
    prompt = "\n".join(m.text for m in llm.requests[0].messages)
    prompt += "\n".join(b.text for b in llm.requests[0].system)
    assert SLA in prompt
    assert "unavailable" not in prompt


async def test_message_mode_summarises_before_deleting(
    store: BaseStore, clock: ManualClock
) -> None:
    await support_session(store, clock)
    memory = memory_for(store, clock)
    report = await retention(store, clock, memory, "message").run_once()
    session = SessionKey(SUPPORT, 1)
    remaining = await store.messages(session)
    cutoff = clock.now() - 30 * DAY
    assert all(m.created_at > cutoff for m in remaining)  # older turns are gone
    assert report.deleted_messages == 40 - len(remaining) > 0
    summary = await memory.summary(session)
    assert summary is not None and summary.first_turn == 1
    assert summary.last_turn >= remaining[0].turn - 1  # contiguous with what is left
    assert SLA in summary.render()
    log = await store.retention_log()
    assert log[0].first_turn == 1 and log[0].reason == "message age"
    llm = GatedLLM()
    async with harness(store, clock, llm) as h:
        await h.say(SUPPORT, "what SLA did we agree?")
        await h.advance(2)
    system = "\n".join(b.text for b in llm.requests[0].system)
    assert f"Summary of turns 1-{summary.last_turn}" in system and SLA in system
    assert "<gap_notice>" not in system


def delete_behind_the_back(path: Path, last_turn: int) -> None:
    """Another deleter (a cron job, a DBA) removes turns 1..last_turn directly."""
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM messages WHERE turn <= ?", (last_turn,))


@pytest.mark.parametrize("policy", ["note", "tell_user", "refuse"])
async def test_gap_policies(tmp_path: Path, clock: ManualClock, policy: str) -> None:
    path = tmp_path / "gap.sqlite3"
    async with SQLiteStore(path=path) as store:
        await support_session(store, clock)
        delete_behind_the_back(path, 28)
        llm = GatedLLM()
        gaps = GapPolicy(
            policy,
            "Turns {first}-{last} were removed; please restate.",  # type: ignore[arg-type]
            "Turns {first}-{last} are gone; a human will take over.",
        )
        async with harness(store, clock, llm, gap_policy=gaps) as h:
            await h.say(SUPPORT, "what SLA did we agree?")
            await h.advance(2)
            await h.say(SUPPORT, "hello?")
            await h.advance(2)
        texts = h.outlet.texts()
        if policy == "refuse":
            assert llm.calls == 0
            assert texts[0] == "Turns 1-28 are gone; a human will take over."
            return
        notice = "\n".join(b.text for b in llm.requests[0].system)
        assert "Turns 1-28 of this conversation are unavailable" in notice
        assert "Do not state facts" in notice
        told = [t for t in texts if "please restate" in t]
        assert told == (
            ["Turns 1-28 were removed; please restate."] if policy == "tell_user" else []
        )  # once per session, not per turn
        assert h.pipeline.counters[f"gap_{policy}"] == 2


async def test_closed_session_expires_as_a_unit(store: BaseStore, clock: ManualClock) -> None:
    for n in range(6):
        await exchange(store, clock, SUPPORT, f"old {n}", n)
        await clock.advance(10 * DAY)  # half of the session is older than 30 days...
    await close_session(store, SUPPORT, clock.now(), "idle")
    await exchange(store, clock, HEALTHY, "recent", 1)
    memory = memory_for(store, clock)
    for mode in ("message", "session"):
        await retention(store, clock, memory, mode).run_once()
        assert len(await store.messages(SessionKey(SUPPORT, 1))) in (0, 12)  # never a prefix
    await clock.advance(31 * DAY)
    report = await retention(store, clock, memory, "session").run_once()
    assert report.expired_sessions >= 1
    assert await store.messages(SessionKey(SUPPORT, 1)) == []
    info = await store.get_session(SessionKey(SUPPORT, 1))
    assert info is not None and info.status == "expired"


class FailingSummaries(BaseLLM):
    async def complete(self, request: ModelRequest) -> ModelResult:
        raise ModelUnavailable("overloaded", status=529)


class CrashAfterSummary(SQLiteStore):
    """Dies right after the summary was saved, before any deletion."""

    crash = True

    async def delete_old_messages(self, *args: object, **kwargs: object) -> int:
        if self.crash:
            self.crash = False
            raise StoreError("power cut")
        return await super().delete_old_messages(*args, **kwargs)  # type: ignore[arg-type]


async def test_interrupted_compaction_leaves_a_consistent_store(
    tmp_path: Path, clock: ManualClock
) -> None:
    async with CrashAfterSummary(path=tmp_path / "crash.sqlite3") as store:
        await support_session(store, clock)
        session = SessionKey(SUPPORT, 1)
        # 1. The summariser fails: nothing is deleted.
        down = retention(store, clock, memory_for(store, clock, FailingSummaries()), "message")
        assert (await down.run_once()).deleted_messages == 0
        assert len(await store.messages(session)) == 40
        # 2. The process dies between the summary and the deletion.
        up = retention(store, clock, memory_for(store, clock), "message")
        with pytest.raises(StoreError):
            await up.run_once()
        summary = await store.get_summary(session)
        assert summary is not None and len(await store.messages(session)) == 40
        # 3. The next run finishes the job: the rows the summary covers go.
        report = await up.run_once()
        assert report.deleted_messages > 0
        remaining = await store.messages(session)
        final = await store.get_summary(session)
        assert final is not None and final.first_turn == 1
        assert remaining[0].turn <= final.last_turn + 1  # no turn is neither stored nor summarised
        assert all(m.created_at > clock.now() - 30 * DAY for m in remaining)


async def test_audit_cli_lists_exactly_the_sessions_at_risk(
    tmp_path: Path, clock: ManualClock
) -> None:
    path = tmp_path / "audit.sqlite3"
    async with SQLiteStore(path=path) as store:
        await support_session(store, clock)
        await exchange(store, clock, HEALTHY, "a recent question", 1)
    import time

    offset = time.time() - clock.now()  # the CLI runs on the real clock: shift the data
    with sqlite3.connect(path) as db:
        for table, col in (
            ("messages", "created_at"),
            ("sessions", "opened_at"),
            ("sessions", "last_activity_at"),
        ):
            db.execute(f"UPDATE {table} SET {col} = {col} + ?", (offset,))
    config = tmp_path / "personabot.toml"
    config.write_text(f'[storage]\nurl = "sqlite:///{path}"\n[retention]\nmode = "message"\n')

    async def audit(*extra: str) -> tuple[int, str]:
        proc = await spawn(
            sys.executable,
            "-m",
            "bot",
            "retention",
            "audit",
            "--config",
            str(config),
            *extra,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await proc.communicate()
        assert proc.returncode is not None
        return proc.returncode, out.decode() + err.decode()

    code, out = await audit("--days", "7")
    assert code == 3, out
    lines = [line for line in out.splitlines() if line.startswith("  ")]
    assert len(lines) == 1 and "support-1#S1: turns 1-" in lines[0]
    assert "healthy" not in out
    code, out = await audit("--days", "365")
    assert code == 0 and "0 session(s) at risk" in out
    code, out = await audit("--days", "7", "--mode", "session")
    assert code == 0


async def test_closed_sessions_never_crowd_out_open_ones(
    store: BaseStore, clock: ManualClock
) -> None:
    """Message mode pages through open sessions only: closed ones wait to expire as units."""
    for i in range(3):
        conv = ConversationKey("telegram", f"closed-{i}")
        await exchange(store, clock, conv, "old", i)
        await close_session(store, conv, clock.now(), "idle")
    await exchange(store, clock, SUPPORT, "old but open", 99)
    await clock.advance(40 * DAY)
    cutoff = clock.now() - 30 * DAY
    assert await store.sessions_with_old_messages(cutoff, 1) == [SessionKey(SUPPORT, 1)]


async def test_delivered_outbox_rows_are_pruned(store: BaseStore, clock: ManualClock) -> None:
    await exchange(store, clock, SUPPORT, "hello", 1)
    (item,) = await store.unsent_outbox(clock.now())
    assert await store.begin_send(item, clock.now())
    await store.mark_sent(item.id, clock.now())
    assert await store.prune_outbox(clock.now() - 60) == 0  # too recent
    await clock.advance(2 * DAY)
    report = await retention(store, clock, memory_for(store, clock), "session").run_once()
    assert report.skipped is None
    assert await store.prune_outbox(clock.now()) == 0  # the run already pruned it


async def delete_rows(stores: StoreFactory, turns: list[int]) -> None:
    """Another tool (a cron job, a DBA) deletes these turns' rows straight from the database."""
    if stores.backend.name == "sqlite":
        with contextlib.closing(sqlite3.connect(stores.path)) as db, db:
            db.execute(f"DELETE FROM messages WHERE turn IN ({','.join('?' * len(turns))})", turns)
        return
    conn = await asyncpg.connect(stores.dsn)
    try:
        await conn.execute("DELETE FROM messages WHERE turn = ANY($1::int[])", turns)
    finally:
        await conn.close()


TOLD = "Turns {turns} were removed; please restate."


@pytest.mark.parametrize("policy", ["tell_user", "refuse"])
async def test_holes_in_the_middle_and_at_the_end_are_noticed(
    store: BaseStore, stores: StoreFactory, clock: ManualClock, policy: str
) -> None:
    """Turns 15-16 and the last two (39-40) vanish behind personabot's back: the first turn,
    turn 14 and turn 38 are still stored, so only a check of every turn notices."""
    await support_session(store, clock)
    await delete_rows(stores, [15, 16, 39, 40])
    session = SessionKey(SUPPORT, 1)
    assert await store.missing_turns(session) == [(15, 16), (39, 40)]
    llm = GatedLLM()
    gaps = GapPolicy(policy, TOLD, "Turns {turns} are gone.")  # type: ignore[arg-type]
    async with harness(store, clock, llm, gap_policy=gaps) as h:
        await h.say(SUPPORT, "what SLA did we agree?")
        await h.advance(2)
    texts = h.outlet.texts()
    assert h.pipeline.counters[f"gap_{policy}"] == 1
    if policy == "refuse":
        assert llm.calls == 0 and texts == ["Turns 15-16, 39-40 are gone."]
        return
    notice = "\n".join(b.text for b in llm.requests[0].system)
    assert "Turns 15-16, 39-40 of this conversation are unavailable" in notice
    assert texts[0] == "Turns 15-16, 39-40 were removed; please restate."


async def test_deletions_personabot_makes_are_not_gaps(
    store: BaseStore, stores: StoreFactory, clock: ManualClock
) -> None:
    """A message deleted on the platform and messages erased by /forget are tombstoned with
    the reason: no gap notice, nothing told; a row deleted by another tool still is."""
    for n in range(3):
        await exchange(store, clock, SUPPORT, f"old {n}", n)  # session 1: turns 1-6
    llm = GatedLLM()
    gaps = GapPolicy("tell_user", TOLD, "refused")  # type: ignore[arg-type]
    async with harness(store, clock, llm, gap_policy=gaps, forget_deletes_messages=True) as h:
        await h.say(SUPPORT, "/new")
        await h.say(SUPPORT, "first", message_id="keep-1")
        await h.advance(2)
        await h.say(SUPPORT, "oops, wrong chat", message_id="oops")
        await h.advance(2)
        await h.router(
            Inbound(SUPPORT, "u1", "Client", "", platform_message_id="oops", kind="delete")
        )
        # Erases the asker's messages and replies only to them.
        await h.say(SUPPORT, "/forget confirm")
        await h.say(SUPPORT, "still there?")
        await h.advance(2)
    assert "<gap_notice>" not in "\n".join(b.text for b in llm.requests[-1].system)
    assert not any("please restate" in t for t in h.outlet.texts())
    assert h.pipeline.counters["gap_tell_user"] == 0
    old, new = SessionKey(SUPPORT, 1), SessionKey(SUPPORT, 2)
    assert await store.missing_turns(old) == [] and await store.missing_turns(new) == []
    assert [(t.first_turn, t.last_turn, t.reason) for t in await store.tombstones(new)] == [
        (1, 2, "/forget"),
        (3, 3, "deleted on the platform"),
    ]
    assert {t.reason for t in await store.tombstones(old)} == {"/forget"}
    assert await store.messages(old) == []  # the replies answered only them: erased too
    # A tombstone explains its own turn only: a row another tool deletes is still a gap.
    await delete_rows(stores, [4])
    assert await store.missing_turns(new) == [(4, 4)]


async def test_message_mode_tombstones_what_it_deletes(
    store: BaseStore, clock: ManualClock
) -> None:
    await support_session(store, clock)
    memory = memory_for(store, clock)
    report = await retention(store, clock, memory, "message").run_once()
    session = SessionKey(SUPPORT, 1)
    buried = await store.tombstones(session)
    assert sum(t.last_turn - t.first_turn + 1 for t in buried) == report.deleted_messages
    assert {t.reason for t in buried} == {"message age"}
    summary = await memory.summary(session)
    assert summary is not None
    # The summary's range explains them; the tombstones alone do not (a lost summary).
    assert await memory.gaps(session) == ()
    covered = (summary.first_turn, summary.last_turn)
    assert await store.missing_turns(session, covered) == []
    assert await store.missing_turns(session) == [(1, report.deleted_messages)]


def test_gap_message_with_an_unknown_placeholder_is_a_config_error(tmp_path: Path) -> None:
    """Caught at start, not as a failing turn when the first gap is found."""
    path = tmp_path / "personabot.toml"
    path.write_text('[retention]\nrefuse_message = "turns {range} are gone"\n')
    with pytest.raises(ConfigError, match=r"retention.refuse_message: bad placeholder"):
        load_settings(path)


async def behind_the_back(stores: StoreFactory, sql: str) -> None:
    """Another tool (a table restored from an older backup, a migration gone wrong) runs
    ``sql`` straight on the database."""
    if stores.backend.name == "sqlite":
        with contextlib.closing(sqlite3.connect(stores.path)) as db, db:
            db.execute(sql)
        return
    conn = await asyncpg.connect(stores.dsn)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def folded_and_deleted(store: BaseStore, clock: ManualClock) -> int:
    """The support session under message-mode retention: turns 1..N folded into the summary,
    then deleted and tombstoned as message age; return N."""
    await support_session(store, clock)
    memory = memory_for(store, clock)
    report = await retention(store, clock, memory, "message").run_once()
    session = SessionKey(SUPPORT, 1)
    (buried,) = await store.tombstones(session)
    assert (buried.first_turn, buried.reason) == (1, "message age")
    assert buried.last_turn == report.deleted_messages > 1
    assert await memory.gaps(session) == ()
    return buried.last_turn


@pytest.mark.parametrize("policy", ["note", "tell_user", "refuse"])
async def test_a_summary_lost_behind_the_back_is_a_gap(
    store: BaseStore, stores: StoreFactory, clock: ManualClock, policy: str
) -> None:
    """The tombstones of message mode say "folded into the summary"; once the summary row is
    gone, nothing holds those turns: the gap policy applies, and the audit lists them."""
    last = await folded_and_deleted(store, clock)
    await behind_the_back(stores, "DELETE FROM summaries")
    session = SessionKey(SUPPORT, 1)
    memory = memory_for(store, clock)
    assert await memory.gaps(session) == (Gap(1, last),)
    risks = await retention(store, clock, memory, "message").audit()
    assert [(r.session, r.first_turn, r.last_turn, r.reason) for r in risks] == [
        (session, 1, last, "already missing")
    ]
    llm = GatedLLM()
    gaps = GapPolicy(policy, TOLD, "Turns {turns} are gone.")  # type: ignore[arg-type]
    async with harness(store, clock, llm, gap_policy=gaps) as h:
        await h.say(SUPPORT, "what SLA did we agree?")
        await h.advance(2)
        await h.say(SUPPORT, "hello?")
        await h.advance(2)
    texts = h.outlet.texts()
    if policy == "refuse":
        assert llm.calls == 0 and texts == [f"Turns 1-{last} are gone."] * 2
        return
    assert len(llm.requests) == 2
    for request in llm.requests:
        system = "\n".join(b.text for b in request.system)
        assert f"Turns 1-{last} of this conversation are unavailable" in system
    told = [t for t in texts if "please restate" in t]
    assert told == (
        [f"Turns 1-{last} were removed; please restate."] if policy == "tell_user" else []
    )


@pytest.mark.parametrize(
    ("narrowed", "missing"), [("last_turn = 10", (11, None)), ("first_turn = 11", (1, 10))]
)
async def test_a_narrower_summary_leaves_the_rest_uncovered(
    store: BaseStore,
    stores: StoreFactory,
    clock: ManualClock,
    narrowed: str,
    missing: tuple[int, int | None],
) -> None:
    """An older summary restored over the current one covers less than the tombstones say was
    folded: exactly the turns it no longer covers are missing."""
    last = await folded_and_deleted(store, clock)
    await behind_the_back(stores, f"UPDATE summaries SET {narrowed}")
    gap = Gap(missing[0], missing[1] or last)
    session = SessionKey(SUPPORT, 1)
    assert await memory_for(store, clock).gaps(session) == (gap,)
    llm = GatedLLM()
    async with harness(store, clock, llm) as h:
        await h.say(SUPPORT, "what SLA did we agree?")
        await h.advance(2)
    system = "\n".join(b.text for b in llm.requests[0].system)
    assert f"Turns {gap} of this conversation are unavailable" in system


async def test_forget_dropping_the_summary_is_not_a_gap(
    store: BaseStore, clock: ManualClock
) -> None:
    """/forget drops every summary that folded the person in, tombstones and all: personabot
    removed it knowingly, so the folded turns are no gap (no notice, nothing told)."""
    for n in range(20):
        author = "u2" if n % 2 else "u1"
        await exchange(store, clock, SUPPORT, f"question {n}", n, author=author)
        await clock.advance(4 * DAY)
    memory = memory_for(store, clock)
    deleted = (await retention(store, clock, memory, "message").run_once()).deleted_messages
    session = SessionKey(SUPPORT, 1)
    assert deleted > 0 and await store.get_summary(session) is not None
    llm = GatedLLM()
    gaps = GapPolicy("tell_user", TOLD, "refused")  # type: ignore[arg-type]
    async with harness(store, clock, llm, gap_policy=gaps, forget_deletes_messages=True) as h:
        await h.say(SUPPORT, "/forget confirm", author="u2")
        assert await store.get_summary(session) is None  # dropped with u2's messages
        await h.say(SUPPORT, "still there?")
        await h.advance(2)
    assert llm.calls == 1
    assert "<gap_notice>" not in "\n".join(b.text for b in llm.requests[0].system)
    assert not any("please restate" in t for t in h.outlet.texts())
    assert h.pipeline.counters["gap_tell_user"] == 0
    assert await memory.gaps(session) == ()
    buried = await store.tombstones(session)
    assert (buried[0].first_turn, buried[0].last_turn) == (1, deleted)
    assert buried[0].reason == "message age (its summary dropped by /forget)"


async def skipped(store: BaseStore, clock: ManualClock, text: str, reason: str) -> None:
    """A user message closed out without a reply (``reason``: why)."""
    inbound = Inbound(SUPPORT, "u1", "Client", text, "closed-out-1")
    await store.ingest(inbound, clock.now(), POLICY)
    turn = await store.pending_turn(SUPPORT)
    lease = await store.acquire_lease(f"t:{SUPPORT}", "setup", 30, clock.now())
    assert turn is not None and lease is not None
    assert await store.skip_turn(turn, lease, clock.now(), POLICY, reason=reason)
    await store.release_lease(lease)


async def test_a_rejected_first_turn_goes_by_age_without_a_gap(
    store: BaseStore, clock: ManualClock
) -> None:
    """The model rejected the session's first message: history (what summaries fold) leaves
    it out, so the summary starts at turn 2. Message mode deletes it by age all the same,
    tombstoned as what it was (never in a prompt), not as "folded into the summary"."""
    await skipped(store, clock, "x" * 50, "rejected: too long")
    await clock.advance(4 * DAY)
    await support_session(store, clock)  # turns 2-41
    memory = memory_for(store, clock)
    await retention(store, clock, memory, "message").run_once()
    session = SessionKey(SUPPORT, 1)
    summary = await memory.summary(session)
    assert summary is not None and summary.first_turn == 2
    assert min(m.turn for m in await store.messages(session)) > summary.first_turn
    assert await memory.gaps(session) == ()
    buried = await store.tombstones(session)
    assert (buried[0].first_turn, buried[0].last_turn) == (1, 1)
    assert buried[0].reason == "message age (rejected, never in a prompt)"
    for folded in buried[1:]:
        assert folded.reason == "message age"
        assert summary.first_turn <= folded.first_turn <= folded.last_turn <= summary.last_turn


async def test_message_mode_never_deletes_below_the_summary(
    store: BaseStore, stores: StoreFactory, clock: ManualClock
) -> None:
    """A summary that starts after turns still stored (one restored from elsewhere) does not
    stand for them: they stay until a summary covers them, and are never made a gap."""
    await support_session(store, clock)
    memory = memory_for(store, clock)
    await memory.compact(SessionKey(SUPPORT, 1), through_turn=30)
    await behind_the_back(stores, "UPDATE summaries SET first_turn = 5")
    report = await retention(store, clock, memory, "message").run_once()
    session = SessionKey(SUPPORT, 1)
    assert [m.turn for m in await store.messages(session)][:4] == [1, 2, 3, 4]
    assert report.deleted_messages > 0
    assert await memory.gaps(session) == ()
    assert [(t.first_turn, t.reason) for t in await store.tombstones(session)] == [
        (5, "message age")
    ]


async def test_a_dry_run_neither_takes_nor_waits_for_the_retention_lease(
    store: BaseStore, clock: ManualClock
) -> None:
    """Review 34: the console's retention page runs a dry run per view; it took the worker's
    lease, so a real run in that moment skipped its turn, and a view during a real run
    showed nothing. A dry run writes nothing and takes no lease."""
    await support_session(store, clock)
    await store.new_session(SUPPORT, clock.now())  # session 1 closes, 80 days old: expires
    await clock.advance(40 * DAY)
    memory = memory_for(store, clock)
    held = await store.acquire_lease("retention", "another process", 600, clock.now())
    assert held is not None
    report = await retention(store, clock, memory, "session").run_once(dry_run=True)
    assert report.skipped is None and report.expired_sessions == 1
    assert len(await store.messages(SessionKey(SUPPORT, 1))) == 40  # nothing deleted
    assert await store.acquire_lease("retention", "me", 600, clock.now()) is None  # still theirs
    await store.release_lease(held)
    real = await retention(store, clock, memory, "session").run_once()
    assert real.skipped is None and real.expired_sessions == 1


async def test_an_unreadable_summary_is_a_gap_and_the_next_compaction_replaces_it(
    store: BaseStore, stores: StoreFactory, clock: ManualClock
) -> None:
    """Review 34: a summary row that no longer parses (a bad edit, a failed migration) stands
    for nothing: the turns only it held are a gap, told as such; and compaction, which
    expected no row and lost its save to the unreadable one every time, replaces it."""
    last = await folded_and_deleted(store, clock)
    await behind_the_back(stores, "UPDATE summaries SET body = 'not json'")
    session = SessionKey(SUPPORT, 1)
    memory = memory_for(store, clock)
    assert await memory.gaps(session) == (Gap(1, last),)
    assert await memory.compact(session, through_turn=last + 4) > 0
    replaced = await store.get_summary(session)
    assert replaced is not None and replaced.body != "not json"
    assert replaced.first_turn == last + 1 and replaced.last_turn >= last + 4
    assert await memory.summary(session) is not None
    assert await memory.gaps(session) == (Gap(1, last),)  # what was lost stays told
