"""A scene's persona accounts on Telegram (docs/scenes.md#platforms): Bob's lines come from
Bob's own bot account, without a header; every other line, and every line Bob's account
cannot post, under the name header from the bot's own account. Real aiogram against the fake
Bot API; the pacing tests on a manual clock that also dates the fake's calls."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from adapters.telegram.accounts import AccountToken
from adapters.telegram.adapter import TelegramAdapter, create_adapter
from adapters.telegram.pacing import TelegramPacer
from bot.config import RunNeeds, Secrets, Settings, TelegramBotSettings
from bot.config.scenes import SceneSettings
from bot.core.errors import ConfigError
from bot.core.events import ConversationKey, Inbound, Reply, Voice, voiced
from tests.adapters.test_telegram import BOT, PERSONA, TOKEN, USERNAME
from tests.adapters.test_telegram_e2e import _env, personabot_run
from tests.fakes.clock import SignallingClock, drive
from tests.fakes.messages_api import FakeMessagesAPI
from tests.fakes.telegram_api import FakeTelegramAPI, TgChat, TgUser

pytestmark = pytest.mark.timeout(30)

BOB_TOKEN = "222333444:AAHtest-Bob-account-0123456789abcdef"
BOB = Voice("bob", "Bob")
ALICE = Voice("alice", "Alice")
ANN = TgUser(1001, "Ann")
GROUP = TgChat.supergroup(-1001000000021, "Tavern")
OTHER_GROUP = TgChat.supergroup(-1001000000022, "Back room")
BOB_ACCOUNT = (AccountToken("bob", "Bob", BOB_TOKEN),)


def key(chat: TgChat) -> ConversationKey:
    return ConversationKey("telegram", str(chat.id), None, BOT)


def line(voice: Voice, said: str, chat: TgChat = GROUP, reply_to: int | None = None) -> Reply:
    """A scene's line as the runtime hands it over: the line alone and under its header."""
    return Reply(
        key(chat),
        voiced(said, voice),
        reply_to_platform_message_id=None if reply_to is None else str(reply_to),
        voice=voice,
        line=said,
    )


def posted(api: FakeTelegramAPI, token: str, chat: TgChat = GROUP) -> list[str]:
    return [c.visible_text for c in api.sent_messages(token, chat.id)]


class _Recorder:
    """An InboundHandler that records what it is handed."""

    commands: tuple[tuple[str, str], ...] = (("new", "start over"),)
    admin_commands: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.received: list[Inbound] = []

    async def __call__(self, inbound: Inbound) -> None:
        self.received.append(inbound)

    def rejected(self, platform: str, bot: str, kind: str) -> None:
        raise AssertionError((platform, bot, kind))

    def batch(self) -> contextlib.AbstractAsyncContextManager[None]:
        return contextlib.nullcontext()


@pytest.fixture
def clock() -> SignallingClock:
    """The pacer's clock, which also dates the fake's calls: a group's 1 s spacing costs no
    real time (``drive`` jumps to each deadline)."""
    return SignallingClock()


@pytest.fixture
async def api(clock: SignallingClock) -> AsyncIterator[FakeTelegramAPI]:
    async with FakeTelegramAPI(now=clock.now) as server:
        server.add_bot(TOKEN, USERNAME, "Mira")
        server.add_bot(BOB_TOKEN, "bob_the_smith_bot", "Bob")
        for chat in (GROUP, OTHER_GROUP, TgChat.private(ANN)):
            server.message_update(chat, ANN, "hi")  # the chats exist (Ann started the bot)
        yield server


@contextlib.asynccontextmanager
async def identified(
    api: FakeTelegramAPI,
    clock: SignallingClock,
    accounts: tuple[AccountToken, ...] = BOB_ACCOUNT,
    pacer: TelegramPacer | None = None,
) -> AsyncIterator[TelegramAdapter]:
    """The scene's adapter, identified (getMe of every account) as ``run`` does first."""
    adapter = TelegramAdapter(
        bot_key=BOT,
        token=TOKEN,
        api_server=api.base_url,
        accounts=accounts,
        clock=clock,
        pacer=pacer,
    )
    try:
        await adapter.prepare(_Recorder())
        yield adapter
    finally:
        await adapter.aclose()


