"""Telegram buttons (issue 40 item 2, docs/telegram.md#buttons): the real adapter (aiogram)
against the fake Bot API, on the composition root's runtime on both stores.

A press is a ``callback_query`` the fake queues for ``getUpdates``; what a person notices is on
the wire: the callback's answer (no spinner left, a refusal says why), the command's answer,
the keyboard taken away or updated, and what the store says afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace

import pytest

from adapters.telegram.adapter import TelegramAdapter
from adapters.telegram.presses import EXPIRED, GARBLED, NOT_YOURS
from bot.app.build import Runtime, Seams, runtime
from bot.config import (
    InitiativeSettings,
    PersonaSettings,
    QueueSettings,
    ScheduleSettings,
    Settings,
    TelegramBotSettings,
)
from bot.core.agenda import NewReminder
from bot.core.choices import BUTTON_LIFETIME
from bot.core.clock import ManualClock
from bot.core.events import ConversationKey, Inbound, QueuePolicy, UserKey
from bot.runtime.extensions import CallNext, Extensions
from bot.store.base import BaseStore
from tests.backends import StoreFactory
from tests.bot.test_initiatives import T0, Scripted
from tests.fakes.telegram_api import ApiCall, FakeTelegramAPI, TgChat, TgUser
from tests.harness import settle
from tests.store.helpers import insert_fault

TOKEN = "123456789:AAHtest-Mira-buttons-0123456789abcdef"
BOT = "mira-telegram"
SASHA = TgUser(1001, "Sasha")
ALEX = TgUser(1002, "Alex")
PRIVATE = TgChat.private(SASHA)
GROUP = TgChat.supergroup(-1001234567890, "Tea club")
ADMIN = "7770001"
MIRA = PersonaSettings(
    id="mira",
    name="Mira",
    system="You are Mira.",
    first_message=["Hi, I'm Mira."],
    model="test-model",
    initiative=InitiativeSettings(enabled=True, after_idle_hours=2.0, quiet_hours=""),
)
ORIN = PersonaSettings(
    id="orin", name="Orin", system="You are Orin.", first_message=["Orin. Where to?"]
)
ERASED = "Done: I erased"
#: What the adapter and the router decide alone: one store suffices. What the store decides
#: (a press run once, across processes and restarts, through a store fault) runs on both.
ADAPTER_ONLY = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


def key(chat: TgChat) -> ConversationKey:
    return ConversationKey("telegram", str(chat.id), None, BOT)


@dataclass
class Rig:
    """The fake Bot API and, while running, the adapter polling it on the wired runtime."""

    api: FakeTelegramAPI
    clock: ManualClock
    rt: Runtime | None = None

    @property
    def store(self) -> BaseStore:
        assert self.rt is not None
        return self.rt.store

    def sent(self, chat: TgChat) -> list[ApiCall]:
        return self.api.sent_messages(TOKEN, chat.id)

    def texts(self, chat: TgChat) -> list[str]:
        return [c.visible_text for c in self.sent(chat)]

    async def until(self, done: Callable[[], object], what: str) -> None:
        """Wait for ``done`` on the wire, the manual clock moving a second at a time (a
        group's messages are a second apart in the adapter's pacer)."""
        deadline = time.monotonic() + 10
        while not done():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            await self.clock.advance(1.0)
            await asyncio.sleep(0.02)

    async def command(self, chat: TgChat, user: TgUser, text: str) -> ApiCall:
        """``user`` sends ``text`` in ``chat``; the bot's answer (awaited on the wire)."""
        before = len(self.sent(chat))
        self.api.push_message(TOKEN, chat, user, text)
        await self.until(lambda: len(self.sent(chat)) > before, f"the answer to {text}")
        return self.sent(chat)[-1]

    async def press(
        self, chat: TgChat, user: TgUser, message: ApiCall, button: int = 0, data: str | None = None
    ) -> ApiCall:
        """``user`` presses a button of ``message`` (or sends ``data`` for it); the
        callback's answer, once what the press did is settled."""
        before = len(self.api.press_answers(TOKEN))
        self.api.push_press(TOKEN, chat, user, message.message_id, button=button, data=data)
        await self.until(lambda: len(self.api.press_answers(TOKEN)) > before, "its answer")
        await self.until(lambda: self.api.pending_updates(TOKEN) == 0, "its acknowledgement")
        await settle(self.store)
        return self.api.press_answers(TOKEN)[-1]


