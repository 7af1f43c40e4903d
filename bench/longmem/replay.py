"""A dataset conversation played through personabot's real path, then questioned.

The path is bench/memory.py's (and ``bot.app.build``'s): a SQLiteStore file, the Ingestor
(with a session policy: a quiet gap past ``session_idle_seconds`` ends the chat session, as
``[sessions] idle_timeout_minutes`` does), Pipeline.run_turn, Memory.build, the background
compaction into the rolling summary, and after every gap past ``extract_after_idle_seconds``
Memory.extract_due (what the sweep does in production) and the retention worker's pass
(memory/retention/worker.py, ``[retention]``), on a manual clock that
follows the dataset's session dates (turns inside a session are ``turn_spacing`` apart).

The user side's messages are ingested; the bot side's turns are the chat model's answers
(``ChatModel`` replays them). Then the store file is closed and copied once per question,
so that no question sees another one's exchange: each copy is reopened at the question's
date, the question is ingested as the user's message and the turn runs with the model under
test, whose request, answer and latency are captured (docs/memory-eval.md#how-a-run-works).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from bench.longmem.datasets import Conversation, Question, Utterance
from bench.memory import NullOutlet, request_blocks
from bot.app.build import memory_on, turn_parts
from bot.core.clock import ManualClock
from bot.core.errors import ModelError, ModelUnavailable, PersonabotError
from bot.core.events import ConversationKey, Inbound, QueuePolicy, SessionPolicy
from bot.core.llm import BaseLLM, ModelRequest, ModelResult, Usage
from bot.queue import Ingestor
from bot.runtime.pipeline import BotProfile, Bots, Pipeline
from bot.store.sqlite import SQLiteStore
from memory.assemble import Budget, PersonaPin
from memory.retention.worker import Retention, RetentionPolicy
from memory.service import Memory, MemoryPolicy
from memory.tokens import estimate_tokens

BOT: Final = "longmem"
#: Times a question's turn is run again after the model was unavailable (the pipeline's own
#: retry re-arms the conversation's timer; the SDK client has retried already).
RETRIES: Final = 3
#: Seconds before the first retry of a call the endpoint could not serve (then doubled).
RETRY_PAUSE: Final = 2.0
USER_ID: Final = "u-eval"
DEBOUNCE: Final = 1.5
#: The user message played when a dataset session opens with the bot side (a reply needs a turn).
OPENER: Final = "Hi!"
#: The reply played when a dataset session ends with the user side.
CLOSER: Final = "OK."
ANSWER_SYSTEM: Final = (
    "You are {{char}}, talking with {{user}}. Answer {{user}}'s question from what you "
    "remember of your conversations: the earlier messages, the conversation summary and your "
    "notes about {{user}}. Dates of past sessions may matter. Answer in one short sentence. "
    'If what you remember does not tell, say "I don\'t know".'
)


class EvalError(PersonabotError):
    """A question the run could not ask (the model kept failing): rerun with --resume."""


@dataclass(frozen=True, slots=True)
class Setup:
    """How personabot is configured for the run (written to the result file)."""

    budget: Budget = field(default_factory=Budget)
    answer_model: str = "eval-model"
    memory_model: str = "eval-memory-model"
    max_tokens: int = 200
    extract_after_idle_seconds: float = 300.0
    session_idle_seconds: float | None = 3600.0
    turn_spacing: float = 30.0
    # [retention] (production's defaults: closed sessions deleted 30 days after they closed);
    # it runs after every quiet gap, as the hourly worker would have by then.
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)

    def policy(self) -> MemoryPolicy:
        """The memory policy of the bot."""
        return MemoryPolicy(
            budget=self.budget,
            summary_model=self.memory_model,
            extract_after_idle_seconds=self.extract_after_idle_seconds,
        )

    def pin(self, conversation: Conversation) -> PersonaPin:
        """The answering persona, named as the dataset's bot side."""
        return PersonaPin(
            name=conversation.bot_name,
            system=ANSWER_SYSTEM,
            first_message=("Hi!",),
            model=self.answer_model,
            max_tokens=self.max_tokens,
            temperature=0.0,
        )


class EvalOutlet(NullOutlet):
    """bench/memory.py's outlet (replies counted, no typing) for a private chat, which is
    already the private conversation of its one user."""

    async def private_conversation(
        self, conversation: ConversationKey, user_id: str
    ) -> ConversationKey:
        """The chat itself."""
        return conversation


