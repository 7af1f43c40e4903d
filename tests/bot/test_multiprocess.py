"""docs/architecture.md#queue rule 8: several OS processes on one PostgreSQL database, real time.

Each process is ``tests/fakes/worker.py``: the real runtime (store from the config, Claude
client, queue, pipeline) behind an HTTP test adapter. All of them call one fake Messages API
that counts calls and takes 2 s per call. Telegram's poller election is not tested here (it
needs the Telegram adapter).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import signal
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import asyncpg
import pytest

from tests.fakes.messages_api import CannedReply, FakeMessagesAPI, RecordedRequest
from tests.processes import Running, clean_env, spawn

ROOT = Path(__file__).resolve().parents[2]
FILLER = "and that is all I wanted to say"
WORKER = (sys.executable, "-m", "tests.fakes.worker")


@dataclass
class Worker:
    """One running worker process."""

    proc: Running
    port: int
    pid: int
    holder: str
    replies: Path
    log: Path

    def url(self, path: str) -> str:
        """An URL of the worker's HTTP adapter."""
        return f"http://127.0.0.1:{self.port}{path}"

    def delivered(self) -> list[dict[str, object]]:
        """Replies this worker delivered (read from its file, so also after a SIGKILL)."""
        if not self.replies.exists():
            return []
        text = self.replies.read_text(encoding="utf-8")
        # The worker may be writing a line right now: only complete lines are replies.
        complete = text[: text.rfind("\n") + 1]
        return [json.loads(line) for line in complete.splitlines() if line.strip()]


def write_config(
    path: Path,
    *,
    dsn: str,
    api_url: str,
    lease: float,
    debounce: float,
    scan: float,
) -> Path:
    """A personabot.toml for the workers."""
    path.write_text(
        f"""
[storage]
url = {json.dumps(dsn)}
max_pool_size = 8

[llm]
base_url = {json.dumps(api_url)}
max_retries = 0
timeout_seconds = 30

[queue]
debounce_seconds = {debounce}
max_wait_seconds = 15.0
lease_seconds = {lease}
max_concurrent_turns = 100
scan_interval_seconds = {scan}
shutdown_grace_seconds = 2.0

[memory]
extract_after_idle_minutes = 10000

[logging]
level = "WARNING"

[[personas]]
id = "mira"
name = "Mira"
system = "You are Mira."
first_message = ["Hi, I'm Mira."]
model = "claude-test"
""",
        encoding="utf-8",
    )
    return path


@pytest.fixture(scope="module")
def worker_env() -> dict[str, str]:
    """The workers' environment (their imports are the zygote's: tests/processes.py)."""
    return clean_env(ANTHROPIC_API_KEY="test")


@contextlib.asynccontextmanager
async def workers(
    count: int, config: Path, tmp_path: Path, env: dict[str, str]
) -> AsyncIterator[list[Worker]]:
    """Start ``count`` workers, wait until each listens; stop the survivors on exit."""
    procs: list[tuple[Running, Path, Path]] = []
    started: list[Worker] = []
    try:
        for i in range(count):
            log = tmp_path / f"worker-{i}.log"
            replies = tmp_path / f"replies-{i}.jsonl"
            with log.open("wb") as err:
                proc = await spawn(
                    *WORKER,
                    "--config",
                    str(config),
                    "--replies",
                    str(replies),
                    cwd=ROOT,
                    env=env,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=err,
                )
            procs.append((proc, replies, log))
        for proc, replies, log in procs:
            assert proc.stdout is not None
            async with asyncio.timeout(30):
                line = (await proc.stdout.readline()).decode().split()
            assert line[:1] == ["READY"], log.read_text(errors="replace")[-3000:]
            started.append(Worker(proc, int(line[1]), int(line[2]), line[3], replies, log))
        yield started
    finally:
        for proc, _, _ in procs:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
        for proc, _, _ in procs:
            try:
                async with asyncio.timeout(15):
                    await proc.communicate()
            except TimeoutError:
                proc.kill()
                await proc.communicate()


async def eventually(check: Callable[[], bool], within: float, what: str) -> None:
    """Poll ``check`` until it holds; fail after ``within`` seconds."""
    deadline = asyncio.get_running_loop().time() + within
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what}")
        await asyncio.sleep(0.05)


