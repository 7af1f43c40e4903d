"""Review of issue 40 items 2 and 4 (Telegram buttons, translated texts): hostile users,
careless operators. The real adapter (aiogram) against the fake Bot API on the composition
root's runtime, with the rig of tests/adapters/test_telegram_buttons.py. Each test here
failed against the code reviewed (branch review40b). What held (a press in a forum topic, a
long reminder list split in parts, a press for a persona removed since) was tried in this
branch's first commits and dropped from the file."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from adapters.telegram.presses import GARBLED
from bot.config import LimitSettings
from bot.core.clock import ManualClock
from bot.core.events import UserKey
from bot.store.base import BaseStore
from tests.adapters import test_telegram_buttons as buttons_rig
from tests.adapters import test_telegram_languages as languages_rig
from tests.adapters.test_telegram_buttons import (
    ALEX,
    GROUP,
    MIRA,
    ORIN,
    PRIVATE,
    SASHA,
    TOKEN,
    fake_api,
    serving,
    settings,
)
from tests.adapters.test_telegram_languages import running
from tests.backends import StoreFactory
from tests.bot.test_initiatives import T0
from tests.fakes.telegram_api import TgChat
from tests.harness import settle

ADAPTER_ONLY = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
FORUM = TgChat.supergroup(-1009876543210, "Tea club forum", forum=True)
TOPIC = 7
RLM, LRI, PDI = "\u200f", "\u2066", "\u2069"


@ADAPTER_ONLY
async def test_an_english_persona_s_greeting_on_a_hebrew_bot_is_not_turned_around(
    store: BaseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bot whose default persona is Hebrew, with a second persona in English: switching to
    it, its greeting (the persona's own words, docs/i18n.md: never translated) is sent as
    written. The command answer's right-to-left finishing also marks the greeting, so an RTL
    paragraph shows "?Orin. Where to" (the question mark on the wrong side)."""
    hebrew = MIRA.model_copy(update={"language": "he"})
    monkeypatch.setattr(buttons_rig, "MIRA", hebrew)  # the persona the rig's adapter serves
    config = settings().model_copy(update={"personas": [hebrew, ORIN]})
    async with fake_api() as rig, serving(rig, store, config):
        await rig.command(PRIVATE, SASHA, "/persona orin")
        await settle(rig.store)
        shown = rig.texts(PRIVATE)[-1]
        assert not any(mark in shown for mark in (RLM, LRI, PDI)), repr(shown)
        assert shown == "Orin. Where to?"


@ADAPTER_ONLY
async def test_an_operator_s_limit_message_with_a_brace_of_its_own_is_sent_or_refused(
    store: BaseStore,
) -> None:
    """A careless operator writes their own limit text with a placeholder the bot does not
    fill ("{name}", or "{}"). Either ``config check`` refuses it (as [retention]'s texts are
    checked) or the notice goes out; the settings take it, and at the limit the turn fails
    with a KeyError instead: the person hears nothing about the limit."""
    own = "Slow down, {name}! Back at {until}."
    try:
        LimitSettings(limit_message=own)
    except ValidationError:
        return  # refused at config time: fine
    async with running(store, "uk", limit_message=own) as rig:
        await rig.say(languages_rig.SASHA, "hi")
        notice = (await rig.say(languages_rig.SASHA, "and again")).visible_text
        assert notice.startswith("Slow down, ")


@ADAPTER_ONLY
async def test_a_persona_named_with_markup_is_listed_and_pressed_as_written(
    store: BaseStore,
) -> None:
    """An operator names a persona with characters that are markup elsewhere; the listing,
    the button and the greeting show them as written, and the press switches."""
    name = "<b>Or_in</b> & *Co* [x](y) {0} {name}"
    orin = ORIN.model_copy(update={"name": name, "first_message": ["Hi {{user}}, {0} *ok*"]})
    config = settings().model_copy(update={"personas": [MIRA, orin]})
    async with fake_api() as rig, serving(rig, store, config):
        listing = await rig.command(PRIVATE, SASHA, "/persona")
        assert rig.api.keyboard(PRIVATE.id, listing.message_id) == [[name]]
        await rig.press(PRIVATE, SASHA, listing)
        session = await rig.store.current_session(buttons_rig.key(PRIVATE))
        assert session is not None and session.persona == "orin"
        # The listing names the persona as its button does (its "*Co*" is not made bold).
        assert f"  {name} (orin)" in listing.visible_text.splitlines()