def settings(*, reminders: bool = False) -> Settings:
    bot = TelegramBotSettings(
        platform="telegram", id=BOT, persona="mira", personas=["mira", "orin"], admins=[ADMIN]
    )
    return Settings(
        queue=QueueSettings(
            debounce_seconds=0.5,
            max_wait_seconds=2.0,
            scan_interval_seconds=0.5,
            shutdown_grace_seconds=1.0,
        ),
        personas=[MIRA, ORIN],
        bots=[bot],
        schedule=ScheduleSettings(reminders=reminders),
    )


@contextlib.asynccontextmanager
async def serving(
    rig: Rig,
    store: BaseStore,
    config: Settings | None = None,
    extensions: Extensions = Extensions(),  # noqa: B008 - frozen
) -> AsyncIterator[Rig]:
    """A process: the runtime on ``store`` and a new adapter polling the fake; stopped on
    exit (the fake, its messages and their keyboards stay)."""
    adapter = TelegramAdapter(
        bot_key=BOT, token=TOKEN, api_server=rig.api.base_url, clock=rig.clock
    )
    try:
        async with runtime(
            config or settings(),
            llm=Scripted(),
            adapters={BOT: (MIRA, adapter)},
            clock=rig.clock,
            store=store,
            seams=Seams(background=False, health=False),
            extensions=extensions,
        ) as rt:
            polls = rig.api.polls_started(TOKEN)
            task = asyncio.create_task(adapter.run(rt.router.for_bot(BOT)))
            try:
                await rig.api.wait_for(
                    lambda: task.done() or rig.api.polls_started(TOKEN) > polls, what="polling"
                )
                assert not task.done(), task.exception()
                rig.rt = rt
                yield rig
            finally:
                rig.rt = None
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
    finally:
        await adapter.aclose()


@contextlib.asynccontextmanager
async def fake_api() -> AsyncIterator[Rig]:
    async with FakeTelegramAPI() as api:
        api.add_bot(TOKEN, "mira_bot", "Mira")
        yield Rig(api, ManualClock(T0))


# ------------------------------------------------------------------------------- /forget


async def test_forget_asks_and_two_presses_erase_once_both_answered(store: BaseStore) -> None:
    async with fake_api() as rig, serving(rig, store):
        await rig.store.set_timezone(UserKey("telegram", str(SASHA.id)), "Europe/Berlin", T0)
        question = await rig.command(PRIVATE, SASHA, "/forget")
        assert question.visible_text.startswith("Erase everything I remember about you")
        assert rig.api.keyboard(PRIVATE.id, question.message_id) == [["Yes, erase", "No, keep it"]]
        # Nothing is erased by the question itself.
        assert await rig.store.timezone_of(UserKey("telegram", str(SASHA.id))) == "Europe/Berlin"
        # Pressed twice (a double tap, or two devices): two updates in one batch.
        rig.api.push_press(TOKEN, PRIVATE, SASHA, question.message_id)
        rig.api.push_press(TOKEN, PRIVATE, SASHA, question.message_id)
        await rig.api.wait_for(lambda: len(rig.api.press_answers(TOKEN)) == 2, what="answers")
        await settle(rig.store)
        answers = [c.params.get("text") for c in rig.api.press_answers(TOKEN)]
        assert answers == [None, "Already done."]
        erased = [t for t in rig.texts(PRIVATE) if t.startswith(ERASED)]
        assert len(erased) == 1
        assert await rig.store.timezone_of(UserKey("telegram", str(SASHA.id))) is None
        # The answer quotes nothing in a private chat; the question's keyboard is gone.
        assert rig.api.keyboard(PRIVATE.id, question.message_id) is None
        # The presses were never stored as messages (nothing for the model either).
        session = await rig.store.current_session(key(PRIVATE))
        assert session is not None and await rig.store.messages(session.key) == []


