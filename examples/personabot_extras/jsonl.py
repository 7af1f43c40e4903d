"""A platform plugin: a bot that reads JSON lines from a file and appends replies to another.

Each inbox line is ``{"id": "1", "chat": "c1", "user": "u1", "name": "Ann", "text": "hi"}``;
each reply is appended to the outbox as ``{"chat": "c1", "text": "..."}``. The inbox is read
from the start at every run: lines already stored are recognised by their ``id``.

    plugins = ["personabot_extras.jsonl"]

    [[bots]]
    platform = "jsonl"
    persona = "companion"
    options = { inbox = "inbox.jsonl", outbox = "outbox.jsonl" }
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pydantic

from adapters.base import BaseAdapter
from bot.app import App
from bot.config import BotSettings, PersonaSettings, Secrets
from bot.core.errors import ConfigError
from bot.core.events import ConversationKey, Inbound, Reply
from bot.core.ports import InboundHandler


class JsonlOptions(pydantic.BaseModel):
    """The ``options`` of a ``platform = "jsonl"`` bot."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    inbox: Path
    outbox: Path
    poll_seconds: float = pydantic.Field(default=0.1, gt=0)


class _Line(pydantic.BaseModel):
    id: str
    chat: str
    user: str
    name: str = ""
    text: str


class JsonlAdapter(BaseAdapter):
    """Tails the inbox file; appends replies to the outbox file."""

    def __init__(self, *, bot_key: str, options: JsonlOptions) -> None:
        super().__init__(bot_key=bot_key)
        self._options = options

    async def run(self, handler: InboundHandler) -> None:
        """Hand every inbox line to ``handler``, then wait for more, until cancelled."""
        offset = 0
        while True:
            data = self._options.inbox.read_bytes() if self._options.inbox.exists() else b""
            end = data.rfind(b"\n") + 1  # only whole lines; a half-written one waits
            for raw in data[offset:end].splitlines():
                await self._one(handler, raw)
            offset = max(offset, end)
            await asyncio.sleep(self._options.poll_seconds)

    async def _one(self, handler: InboundHandler, raw: bytes) -> None:
        if not raw.strip():
            return
        try:
            line = _Line.model_validate_json(raw)
        except pydantic.ValidationError:
            handler.rejected("jsonl", self.bot_key, "unreadable")
            return
        await handler(
            Inbound(
                conversation=ConversationKey("jsonl", line.chat, None, self.bot_key),
                author_id=line.user,
                display_name=line.name or line.user,
                text=line.text,
                platform_message_id=line.id,
            )
        )

    async def send(self, reply: Reply) -> None:
        """Append the reply as one JSON line."""
        record = {"chat": reply.conversation.chat_id, "text": reply.text}
        with self._options.outbox.open("a", encoding="utf-8") as out:
            out.write(json.dumps(record, ensure_ascii=False) + "\n")

    @contextlib.asynccontextmanager
    async def typing(self, conversation: ConversationKey) -> AsyncIterator[None]:
        """No typing indicator in a file."""
        yield


def create_adapter(entry: BotSettings, persona: PersonaSettings, secrets: Secrets) -> BaseAdapter:
    """The adapter of one ``platform = "jsonl"`` entry."""
    raw = getattr(entry, "options", {})
    try:
        options = JsonlOptions.model_validate(raw)
    except pydantic.ValidationError as exc:
        problems = [f"options.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
        raise ConfigError([f"bots {entry.key}: {p}" for p in problems]) from None
    return JsonlAdapter(bot_key=entry.key, options=options)


def setup(app: App) -> None:
    """Register the ``jsonl`` platform."""
    app.platform("jsonl", create_adapter)
