"""The person's language on Telegram (docs/i18n.md): the real adapter (aiogram against the fake
Bot API) and the composition root's runtime on both stores. A persona's ``language`` puts
``/help``, ``/memory``, a limit notice and the command menu in its language; a Hebrew one's
texts carry the directional marks that keep ``/help`` and a date in order; an operator's own
text wins over every catalog; ``auto`` follows the person's ``language_code``; /forget's
question, its buttons and the answer to a press are in the persona's language.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from adapters.telegram.adapter import TelegramAdapter
from bot.app.build import Runtime, Seams, runtime
from bot.config import LimitSettings, PersonaSettings, QueueSettings, Settings
from bot.core.clock import ManualClock
from bot.core.events import ConversationKey
from bot.store.base import BaseStore
from tests.adapters.test_telegram import eventually
from tests.bot.test_initiatives import T0, Scripted
from tests.fakes.telegram_api import ApiCall, FakeTelegramAPI, TgChat, TgUser
from tests.harness import settle

TOKEN = "123456789:AAHtest-Mira-languages-0123456789abcd"
BOT = "mira-telegram"
SASHA = TgUser(1001, "Sasha", language_code="en")
LRI, PDI, RLM = "\u2066", "\u2069", "\u200f"


def _persona(language: str) -> PersonaSettings:
    return PersonaSettings(
        id="companion",
        name="Mira",
        system="You are Mira.",
        first_message=["Hi, I'm Mira."],
        model="test-model",
        language=language,
    )


@dataclass
class Rig:
    """The fake Bot API and the wired runtime on the manual clock."""

    api: FakeTelegramAPI
    rt: Runtime
    clock: ManualClock

    def sends(self, user: TgUser) -> list[ApiCall]:
        """Every ``sendMessage`` to ``user``'s private chat."""
        return [c for c in self.api.calls_of("sendMessage", TOKEN) if c.chat_id == user.id]

    async def ask(self, user: TgUser, text: str) -> ApiCall:
        """``user`` sends a command; its answer as sent."""
        before = len(self.sends(user))
        self.api.push_message(TOKEN, TgChat.private(user), user, text)
        await self.api.wait_for(
            lambda: len(self.sends(user)) > before, what=f"the answer to {text}"
        )
        return self.sends(user)[before]

    async def say(self, user: TgUser, text: str) -> ApiCall:
        """``user`` writes a message; the first thing sent after the debounce."""
        before = len(self.sends(user))
        self.api.push_message(TOKEN, TgChat.private(user), user, text)
        await eventually(self._stored(user, text), what=f"{text!r} stored")
        for _ in range(6):  # the debounce, on the manual clock
            await self.clock.advance(0.5)
            await settle(self.rt.store)
        await self.api.wait_for(lambda: len(self.sends(user)) > before, what=f"after {text!r}")
        return self.sends(user)[before]

    def _stored(self, user: TgUser, text: str) -> Callable[[], Awaitable[bool]]:
        key = ConversationKey("telegram", str(user.id), None, BOT)

        async def check() -> bool:
            session = await self.rt.store.current_session(key)
            if session is None:
                return False
            return any(m.text == text for m in await self.rt.store.messages(session.key))

        return check


#: A Hebrew menu an earlier run left (the persona spoke Hebrew then).
STALE = [{"command": "help", "description": "רשימת הפקודות"}]