@ADAPTER_ONLY
async def test_keep_it_erases_nothing(store: BaseStore) -> None:
    async with fake_api() as rig, serving(rig, store):
        await rig.store.set_timezone(UserKey("telegram", str(SASHA.id)), "Asia/Tokyo", T0)
        question = await rig.command(PRIVATE, SASHA, "/forget")
        await rig.press(PRIVATE, SASHA, question, button=1)
        assert rig.texts(PRIVATE)[-1] == "Nothing was erased."
        assert await rig.store.timezone_of(UserKey("telegram", str(SASHA.id))) == "Asia/Tokyo"
        assert rig.api.keyboard(PRIVATE.id, question.message_id) is None


@ADAPTER_ONLY
async def test_another_member_of_the_group_is_refused(store: BaseStore) -> None:
    async with fake_api() as rig, serving(rig, store):
        await rig.store.set_timezone(UserKey("telegram", str(SASHA.id)), "Europe/Berlin", T0)
        question = await rig.command(GROUP, SASHA, "/forget")
        sent = len(rig.sent(GROUP))
        answer = await rig.press(GROUP, ALEX, question)
        assert (answer.params.get("text"), answer.flag("show_alert")) == (NOT_YOURS, True)
        assert len(rig.sent(GROUP)) == sent  # nothing ran, nothing said in the group
        assert await rig.store.timezone_of(UserKey("telegram", str(SASHA.id))) == "Europe/Berlin"
        assert rig.api.keyboard(GROUP.id, question.message_id) == [["Yes, erase", "No, keep it"]]
        # Sasha's own press still works, and its answer quotes the question in the group.
        await rig.press(GROUP, SASHA, question)
        done = rig.sent(GROUP)[-1]
        assert done.visible_text.startswith(ERASED) and done.reply_to == question.message_id


@ADAPTER_ONLY
async def test_forged_garbled_and_stale_data_are_refused(store: BaseStore) -> None:
    async with fake_api() as rig, serving(rig, store):
        user = UserKey("telegram", str(SASHA.id))
        await rig.store.set_timezone(user, "Europe/Berlin", T0)
        question = await rig.command(PRIVATE, SASHA, "/forget")
        in_group = await rig.command(GROUP, SASHA, "/forget")
        data = _data(rig, PRIVATE, question)
        assert len(data.encode()) <= 64 and TOKEN.split(":")[1] not in data
        other = data.replace(_base36(SASHA.id), _base36(ALEX.id), 1)
        assert other != data
        forged = [
            (PRIVATE, ALEX, question, other),  # names Alex as the asker
            (GROUP, SASHA, in_group, data),  # the private chat's data pressed in the group
            (PRIVATE, SASHA, question, "forget confirm"),  # made up
            (PRIVATE, SASHA, question, data[:-1] + "x"),  # another command
            (PRIVATE, SASHA, question, "\u2603" * 16),
        ]
        for chat, who, shown, sent in forged:
            answer = await rig.press(chat, who, shown, data=sent)
            assert (answer.params.get("text"), answer.flag("show_alert")) == (GARBLED, True)
        assert not [t for chat in (PRIVATE, GROUP) for t in rig.texts(chat) if ERASED in t]
        assert await rig.store.timezone_of(user) == "Europe/Berlin"
        # Past the buttons' lifetime a real button is refused too, and its keyboard goes.
        await rig.clock.advance(BUTTON_LIFETIME + 60)
        answer = await rig.press(PRIVATE, SASHA, question)
        assert answer.params.get("text") == EXPIRED
        assert rig.api.keyboard(PRIVATE.id, question.message_id) is None
        assert await rig.store.timezone_of(user) == "Europe/Berlin"


