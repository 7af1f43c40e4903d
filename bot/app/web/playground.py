"""The playground: the operator chats with any persona in the browser, through the real
pipeline (docs/web.md#playground).

Each persona gets a bot ``web-<persona id>`` on the ``web`` platform, hosted by a runtime of
its own on the console's store: its own conversation keys (they never meet a real chat's),
the coalescing queue, memory, the persona's pin and model. The operator is that bot's admin,
so the per-person limits do not hold them back. What the page shows is the stored
transcript; the outlet delivers nowhere.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from adapters.web import PLATFORM, WebOutlet
from bot.app.build import Runtime, Seams
from bot.config import PersonaSettings
from bot.core.events import ConversationKey, Inbound, SessionKey, StoredMessage
from bot.store.base import BaseStore

if TYPE_CHECKING:
    from bot.app.app import App

#: The playground's one person (their user id and private chat id).
OPERATOR = "operator"
#: Their display name (the ``{{user}}`` of the persona's text).
OPERATOR_NAME = "Operator"
#: The newest messages the playground page shows.
PAGE = 200
PREFIX = "web-"


@dataclass(frozen=True, slots=True)
class PlaygroundChat:
    """A persona's playground conversation, as the page shows it."""

    persona: PersonaSettings
    session: int | None
    messages: tuple[StoredMessage, ...]
    waiting: bool  # input not answered yet
    # The persona's opening of this session (of the first, before anything was said): what
    # its pin says it greeted the operator with, so the page shows what the model was told.
    greeting: str


class Playground:
    """Say something to a persona; read its playground conversation."""

    def __init__(self, runtime: Runtime, personas: list[PersonaSettings]) -> None:
        self._runtime = runtime
        self._personas = {p.id: p for p in personas}
        # Built once: the page reloads every two seconds while a reply is being written.
        self._pins = {p.id: p.pin() for p in personas}

    @property
    def personas(self) -> list[PersonaSettings]:
        """The personas one can talk to."""
        return list(self._personas.values())

    def conversation(self, persona_id: str) -> ConversationKey:
        """The operator's conversation with a persona."""
        if persona_id not in self._personas:
            raise KeyError(persona_id)
        return ConversationKey(PLATFORM, OPERATOR, None, PREFIX + persona_id)

    async def say(self, persona_id: str, text: str) -> None:
        """A message from the operator, as an adapter would hand it in."""
        await self._runtime.router(
            Inbound(
                conversation=self.conversation(persona_id),
                author_id=OPERATOR,
                display_name=OPERATOR_NAME,
                text=text,
                platform_message_id=uuid.uuid4().hex,
                is_private=True,
            )
        )

    async def chat(self, persona_id: str) -> PlaygroundChat:
        """The current session's messages."""
        key = self.conversation(persona_id)
        store = self._runtime.store
        session = await store.current_session(key)
        messages = () if session is None else tuple(await store.messages(session.key, limit=PAGE))
        persona = self._personas[persona_id]
        # No session yet: the first one opens when the operator first writes.
        opened = SessionKey(key, 1) if session is None else session.key
        return PlaygroundChat(
            persona=persona,
            greeting=self._pins[persona_id].greeting(opened, user=OPERATOR_NAME),
            session=None if session is None else session.key.session_id,
            messages=messages,
            waiting=await store.pending_turn(key, 1) is not None,
        )


@contextlib.asynccontextmanager
async def playground(app: App, store: BaseStore) -> AsyncIterator[Playground]:
    """A playground runtime for every persona of ``app`` on ``store`` (without an API key:
    the offline model)."""
    personas = list(app.settings.personas)
    bots = {PREFIX + p.id: (p, WebOutlet()) for p in personas}
    seams = Seams(admins={key: frozenset({OPERATOR}) for key in bots}, health=False)
    async with app.running(bots, store=store, offline_fallback=True, seams=seams) as runtime:
        yield Playground(runtime, personas)
