"""A card's fields in the prompt the model gets: a V3 CHARX written by the test, imported with
``personabot persona import``, then ``personabot run`` (a real process) answering a private
chat and a group through the fake Bot API (real aiogram) and the fake Messages API (real
anthropic SDK), and ``personabot prompt`` showing the same pin."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.adapters.test_telegram_e2e import _env, personabot_run
from tests.cards.cards import personabot, v3_card, write_card
from tests.fakes.messages_api import FakeMessagesAPI, RecordedRequest
from tests.fakes.telegram_api import FakeTelegramAPI, TgChat, TgUser

TOKEN = "5550011:AACard-prompt-e2e-token-abcdefghijklm"
SASHA = TgUser(4242, "Sasha")
ALEX = TgUser(5151, "Alex")
GROUP = TgChat.group(-5001, "Kell Point")
OPENED = "You opened this conversation with:\n"
# Texts of the card that must never reach the model.
CREATOR_NOTES = "Best with a warm model. Never shown to the model."
CREATOR_NOTES_DE = "Für warme Modelle."


def _card() -> dict[str, Any]:
    """A full V3 card; post-history instructions and group openings with macros in them."""
    card = v3_card(
        post_history_instructions="Answer {{user}} in under 80 words, as {{char}}.",
        group_only_greetings=["Hello, all of you.", "Evening, {{user}}. Sit by the lamp."],
    )
    data = card["data"]
    assert data["creator_notes"] == CREATOR_NOTES
    assert data["creator_notes_multilingual"] == {"de": CREATOR_NOTES_DE}
    return card


def _prepare(tmp_path: Path, telegram: str, claude: str) -> Path:
    """The operator's TOML (storage, model, quick queue), the card imported into it, and a
    Telegram bot for the imported persona on the fake Bot API."""
    config = tmp_path / "personabot.toml"
    config.write_text(
        f"""[storage]
url = "sqlite:///{tmp_path / "bots.sqlite3"}"

[llm]
base_url = {json.dumps(claude)}
max_retries = 0

[queue]
debounce_seconds = 0.2
max_wait_seconds = 2
scan_interval_seconds = 0.2
shutdown_grace_seconds = 2