async def test_a_press_after_a_restart_runs_and_only_once(stores: StoreFactory) -> None:
    """The buttons shown by one process, pressed after it stopped: a new adapter and runtime
    on a new store object of the same database (another process) run it; pressed once more
    in a third, it is done."""
    async with fake_api() as rig:
        async with stores.new() as first, serving(rig, first):
            await first.set_timezone(UserKey("telegram", str(SASHA.id)), "Europe/Berlin", T0)
            question = await rig.command(PRIVATE, SASHA, "/forget")
        data = _data(rig, PRIVATE, question)
        async with stores.new() as second, serving(rig, second):
            answer = await rig.press(PRIVATE, SASHA, question)
            assert answer.params.get("text") is None
            assert rig.texts(PRIVATE)[-1].startswith(ERASED)
            assert await second.timezone_of(UserKey("telegram", str(SASHA.id))) is None
            assert rig.api.keyboard(PRIVATE.id, question.message_id) is None
        async with stores.new() as third, serving(rig, third):
            # A second device still showing the keyboard.
            answer = await rig.press(PRIVATE, SASHA, question, data=data)
            assert answer.params.get("text") == "Already done."
        assert len([t for t in rig.texts(PRIVATE) if t.startswith(ERASED)]) == 1


async def test_one_press_in_two_processes_at_once_runs_once(stores: StoreFactory) -> None:
    """The router's claim (a lease named by the message and the command): two processes
    handed the same press at the same moment (webhooks of two workers) run it once."""
    async with (
        fake_api() as rig,
        stores.new() as a,
        stores.new() as b,
        serving(rig, a) as one,
    ):
        question = await rig.command(PRIVATE, SASHA, "/forget")
        assert one.rt is not None
        other = TelegramAdapter(bot_key=BOT, token=TOKEN, api_server=rig.api.base_url)
        try:
            async with runtime(
                settings(),
                llm=Scripted(),
                adapters={BOT: (MIRA, other)},
                clock=rig.clock,
                store=b,
                seams=Seams(background=False, health=False),
            ) as two:
                press = Inbound(
                    key(PRIVATE),
                    str(SASHA.id),
                    "Sasha",
                    "/forget confirm",
                    str(question.message_id),
                    kind="press",
                )
                outcomes = await asyncio.gather(one.rt.router.press(press), two.router.press(press))
        finally:
            await other.aclose()
        assert sorted(outcomes) == ["pending", "ran"]  # the other run is watched, not repeated
        await rig.api.wait_for(
            lambda: any(t.startswith(ERASED) for t in rig.texts(PRIVATE)), what="the erasure"
        )
        assert len([t for t in rig.texts(PRIVATE) if t.startswith(ERASED)]) == 1


async def _press_fault(stores: StoreFactory, on: bool) -> None:
    """Make the store refuse (True) or take again (False) a press's claim."""
    await insert_fault(stores, "leases", on, when="NEW.name LIKE 'press:%'")


async def test_a_press_during_a_store_fault_is_answered_and_runs_once_the_store_is_back(
    stores: StoreFactory,
) -> None:
    """Nothing acknowledged is lost: the store refuses the press's claim, the callback is
    answered all the same (no spinner), the update is not acknowledged and comes again, and
    once the store takes it the erasure runs, once."""
    async with fake_api() as rig, stores.new() as store, serving(rig, store):
        await store.set_timezone(UserKey("telegram", str(SASHA.id)), "Europe/Berlin", T0)
        question = await rig.command(PRIVATE, SASHA, "/forget")
        await _press_fault(stores, True)
        rig.api.push_press(TOKEN, PRIVATE, SASHA, question.message_id)
        await rig.until(lambda: rig.api.press_answers(TOKEN), "the answer")
        assert rig.api.press_answers(TOKEN)[0].params.get("text") is None
        assert rig.api.pending_updates(TOKEN) == 1  # not acknowledged
        await _press_fault(stores, False)
        await rig.until(
            lambda: any(t.startswith(ERASED) for t in rig.texts(PRIVATE)), "the erasure"
        )
        await rig.until(lambda: rig.api.pending_updates(TOKEN) == 0, "the acknowledgement")
        assert len([t for t in rig.texts(PRIVATE) if t.startswith(ERASED)]) == 1
        assert await store.timezone_of(UserKey("telegram", str(SASHA.id))) is None
        assert rig.api.keyboard(PRIVATE.id, question.message_id) is None


