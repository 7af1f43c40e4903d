"""docs/scenes.md on Telegram with one bot account: the real aiogram adapter polling the fake
Bot API, the wired runtime on the real clock (short debounce). Each persona's line goes out
under its bold name header; a reply to a line addresses its speaker; the bot's own lines, or
another bot's, fed back in are never input."""

from __future__ import annotations

from pathlib import Path

from bot.core.llm import ModelRequest
from tests.adapters.test_telegram import TOKEN, _settings, api, running
from tests.fakes.llm import GatedLLM
from tests.fakes.telegram_api import FakeTelegramAPI, TgChat, TgUser
from tests.scenes.test_scene_turns import CAST, scene_bot, speaker

__all__ = ["api"]  # the fake Bot API fixture

ANN = TgUser(1001, "Ann")
GROUP = TgChat.supergroup(-1001000000009, "Tavern")
OTHER_BOT = TgUser(777000111, "helper_bot", is_bot=True)


def _scene(tmp_path: Path) -> object:
    base = _settings(tmp_path, debounce=0.2, max_wait=2.0)
    bot = scene_bot(strategy="manual").model_copy(update={"id": "mira-telegram"})
    return base.model_copy(update={"personas": list(CAST), "bots": [bot]})


async def test_lines_carry_headers_replies_address_their_speaker_and_echoes_are_ignored(
    tmp_path: Path, api: FakeTelegramAPI
) -> None:
    def answer(request: ModelRequest) -> str:
        return f"{speaker(request)} at your service."

    llm = GatedLLM(answer=answer)
    settings = _scene(tmp_path)
    async with running(tmp_path, api, llm, settings=settings) as rig:  # type: ignore[arg-type]
        rig.say(GROUP, ANN, "Bob, are you awake?")
        await api.wait_for(lambda: len(rig.replies(GROUP)) == 1, what="Bob's line")
        (bob_line,) = api.sent_messages(TOKEN, GROUP.id)
        assert bob_line.visible_text == "Bob: Bob at your service."
        assert "<b>Bob:</b>" in str(bob_line.params.get("text"))  # bold on the screen
        # A reply to Bob's line is for Bob, though it names nobody and mentions no bot.
        rig.say(GROUP, ANN, "thanks!", reply_to_message_id=bob_line.message_id)
        await api.wait_for(lambda: len(rig.replies(GROUP)) == 2, what="the answer to the reply")
        assert rig.replies(GROUP)[-1].startswith("Bob: ")
        # Quoting part of Bob's line (without its header): still for Bob, and Bob reads it as
        # a reply to his line, not to "your own message".
        rig.say(GROUP, ANN, "how?", reply_to_message_id=bob_line.message_id, quote="service")
        await api.wait_for(lambda: len(rig.replies(GROUP)) == 3, what="the answer to the quote")
        assert rig.replies(GROUP)[-1].startswith("Bob: ")
        asked = llm.requests[-1].messages[-1].text
        assert '[quoting "Bob", who wrote: "service"]' in asked
        assert "your own message" not in asked
        # The bot's own message and another bot's, pushed back in: never input.
        me = TgUser(int(TOKEN.split(":")[0]), "mira_bot", is_bot=True)
        rig.say(GROUP, me, "Alice: hello Carol")
        rig.say(GROUP, OTHER_BOT, "Carol, Alice, wake up")
        rig.say(GROUP, ANN, "Alice?")
        await api.wait_for(lambda: len(rig.replies(GROUP)) == 4, what="Alice's line")
        await rig.quiet(rig.key(GROUP))
        assert [r.split(":")[0] for r in rig.replies(GROUP)] == ["Bob", "Bob", "Bob", "Alice"]
        assert len(llm.requests) == 4
        stored = await rig.stored_texts(rig.key(GROUP))
        assert "Alice: hello Carol" not in stored and "Carol, Alice, wake up" not in stored
        # An admin-only command, in no menu, typed without @bot in the group: taken (not
        # dropped as another bot's command), and refused to someone who is no admin.
        rig.say(GROUP, ANN, "/stop")
        await api.wait_for(lambda: len(rig.replies(GROUP)) == 5, what="the refusal")
        assert rig.replies(GROUP)[-1] == "/stop is for the bot's admins."
