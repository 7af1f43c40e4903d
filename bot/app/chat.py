"""``personabot chat``: the console adapter on the same pipeline as a hosted bot."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import getpass
import logging
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal, TextIO

from adapters.console.adapter import ConsoleAdapter
from bot.app.build import Runtime, session_policy
from bot.app.logs import redact_text
from bot.core.errors import AdapterError
from bot.core.terminal import safe_for_terminal
from bot.llm.offline import OfflineLLM
from bot.runtime.router import BotHandler
from bot.store.postgres import redact_url

if TYPE_CHECKING:
    from bot.app.app import App
    from bot.config import PersonaSettings
    from bot.core.llm import BaseLLM


#: The exit code of a chat that leaves input unanswered (or unread: stopped by a signal), or
#: that stopped because a task of its runtime failed.
EXIT_UNANSWERED = 1


async def wait_until_answered(rt: Runtime, bot: str, within: float) -> bool:
    """Flush the console conversation's timer and wait until nothing of it is pending."""
    adapter = rt.adapters[bot]
    assert isinstance(adapter, ConsoleAdapter)
    key = adapter.conversation
    if await rt.store.timer(key) is not None:
        # Input has ended: nothing more will join the burst, so answer it now.
        await rt.store.rearm_timer(key, rt.clock.now())
        rt.scheduler.wake()
    deadline = asyncio.get_running_loop().time() + within
    while asyncio.get_running_loop().time() < deadline:
        if await rt.store.timer(key) is None and rt.scheduler.active == 0:
            return True
        await asyncio.sleep(0.02)
    return False


async def run_chat(
    app: App,
    *,
    persona_id: str | None,
    stdin: TextIO,
    stdout: TextIO,
    interactive: bool,
    notice: Callable[[str], None] | None = None,
    log_path: str | None = None,
) -> int:
    """``personabot chat``: the console adapter on the full pipeline. Returns the exit code:
    0, or EXIT_UNANSWERED when the chat ended (EOF, /quit, SIGINT or SIGTERM) with messages
    still unanswered, or stopped by a signal before the end of piped input, or by a task of
    the runtime that failed (the scheduler, say: logged, and no reply would come). Raises
    BrokenPipeError when stdout was closed under it (the CLI's EXIT_PIPE): the chat stops at
    once, its unanswered messages kept.

    On a terminal the chat is live: lines typed quickly coalesce into one turn, commands
    answer at once. Piped, each line is answered (or its command run) before the next is
    read, so the transcript reads in input order; a line the model does not answer within
    ``max_wait_seconds`` + the model's ``timeout_seconds`` stops the waiting (the rest goes in
    as it comes, and is counted at exit if unanswered), so a piped run never hangs.
    ``log_path``: where the log records go (named in the opening line), if not stderr."""
    settings, secrets = app.settings, app.secrets
    show = notice or (lambda line: print(line, file=stdout, flush=True))

    def say(line: str) -> None:
        show(safe_for_terminal(line))  # a card's persona name, a path: never escape sequences

    persona = settings.persona(persona_id)
    app.prepare()
    llm = app.build_llm(offline_fallback=True)
    if isinstance(llm, OfflineLLM) and settings.llm.provider == "anthropic":
        say("No ANTHROPIC_API_KEY set: using the offline model (it echoes what it receives).")
    user = _local_user()
    bot_key = f"console-{persona.id}"
    limit = settings.queue_for(persona).max_wait_seconds + settings.llm.timeout_seconds
    pacer = _Pacer(bot_key, limit)
    adapter = ConsoleAdapter(
        bot_key=bot_key,
        persona_name=persona.name,
        user_id=user,
        display_name=user,
        stdin=stdin,
        stdout=stdout,
        interactive=interactive,
        pace=None if interactive else pacer.pace,
        # Piped, a reply streaming past the pacer's limit was printed in part, then again
        # whole (or dropped) once newer input came: a transcript gets each reply once.
        previews=interactive,
    )
    # A credential hidden anywhere in the URL (a token set in the environment) is masked too.
    known = [*secrets.values(settings.secret_names()), *settings.credentials()]
    where = redact_text(redact_url(settings.storage.url), known).removeprefix("sqlite:///")
    log = f"; log: {log_path}" if log_path else ""
    say(f"personabot chat with {persona.name} ({persona.id}); store: {where}{log}; /help, /quit")
    tally = _Tally()
    if log_path:
        logging.getLogger().addHandler(tally)
    try:
        ending = await _converse(app, persona, adapter, llm, pacer)
    finally:
        logging.getLogger().removeHandler(tally)
    if ending.how == "gone":
        # Like any filter whose reader went away: nothing more to say, and no one to say it to.
        raise BrokenPipeError("the chat's output was closed")
    if tally.count:
        logged = _count(tally.count, "warning or error was", "warnings or errors were")
        say(f"{logged} logged to {log_path}.")
    return _report(ending, say)


def _report(ending: _Ending, say: Callable[[str], None]) -> int:
    """Say what was left unanswered; the exit code."""
    stopped = ending.how in ("signal", "failed")
    unread = stopped and not ending.input_ended and not ending.interactive
    if ending.unanswered:
        say(
            f"{'Stopped: ' if stopped else ''}"
            f"{_count(ending.unanswered, 'message', 'messages')} went unanswered; kept, and "
            "answered at the next start or with the next message."
        )
    if unread:
        # Piped input cut short (``timeout 30 personabot chat < script``): the rest was never
        # taken in, so it is neither stored nor answered.
        say(f"Stopped: input after line {ending.lines_read} was not read.")
    failed = ending.how == "failed"  # a task of the runtime failed (logged): not a clean end
    return EXIT_UNANSWERED if ending.unanswered or unread or failed else 0