async def send(clock: SignallingClock, adapter: TelegramAdapter, *replies: Reply) -> None:
    """Send the replies one after the other, the clock jumping to each pacing deadline."""
    for reply in replies:
        await drive(clock, adapter.send(reply))


async def test_bobs_line_comes_from_his_account_without_a_header_alices_with_one(
    api: FakeTelegramAPI,
    clock: SignallingClock,
) -> None:
    asked = api.message_update(GROUP, ANN, "Bob, Alice, hello?")["message"]["message_id"]
    long_line = "\n\n".join(["The forge is hot and the iron is ready. " * 30] * 5)
    async with identified(api, clock) as adapter:
        await send(clock, adapter, line(BOB, "Hmph. @ann, what now?", reply_to=asked))
        await send(clock, adapter, line(ALICE, "Morning!", reply_to=asked))
        await send(clock, adapter, line(BOB, long_line))
    bob = api.sent_messages(BOB_TOKEN, GROUP.id)
    assert bob[0].visible_text == "Hmph. @\u2060ann, what now?"  # no header; the mention defused
    assert bob[0].reply_to == asked  # the first chunk quotes the turn's message, as ever
    assert len(bob) > 2 and all(c.reply_to is None for c in bob[1:])  # chunked as ever
    assert "".join(c.visible_text for c in bob[1:]).replace("\n", "").startswith("The forge")
    mira = api.sent_messages(TOKEN, GROUP.id)
    assert [c.visible_text for c in mira] == ["Alice: Morning!"]
    assert "<b>Alice:</b>" in mira[0].text and mira[0].reply_to == asked
    # Bob's account only identified itself and posted: no polling, webhook or commands.
    assert {c.method for c in api.calls if c.token == BOB_TOKEN} == {"getMe", "sendMessage"}


async def test_a_private_chat_and_voices_header_use_the_header_on_the_bots_own_account(
    api: FakeTelegramAPI,
    clock: SignallingClock,
) -> None:
    private = TgChat.private(ANN)
    async with identified(api, clock) as adapter:
        await send(clock, adapter, line(BOB, "Hmph.", chat=private))
    # A persona account posting "into" Ann's chat would write into her dialog with Bob's bot.
    assert posted(api, TOKEN, private) == ["Bob: Hmph."]
    assert not api.sent_messages(BOB_TOKEN)
    entry = TelegramBotSettings(
        platform="telegram",
        id=BOT,
        personas=["alice", "bob"],
        api_server=api.base_url,
        scene=SceneSettings(voices="header", accounts={"bob": "BOB_TG_TOKEN"}),
    )
    adapter = create_adapter(entry, PERSONA, Secrets({"TELEGRAM_BOT_TOKEN": TOKEN}))
    identified_before = len(api.calls_of("getMe", BOB_TOKEN))
    try:
        await adapter.prepare(_Recorder())
        await adapter.send(line(BOB, "Hmph, again."))  # its own pacer: a first send
    finally:
        await adapter.aclose()
    assert posted(api, TOKEN) == ["Bob: Hmph, again."]
    # With voices = "header" Bob's account is not even identified.
    assert len(api.calls_of("getMe", BOB_TOKEN)) == identified_before


async def test_all_accounts_share_the_groups_pacer_and_a_flood_limit(
    api: FakeTelegramAPI,
    clock: SignallingClock,
) -> None:
    pacer = TelegramPacer(clock=clock)
    async with identified(api, clock, pacer=pacer) as adapter:
        start = clock.now()
        voices = [BOB if i % 2 == 0 else ALICE for i in range(6)]
        await drive(
            clock,
            asyncio.gather(*(adapter.send(line(v, f"line {i}")) for i, v in enumerate(voices))),
        )
        sends = [c for c in api.calls if c.method == "sendMessage" and c.chat_id == GROUP.id]
        assert [c.token for c in sends] == [BOB_TOKEN, TOKEN] * 3
        assert [c.at - start for c in sends] == [0, 1, 2, 3, 4, 5]  # 1/s in the group, whoever
        # A 429 on Bob's account pauses the (other) group for the bot's own account too.
        api.fail_next("sendMessage", status=429, retry_after=5, token=BOB_TOKEN)
        start = clock.now()
        bob = asyncio.create_task(adapter.send(line(BOB, "after the pause", OTHER_GROUP)))
        await asyncio.wait_for(clock.next_sleeper(), 10)  # Bob got the 429 and waits it out
        assert pacer.paused_for(OTHER_GROUP.id) == 5
        alice = asyncio.create_task(adapter.send(line(ALICE, "me too", OTHER_GROUP)))
        await drive(clock, asyncio.gather(bob, alice))
    there = [c for c in api.calls if c.method == "sendMessage" and c.chat_id == OTHER_GROUP.id]
    assert [(c.token, c.status, c.visible_text, c.at - start) for c in there] == [
        (BOB_TOKEN, 429, "after the pause", 0),
        (BOB_TOKEN, 200, "after the pause", 5),  # retried once, after retry_after
        (TOKEN, 200, "Alice: me too", 6),  # the bot's own account honoured Bob's pause
    ]