@contextlib.asynccontextmanager
async def running(store: BaseStore, language: str, **limits: Any) -> AsyncIterator[Rig]:
    """Mira (persona ``language``) polling the fake API; one turn per person and hour. An
    earlier run left a Hebrew menu."""
    persona = _persona(language)
    settings = Settings(
        queue=QueueSettings(
            debounce_seconds=0.5,
            max_wait_seconds=2.0,
            scan_interval_seconds=0.5,
            shutdown_grace_seconds=1.0,
        ),
        limits=LimitSettings(user_turns_per_hour=1, **limits),
        personas=[persona],
    )
    clock = ManualClock(T0)
    async with FakeTelegramAPI() as api:
        api.add_bot(TOKEN, "mira_bot", "Mira")
        api.set_menu(TOKEN, STALE, "he")
        api.set_menu(TOKEN, STALE, "he", scope="all_group_chats")
        adapter = TelegramAdapter(bot_key=BOT, token=TOKEN, api_server=api.base_url)
        try:
            async with runtime(
                settings,
                llm=Scripted(),
                adapters={BOT: (persona, adapter)},
                clock=clock,
                store=store,
                seams=Seams(background=False),
            ) as rt:
                task = asyncio.create_task(adapter.run(rt.router.for_bot(BOT)))
                try:
                    await api.wait_for(
                        lambda: task.done() or api.polls_started(TOKEN), what="polling"
                    )
                    assert not task.done(), task.exception()
                    yield Rig(api, rt, clock)
                finally:
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
        finally:
            await adapter.aclose()


def _menu(api: FakeTelegramAPI, language_code: str = "") -> dict[str, str]:
    return {c["command"]: c["description"] for c in api.commands(TOKEN, language_code)}


async def test_a_ukrainian_persona_answers_notices_and_menus_in_ukrainian(
    store: BaseStore,
) -> None:
    async with running(store, "uk") as rig:
        # The menu: English for everyone, Ukrainian for people whose app is in Ukrainian.
        assert _menu(rig.api)["help"] == "list the commands"
        assert _menu(rig.api, "uk")["help"] == "список команд"
        assert _menu(rig.api, "uk")["memory"] == "показати, що я про вас пам’ятаю"
        assert _menu(rig.api, "ru") == {}  # no persona of this bot speaks Russian
        assert _menu(rig.api, "he") == {}  # none speaks Hebrew any more: its menu is gone
        assert rig.api.menu(TOKEN, "all_group_chats", language="he") is None  # in every scope
        # Every scope once more in Ukrainian: a group's menu without the personal commands.
        private = rig.api.commands(TOKEN, "uk", scope="all_private_chats")
        assert {c["command"]: c["description"] for c in private}["help"] == "список команд"
        group = rig.api.menu(TOKEN, "all_group_chats", language="uk")
        assert group is not None and "help" in group and "memory" not in group

        # The persona's language wins over the person's own (Sasha's app is in English).
        answer = (await rig.ask(SASHA, "/help")).visible_text
        assert answer.startswith("Команди:\n/start - привітатися\n")
        assert "/memory - показати, що я про вас пам’ятаю" in answer
        memory = (await rig.ask(SASHA, "/memory")).visible_text
        assert memory.startswith("Я поки що нічого не запам’ятав про вас надовго.")

        assert (await rig.say(SASHA, "hi")).visible_text == "reply to: hi"
        notice = (await rig.say(SASHA, "and again")).visible_text
        assert notice.startswith("Ви поки що вичерпали ліміт повідомлень. Продовжити можна після ")
        assert "(UTC); ваші повідомлення збережено." in notice


async def test_a_hebrew_persona_s_texts_are_laid_out_right_to_left(store: BaseStore) -> None:
    async with running(store, "he") as rig:
        help_text = (await rig.ask(SASHA, "/help")).text
        lines = help_text.split("\n")
        assert lines[0] == f"{RLM}פקודות:"
        # Each line opens right to left; the command is isolated so "/" stays on its left.
        assert f"{RLM}{LRI}/help{PDI} - רשימת הפקודות" in lines
        assert f"{RLM}{LRI}/reset{PDI} - כמו {LRI}/new{PDI}" in lines

        await rig.say(SASHA, "hi")
        notice = (await rig.say(SASHA, "and again")).text
        # The date and time of the limit are one left-to-right run: read as written, not
        # "15:00 2026-12-02" as the bidirectional algorithm lays out two bare numbers.
        assert notice.startswith(f"{RLM}הגעתם למגבלת ההודעות לעת עתה. אפשר להמשיך אחרי {LRI}")
        date_run = notice.split(LRI, 1)[1].split(PDI, 1)[0]
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", date_run), date_run
        assert notice.endswith(f"({LRI}UTC{PDI}); ההודעות שלכם נשמרו.")
        # Telegram's own menu gets the Hebrew descriptions too.
        assert _menu(rig.api, "he")["help"] == f"{RLM}רשימת הפקודות"