@dataclasses.dataclass(frozen=True, slots=True)
class _Ending:
    """How a chat ended, and what it left unanswered."""

    #: EOF or /quit; SIGINT or SIGTERM; a runtime task failed; stdout closed.
    how: Literal["input", "signal", "failed", "gone"]
    unanswered: int  # messages stored and still pending
    lines_read: int
    input_ended: bool
    interactive: bool


async def _converse(
    app: App, persona: PersonaSettings, adapter: ConsoleAdapter, llm: BaseLLM, pacer: _Pacer
) -> _Ending:
    """Run the chat until input ends, a signal stops it or its output is closed.

    SIGINT/SIGTERM while the runtime starts stop the chat too: a plugin's lifespan still
    starting is given up (bot/app/lifespans.py) and what opened closes again, instead of the
    signal killing the process with its resources open."""
    loop = asyncio.get_running_loop()
    asked = asyncio.Event()

    def stop_starting() -> None:
        asked.set()
        app.give_up_starting()

    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop_starting)
            installed.append(sig)
    try:
        return await _chat(app, persona, adapter, llm, pacer, asked)
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is None or not (asked.is_set() and app.start_given_up):
            raise
        task.uncancel()
        return _Ending("signal", 0, adapter.lines_read, adapter.input_ended, adapter.interactive)
    finally:
        for sig in installed:  # no-op when the reading replaced and removed them
            loop.remove_signal_handler(sig)


async def _chat(
    app: App,
    persona: PersonaSettings,
    adapter: ConsoleAdapter,
    llm: BaseLLM,
    pacer: _Pacer,
    asked: asyncio.Event,
) -> _Ending:
    """The chat on a started runtime (``asked``: a signal came while it started)."""
    async with app.running({pacer.bot: (persona, adapter)}, llm=llm) as rt:
        pacer.rt = rt
        session = await rt.store.open_session(
            adapter.conversation, rt.clock.now(), session_policy(app.settings)
        )
        if (earlier := await rt.store.pending_turn(adapter.conversation)) is not None:
            adapter.expect_late(
                {m.platform_message_id: m.text for m in earlier.messages if m.platform_message_id}
            )
        if not await rt.store.messages(session.key):
            # A /start of the local user: the greeting takes the one outbound path, after the
            # access check (someone outside allow_users gets only the denied reply).
            await rt.router(adapter.inbound("/start"))
        how: Literal["input", "signal", "failed", "gone"] = "signal"
        if not asked.is_set():
            how = await _read_until_end(adapter, rt.router.for_bot(pacer.bot), rt.background.failed)
        if how == "gone":
            # Nothing can be shown any more: running turns are cancelled now (their messages
            # stay pending, answered at the next start), not given the grace period.
            rt.scheduler.abort()
        elif how in ("signal", "failed"):
            # Running turns get the grace period, as in ``run``; what they leave stays stored
            # with its timer armed and is answered on the next start.
            rt.scheduler.stop()
            await rt.scheduler.drain(app.settings.queue.shutdown_grace_seconds)
        else:
            # Piped input the model stopped answering was waited for already: no second wait.
            await wait_until_answered(rt, pacer.bot, pacer.within if pacer.waiting else 0.0)
        return _Ending(
            how=how,
            unanswered=await rt.store.pending_count(adapter.conversation),
            lines_read=adapter.lines_read,
            input_ended=adapter.input_ended,
            interactive=adapter.interactive,
        )


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


class _Tally(logging.Handler):
    """Counts the warnings and errors logged while the chat runs (they go to a file)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        """Count it."""
        self.count += 1


@dataclasses.dataclass(slots=True)
class _Pacer:
    """Holds a piped chat's next line until the one before it is answered."""

    bot: str
    within: float
    rt: Runtime | None = None
    #: False once a line went unanswered within ``within``: the model does not answer (down,
    #: or rejecting the key), so the rest goes in without waiting, to be counted at exit.
    waiting: bool = True

    async def pace(self) -> None:
        """Wait until nothing of the conversation is pending (at most ``within``)."""
        if self.waiting and self.rt is not None:
            self.waiting = await wait_until_answered(self.rt, self.bot, self.within)


async def _read_until_end(
    adapter: ConsoleAdapter, router: BotHandler, failed: asyncio.Event
) -> Literal["input", "signal", "failed", "gone"]:
    """Run the console until EOF or /quit, SIGINT or SIGTERM, a task of the runtime fails
    (``failed``: the scheduler, say; it was logged), or its stdout is closed."""
    loop = asyncio.get_running_loop()
    reading = asyncio.create_task(adapter.run(router), name="console")
    gone = asyncio.create_task(adapter.output_gone.wait(), name="console-output-gone")
    broken = asyncio.create_task(failed.wait(), name="runtime-failed")
    signalled = False

    def stop() -> None:
        nonlocal signalled
        signalled = True
        reading.cancel()

    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop)
            installed.append(sig)
    try:
        await asyncio.wait({reading, gone, broken}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
        gone.cancel()
        broken.cancel()
        reading.cancel()
        # A prompt or an end of line that met a closed stdout ends the reading with that
        # AdapterError; output_gone says so.
        with contextlib.suppress(asyncio.CancelledError, AdapterError):
            await reading
    if adapter.output_gone.is_set():
        return "gone"
    if failed.is_set():
        return "failed"
    return "signal" if signalled else "input"


def _local_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "local"
