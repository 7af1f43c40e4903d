"""Notices of a reply turn in the persona's language (docs/i18n.md): the built-in trouble
notice is translated, an operator's own is sent as written (the runtime of the composition root
on both stores, the model failing as an overloaded API does); a Hebrew gap notice reads right
to left."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config.llm import LLMSettings
from bot.config.memory import RetentionSettings
from bot.core.clock import ManualClock
from bot.core.errors import ModelUnavailable
from bot.core.events import ConversationKey, Inbound
from bot.core.i18n import LRI, PDI, RLM
from bot.runtime.extensions import Command, CommandSpec, Extensions
from bot.runtime.pipeline import GapPolicy
from bot.store.base import BaseStore
from bot.store.sqlite import SQLiteStore
from tests.bot.test_pipeline import FlakyLLM
from tests.bot.test_retention import SUPPORT, delete_behind_the_back, support_session
from tests.fakes.llm import GatedLLM
from tests.harness import PERSONA, harness

DM = ConversationKey("telegram", "42")
BUILT_IN = LLMSettings().trouble_notice


@pytest.mark.parametrize(
    ("configured", "sent"),
    [
        (BUILT_IN, "Мені зараз важко зібратися з думками; незабаром відповім."),
        ("Back in a moment!", "Back in a moment!"),  # the operator's own: every language
    ],
    ids=["built-in", "own"],
)
async def test_the_trouble_notice_speaks_the_persona_s_language_unless_overridden(
    store: BaseStore, clock: ManualClock, configured: str, sent: str
) -> None:
    persona = PERSONA.model_copy(update={"language": "uk"})
    llm = FlakyLLM([ModelUnavailable("overloaded", status=529)] * 2)
    async with harness(store, clock, llm, trouble_notice=configured, persona=persona) as h:
        await h.say(DM, "hello")
        await h.advance(8, step=0.5)  # two retries, 2 s then 4 s later
        assert h.outlet.texts() == [sent, "ok: hello"]


async def test_the_gap_notice_of_a_hebrew_persona_reads_right_to_left(
    tmp_path: Path, clock: ManualClock
) -> None:
    """Turns deleted behind the store's back: the built-in "tell_user" notice, in Hebrew, its
    turn range one left-to-right run (else "1-28" could read as "28-1")."""
    path = tmp_path / "gap.sqlite3"
    built_in = RetentionSettings()
    gaps = GapPolicy("tell_user", built_in.tell_user_message, built_in.refuse_message)
    persona = PERSONA.model_copy(update={"language": "he"})
    async with SQLiteStore(path=path) as store:
        await support_session(store, clock)
        delete_behind_the_back(path, 28)
        async with harness(store, clock, GatedLLM(), gap_policy=gaps, persona=persona) as h:
            await h.say(SUPPORT, "what SLA did we agree?")
            await h.advance(2)
        (told,) = [t for t in h.outlet.texts() if t.startswith(RLM)]
        assert told == (
            f"{RLM}חלק מההודעות בשיחה הזו (תורות {LRI}1-28{PDI}) כבר אינן זמינות לי. "
            "אם היה בהן משהו חשוב, ספרו לי שוב בבקשה."
        )


async def test_a_plugin_command_s_refusal_on_a_hebrew_bot_reads_right_to_left(
    store: BaseStore, clock: ManualClock
) -> None:
    """The bot's own refusal around a plugin's command ("/secret is for the bot's admins")
    is the bot's text: marked right to left like every built-in answer (a line opening with
    /secret would otherwise lay out left to right); the plugin's own answers are left alone."""

    async def secret(inbound: Inbound, command: Command) -> str:
        return "42"

    persona = PERSONA.model_copy(update={"language": "he"})
    plugin = Extensions(commands=(CommandSpec("secret", "a secret", secret, admin=True),))
    async with harness(store, clock, GatedLLM(), persona=persona, extensions=plugin) as h:
        await h.say(DM, "/secret")
        await h.advance(2, step=0.5)
        (refusal,) = h.outlet.texts()
        assert refusal.startswith(f"{RLM}{LRI}/secret{PDI}"), repr(refusal)
