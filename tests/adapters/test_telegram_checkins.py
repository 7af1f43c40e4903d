"""A check-in through the real Telegram adapter (aiogram against the fake Bot API): a person who
blocked the bot gets no further check-in (docs/initiatives.md, "A blocked chat stops them").

The runtime is the composition root's, on the manual clock (the queue, the check-in scheduler
and its rules); the adapter polls and sends over real HTTP in real time, so every outcome on
the wire is awaited with a bounded wait after the clock moved.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from adapters.telegram.adapter import TelegramAdapter
from bot.app.build import Runtime, Seams, runtime
from bot.config import InitiativeSettings, PersonaSettings, QueueSettings, Settings
from bot.core.clock import ManualClock
from bot.core.events import ConversationKey
from bot.store.base import BaseStore
from tests.adapters.test_telegram import eventually
from tests.bot.test_initiatives import CHECK_IN, HOUR, T0, Scripted
from tests.fakes.telegram_api import ApiCall, FakeTelegramAPI, TgChat, TgUser
from tests.harness import settle

TOKEN = "123456789:AAHtest-Mira-checkins-0123456789abcd"
BOT = "mira-telegram"
SASHA = TgUser(1001, "Sasha")
CHAT = TgChat.private(SASHA)
KEY = ConversationKey("telegram", str(SASHA.id), None, BOT)
# Check-ins 2 hours after the last message, day and night, up to five unanswered in a row:
# without the block, a second one would follow the first two hours later.
PERSONA = PersonaSettings(
    id="companion",
    name="Mira",
    system="You are Mira.",
    first_message=["Hi, I'm Mira."],
    model="test-model",
    initiative=InitiativeSettings(
        enabled=True,
        after_idle_hours=2.0,
        quiet_hours="",
        max_unanswered=5,
        min_interval_hours=0.0,
    ),
)


@dataclass
class Rig:
    """The fake Bot API, the wired runtime on the manual clock and the model."""

    api: FakeTelegramAPI
    rt: Runtime
    clock: ManualClock
    llm: Scripted

    def sends(self) -> list[ApiCall]:
        """Every ``sendMessage`` to Sasha's chat, refused ones included."""
        return [c for c in self.api.calls_of("sendMessage", TOKEN) if c.chat_id == SASHA.id]

    async def advance(self, seconds: float, step: float) -> None:
        """Move the manual clock in steps, letting the runtime's tasks run between them."""
        remaining = seconds
        while remaining > 1e-9:
            delta = min(step, remaining)
            await self.clock.advance(delta)
            await settle(self.rt.store)
            remaining -= delta

    async def say(self, text: str) -> None:
        """Sasha writes (through getUpdates); the reply is awaited on the wire."""
        before = len(self.sends())
        self.api.push_message(TOKEN, CHAT, SASHA, text)
        await eventually(self._stored(text), what=f"{text!r} stored")
        await self.advance(3.0, step=0.5)  # the debounce
        await self.api.wait_for(lambda: len(self.sends()) > before, what=f"the reply to {text!r}")

    def _stored(self, text: str) -> Callable[[], Awaitable[bool]]:
        async def check() -> bool:
            session = await self.rt.store.current_session(KEY)
            if session is None:
                return False
            return any(m.text == text for m in await self.rt.store.messages(session.key))

        return check


@contextlib.asynccontextmanager
async def running(store: BaseStore) -> AsyncIterator[Rig]:
    """The adapter polling the fake API, the runtime on the manual clock; stopped on exit."""
    clock = ManualClock(T0)
    llm = Scripted()
    settings = Settings(
        queue=QueueSettings(
            debounce_seconds=0.5,
            max_wait_seconds=2.0,
            scan_interval_seconds=0.5,
            shutdown_grace_seconds=1.0,
        ),
        personas=[PERSONA],
    )
    async with FakeTelegramAPI() as api:
        api.add_bot(TOKEN, "mira_bot", "Mira")
        adapter = TelegramAdapter(bot_key=BOT, token=TOKEN, api_server=api.base_url)
        adapters = {BOT: (PERSONA, adapter)}
        seams = Seams(background=False)
        try:
            async with runtime(
                settings, llm=llm, adapters=adapters, clock=clock, store=store, seams=seams
            ) as rt:
                task = asyncio.create_task(adapter.run(rt.router))
                try:
                    await api.wait_for(
                        lambda: task.done() or api.polls_started(TOKEN), what="polling"
                    )
                    assert not task.done(), task.exception()
                    yield Rig(api, rt, clock, llm)
                finally:
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
        finally:
            await adapter.aclose()


async def test_a_blocked_telegram_chat_gets_no_further_check_in(store: BaseStore) -> None:
    async with running(store) as rig:
        await rig.say("I have an exam tomorrow")
        assert [c.ok for c in rig.sends()] == [True]
        # Sasha blocks the bot: Telegram refuses the next message to the chat.
        rig.api.fail_next(
            "sendMessage", status=403, description="Forbidden: bot was blocked by the user"
        )
        await rig.advance(2.1 * HOUR, step=300)
        await rig.api.wait_for(lambda: len(rig.sends()) == 2, what="the check-in's send")
        refused = rig.sends()[1]
        assert (refused.status, refused.visible_text) == (403, CHECK_IN)
        await eventually(
            lambda: _inactive(rig.rt.store), what="the conversation to be marked inactive"
        )
        # Two days on (a check-in would be due every two hours): nothing more is sent, and
        # the model is not even asked.
        await rig.advance(48 * HOUR, step=1800)
        await asyncio.sleep(0.3)  # a send would be on the wire by now
        assert len(rig.sends()) == 2 and len(rig.llm.decisions()) == 1
        state = await rig.rt.store.initiative_state(KEY)
        assert state is not None and state.due_at is None  # disarmed, not postponed
        # Sasha unblocks and writes: the chat is active again, and check-ins come back.
        await rig.say("sorry, I was offline")
        assert not await _inactive(rig.rt.store)
        await rig.advance(2.1 * HOUR, step=300)
        await rig.api.wait_for(lambda: len(rig.sends()) == 4, what="the next check-in")
        assert [c.ok for c in rig.sends()] == [True, False, True, True]
        assert rig.sends()[3].visible_text == CHECK_IN


async def _inactive(store: BaseStore) -> bool:
    return not await store.conversation_active(KEY)
