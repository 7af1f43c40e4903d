"""Terminal chat: the same pipeline as a hosted bot, with stdin/stdout as the platform.

Works with a terminal, a pipe or a file on stdin: lines are read by a daemon thread (so a
blocked read never holds up exit) and handed to the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TextIO

from adapters.base import BaseAdapter
from bot.core.errors import AdapterError
from bot.core.events import Attachment, ConversationKey, Inbound, Reply
from bot.core.ports import InboundHandler

QUIT_COMMANDS = frozenset({"/quit", "/exit"})


class ConsoleAdapter(BaseAdapter):
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
    ) -> None:
        super().__init__(bot_key=bot_key)
        self._files_dir = files_dir or Path.cwd()
        self.conversation = ConversationKey("console", user_id, None, bot_key)
        self._persona_name = persona_name
        self._user_id = user_id
        self._display_name = display_name
        self._stdin = stdin
        self._stdout = stdout
        self._interactive = interactive
        self._counter = 0
        self.replies_sent = 0
        self._prompting = False

    def write(self, text: str) -> None:
        """Print a line of the conversation."""
        self._stdout.write(text + "\n")
        self._stdout.flush()
        self._prompting = False

    def _prompt(self) -> None:
        if self._interactive and not self._prompting:
            self._stdout.write("> ")
            self._stdout.flush()
            self._prompting = True

    def inbound(self, text: str) -> Inbound:
        """A line of the local user as an inbound message (``personabot chat`` greets with a
        ``/start`` of its own, so the greeting takes the same path as every answer)."""
        return Inbound(
            conversation=self.conversation,
            author_id=self._user_id,
            display_name=self._display_name,
            text=text,
            platform_message_id=None,
            is_private=True,
        )

    async def run(self, handler: InboundHandler) -> None:
        """Read lines until EOF or /quit; each non-empty line is one inbound message."""
        lines = _threaded_lines(self._stdin)
        self._prompt()
        async for line in lines:
            text = line.strip()
            if text.lower() in QUIT_COMMANDS:
                break
            if not text:
                self._prompt()
                continue
            # The prompt comes back with the reply (send), not before it.
            self._counter += 1
            self._prompting = False
            await handler(self.inbound(text))

    async def send(self, reply: Reply) -> None:
        """Print the reply under the persona's name (an attachment: written, path printed)."""
        self.replies_sent += 1
        if reply.attachment is not None:
            path = self._save(reply.attachment)
            self.write(f"{self._persona_name}: {reply.text}\n  saved to {path}")
        else:
            self.write(f"{self._persona_name}: {reply.text}")
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