async def test_a_reply_to_bobs_account_addresses_bob_and_bobs_own_messages_are_no_input(
    api: FakeTelegramAPI,
    clock: SignallingClock,
) -> None:
    recorder = _Recorder()
    adapter = TelegramAdapter(
        bot_key=BOT, token=TOKEN, api_server=api.base_url, accounts=BOB_ACCOUNT, clock=clock
    )
    task = asyncio.create_task(adapter.run(recorder))
    try:
        await api.wait_for(lambda: api.polls_started(TOKEN) or task.done(), what="polling")
        await send(clock, adapter, line(BOB, "Hmph. Who's asking?"))
        (bobs,) = api.sent_messages(BOB_TOKEN, GROUP.id)
        bob_user = api.bot_user(BOB_TOKEN)
        # Telegram never shows a bot other bots' messages; were it to, it is no input.
        api.push_message(TOKEN, GROUP, bob_user, "Alice, the bread is burning")
        api.push_message(TOKEN, GROUP, ANN, "just me", reply_to_message_id=bobs.message_id)
        api.push_message(TOKEN, GROUP, ANN, "and now to nobody")
        await api.wait_for(lambda: len(recorder.received) == 2, what="Ann's two messages")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await adapter.aclose()
    reply, plain = recorder.received
    assert [r.text for r in recorder.received] == ["just me", "and now to nobody"]
    assert reply.triggers_reply and reply.reply_to_bot  # as a reply to the bot's own message
    assert reply.quote is not None and reply.quote.from_bot and reply.quote.author == "Bob"
    assert reply.quote.text == "Hmph. Who's asking?"
    assert not plain.triggers_reply and plain.quote is None