# ------------------------------------------------------------------ /persona, /checkins


@ADAPTER_ONLY
async def test_persona_buttons_switch_like_the_typed_command(store: BaseStore) -> None:
    async with fake_api() as rig, serving(rig, store):
        listing = await rig.command(PRIVATE, SASHA, "/persona")
        assert listing.visible_text.splitlines()[1:] == ["> Mira (mira)", "  Orin (orin)"]
        assert rig.api.keyboard(PRIVATE.id, listing.message_id) == [["Orin"]]
        await rig.press(PRIVATE, SASHA, listing)
        assert rig.texts(PRIVATE)[-1] == "Orin. Where to?"
        session = await rig.store.current_session(key(PRIVATE))
        assert session is not None and session.persona == "orin"
        assert rig.api.keyboard(PRIVATE.id, listing.message_id) is None


@ADAPTER_ONLY
async def test_checkins_toggle(store: BaseStore) -> None:
    async with fake_api() as rig, serving(rig, store):
        status = await rig.command(PRIVATE, SASHA, "/checkins")
        assert status.visible_text == "Check-ins are on in this chat."
        assert rig.api.keyboard(PRIVATE.id, status.message_id) == [["Turn off"]]
        await rig.press(PRIVATE, SASHA, status)
        assert rig.texts(PRIVATE)[-1].startswith("Okay, I won't write first")
        state = await rig.store.initiative_state(key(PRIVATE))
        assert state is not None and not state.enabled
        again = await rig.command(PRIVATE, SASHA, "/checkins")
        assert rig.api.keyboard(PRIVATE.id, again.message_id) == [["Turn on"]]


# ---------------------------------------------------------------------------- /reminders


@ADAPTER_ONLY
async def test_a_reminder_cancel_button_takes_only_its_own_button_away(
    store: BaseStore,
) -> None:
    async with fake_api() as rig:
        config = settings(reminders=True)
        async with serving(rig, store, config):
            await _reminders(rig.store, ["tea", "the dentist"])
            listing = await rig.command(PRIVATE, SASHA, "/reminders")
            (tea, dentist) = await rig.store.reminders(UserKey("telegram", str(SASHA.id)))
            labels = [[f"Cancel #{tea.id}"], [f"Cancel #{dentist.id}"]]
            assert rig.api.keyboard(PRIVATE.id, listing.message_id) == labels
            await rig.press(PRIVATE, SASHA, listing, button=1)
            assert rig.texts(PRIVATE)[-1] == f"Reminder #{dentist.id} cancelled."
            assert rig.api.keyboard(PRIVATE.id, listing.message_id) == labels[:1]
            left = await rig.store.reminders(UserKey("telegram", str(SASHA.id)))
            assert [r.about for r in left] == ["tea"]


# ---------------------------------------------------------------------------- the menus


@ADAPTER_ONLY
async def test_the_command_menu_is_set_per_scope(store: BaseStore) -> None:
    async with fake_api() as rig, serving(rig, store):
        private = rig.api.menu(TOKEN, "all_private_chats")
        group = rig.api.menu(TOKEN, "all_group_chats")
        admin = rig.api.menu(TOKEN, "chat", int(ADMIN))
    assert private is not None and group is not None and admin is not None
    assert {"forget", "memory", "export", "persona", "new", "help"} <= set(private)
    assert {"persona", "new", "help", "checkins"} <= set(group)
    assert not {"forget", "memory", "export", "start", "timezone"} & set(group)
    assert "stats" in admin and "stats" not in private and set(private) < set(admin)
    assert rig.api.menu(TOKEN) == private  # the default: what any other scope falls back to