async def post(http: aiohttp.ClientSession, worker: Worker, chat: str, text: str, mid: str) -> None:
    """One user message to a worker; returns once it is ingested."""
    body = {"chat_id": chat, "author_id": f"user-{chat}", "text": text, "message_id": mid}
    async with http.post(worker.url("/inbound"), json=body) as response:
        assert response.status == 200, await response.text()


async def test_three_processes_answer_each_burst_once(
    pg_dsn: str, tmp_path: Path, worker_env: dict[str, str]
) -> None:
    rng = random.Random(20261130)
    bursts = {
        f"c{i}": [f"c{i} m{j} {FILLER}" for j in range(rng.randint(1, 5))] for i in range(200)
    }
    async with FakeMessagesAPI(latency=2.0) as api:
        config = write_config(
            tmp_path / "personabot.toml",
            dsn=pg_dsn,
            api_url=api.base_url,
            lease=30.0,
            debounce=2.0,
            scan=0.5,
        )
        async with workers(3, config, tmp_path, worker_env) as procs:
            # Every message of a burst goes to a random process (as a load balancer would).
            routes = {chat: [rng.choice(procs) for _ in texts] for chat, texts in bursts.items()}
            async with aiohttp.ClientSession() as http:

                async def send(chat: str) -> None:
                    for j, (text, worker) in enumerate(
                        zip(bursts[chat], routes[chat], strict=True)
                    ):
                        await post(http, worker, chat, text, f"{chat}-{j}")

                await asyncio.gather(*(send(chat) for chat in bursts))

            def replies() -> list[dict[str, object]]:
                return [r for w in procs for r in w.delivered()]

            await eventually(lambda: len(replies()) >= len(bursts), 45, "a reply to every burst")
            # Let any stray second call or reply show up before counting.
            await eventually(lambda: api.call_count >= len(bursts), 10, "all model calls")
            delivered = replies()
        per_process = Counter(w.pid for ws in routes.values() for w in ws)
        assert len(per_process) == 3  # every process ingested messages
        assert sum(len(set(w.pid for w in ws)) > 1 for ws in routes.values()) > 50

    # Exactly one model call per burst holds the whole burst, in order. On a loaded machine a
    # burst's next message may come later than the debounce after the one before: the turn
    # started then is cut by it (queue rule 9), so a call of a burst's first messages only
    # may come before its one whole call, never a second whole one.
    whole = Counter[str]()
    for request in api.requests:
        text = request.last_user_text
        chats = {chat for chat in bursts if f"{chat} m0 " in text}
        assert len(chats) == 1, text
        (chat,) = chats
        said = [line for line in text.splitlines() if line.strip()]
        if said == bursts[chat]:
            whole[chat] += 1
        else:
            assert said == bursts[chat][: len(said)], text  # a cut turn: the burst's start
    assert whole == Counter(dict.fromkeys(bursts, 1))
    # Exactly one reply per burst, covering every message once.
    assert Counter(str(r["chat_id"]) for r in delivered) == Counter(dict.fromkeys(bursts, 1))
    for r in delivered:
        assert str(r["text"]).split("\n") == bursts[str(r["chat_id"])]


async def test_sigkill_mid_generation_another_process_replies_once(
    pg_dsn: str, tmp_path: Path, worker_env: dict[str, str]
) -> None:
    lease_seconds = 3.0
    async with FakeMessagesAPI(latency=2.0) as api:
        config = write_config(
            tmp_path / "personabot.toml",
            dsn=pg_dsn,
            api_url=api.base_url,
            lease=lease_seconds,
            debounce=0.3,
            scan=0.2,
        )
        async with (
            workers(3, config, tmp_path, worker_env) as procs,
            aiohttp.ClientSession() as http,
        ):
            await post(http, procs[0], "k1", "are you there?", "k1-0")
            await eventually(lambda: api.call_count == 1, 15, "the first generation")
            db = await asyncpg.connect(pg_dsn)
            try:
                holder, expires_at = await db.fetchrow(
                    "SELECT holder, expires_at FROM leases WHERE name LIKE 'turn:%:k1'"
                )
                victim = next(w for w in procs if w.holder == holder)
                victim.proc.send_signal(signal.SIGKILL)  # mid-generation: the call takes 2 s
                await victim.proc.wait()
                killed_at = time.time()

                def replies() -> list[dict[str, object]]:
                    return [r for w in procs for r in w.delivered()]

                await eventually(lambda: len(replies()) >= 1, 30, "the takeover's reply")
                timers = await db.fetchval("SELECT COUNT(*) FROM timers")
                rows = await db.fetch("SELECT role, pending FROM messages ORDER BY turn")
            finally:
                await db.close()
            survivors_replies = replies()

    assert victim.delivered() == []  # the killed process's work never reached the platform
    assert len(survivors_replies) == 1
    (reply,) = survivors_replies
    assert reply["pid"] != victim.pid
    assert reply["text"] == "are you there?"
    # Sent only after the lease expired (server clock, same machine).
    assert float(str(reply["at"])) >= expires_at >= killed_at - lease_seconds
    assert api.call_count == 2  # the killed generation and the takeover's
    assert timers == 0
    assert [(r["role"], r["pending"]) for r in rows] == [("user", False), ("assistant", False)]


