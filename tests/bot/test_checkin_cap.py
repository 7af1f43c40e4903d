"""The per-bot cap on check-ins (``[schedule] max_checkins_per_day``, docs/initiatives.md):
through the wired runtime on the manual clock, on both stores."""

from __future__ import annotations

from bot.app.preview import preview_prompt
from bot.config import ScheduleSettings, Settings
from bot.core.clock import ManualClock
from bot.core.events import ConversationKey
from bot.store.base import BaseStore
from tests.bot.test_initiatives import CHECK_IN, HOUR, NO_QUIET, T0, Scripted
from tests.harness import BOT, PERSONA, Harness, harness

DAY = 24 * HOUR
CHATS = [ConversationKey("telegram", str(n), None, BOT) for n in (41, 42, 43)]
CAPPED = ScheduleSettings(max_checkins_per_day=2)


def _check_ins(h: Harness) -> list[tuple[float, str]]:
    """(when, chat) of every check-in sent."""
    return [(t, r.conversation.chat_id) for t, r in h.outlet.replies if r.text == CHECK_IN]


async def test_past_the_cap_a_check_in_waits_for_the_window_and_is_then_sent(
    store: BaseStore,
) -> None:
    """Three people go quiet ten minutes apart; the bot may write two check-ins a day. The
    first two are sent two hours later; the third is postponed (the model is not asked) until
    24 hours after the first, then sent."""
    clock = ManualClock(T0)
    llm = Scripted()
    async with harness(store, clock, llm, initiative=NO_QUIET, schedule=CAPPED) as h:
        for n, chat in enumerate(CHATS):
            await h.say(chat, "good night", author=f"u{n}")
            await h.advance(3.0, step=0.5)  # answered
            await h.advance(597, step=60)
        await h.advance(2.5 * HOUR, step=120)  # all three are due by now
        sent = _check_ins(h)
        assert [chat for _, chat in sent] == ["41", "42"]
        assert len(llm.decisions()) == 2
        assert await store.recent_checkins(BOT, T0, 10) == [sent[1][0], sent[0][0]]
        first = sent[0][0]
        waiting = await store.initiative_state(CHATS[2])
        assert waiting is not None and waiting.due_at == first + DAY  # postponed, not lost
        # `personabot prompt` shows the chat's check-in only where the cap does not hold.
        uncapped = Settings(personas=[PERSONA.model_copy(update={"initiative": NO_QUIET})])
        capped = uncapped.model_copy(update={"schedule": CAPPED})
        assert (await _preview(uncapped, h, CHATS[2])).startswith("check-in for")
        assert (await _preview(capped, h, CHATS[2])).startswith("prompt for")
        await h.advance(first + DAY - clock.now() - 60, step=3600)
        assert len(_check_ins(h)) == 2 and len(llm.decisions()) == 2
        await h.advance(120, step=10)
        (late,) = _check_ins(h)[2:]
        assert late[1] == "43" and first + DAY <= late[0] <= first + DAY + 15
        await h.advance(DAY, step=3600)
        assert len(_check_ins(h)) == 3  # max_unanswered = 1 in every chat


async def test_no_cap_by_default(store: BaseStore) -> None:
    clock = ManualClock(T0)
    async with harness(store, clock, Scripted(), initiative=NO_QUIET) as h:
        for n, chat in enumerate(CHATS):
            await h.say(chat, "good night", author=f"u{n}")
        await h.advance(3.0, step=0.5)
        await h.advance(2.5 * HOUR, step=60)
        assert sorted(chat for _, chat in _check_ins(h)) == ["41", "42", "43"]


async def _preview(settings: Settings, h: Harness, conversation: ConversationKey) -> str:
    """What ``personabot prompt`` would show for the chat now: its title."""
    persona = settings.personas[0]
    now = h.clock.now()
    preview = await preview_prompt(settings, h.store, h.memory, conversation, persona, now)
    assert preview is not None
    return preview[0]