@ADAPTER_ONLY
async def test_a_refused_press_runs_nothing(stores: StoreFactory) -> None:
    """The access lists apply to a press as to a typed command: a person no longer allowed
    presses a button they got before; the router refuses it and nothing runs."""
    async with fake_api() as rig:
        async with stores.new() as first, serving(rig, first):
            await first.set_timezone(UserKey("telegram", str(SASHA.id)), "Europe/Berlin", T0)
            question = await rig.command(PRIVATE, SASHA, "/forget")
        config = settings()
        closed = config.bots[0].model_copy(update={"allow_users": [str(ALEX.id)]})
        closed_config = config.model_copy(update={"bots": [closed]})
        async with stores.new() as second, serving(rig, second, closed_config):
            answer = await rig.press(PRIVATE, SASHA, question)
            assert answer.params.get("text") == "You cannot use this bot here."
            assert await second.timezone_of(UserKey("telegram", str(SASHA.id))) == "Europe/Berlin"
        assert not [t for t in rig.texts(PRIVATE) if ERASED in t]


@ADAPTER_ONLY
async def test_a_press_a_middleware_turns_into_chatter_is_never_stored(store: BaseStore) -> None:
    """Plugins see a press (kind "press") as they see a typed command; one that rewrites its
    text into no command drops it: never ingested, never for the model."""
    seen: list[str] = []

    async def chatty(event: Inbound, call_next: CallNext) -> None:
        seen.append(event.kind)
        if event.kind == "press":
            event = replace(event, text="hello, tell me a story")
        await call_next(event)

    mine = Extensions(middleware=(chatty,))
    async with fake_api() as rig, serving(rig, store, extensions=mine):
        question = await rig.command(PRIVATE, SASHA, "/forget")
        sent = len(rig.sent(PRIVATE))
        answer = await rig.press(PRIVATE, SASHA, question)
        assert answer.params.get("text") is None
        assert seen == ["message", "press"]
        await rig.clock.advance(5)  # past any debounce
        await settle(rig.store)
        session = await rig.store.current_session(key(PRIVATE))
        assert session is not None and await rig.store.messages(session.key) == []
        assert len(rig.sent(PRIVATE)) == sent
        assert rig.api.keyboard(PRIVATE.id, question.message_id) == [["Yes, erase", "No, keep it"]]


# ------------------------------------------------------------------------------ helpers


async def _reminders(store: BaseStore, about: list[str]) -> None:
    """Sasha asked for these reminders in the private chat (stored with a reply, as the
    final check stores them)."""
    conversation = key(PRIVATE)
    await store.ingest(
        Inbound(conversation, str(SASHA.id), "Sasha", "remind me", "m1"), T0, QueuePolicy()
    )
    turn = await store.pending_turn(conversation)
    assert turn is not None
    lease = await store.acquire_lease(f"turn:{conversation}", "w", 30, T0)
    assert lease is not None
    reminders = [
        NewReminder(str(SASHA.id), what, T0 + 3600 * (n + 1), "UTC") for n, what in enumerate(about)
    ]
    done = await store.finish_turn(turn, lease, "I will.", T0, QueuePolicy(), reminders=reminders)
    assert done.outcome == "recorded"
    await store.release_lease(lease)


def _data(rig: Rig, chat: TgChat, shown: ApiCall, button: int = 0) -> str:
    """The callback data of a button of a message as the chat shows it now."""
    message = rig.api.message(chat.id, shown.message_id)
    assert message is not None
    buttons = [b for row in message["reply_markup"]["inline_keyboard"] for b in row]
    return str(buttons[button]["callback_data"])


def _base36(number: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        number, digit = divmod(number, 36)
        out = digits[digit] + out
        if number == 0:
            return out