class CountingLLM(BaseLLM):
    """The memory model, its calls and input tokens counted by task (summary, extract): what
    personabot's memory costs besides the answers (docs/memory-eval.md#what-the-numbers-mean)."""

    name = "counting"

    def __init__(self, inner: BaseLLM) -> None:
        self._inner = inner
        self.calls: dict[str, int] = {}
        self.input_tokens: dict[str, int] = {}
        # Calls the memory model failed: personabot's memory then kept what it had (the
        # summary, the facts), so its figures are weaker than they would be; reported.
        self.failures: dict[str, int] = {}

    async def complete(self, request: ModelRequest) -> ModelResult:
        """Count, then ask the memory model (a failure counted, and raised as it came)."""
        task = request.purpose
        self.calls[task] = self.calls.get(task, 0) + 1
        tokens = sum(b.tokens for b in request_blocks(request))
        self.input_tokens[task] = self.input_tokens.get(task, 0) + tokens
        try:
            return await self._inner.complete(request)
        except ModelError:
            self.failures[task] = self.failures.get(task, 0) + 1
            raise


class _Sealable(BaseLLM):
    """The memory model of a question's copy of the store: refuses calls once ``sealed``."""

    name = "sealable"

    def __init__(self, inner: BaseLLM) -> None:
        self._inner = inner
        self.sealed = False

    async def complete(self, request: ModelRequest) -> ModelResult:
        """The memory model's answer, or ModelUnavailable once sealed (not asked)."""
        if self.sealed:
            raise ModelUnavailable("not asked: the question's copy of the store is thrown away")
        return await self._inner.complete(request)


@dataclass(frozen=True, slots=True)
class Answered:
    """The model under test's request, its answer and how long the call took."""

    request: ModelRequest
    result: ModelResult
    latency: float
    at: float


class ChatModel(BaseLLM):
    """The bot's chat model: the dataset's reply while replaying, the model under test when a
    question is asked (its calls captured)."""

    name = "longmem-chat"

    def __init__(self, clock: ManualClock, under_test: BaseLLM | None = None) -> None:
        self._clock = clock
        self._reply: str | None = None
        self._under_test = under_test
        self.answered: list[Answered] = []

    def expect(self, reply: str) -> None:
        """The replayed answer to the next request."""
        self._reply = reply

    async def complete(self, request: ModelRequest) -> ModelResult:
        """Replay, or ask the model under test."""
        if self._reply is not None:
            reply, self._reply = self._reply, None
            tokens = sum(b.tokens for b in request_blocks(request))
            return ModelResult(reply, Usage(tokens, estimate_tokens(reply)), "replay", "end_turn")
        if self._under_test is None:
            raise RuntimeError("unexpected model call while replaying")
        started = time.perf_counter()
        result = await self._under_test.complete(request)
        latency = time.perf_counter() - started
        self.answered.append(Answered(request, result, latency, self._clock.now()))
        return result


@dataclass(frozen=True, slots=True)
class Runtime:
    """personabot's path around one store, on a manual clock."""

    clock: ManualClock
    chat: ChatModel
    memory: Memory
    pipeline: Pipeline
    ingestor: Ingestor
    retention: Retention
    conversation: ConversationKey


def _wire(
    store: SQLiteStore,
    setup: Setup,
    conv: Conversation,
    *,
    clock: ManualClock,
    memory_llm: BaseLLM,
    under_test: BaseLLM | None,
) -> Runtime:
    """Store, memory, pipeline and ingestor as ``bot.app.build`` wires them."""
    policy = setup.policy()
    chat = ChatModel(clock, under_test)
    profile = BotProfile(
        key=BOT,
        pin=setup.pin(conv),
        queue=QueuePolicy(debounce=DEBOUNCE, max_wait=8.0),
        memory=policy,
        outlet=EvalOutlet(),
    )
    bots = Bots({BOT: profile})
    memory = memory_on(store=store, llm=memory_llm, clock=clock, policy_for=lambda _bot: policy)
    pipeline = Pipeline(
        store=store,
        parts=turn_parts(store, llm=chat, clock=clock, memory=memory, outlet_for=bots.outlet_for),
        bots=bots,
    )
    ingestor = Ingestor(
        store=store,
        clock=clock,
        policy_for=lambda _bot: profile.queue,
        sessions=SessionPolicy(idle_seconds=setup.session_idle_seconds),
    )
    retention = Retention(store=store, memory=memory, clock=clock, policy=setup.retention)
    key = ConversationKey("eval", f"chat-{conv.id}", None, BOT)
    return Runtime(clock, chat, memory, pipeline, ingestor, retention, key)


@contextlib.asynccontextmanager
async def _runtime(
    path: Path,
    setup: Setup,
    conv: Conversation,
    *,
    start: float,
    memory_llm: BaseLLM,
    under_test: BaseLLM | None = None,
) -> AsyncIterator[Runtime]:
    async with SQLiteStore(path=path) as store:
        rt = _wire(
            store,
            setup,
            conv,
            clock=ManualClock(start),
            memory_llm=memory_llm,
            under_test=under_test,
        )
        try:
            yield rt
        finally:
            await rt.memory.aclose()


