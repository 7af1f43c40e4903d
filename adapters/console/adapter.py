"""Terminal chat: the same pipeline as a hosted bot, with stdin/stdout as the platform.

Works with a terminal, a pipe or a file on stdin: lines are read by a daemon thread (so a
blocked read never holds up exit) and handed to the event loop. Each line gets an id of this
run (``<run>-<n>``): a reply whose message id is not one of them answers a message left by an
earlier run, and is labelled so.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Literal, TextIO

from adapters.streaming import StreamingAdapter
from bot.core.errors import AdapterError, PreviewUnavailable
from bot.core.events import Attachment, ConversationKey, Inbound, Reply
from bot.core.ports import InboundHandler, Preview, StreamSettings
from bot.core.terminal import safe_for_terminal
from bot.runtime.commands import parse_command

QUIT_COMMANDS = frozenset({"/quit", "/exit"})
#: The lines /help adds for what the console itself handles (the runtime never sees them).
CONSOLE_HELP = "/quit - leave the chat (also /exit, Ctrl-D or Ctrl-C)"
#: How much of an earlier message a late answer's label quotes.
LABEL_CHARS = 60


class ConsoleAdapter(StreamingAdapter):
    """One local user talking to one persona in the terminal."""

    def __init__(
        self,
        *,
        bot_key: str,
        persona_name: str,
        user_id: str,
        display_name: str,
        stdin: TextIO,
        stdout: TextIO,
        interactive: bool = False,
        files_dir: Path | None = None,
        pace: Callable[[], Awaitable[None]] | None = None,
        previews: bool = True,
    ) -> None:
        """``pace``, when given, is awaited before the first line is read and after each line
        is handed over, before the next is read: a piped run waits there until the line is
        answered, so the transcript reads in input order. ``previews``: print replies as they
        are written (else each once, complete)."""
        super().__init__(bot_key=bot_key)
        self._files_dir = files_dir or Path.cwd()
        self.conversation = ConversationKey("console", user_id, None, bot_key)
        self._persona_name = persona_name
        self._user_id = user_id
        self._display_name = display_name
        self._stdin = stdin
        self._stdout = stdout
        self._interactive = interactive
        self._pace = pace
        self._previews = previews
        self._run_id = uuid.uuid4().hex[:8]
        self._counter = 0
        self._mine: set[str] = set()  # ids of the lines of this run
        self._help: set[str] = set()  # ids of this run's /help lines
        self._earlier: dict[str, str] = {}  # text of earlier runs' unanswered lines, by id
        self.replies_sent = 0
        self._prompting = False
        self._reading = True  # False once input ended: no prompt after the last answers
        self._streamed: str | None = None  # the reply printed so far while it is written
        #: Set when stdout is closed under the chat (``personabot chat | head``): nothing can
        #: be shown any more, so the chat stops (``bot.app.chat``).
        self.output_gone = asyncio.Event()
        #: Lines read from stdin so far (blank ones too): where a stopped run left its input.
        self.lines_read = 0
        self.input_ended = False  # EOF or /quit was read

    @property
    def interactive(self) -> bool:
        """A person at a terminal (not piped input)."""
        return self._interactive

    def write(self, text: str) -> None:
        """Print a line of the conversation."""
        self._emit(text + "\n")
        self._prompting = False

    def _emit(self, text: str) -> None:
        """Write and flush ``text`` made safe for a terminal: everything the chat shows passes
        here (replies, a card's name and greeting, messages of the store), so no escape
        sequence of a model or a card reaches the terminal. A closed stdout (EPIPE) is an
        AdapterError, and sets ``output_gone``."""
        if self.output_gone.is_set():
            raise AdapterError("the chat's output is closed")
        try:
            self._stdout.write(safe_for_terminal(text))
            self._stdout.flush()
        except (BrokenPipeError, ValueError) as exc:  # ValueError: stdout closed in-process
            self.output_gone.set()
            raise AdapterError("the chat's output is closed") from exc

    def expect_late(self, earlier: Mapping[str, str]) -> None:
        """Texts (by message id) of messages an earlier run left unanswered: their answers are
        labelled with them."""
        self._earlier.update(earlier)

    def _prompt(self) -> None:
        if self._interactive and self._reading and not self._prompting:
            self._emit("> ")
            self._prompting = True

    def inbound(self, text: str) -> Inbound:
        """A line of the local user as an inbound message (``personabot chat`` greets with a
        ``/start`` of its own, so the greeting takes the same path as every answer)."""
        self._counter += 1
        message_id = f"{self._run_id}-{self._counter}"
        self._mine.add(message_id)
        if (command := parse_command(text)) is not None and command.name == "help":
            self._help.add(message_id)  # matched as the runtime matches it: /HELP too
        return Inbound(
            conversation=self.conversation,
            author_id=self._user_id,
            display_name=self._display_name,
            text=text,
            platform_message_id=message_id,
            is_private=True,
        )

    async def run(self, handler: InboundHandler) -> None:
        """Read lines until EOF or /quit; each non-empty line is one inbound message."""
        lines = _threaded_lines(self._stdin)
        if self._pace is not None:
            await self._pace()  # answers left by an earlier run come before this run's lines
        self._prompt()
        try:
            async for line in lines:
                self.lines_read += 1
                text = line.strip()
                if text.lower() in QUIT_COMMANDS:
                    self.input_ended = True
                    break
                if not text:
                    self._prompt()
                    continue
                # The prompt comes back with the reply (send), not before it.
                self._prompting = False
                await handler(self.inbound(text))
                if self._pace is not None:
                    await self._pace()
            else:
                self.input_ended = True
                self.end_line()  # Ctrl-D after the prompt: the shell's prompt gets a line
        finally:
            self._reading = False

    def end_line(self) -> None:
        """End the prompt's line, if one is shown (input ended where the prompt stood)."""
        if self._prompting:
            self.write("")

    def _open_preview(
        self,
        conversation: ConversationKey,
        settings: StreamSettings,
        reply_to: str | None,
        draft_id: int | None,
    ) -> Preview | None:
        """Print the reply as it is written (unless previews are turned off here)."""
        if not self._previews:
            return None
        return _ConsolePreview(self, reply_to)

    async def retract(self, conversation: ConversationKey, message_id: str) -> bool:
        """Nothing printed can be taken back (and the console posts no preview messages)."""
        return True

    def _label(self, reply_to: str | None) -> str | None:
        """The line that says whom a reply answers: only a message of an earlier run."""
        if reply_to is None or reply_to in self._mine:
            return None
        earlier = self._earlier.get(reply_to)
        if earlier is None:
            return "(to your earlier message)"
        quoted = " ".join(earlier.split())
        if len(quoted) > LABEL_CHARS:
            quoted = quoted[: LABEL_CHARS - 3].rstrip() + "..."
        return f"(to your earlier message: {quoted})"

    def _stream(self, text: str, reply_to: str | None = None) -> None:
        """Print the part of ``text`` not printed yet (a new model step starts a new line)."""
        printed = self._streamed
        head = ""
        if printed is None and self._prompting:
            head += "\n"  # a late answer arrives while the prompt is shown
        if printed is None and (label := self._label(reply_to)) is not None:
            head += label + "\n"
        if printed is None or not text.startswith(printed):
            if printed is not None:
                head += "\n"
            head += f"{self._persona_name}: "
            printed = ""
        self._streamed = text
        self._prompting = False
        self._emit(head + text[len(printed) :])

    def _dropped(self) -> None:
        """A streamed reply was taken back (newer input arrived, or the model failed)."""
        if self._streamed is not None:
            self._streamed = None
            self._emit(" [dropped]\n")

    async def send(self, reply: Reply) -> None:
        """Print the reply under the persona's name (an attachment: written, path printed).

        After a streamed preview the reply completes the printed line when it continues it.
        """
        self.replies_sent += 1
        reply_to = reply.reply_to_platform_message_id
        text = reply.text
        if reply_to in self._help:
            text = f"{text}\n{CONSOLE_HELP}"
        streamed, self._streamed = self._streamed, None
        head = ""
        if streamed is not None and reply.attachment is None:
            if text.startswith(streamed):
                self.write(text[len(streamed) :])
                self._prompt()
                return
            head = "\n"
        elif streamed is None:
            if self._prompting:
                head += "\n"  # an answer that comes while the prompt is shown
            if (label := self._label(reply_to)) is not None:
                head += label + "\n"
        if reply.attachment is not None:
            path = self._save(reply.attachment)
            self.write(f"{head}{self._persona_name}: {text}\n  saved to {path}")
        else:
            self.write(f"{head}{self._persona_name}: {text}")
        self._prompt()

    def _save(self, attachment: Attachment) -> Path:
        """Write a file only its owner can read (it holds personal data); never overwrite."""
        name = Path(attachment.filename).name or "attachment"
        stem, suffix = Path(name).stem, Path(name).suffix
        for n in range(1000):
            path = self._files_dir / (name if n == 0 else f"{stem}-{n}{suffix}")
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                continue
            except OSError as exc:
                raise AdapterError(f"cannot write {path}: {exc.strerror}") from exc
            with os.fdopen(fd, "wb") as out:
                out.write(attachment.data)
            return path.resolve()
        raise AdapterError(f"cannot write {name}: too many files of that name")

    async def private_conversation(
        self, conversation: ConversationKey, user_id: str
    ) -> ConversationKey:
        """The terminal is the local user's private chat."""
        return self.conversation

    @contextlib.asynccontextmanager
    async def typing(self, conversation: ConversationKey) -> AsyncIterator[None]:
        """No indicator on a terminal: replies appear when ready."""
        yield


class _ConsolePreview:
    """A reply printed as it comes; the final reply completes the line."""

    def __init__(self, adapter: ConsoleAdapter, reply_to: str | None) -> None:
        self._adapter = adapter
        self._reply_to = reply_to

    @property
    def kind(self) -> Literal["console"]:
        """Terminal output."""
        return "console"

    @property
    def draft_id(self) -> None:
        """No stop button."""
        return None

    @property
    def message_id(self) -> None:
        """Nothing to replace: the reply completes the printed line."""
        return None

    async def show(self, text: str) -> None:
        """Print what is new (stdout closed: no preview, and the chat stops)."""
        try:
            self._adapter._stream(text, self._reply_to)
        except AdapterError as exc:
            raise PreviewUnavailable(str(exc)) from exc

    async def discard(self) -> None:
        """Mark the printed reply as dropped."""
        self._adapter._dropped()


async def _threaded_lines(stream: TextIO) -> AsyncIterator[str]:
    """Lines of a blocking text stream, read in a daemon thread."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[str | None] = asyncio.Queue()
    put: Callable[[str | None], object] = queue.put_nowait

    def reader() -> None:
        try:
            for line in iter(stream.readline, ""):
                loop.call_soon_threadsafe(put, line)
        except (OSError, ValueError):
            pass
        finally:
            with contextlib.suppress(RuntimeError):  # loop already closed at exit
                loop.call_soon_threadsafe(put, None)

    threading.Thread(target=reader, name="console-stdin", daemon=True).start()
    while (line := await queue.get()) is not None:
        yield line
