"""Review of issue 40 items 2 and 4 (Telegram buttons, translated texts): hostile users,
careless operators. The real adapter (aiogram) against the fake Bot API on the composition
root's runtime, with the rig of tests/adapters/test_telegram_buttons.py. Each test here
failed against the code reviewed (branch review40b). What held (a press in a forum topic, a
long reminder list split in parts, a press for a persona removed since) was tried in this
branch's first commits and dropped from the file."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from bot.config import LimitSettings
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
    fake_api,
    serving,
    settings,
)
from tests.adapters.test_telegram_languages import running
from tests.fakes.telegram_api import TgChat
from tests.harness import settle

ADAPTER_ONLY = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
FORUM = TgChat.supergroup(-1009876543210, "Tea club forum", forum=True)
TOPIC = 7
RLM, LRI, PDI = "\u200f", "\u2066", "\u2069"


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