@ADAPTER_ONLY
async def test_a_hebrew_typed_command_copied_back_with_its_isolates_runs(
    store: BaseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More reminders than a keyboard holds: a Hebrew bot shows each choice as a command to
    send, wrapped in directional isolates (U+2066 ... U+2069) by ``Texts.finish``. A person
    copies the command from the end of its line and sends it back; the closing isolate comes
    with it. It should cancel the reminder; "cancel 1\u2069" is no number to the command, so
    nothing is cancelled (and a copy with the opening U+2066 is no command at all: chatter
    for the model)."""
    hebrew = MIRA.model_copy(update={"language": "he"})
    monkeypatch.setattr(buttons_rig, "MIRA", hebrew)
    config = settings(reminders=True).model_copy(update={"personas": [hebrew, ORIN]})
    user = UserKey("telegram", str(SASHA.id))
    async with fake_api() as rig, serving(rig, store, config):
        await buttons_rig._reminders(rig.store, [f"tea {n}" for n in range(26)])
        listing = await rig.command(PRIVATE, SASHA, "/reminders")
        assert rig.api.keyboard(PRIVATE.id, listing.message_id) is None  # too many: typed
        first = (await rig.store.reminders(user))[0]
        command = f"/reminders cancel {first.id}"
        # The line reads "ביטול \u2066#1: /reminders cancel 1\u2069": the person selects from
        # the "/" to the end of the line, and the closing isolate comes along.
        shown = f"{command}{PDI}"
        assert any(line.endswith(f": {shown}") for line in listing.text.splitlines())
        await rig.command(PRIVATE, SASHA, shown)
        await settle(rig.store)
        left = await rig.store.reminders(user)
        assert first.id not in [r.id for r in left], rig.texts(PRIVATE)[-1]


@ADAPTER_ONLY
async def test_a_press_verified_by_a_process_whose_clock_is_behind_is_not_called_forged(
    stores: StoreFactory,
) -> None:
    """Two hosts of one bot (webhook workers, or a restart on another machine) whose clocks
    differ by ten minutes: the buttons shown by the one ahead are pressed at once and reach
    the one behind. The person's own, genuine button is refused as "not valid" with an
    alert, and the log reports data that is not ours (a forgery), instead of running it."""
    async with fake_api() as rig:
        rig.clock = ManualClock(T0 + 600)  # the host that shows the buttons runs ahead
        async with stores.new() as first, serving(rig, first):
            await first.set_timezone(UserKey("telegram", str(SASHA.id)), "UTC", T0)
            question = await rig.command(PRIVATE, SASHA, "/forget")
        rig.clock = ManualClock(T0 + 1)
        async with stores.new() as second, serving(rig, second):
            answer = await rig.press(PRIVATE, SASHA, question)
            assert answer.params.get("text") != GARBLED
            assert rig.texts(PRIVATE)[-1].startswith(buttons_rig.ERASED)


@ADAPTER_ONLY
async def test_two_quick_cancel_taps_leave_neither_button(store: BaseStore) -> None:
    """Three reminders, each with its cancel button; the person taps "Cancel #1" and then
    "Cancel #2" quickly (both presses arrive in one batch, each carrying the message as it
    was: all three buttons). Both reminders are cancelled, and the keyboard ends with only
    #3's button; each press's edit starts from its own stale copy of the keyboard, so the
    last edit puts the other cancelled reminder's button back."""
    async with fake_api() as rig, serving(rig, store, settings(reminders=True)):
        await buttons_rig._reminders(rig.store, ["tea", "the dentist", "the plants"])
        listing = await rig.command(PRIVATE, SASHA, "/reminders")
        user = UserKey("telegram", str(SASHA.id))
        _one, _two, three = await rig.store.reminders(user)
        rig.api.push_press(TOKEN, PRIVATE, SASHA, listing.message_id, button=0)
        rig.api.push_press(TOKEN, PRIVATE, SASHA, listing.message_id, button=1)
        await rig.until(lambda: len(rig.api.press_answers(TOKEN)) == 2, "both answers")
        await rig.until(lambda: rig.api.pending_updates(TOKEN) == 0, "acknowledged")
        await settle(rig.store)
        for _ in range(3):
            await rig.clock.advance(1.0)
            await settle(rig.store)
        assert [r.id for r in await rig.store.reminders(user)] == [three.id]
        keyboard = rig.api.keyboard(PRIVATE.id, listing.message_id)
        assert keyboard == [[f"Cancel #{three.id}"]]


@ADAPTER_ONLY
async def test_an_admin_removed_from_the_config_loses_the_admin_menu(
    stores: StoreFactory,
) -> None:
    """The operator takes an admin off ``admins`` and restarts: that person's private chat
    still lists /stats (the chat scope set for them as admin is never set again nor
    deleted), in English and in every language of the bot."""
    ukrainian = ORIN.model_copy(update={"language": "uk"})
    config = settings().model_copy(update={"personas": [MIRA, ukrainian]})
    admin = int(buttons_rig.ADMIN)
    async with fake_api() as rig:
        async with stores.new() as first, serving(rig, first, config):
            for language in (None, "uk"):
                admin_menu = rig.api.menu(TOKEN, "chat", admin, language)
                assert admin_menu is not None and "stats" in admin_menu, language
        config = config.model_copy(
            update={"bots": [config.bots[0].model_copy(update={"admins": []})]}
        )
        async with stores.new() as second, serving(rig, second, config):
            for language in (None, "uk"):
                left = rig.api.menu(TOKEN, "chat", admin, language)
                assert left is None or "stats" not in left, (language, left)


@ADAPTER_ONLY
async def test_a_member_cannot_clear_another_member_s_question_with_her_own_data(
    store: BaseStore,
) -> None:
    """In a group, Alex asked /forget (his keyboard: yes / no). Sasha, with a modified client,
    sends the callback data of her own /persona button (valid: her chat, her id) for Alex's
    message. The data verifies (it names no message), so it runs as a press of Alex's
    message: the persona switches and Alex's question loses its keyboard (a decisive press
    takes it away), and the press is remembered under Alex's message. Data that is not one of
    the pressed message's own buttons should be refused and Alex's keyboard left alone."""
    async with fake_api() as rig, serving(rig, store):
        question = await rig.command(GROUP, ALEX, "/forget")
        assert rig.api.keyboard(GROUP.id, question.message_id) == [["Yes, erase", "No, keep it"]]
        listing = await rig.command(GROUP, SASHA, "/persona")
        hers = buttons_rig._data(rig, GROUP, listing)
        await rig.press(GROUP, SASHA, question, data=hers)
        assert rig.api.keyboard(GROUP.id, question.message_id) == [["Yes, erase", "No, keep it"]]
        session = await rig.store.current_session(buttons_rig.key(GROUP))
        assert session is None or session.persona in (None, "mira")


@ADAPTER_ONLY
async def test_an_admin_s_menu_survives_a_start_whose_menu_calls_fail(
    stores: StoreFactory,
) -> None:
    """A restart while Telegram refuses setMyCommands for a moment (5xx): the admin is still
    an admin, so the admin menu set before is not deleted as if they had been removed."""
    admin = int(buttons_rig.ADMIN)
    async with fake_api() as rig:
        async with stores.new() as first, serving(rig, first):
            assert "stats" in (rig.api.menu(TOKEN, "chat", admin) or [])
        rig.api.fail_next("setMyCommands", status=500, times=100)
        async with stores.new() as second, serving(rig, second):
            assert "stats" in (rig.api.menu(TOKEN, "chat", admin) or [])