async def test_input_stored_by_one_process_cuts_the_generation_running_in_another(
    pg_dsn: str, tmp_path: Path, worker_env: dict[str, str]
) -> None:
    """docs/architecture.md#queue rule 9 across processes: process B generates an answer to
    "are you there?" (the model holds it 60 s); process A stores "and one more thing". B hears
    PostgreSQL's announcement, finds its generation stale and closes the model request at
    once, rather than after 60 s; the next turn answers both messages, once."""
    first = "are you there?"
    more = "and one more thing"
    async with FakeMessagesAPI(notice_disconnects=True) as api:
        api.answer_when(lambda r: more not in r.last_user_text, CannedReply(), delay=60.0)
        config = write_config(
            tmp_path / "personabot.toml",
            dsn=pg_dsn,
            api_url=api.base_url,
            lease=30.0,
            debounce=0.3,
            scan=0.2,
        )
        async with (
            workers(2, config, tmp_path, worker_env) as procs,
            aiohttp.ClientSession() as http,
        ):
            await post(http, procs[0], "x1", first, "x1-0")
            await eventually(lambda: api.call_count == 1, 15, "the first generation")
            db = await asyncpg.connect(pg_dsn)
            try:
                holder = await db.fetchval(
                    "SELECT holder FROM leases WHERE name LIKE 'turn:%:x1' AND expires_at > $1",
                    time.time(),
                )
            finally:
                await db.close()
            b = next(w for w in procs if w.holder == holder)
            a = next(w for w in procs if w is not b)
            await post(http, a, "x1", more, "x1-1")  # stored (committed) by A
            stored = time.monotonic()
            stale = api.requests[0]
            await eventually(lambda: bool(stale.abandoned_at), 20, "B to close its request")
            await eventually(lambda: len(a.delivered() + b.delivered()) == 1, 20, "the reply")
            delivered = a.delivered() + b.delivered()
            calls = api.call_count

    # Closed long before the model would have answered (60 s): B was told, it did not wait.
    assert stale.abandoned_at[0] - stored < 20
    assert [m for m in stale.text_of("user") if m.strip()] == [first]
    assert calls == 2
    assert api.requests[1].last_user_text.split("\n") == [first, more]
    (reply,) = delivered
    assert str(reply["text"]).split("\n") == [first, more]


# -- check-ins and reminders (docs/initiatives.md#what-is-guaranteed) ---------------------------

#: Check-ins about 3 s after the reply (0.0008 h), no quiet hours, one unanswered at most,
#: reminders on; the agenda scheduler scans every 0.2 s (and wakes for what it arms itself).
AGENDA = """
[personas.initiative]
enabled = true
after_idle_hours = 0.0008
quiet_hours = ""
max_unanswered = 1
min_interval_hours = 0

[schedule]
reminders = true
scan_interval_seconds = 0.2
"""
CHAT = re.compile(r"\[(c\d+|k\d+)\]")
REMINDER_NOTE = "asked you to remind them"
SET = "I'll remind you."
# One reminder is set this far ahead of the request that asks for it.
REMIND_AHEAD = 4.0


def with_agenda(config: Path) -> Path:
    """``config`` (as write_config wrote it) with check-ins and reminders on for the persona.

    Appended: ``[personas.initiative]`` belongs to the last ``[[personas]]`` entry."""
    config.write_text(config.read_text(encoding="utf-8") + AGENDA, encoding="utf-8")
    return config