async def test_an_operator_s_own_text_wins_over_every_catalog(store: BaseStore) -> None:
    own = "Enough for now, friend: back at {until}."
    async with running(store, "uk", limit_message=own) as rig:
        await rig.say(SASHA, "hi")
        notice = (await rig.say(SASHA, "and again")).visible_text
        assert notice.startswith("Enough for now, friend: back at ")


async def test_auto_follows_the_person_s_telegram_language_else_english(
    store: BaseStore,
) -> None:
    olena = TgUser(1002, "Olena", language_code="uk")
    li = TgUser(1003, "Li", language_code="zh-hans")
    joao = TgUser(1004, "João", language_code="pt-br")  # no catalog: English
    async with running(store, "auto") as rig:
        assert (await rig.ask(olena, "/help")).visible_text.startswith("Команди:\n")
        assert (await rig.ask(li, "/help")).visible_text.startswith("命令：\n")
        assert (await rig.ask(joao, "/help")).visible_text.startswith(
            "Commands:\n/start - say hello"
        )
        # Menus in every shipped language (Telegram's two-letter codes), English by default.
        assert _menu(rig.api, "zh")["help"] == "列出命令"
        assert _menu(rig.api, "ru")["help"] == "список команд"
        assert _menu(rig.api, "he")["help"] == f"{RLM}רשימת הפקודות"
        assert _menu(rig.api)["help"] == "list the commands"


async def test_a_ukrainian_persona_s_forget_question_buttons_and_press_answers_are_ukrainian(
    store: BaseStore,
) -> None:
    group = TgChat.supergroup(-1001234567892, "Tea club")
    alex = TgUser(1005, "Alex", language_code="en")  # another member; his app is in English
    async with running(store, "uk") as rig:
        rig.api.push_message(TOKEN, group, SASHA, "/forget")
        await rig.api.wait_for(lambda: rig.api.sent_messages(TOKEN, group.id), what="question")
        question = rig.api.sent_messages(TOKEN, group.id)[0]
        assert question.visible_text.startswith(
            "Стерти все, що я про вас пам’ятаю, у всіх чатах зі мною?"
        )
        assert rig.api.keyboard(group.id, question.message_id) == [["Так, стерти", "Ні, залишити"]]

        datas: list[str] = []  # each press's callback data, as the client sent it

        async def pressed(user: TgUser, button: int, data: str | None = None) -> ApiCall:
            before = len(rig.api.press_answers(TOKEN))
            update = rig.api.push_press(
                TOKEN, group, user, question.message_id, button=button, data=data
            )
            datas.append(update["callback_query"]["data"])
            await rig.api.wait_for(
                lambda: len(rig.api.press_answers(TOKEN)) > before, what="the press's answer"
            )
            return rig.api.press_answers(TOKEN)[-1]

        # Another member's press: refused in the persona's language, nothing erased.
        refusal = await pressed(alex, 0)
        assert refusal.params.get("text") == "Ці кнопки для того, хто питав."
        assert refusal.flag("show_alert")
        # Sasha keeps it: the answer in Ukrainian; a second press of the settled question is
        # "already done" in Ukrainian too.
        first = await pressed(SASHA, 1)
        assert first.params.get("text") is None  # it ran: its answer is the message
        await rig.api.wait_for(
            lambda: len(rig.api.sent_messages(TOKEN, group.id)) > 1, what="the answer"
        )
        assert rig.api.sent_messages(TOKEN, group.id)[1].visible_text == "Нічого не стерто."
        # The keyboard goes after the press was answered (its own call): waited for.
        await rig.api.wait_for(
            lambda: rig.api.keyboard(group.id, question.message_id) is None, what="no keyboard"
        )
        # The same button once more (an old client still showing it): already done.
        again = await pressed(SASHA, 1, datas[-1])
        assert again.params.get("text") == "Уже зроблено."