[memory]
extract_after_idle_minutes = 10000
""",
        encoding="utf-8",
    )
    write_card(tmp_path / "mira.charx", _card())
    code, out, err = personabot("persona", "import", "mira.charx", "--id", "mira", cwd=tmp_path)
    assert (code, err) == (0, ""), out
    with config.open("a", encoding="utf-8") as toml:
        toml.write(
            f'\n[[bots]]\nplatform = "telegram"\npersona = "mira"\ntoken_env = "TG_TOKEN"\n'
            f'api_server = "{telegram}"\n'
        )
    return config


def _texts(request: RecordedRequest) -> list[tuple[str, str]]:
    """Every text block of the request, in prompt order, with where it is."""
    out = [("system", str(b["text"])) for b in request.system_blocks]
    for message in request.messages:
        out += [(message["role"], str(b["text"])) for b in message["content"] if "text" in b]
    return out


def _pin(request: RecordedRequest) -> str:
    return str(request.system_blocks[0]["text"])


def _turn_blocks(request: RecordedRequest) -> list[str]:
    return [str(b["text"]) for b in request.messages[-1]["content"] if "text" in b]


def _said_last(request: RecordedRequest, text: str) -> bool:
    return any(text in block for block in _turn_blocks(request))


async def test_an_imported_cards_fields_reach_the_prompt_where_they_belong(
    tmp_path: Path,
) -> None:
    """Issue 18, every mapped field lands where it should, in the request itself: the
    nickname is {{char}}; the system prompt, description, personality and scenario are the
    pin; the example dialogue is the pinned examples layer; the opening is one of first_mes
    and alternate_greetings in a private chat (the one /start sent) and one of
    group_only_greetings in a group; the lorebook entry fires on its keys after the window;
    the post-history instructions come last, after the window and the turn; the creator
    notes are nowhere. ``personabot prompt`` shows the same pin."""
    card = _card()["data"]
    async with FakeTelegramAPI() as telegram, FakeMessagesAPI(reply_text="Mm.") as claude:
        telegram.add_bot(TOKEN, "kell_bot")
        config = _prepare(tmp_path, telegram.base_url, claude.base_url)
        env = _env(TG_TOKEN=TOKEN, ANTHROPIC_API_KEY="sk-test-card-prompt")
        private = TgChat.private(SASHA)

        def sent(chat: int) -> list[str]:
            return [c.visible_text for c in telegram.sent_messages(TOKEN, chat)]

        def asked(text: str) -> list[RecordedRequest]:
            return [r for r in claude.requests if _said_last(r, text)]

        async with personabot_run(tmp_path, config, env):
            await telegram.wait_for(lambda: telegram.polls_started(TOKEN), within=40, what="poll")
            telegram.push_message(TOKEN, private, SASHA, "/start")
            telegram.push_message(TOKEN, GROUP, ALEX, "/start")
            await telegram.wait_for(lambda: sent(SASHA.id) and sent(GROUP.id), what="openings")
            telegram.push_message(TOKEN, private, SASHA, "good evening")
            await telegram.wait_for(lambda: len(sent(SASHA.id)) == 2, what="the first reply")
            telegram.push_message(TOKEN, private, SASHA, "is the lighthouse dark since the storm?")
            telegram.push_message(TOKEN, GROUP, ALEX, "@kell_bot may we come in?")
            await telegram.wait_for(
                lambda: asked("is the lighthouse dark") and asked("may we come in?"),
                what="the private and the group turn",
            )
            await telegram.wait_for(lambda: len(sent(SASHA.id)) == 3, what="the second reply")
            await telegram.wait_for(lambda: len(sent(GROUP.id)) == 2, what="the group reply")

    private_opening, group_opening = sent(SASHA.id)[0], sent(GROUP.id)[0]
    (first,) = asked("good evening")
    (second,) = asked("is the lighthouse dark")
    (group,) = asked("may we come in?")

    # The pin of the private chat: {{char}} is the nickname, {{user}} the person.
    pin = _pin(second)
    assert pin == _pin(first)  # the same for the whole session (the prompt cache keeps it)
    assert pin.startswith("You are Mimi. Stay in character.\n\n")
    assert "Mimi's description:\nMimi keeps the lighthouse on Kell Point.\nShe speaks" in pin
    assert "Mimi's personality: warm, curious, stubborn" in pin
    assert "Scenario: A stormy night; Sasha knocks at the door." in pin
    assert "Mira Kell" not in pin and "{{" not in pin
    # The example dialogue is pinned as examples of style, not sent as conversation.
    assert "<examples>\n<START>\nSasha: Hi\nMimi: Hello there.\n</examples>" in pin
    assert not any("Hello there." in t for role, t in _texts(second) if role != "system")
    # The private opening: one of first_mes and alternate_greetings, the one /start sent.
    private_choices = {
        "Oh! Come in, Sasha, you're soaked.",
        "The lamp flickers. Who's there?",
        "Back again, Sasha?",
    }
    assert private_opening in private_choices
    assert pin.endswith(OPENED + private_opening)

    # After the window (the first exchange), in the new turn's message: the lorebook entry
    # that fired, the turn, then the author's instructions, last.
    assert [m["role"] for m in second.messages] == ["user", "assistant", "user"]
    assert "good evening" in second.messages[0]["content"][0]["text"]
    lore, turn, post = _turn_blocks(second)
    assert lore.startswith("<lorebook>") and "dark since the storm of '09." in lore
    assert "Orin is the ferryman." not in json.dumps(second.body)  # a disabled entry
    assert turn == "is the lighthouse dark since the storm?"
    assert post.startswith("<persona_instructions>")
    assert "Answer Sasha in under 80 words, as Mimi." in post
    assert not any("under 80 words" in t for _, t in _texts(second)[:-1])
    assert not any(t.startswith("<lorebook>") for t in _turn_blocks(first))  # no key said

    # The group: openings from group_only_greetings only, {{user}} is "everyone" in the pin.
    group_pin = _pin(group)
    assert group_opening in {"Hello, all of you.", "Evening, everyone. Sit by the lamp."}
    assert group_pin.endswith(OPENED + group_opening)
    assert "Scenario: A stormy night; everyone knocks at the door." in group_pin
    assert not any(choice in group_pin for choice in private_choices)
    assert "Answer Alex in under 80 words, as Mimi." in _turn_blocks(group)[-1]

    # Creator notes never reach a prompt, in any language.
    for request in claude.requests:
        text = json.dumps(request.body, ensure_ascii=False)
        assert CREATOR_NOTES not in text and CREATOR_NOTES_DE not in text
        assert card["creator_notes"] not in text

    # `personabot prompt` shows the pin the model got, and what follows the window.
    code, out, err = personabot(
        "prompt",
        "--platform",
        "telegram",
        "--chat",
        str(SASHA.id),
        "--message",
        "and the lamp, in the storm?",
        cwd=tmp_path,
    )
    assert (code, err) == (0, "")
    assert f"--- system block 0  [cache breakpoint]\n{pin}\n" in out
    assert "fired    'lighthouse': key 'lighthouse' and 'storm'" in out
    assert "Answer Sasha in under 80 words, as Mimi." in out
    assert CREATOR_NOTES not in out and CREATOR_NOTES_DE not in out