def chat_of(request: RecordedRequest) -> str:
    """The one chat whose messages a request holds (each user message names its chat)."""
    (chat,) = {m for text in request.text_of("user") for m in CHAT.findall(text)}
    return chat


def check_in_text(chat: str) -> str:
    return f"Hey, how did the exam go? ({chat})"


def reminder_text(chat: str) -> str:
    return f"The dentist, now! ({chat})"


def is_check_in(request: RecordedRequest) -> bool:
    """A check-in decision: the send/skip choice with one tool call required."""
    return request.tool_choice == "any" and {"send", "skip"} <= set(request.tool_names)


def script_agenda(api: FakeMessagesAPI, *, check_in_delay: float) -> list[float]:
    """Rules for the workers' calls, whichever worker makes them, in any order: a check-in
    sends (after ``check_in_delay``), a turn asking for a reminder calls ``remind_me`` for
    REMIND_AHEAD seconds later (UTC, the default zone), its tool result gets SET, a reminder's
    request gets the persona's words; other turns get ``api.reply_text``. Returns the list
    the reminders' due instants are appended to."""
    due: list[float] = []

    def remind(request: RecordedRequest) -> CannedReply:
        at = float(int(time.time() + REMIND_AHEAD))  # remind_me takes whole seconds
        due.append(at)
        when = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        return api.tool_use_reply("remind_me", {"at": when, "about": "the dentist"})

    api.answer_when(
        is_check_in,
        lambda r: api.tool_use_reply("send", {"text": check_in_text(chat_of(r))}),
        delay=check_in_delay,
    )
    api.answer_when(
        lambda r: (
            "remind_me" in r.tool_names and not r.tool_results and "remind me" in r.last_user_text
        ),
        remind,
    )
    api.answer_when(lambda r: bool(r.tool_results), CannedReply(SET))
    api.answer_when(
        lambda r: REMINDER_NOTE in r.last_user_text,
        lambda r: CannedReply(reminder_text(chat_of(r))),
    )
    return due


async def agenda_settled(db: asyncpg.Connection) -> bool:
    """Nothing more can be sent: no check-in armed, no reminder waiting, no reply unsent, no
    turn lease held, no turn timer armed."""
    row = await db.fetchrow(
        "SELECT (SELECT COUNT(*) FROM initiatives WHERE due_at IS NOT NULL), "
        "(SELECT COUNT(*) FROM reminders WHERE status = 'pending'), "
        "(SELECT COUNT(*) FROM outbox WHERE status = 'pending'), "
        "(SELECT COUNT(*) FROM leases WHERE name LIKE 'turn:%' AND expires_at > $1), "
        "(SELECT COUNT(*) FROM timers)",
        time.time(),
    )
    assert row is not None
    return not any(row)


async def settled(db: asyncpg.Connection, within: float) -> None:
    """Poll :func:`agenda_settled` until it holds."""
    deadline = time.monotonic() + within
    while not await agenda_settled(db):
        if time.monotonic() > deadline:
            raise AssertionError(f"check-ins and reminders still under way after {within}s")
        await asyncio.sleep(0.1)