async def test_an_account_not_in_the_group_falls_back_to_the_header_with_one_notice(
    api: FakeTelegramAPI, clock: SignallingClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="personabot.telegram")
    api.remove_from_chat(BOB_TOKEN, GROUP.id)
    asked = api.message_update(GROUP, ANN, "Bob?")["message"]["message_id"]
    async with identified(api, clock) as adapter:
        await send(clock, adapter, line(BOB, "Hmph.", reply_to=asked))
        await send(clock, adapter, line(BOB, "Still here."))
        await send(clock, adapter, line(BOB, "Elsewhere I am me.", chat=OTHER_GROUP))
    notice = (
        "Add @bob_the_smith_bot to this group so Bob can speak for itself; until then the "
        "names are shown in bold."
    )
    assert posted(api, TOKEN) == ["Bob: Hmph.", notice, "Bob: Still here."]
    assert api.sent_messages(TOKEN, GROUP.id)[0].reply_to == asked  # the line still answers
    assert posted(api, BOB_TOKEN, OTHER_GROUP) == ["Elsewhere I am me."]
    assert not api.sent_messages(BOB_TOKEN, GROUP.id)
    tried = [c for c in api.calls_of("sendMessage", BOB_TOKEN) if c.chat_id == GROUP.id]
    assert [c.status for c in tried] == [403]  # not asked again for every line
    warnings = [r for r in caplog.records if "not a member" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING


async def test_a_rejected_token_leaves_the_bot_running_and_bob_speaks_with_the_header(
    api: FakeTelegramAPI, clock: SignallingClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    revoked = "999888777:AAHtest-revoked-Bob-token-0123456789"  # unknown to the fake: 401
    accounts = (AccountToken("bob", "Bob", revoked),)
    async with identified(api, clock, accounts) as adapter:
        assert adapter.identity.username == USERNAME  # the bot itself started
        await send(clock, adapter, line(BOB, "Hmph."))
        await send(clock, adapter, line(BOB, "Hmph again."))
    assert posted(api, TOKEN) == ["Bob: Hmph.", "Bob: Hmph again."]
    assert [c.method for c in api.calls if c.token == revoked] == ["getMe"]  # never again
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "persona bob" in errors[0].getMessage()
    for record in caplog.records:
        for token in (revoked, TOKEN, BOB_TOKEN):
            assert token.split(":")[1] not in record.getMessage()


async def test_a_token_revoked_while_running_sends_the_line_from_the_bots_own_account(
    api: FakeTelegramAPI, clock: SignallingClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with identified(api, clock) as adapter:
        api.fail_next("sendMessage", status=401, token=BOB_TOKEN)
        await send(clock, adapter, line(BOB, "Hmph."))
        await send(clock, adapter, line(BOB, "Hmph again."))
    assert posted(api, TOKEN) == ["Bob: Hmph.", "Bob: Hmph again."]
    assert not api.sent_messages(BOB_TOKEN)
    assert any(
        r.levelno == logging.ERROR and "persona bob" in r.getMessage() for r in caplog.records
    )
    assert all(BOB_TOKEN.split(":")[1] not in r.getMessage() for r in caplog.records)


def _scene_entry(**scene: object) -> TelegramBotSettings:
    return TelegramBotSettings(
        platform="telegram",
        id=BOT,
        personas=["alice", "bob"],
        scene=SceneSettings(accounts={"bob": "BOB_TG_TOKEN"}, **scene),  # type: ignore[arg-type]
    )


def test_account_tokens_are_read_like_the_bots_own_and_never_shown() -> None:
    entry = _scene_entry()
    with pytest.raises(ConfigError, match="BOB_TG_TOKEN: not set in the environment"):
        create_adapter(entry, PERSONA, Secrets({"TELEGRAM_BOT_TOKEN": TOKEN}))
    secrets = Secrets({"TELEGRAM_BOT_TOKEN": TOKEN, "BOB_TG_TOKEN": "oops-not-a-token"})
    with pytest.raises(ConfigError, match=r"scene\.accounts\.bob: the token is malformed") as bad:
        create_adapter(entry, PERSONA, secrets)
    assert "oops" not in str(bad.value)
    secrets = Secrets({"TELEGRAM_BOT_TOKEN": TOKEN, "BOB_TG_TOKEN": TOKEN})
    with pytest.raises(ConfigError, match="bob: the bot's own token") as same:
        create_adapter(entry, PERSONA, secrets)
    assert TOKEN.split(":")[1] not in str(same.value)


def test_run_needs_names_an_unset_account_variable_as_it_names_a_bot_token() -> None:
    settings = Settings(
        personas=[
            PERSONA.model_copy(update={"id": "alice", "name": "Alice"}),
            PERSONA.model_copy(update={"id": "bob", "name": "Bob"}),
        ],
        bots=[_scene_entry()],
    )
    needs = RunNeeds.of(settings)
    problems = needs.problems(Secrets({"ANTHROPIC_API_KEY": "sk-x"}))
    assert f"bots[0] ({BOT}): TELEGRAM_BOT_TOKEN is not set in the environment" in problems
    assert any(
        p.startswith(f"bots[0] ({BOT}): BOB_TG_TOKEN is not set in the environment")
        and "persona bob" in p
        for p in problems
    )
    env = {"ANTHROPIC_API_KEY": "sk-x", "TELEGRAM_BOT_TOKEN": TOKEN, "BOB_TG_TOKEN": BOB_TOKEN}
    assert needs.problems(Secrets(env)) == []
    raw = {
        "bots": [
            {"platform": "telegram", "id": BOT, "scene": {"accounts": {"bob": "BOB_TG_TOKEN"}}}
        ]
    }
    from_raw = RunNeeds.of_raw(raw)
    assert from_raw is not None and from_raw.accounts == needs.accounts
    header = RunNeeds.of(settings.model_copy(update={"bots": [_scene_entry(voices="header")]}))
    assert header.accounts == ()  # with voices = "header" the variable is never read


def _run_config(tmp_path: Path, telegram: str, claude: str) -> Path:
    people = "".join(
        f'\n[[personas]]\nid = "{pid}"\nname = "{name}"\ndescription = "{about}"\n'
        f'first_message = ["Hello."]\nmodel = "claude-test"\n'
        for pid, name, about in (
            ("alice", "Alice", "A cheerful baker."),
            ("bob", "Bob", "A grumpy blacksmith."),
        )
    )
    path = tmp_path / "personabot.toml"
    path.write_text(
        f"""
[storage]
url = "sqlite:///{tmp_path / "bots.sqlite3"}"

[llm]
base_url = {json.dumps(claude)}
max_retries = 0

[queue]
debounce_seconds = 0.2
max_wait_seconds = 2
scan_interval_seconds = 0.2
shutdown_grace_seconds = 2

[logging]
level = "DEBUG"

[memory]
extract_after_idle_minutes = 10000
{people}
[[bots]]
id = "tavern"
platform = "telegram"
personas = ["alice", "bob"]
token_env = "TG_TOKEN"
api_server = "{telegram}"

[bots.scene]
strategy = "manual"
accounts = {{ bob = "BOB_TG_TOKEN" }}
""",
        encoding="utf-8",
    )
    return path


@pytest.mark.timeout(90)
async def test_personabot_run_posts_bobs_line_from_bobs_account(tmp_path: Path) -> None:
    """The wiring: ``personabot run`` reads Bob's token from the environment, Bob's line
    answers from Bob's account, a reply to it addresses Bob, Bob's own message fed to the
    bot is not stored, and no token reaches the logs."""
    async with FakeTelegramAPI() as telegram, FakeMessagesAPI(reply_text="Hmph.") as claude:
        telegram.add_bot(TOKEN, USERNAME, "Tavern")
        bob_user = telegram.add_bot(BOB_TOKEN, "bob_the_smith_bot", "Bob")
        config = _run_config(tmp_path, telegram.base_url, claude.base_url)
        env = _env(TG_TOKEN=TOKEN, BOB_TG_TOKEN=BOB_TOKEN, ANTHROPIC_API_KEY="sk-test-e2e")
        async with personabot_run(tmp_path, config, env):
            await telegram.wait_for(lambda: telegram.polls_started(TOKEN), within=40, what="poll")
            asked = telegram.push_message(TOKEN, GROUP, ANN, "Bob, are you awake?")
            await telegram.wait_for(
                lambda: telegram.sent_messages(BOB_TOKEN, GROUP.id), what="Bob's line"
            )
            (bobs,) = telegram.sent_messages(BOB_TOKEN, GROUP.id)
            # Bob's own message, were Telegram to show it to the bot: never input.
            telegram.push_message(TOKEN, GROUP, bob_user, "Alice, wake up")
            telegram.push_message(TOKEN, GROUP, ANN, "thanks", reply_to_message_id=bobs.message_id)
            await telegram.wait_for(
                lambda: len(telegram.sent_messages(BOB_TOKEN, GROUP.id)) == 2,
                what="Bob's answer to the reply",
            )
            stopped_with = len(claude.requests)
        stored = _texts(tmp_path)
    assert bobs.visible_text == "Hmph." and bobs.reply_to == asked["message"]["message_id"]
    assert not telegram.sent_messages(TOKEN, GROUP.id)  # nothing under a header
    assert stopped_with == 2 and all('"Bob"' in r.last_user_text for r in claude.requests)
    assert "Alice, wake up" not in stored and "thanks" in stored
    assert {c.method for c in telegram.calls if c.token == BOB_TOKEN} == {"getMe", "sendMessage"}
    logs = (tmp_path / "err.log").read_text() + (tmp_path / "out.log").read_text()
    assert "persona bob speaks as @bob_the_smith_bot" in logs  # the logs were captured
    for token in (TOKEN, BOB_TOKEN):
        assert token.split(":")[1] not in logs


def _texts(tmp_path: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(tmp_path / "bots.sqlite3")) as db:
        return [row[0] for row in db.execute("SELECT text FROM messages ORDER BY id")]