async def _move_to(rt: Runtime, setup: Setup, when: float) -> None:
    """Let time pass until ``when``; after a quiet gap, learn as the sweep would."""
    gap = when - rt.clock.now()
    if gap <= 0:
        return
    await rt.clock.advance(gap)
    if gap > setup.extract_after_idle_seconds:
        await rt.memory.extract_due([BOT])
        await rt.memory.wait_idle()
        await rt.retention.run_once()


async def _turn(
    rt: Runtime, conv: Conversation, setup: Setup, said: Sequence[Utterance], reply: str
) -> None:
    """The user's messages, then the replayed reply through Pipeline.run_turn."""
    for i, u in enumerate(said):
        if i:
            await rt.clock.advance(setup.turn_spacing)
        await rt.ingestor.ingest(
            Inbound(rt.conversation, USER_ID, conv.user_name, u.text, f"{conv.id}/{u.ref}")
        )
    await rt.clock.advance(DEBOUNCE)
    rt.chat.expect(reply)
    outcome = await rt.pipeline.run_turn(rt.conversation)
    if outcome != "sent":
        raise RuntimeError(f"conversation {conv.id}: replayed turn ended {outcome!r}")
    await rt.memory.wait_idle()  # the background summary update, as between real turns
    await rt.clock.advance(setup.turn_spacing)


def exchanges(utterances: Sequence[Utterance]) -> list[tuple[list[Utterance], str]]:
    """A session as (user messages, reply) pairs: runs of each side, an opener or closer
    where a side is missing."""
    pairs: list[tuple[list[Utterance], str]] = []
    said: list[Utterance] = []
    replies: list[str] = []
    for u in utterances:
        if u.role == "user":
            if replies:
                pairs.append((said, "\n".join(replies)))
                said, replies = [], []
            said.append(u)
        else:
            if not said:
                said = [Utterance("user", OPENER, f"opener-{u.ref}")]
            replies.append(u.text)
    if said:
        pairs.append((said, "\n".join(replies) or CLOSER))
    return pairs


async def replay(
    conv: Conversation, setup: Setup, path: Path, *, memory_llm: BaseLLM, until: float
) -> float:
    """Play every session into a new store file at ``path``; let time run to ``until`` (the
    first question), learning from the last session; return the clock's time then."""
    first = conv.sessions[0].start
    async with _runtime(path, setup, conv, start=first, memory_llm=memory_llm) as rt:
        for session in conv.sessions:
            await _move_to(rt, setup, session.start)
            for said, reply in exchanges(session.utterances):
                await _turn(rt, conv, setup, said, reply)
        await _move_to(rt, setup, until)
        return rt.clock.now()


def copy_store(source: Path, target: Path) -> None:
    """A closed store file (and any WAL files left) copied."""
    for suffix in ("", "-wal", "-shm"):
        src = source.with_name(source.name + suffix)
        if src.exists():
            shutil.copyfile(src, target.with_name(target.name + suffix))


async def ask(
    conv: Conversation,
    question: Question,
    setup: Setup,
    snapshot: Path,
    work: Path,
    *,
    now: float,
    memory_llm: BaseLLM,
    under_test: BaseLLM,
    retry_pause: float = RETRY_PAUSE,
) -> Answered:
    """Ask ``question`` on a copy of the replayed store, at its date, through the pipeline."""
    copy_store(snapshot, work)
    memory = _Sealable(memory_llm)
    async with _runtime(
        work, setup, conv, start=now, memory_llm=memory, under_test=under_test
    ) as rt:
        await _move_to(rt, setup, question.asked_at)
        # What the memory learns before the question counts; what the question's own turn
        # would start (a summary once the window is full) is lost with the copy: never paid.
        memory.sealed = True
        await rt.ingestor.ingest(
            Inbound(rt.conversation, USER_ID, conv.user_name, question.text, f"q-{question.id}")
        )
        await rt.clock.advance(DEBOUNCE)
        for attempt in range(RETRIES + 1):
            outcome = await rt.pipeline.run_turn(rt.conversation)
            if outcome != "retry" or attempt == RETRIES:  # "retry": the model was unavailable
                break
            await asyncio.sleep(retry_pause * 2**attempt)  # the endpoint is real: wait for real
            await rt.clock.advance(60.0 * 2**attempt)  # past the re-armed timer
        if outcome != "sent" or not rt.chat.answered:
            raise EvalError(f"question {question.id}: the turn ended {outcome!r}")
        return rt.chat.answered[-1]