async def test_three_processes_send_each_check_in_and_reminder_once(
    pg_dsn: str, tmp_path: Path, worker_env: dict[str, str]
) -> None:
    """Issue 17's acceptance across real processes: every due check-in and every reminder set
    through remind_me is sent exactly once, although every worker scans for them."""
    rng = random.Random(20261201)
    chats = [f"c{i}" for i in range(8)]
    reminding = {"c0", "c5"}
    async with FakeMessagesAPI(reply_text="Good luck!") as api:
        due = script_agenda(api, check_in_delay=0.3)
        config = with_agenda(
            write_config(
                tmp_path / "personabot.toml",
                dsn=pg_dsn,
                api_url=api.base_url,
                lease=10.0,
                debounce=0.3,
                scan=0.2,
            )
        )
        async with (
            workers(3, config, tmp_path, worker_env) as procs,
            aiohttp.ClientSession() as http,
        ):
            for chat in chats:
                text = (
                    f"[{chat}] please remind me in a few seconds about the dentist"
                    if chat in reminding
                    else f"[{chat}] I have an exam tomorrow"
                )
                await post(http, rng.choice(procs), chat, text, f"{chat}-0")

            def delivered() -> list[dict[str, object]]:
                return [r for w in procs for r in w.delivered()]

            # A reply and a check-in per chat, and a reminder in two.
            expected = 2 * len(chats) + len(reminding)
            await eventually(lambda: len(delivered()) >= expected, 30, "every check-in")
            db = await asyncpg.connect(pg_dsn)
            try:
                await settled(db, 10)
                origins = await db.fetch(
                    "SELECT c.chat_id, m.origin FROM messages m JOIN conversations c "
                    "ON c.id = m.conversation_id WHERE m.origin IS NOT NULL"
                )
                reminders = await db.fetch("SELECT status FROM reminders")
            finally:
                await db.close()
            sent = delivered()

    texts = Counter((str(r["chat_id"]), str(r["text"])) for r in sent)
    for chat in chats:
        first = SET if chat in reminding else "Good luck!"
        mine = {first: 1, check_in_text(chat): 1}
        if chat in reminding:
            mine[reminder_text(chat)] = 1
        assert {t: n for (c, t), n in texts.items() if c == chat} == mine, chat
    assert len(sent) == expected
    # One decision per chat reached the model: no second worker even asked.
    assert Counter(chat_of(r) for r in api.requests if is_check_in(r)) == Counter(chats)
    # Each reminder came at its time, not before.
    (a, b) = sorted(float(str(r["at"])) for r in sent if "dentist, now" in str(r["text"]))
    assert len(due) == 2 and a >= min(due) and b >= max(due)
    assert sorted((r["chat_id"], r["origin"]) for r in origins) == sorted(
        [*((c, "initiative") for c in chats), *((c, "reminder") for c in reminding)]
    )
    assert [r["status"] for r in reminders] == ["sent", "sent"]


async def test_sigkill_while_a_check_in_is_generated_the_other_process_sends_it_once(
    pg_dsn: str, tmp_path: Path, worker_env: dict[str, str]
) -> None:
    lease_seconds = 2.0
    async with FakeMessagesAPI(reply_text="Good luck!") as api:
        script_agenda(api, check_in_delay=3.0)  # the decision outlives the lease
        config = with_agenda(
            write_config(
                tmp_path / "personabot.toml",
                dsn=pg_dsn,
                api_url=api.base_url,
                lease=lease_seconds,
                debounce=0.3,
                scan=0.2,
            )
        )
        async with (
            workers(2, config, tmp_path, worker_env) as procs,
            aiohttp.ClientSession() as http,
        ):
            await post(http, procs[0], "k1", "[k1] I have an exam tomorrow", "k1-0")

            def check_ins() -> list[RecordedRequest]:
                return [r for r in api.requests if is_check_in(r)]

            await eventually(lambda: len(check_ins()) == 1, 20, "the check-in's decision")
            db = await asyncpg.connect(pg_dsn)
            try:
                holder, token = await db.fetchrow(
                    "SELECT holder, token FROM leases WHERE name LIKE 'turn:%:k1'"
                )
                (victim,) = [w for w in procs if w.holder == holder]
                (survivor,) = [w for w in procs if w is not victim]
                victim.proc.send_signal(signal.SIGKILL)  # mid-decision: the call takes 3 s
                await victim.proc.wait()
                still, expires_at = await db.fetchrow(
                    "SELECT token, expires_at FROM leases WHERE name LIKE 'turn:%:k1'"
                )
                assert still == token  # nobody took over before the kill

                def sent() -> list[dict[str, object]]:
                    return [r for r in survivor.delivered() if r["text"] == check_in_text("k1")]

                await eventually(lambda: len(sent()) >= 1, 20, "the takeover's check-in")
                await settled(db, 10)
                origins = await db.fetch("SELECT origin FROM messages WHERE origin IS NOT NULL")
            finally:
                await db.close()
            everything = [r for w in procs for r in w.delivered()]

    assert [r["text"] for r in victim.delivered()] in ([], ["Good luck!"])
    # One reply and one check-in in all; the check-in from the survivor, after the lease.
    assert sorted(str(r["text"]) for r in everything) == sorted(["Good luck!", check_in_text("k1")])
    (check_in,) = sent()
    assert float(str(check_in["at"])) >= expires_at
    assert len(check_ins()) == 2  # the killed decision and the takeover's
    assert [r["origin"] for r in origins] == ["initiative"]
