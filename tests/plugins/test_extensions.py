"""The plugin API on the App's runtime (tests/harness.py is a thin layer over App): what a
middleware may and may not do, plugin commands behind the access rules, registration errors."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
from collections.abc import Sequence
from pathlib import Path

import pytest

from bot.app import App
from bot.config import Secrets, Settings
from bot.core.clock import ManualClock
from bot.core.errors import ConfigError
from bot.core.events import ConversationKey, Inbound, SessionKey
from bot.runtime.access import AccessPolicy
from bot.runtime.extensions import CallNext, Command, Extensions
from bot.runtime.tools import Tool
from bot.store.base import BaseStore
from tests.fakes.llm import GatedLLM
from tests.harness import BOT, harness

DM = ConversationKey("telegram", "11", None, BOT)


async def _stored(store: BaseStore, conversation: ConversationKey = DM) -> list[tuple[str, str]]:
    session = await store.current_session(conversation)
    if session is None:
        return []
    messages = await store.messages(SessionKey(conversation, session.key.session_id))
    return [(m.author_id, m.text) for m in messages if m.role == "user"]


async def test_a_failing_middleware_is_skipped_and_the_message_kept(
    store: BaseStore, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A plugin's bug before call_next loses nothing: the event goes on as it came."""

    def extend(app: App) -> None:
        @app.middleware
        async def broken(event: Inbound, call_next: CallNext) -> None:
            raise ValueError("plugin bug")

    llm = GatedLLM()
    with caplog.at_level(logging.ERROR, logger="personabot.router"):
        async with harness(store, clock, llm, extend=extend) as h:
            await h.say(DM, "still here", author="11")
            await h.advance(2)
    assert await _stored(store) == [("11", "still here")]
    assert llm.calls == 1
    assert "middleware" in caplog.text and "plugin bug" in caplog.text


async def test_a_middleware_changes_text_but_not_who_wrote_it(
    store: BaseStore, clock: ManualClock
) -> None:
    """Enrich, never forge: a changed author or privacy flag is kept as received."""

    def extend(app: App) -> None:
        @app.middleware
        async def forge(event: Inbound, call_next: CallNext) -> None:
            await call_next(
                dataclasses.replace(
                    event, text=event.text.upper(), author_id="admin", is_private=False
                )
            )

    async with harness(store, clock, GatedLLM(), extend=extend, debounce=60) as h:
        await h.say(DM, "hello", author="11")
    assert await _stored(store) == [("11", "HELLO")]


async def test_a_store_fault_inside_call_next_reaches_the_adapter_even_if_swallowed(
    store: BaseStore, clock: ManualClock
) -> None:
    """The platform must deliver the update again: an outer middleware cannot hide the
    failure of what runs inside its call_next."""

    def extend(app: App) -> None:
        @app.middleware
        async def swallow(event: Inbound, call_next: CallNext) -> None:
            with contextlib.suppress(RuntimeError):
                await call_next(event)

        @app.middleware
        async def fails_after(event: Inbound, call_next: CallNext) -> None:
            await call_next(event)
            raise RuntimeError("failed after storing")

    async with harness(store, clock, GatedLLM(), extend=extend, debounce=60) as h:
        with pytest.raises(RuntimeError, match="failed after storing"):
            await h.router(Inbound(DM, "11", "Ann", "hi", "m-fault"))


async def test_a_dropped_message_is_not_stored_and_a_plugin_command_answers(
    store: BaseStore, clock: ManualClock
) -> None:
    def extend(app: App) -> None:
        @app.middleware
        async def drop(event: Inbound, call_next: CallNext) -> None:
            if "spam" not in event.text:
                await call_next(event)

        @app.command("echo", help="say it back")
        async def echo(event: Inbound, command: Command) -> str:
            return f"echo: {command.args}"

        @app.command("boom", help="always fails")
        async def boom(event: Inbound, command: Command) -> str:
            raise KeyError("bug")

    async with harness(store, clock, GatedLLM(), extend=extend, debounce=60) as h:
        await h.say(DM, "spam spam", author="11")
        await h.say(DM, "/echo a b", author="11")
        await h.say(DM, "/boom", author="11")
        await h.say(DM, "/help", author="11")
        await h.say(DM, "real words", author="11")
    texts = h.outlet.texts(DM)
    assert texts[:2] == ["echo: a b", "Sorry, /boom failed. Please try again later."]
    assert "/echo - say it back" in texts[2]
    assert await _stored(store) == [("11", "real words")]


async def test_a_stranger_gets_nothing_from_a_plugin_and_no_plugin_sees_them(
    store: BaseStore, clock: ManualClock
) -> None:
    seen: list[str] = []

    def extend(app: App) -> None:
        @app.middleware
        async def watch(event: Inbound, call_next: CallNext) -> None:
            seen.append(event.author_id)
            await call_next(event)

        @app.command("secret", help="only for the allowed")
        async def secret(event: Inbound, command: Command) -> str:
            return "the secret"

    policy = AccessPolicy(allow_users=frozenset({"11"}))
    async with harness(store, clock, GatedLLM(), access=policy, extend=extend) as h:
        await h.say(DM, "/secret", author="99", name="Eve")
        await h.say(DM, "/secret", author="11")
    assert h.outlet.texts(DM) == ["the secret"]
    assert seen == ["11"]


async def test_a_strangers_edits_and_deletions_reach_no_plugin(
    store: BaseStore, clock: ManualClock
) -> None:
    """review14: an edit from outside allow_users reached every middleware (with its text)."""
    seen: list[tuple[str, str, str]] = []

    def extend(app: App) -> None:
        @app.middleware
        async def watch(event: Inbound, call_next: CallNext) -> None:
            seen.append((event.kind, event.author_id, event.text))
            await call_next(event)

    policy = AccessPolicy(allow_users=frozenset({"11"}))
    async with harness(store, clock, GatedLLM(), access=policy, extend=extend, debounce=60) as h:
        await h.router(Inbound(DM, "99", "Eve", "what Eve wrote", "m-eve", kind="edit"))
        await h.router(Inbound(DM, "99", "Eve", "", "m-eve", kind="delete"))
        await h.router(Inbound(DM, "11", "Ann", "first", "m-ann"))
        await h.router(Inbound(DM, "11", "Ann", "second", "m-ann", kind="edit"))
        # Discord's deletions carry no author: only the chat rule applies (none here).
        await h.router(Inbound(DM, "", "", "", "m-ann", kind="delete"))
    assert seen == [("message", "11", "first"), ("edit", "11", "second"), ("delete", "", "")]
    assert h.outlet.texts(DM) == []
    assert await _stored(store) == []


async def test_a_plugin_command_answering_with_no_text_is_told_as_failed(
    store: BaseStore, clock: ManualClock
) -> None:
    """review14: a handler returning an int raised TypeError in Delivery, into the adapter
    (Telegram skipped the update; its webhook answered 500 and the command ran again)."""

    def extend(app: App) -> None:
        @app.command("num", help="a number")
        async def num(event: Inbound, command: Command) -> str:
            return 42  # type: ignore[return-value] - the plugin author's mistake

    async with harness(store, clock, GatedLLM(), extend=extend, debounce=60) as h:
        await h.say(DM, "/num", author="11")
        await h.say(DM, "/num", author="11")
    assert h.outlet.texts(DM) == ["Sorry, /num failed. Please try again later."] * 2


async def test_a_hanging_or_self_cancelling_plugin_command_answers_failed(
    store: BaseStore, clock: ManualClock
) -> None:
    """review14: a plugin command that never returned held the bot's update stream (every
    later message of every chat waited behind it); one raising CancelledError ended the
    adapter's update loop like a shutdown. A middleware raising it lost nothing either."""

    def extend(app: App) -> None:
        @app.command("slow", help="never answers")
        async def slow(event: Inbound, command: Command) -> str:
            await asyncio.Event().wait()
            return "never"

        @app.command("quits", help="cancels itself")
        async def quits(event: Inbound, command: Command) -> str:
            raise asyncio.CancelledError

        @app.middleware
        async def quitter(event: Inbound, call_next: CallNext) -> None:
            if event.text == "hello":
                raise asyncio.CancelledError
            await call_next(event)

    async with harness(store, clock, GatedLLM(), extend=extend, debounce=60) as h:
        waiting = asyncio.create_task(h.say(DM, "/slow", author="11"))
        await h.advance(10.5)
        await asyncio.wait_for(waiting, 5)
        await h.say(DM, "/quits", author="11")
        await h.say(DM, "hello", author="11")
    assert h.outlet.texts(DM) == [
        "Sorry, /slow failed. Please try again later.",
        "Sorry, /quits failed. Please try again later.",
    ]
    assert await _stored(store) == [("11", "hello")]


async def test_a_stranger_chatting_in_a_group_is_not_told_the_bot_is_private(
    store: BaseStore, clock: ManualClock
) -> None:
    """review14: any message of someone outside allow_users in a group, even one that did not
    address the bot, made it post the denied reply there (once a day)."""
    group = ConversationKey("telegram", "-100", None, BOT)
    policy = AccessPolicy(allow_users=frozenset({"11"}), denied_reply="This bot is private.")
    async with harness(store, clock, GatedLLM(), access=policy) as h:
        chatter = Inbound(group, "99", "Eve", "lunch?", "g1", is_private=False)
        await h.router(dataclasses.replace(chatter, triggers_reply=False))
        assert h.outlet.texts(group) == []
        await h.router(dataclasses.replace(chatter, platform_message_id="g2", mentions_bot=True))
        await h.router(dataclasses.replace(chatter, platform_message_id="g3"))
    assert h.outlet.texts(group) == ["This bot is private."]
    assert await _stored(store, group) == []


async def test_a_hanging_middleware_does_not_hold_the_update_stream(
    store: BaseStore, clock: ManualClock
) -> None:
    """review14: a middleware that neither calls call_next nor returns held the bot's update
    stream forever; it is skipped after [tools] command_timeout_seconds, the event kept."""

    def extend(app: App) -> None:
        @app.middleware
        async def hangs(event: Inbound, call_next: CallNext) -> None:
            if event.text == "hang":
                await asyncio.Event().wait()
            await call_next(event)

    async with harness(store, clock, GatedLLM(), extend=extend, debounce=60) as h:
        waiting = asyncio.create_task(h.say(DM, "hang", author="11"))
        await h.advance(30)
        done = waiting.done()
        waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
    assert done and await _stored(store) == [("11", "hang")]


async def test_a_middleware_is_never_cut_off_once_it_passed_the_event_on(
    store: BaseStore, clock: ManualClock
) -> None:
    """The bound is on deciding only: work after ``call_next`` (the event is stored by then)
    may take longer than ``[tools] command_timeout_seconds`` and is not cancelled."""
    finished: list[str] = []

    def extend(app: App) -> None:
        @app.middleware
        async def slow_after(event: Inbound, call_next: CallNext) -> None:
            await call_next(event)
            await app_clock.sleep(30)
            finished.append(event.text)

    app_clock = clock
    async with harness(store, clock, GatedLLM(), extend=extend, debounce=60) as h:
        waiting = asyncio.create_task(h.say(DM, "slow", author="11"))
        await h.advance(31)
        await asyncio.wait_for(waiting, timeout=5)
    assert finished == ["slow"] and await _stored(store) == [("11", "slow")]


async def test_a_middleware_cannot_veto_a_deletion(store: BaseStore, clock: ManualClock) -> None:
    """review14: a middleware that passed on only messages (``if not event.text: return``)
    kept every message its author deleted on the platform in the store."""

    def extend(app: App) -> None:
        @app.middleware
        async def text_only(event: Inbound, call_next: CallNext) -> None:
            if event.text:
                await call_next(event)

    async with harness(store, clock, GatedLLM(), extend=extend, debounce=60) as h:
        await h.router(Inbound(DM, "11", "Ann", "my address is ...", "m-del"))
        await h.router(Inbound(DM, "11", "Ann", "still here", "m-keep"))
        await h.router(Inbound(DM, "11", "Ann", "", "m-del", kind="delete"))
    assert await _stored(store) == [("11", "still here")]


def _app() -> App:
    return App(Settings.model_validate({"llm": {"provider": "offline"}}))


async def _handler(event: Inbound, command: Command) -> str:
    return "x"


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("help", "a built-in command has this name"),
        ("Roll", "lowercase"),
        ("x" * 33, "lowercase"),
    ],
)
def test_bad_command_names_are_config_errors(name: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        _app().command(name, help="does things")(_handler)


def test_registrations_are_checked() -> None:
    app = _app()
    app.command("roll", help="roll dice")(_handler)
    with pytest.raises(ConfigError, match="registered twice"):
        app.command("roll", help="roll again")(_handler)
    with pytest.raises(ConfigError, match="must be async def"):
        app.middleware(lambda event, call_next: None)  # type: ignore[arg-type,return-value]
    with pytest.raises(ConfigError, match="model provider 'offline': registered twice"):
        app.provider("offline", lambda llm, secrets: None)  # type: ignore[arg-type,return-value]
    with pytest.raises(ConfigError, match="platform 'telegram': registered twice"):
        app.platform("telegram", lambda e, p, s: None)  # type: ignore[arg-type,return-value]

    async def when(utc: float) -> str:
        """The time."""
        return ""

    app.tool(when)
    with pytest.raises(ConfigError, match="tool 'when': registered twice"):
        app.tool(name="when")(when)


async def test_extensions_built_by_hand_apply_per_bot(store: BaseStore, clock: ManualClock) -> None:
    """``app.extend``: a program's own Extensions, a command of one bot only."""
    from bot.runtime.extensions import CommandSpec, Extensions

    async def hi(event: Inbound, command: Command) -> str:
        return "hi from the extension"

    mine = Extensions(
        commands=(CommandSpec("hey", "says hey", hi),),
        per_bot={"elsewhere": Extensions(commands=(CommandSpec("hi", "says hi", hi),))},
    )
    async with harness(store, clock, GatedLLM(), extensions=mine, debounce=60) as h:
        await h.say(DM, "/hey", author="11")
        await h.say(DM, "/hi", author="11")
        assert [n for n, _ in h.router.commands_for("elsewhere")][-2:] == ["hey", "hi"]
        assert "hi" not in {n for n, _ in h.router.commands_for(BOT)}
    assert h.outlet.texts(DM) == [
        "hi from the extension",
        "Unknown command /hi. Send /help for the list.",
    ]


def test_a_plugin_for_two_bots_and_one_named_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A per-bot plugin serves two bots, a platform plugin loaded twice is loaded once; the
    same plugin both per bot and at the top level is one clear error."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "examples"))
    bots = [
        {"platform": "jsonl", "persona": "companion", "id": name, "plugins": ["personabot_dice"],
         "options": {"inbox": str(tmp_path / f"{name}.in"), "outbox": str(tmp_path / "out")}}
        for name in ("a", "b")
    ]  # fmt: skip
    settings = Settings.model_validate(
        {"llm": {"provider": "offline"}, "plugins": ["personabot_extras.jsonl"], "bots": bots}
    )
    app = App(settings)
    app.load_plugin("personabot_extras.jsonl")  # again, by hand: loaded once
    app.prepare()
    ext = app.extensions()
    assert [s.name for s in ext.for_bot("a").commands] == ["roll"]
    assert [s.name for s in ext.for_bot("b").commands] == ["roll"]
    assert ext.for_bot("c").commands == ()
    twice = settings.model_copy(update={"plugins": ["personabot_extras.jsonl", "personabot_dice"]})
    with pytest.raises(ConfigError, match=r"bots\[0\].plugins\[0\] 'personabot_dice': already in"):
        App(twice).prepare()


async def test_embedding_from_toml_and_async_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A program embeds personabot: ``App.from_toml`` with its own environment, then
    ``async with app as rt`` starts the runtime with the configured bots; it feeds one
    message in and the plugin provider's answer leaves through the plugin platform."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "examples"))
    outbox = tmp_path / "out.jsonl"
    config = tmp_path / "personabot.toml"
    config.write_text(
        'plugins = ["personabot_extras.jsonl", "personabot_extras.parrot"]\n'
        f'[storage]\nurl = "sqlite:///{tmp_path / "e.sqlite3"}"\n'
        '[llm]\nprovider = "parrot"\n'
        "[queue]\ndebounce_seconds = 0.05\nmax_wait_seconds = 1\nscan_interval_seconds = 0.1\n"
        '[[bots]]\nid = "j"\nplatform = "jsonl"\npersona = "companion"\ntoken_env = "J_TOKEN"\n'
        f'options = {{ inbox = "{tmp_path / "in.jsonl"}", outbox = "{outbox}" }}\n'
    )
    app = App.from_toml(config, environ={"J_TOKEN": "embedded-secret-value"})
    assert app.secrets.get("J_TOKEN") == "embedded-secret-value"
    assert app.plugins == ("personabot_extras.jsonl", "personabot_extras.parrot")
    async with app as rt:
        await rt.router(Inbound(ConversationKey("jsonl", "c9", None, "j"), "u", "U", "ahoy", "1"))
        async with asyncio.timeout(10):
            while not outbox.exists():  # noqa: ASYNC110 - a file another task writes
                await asyncio.sleep(0.02)
    assert [json.loads(x) for x in outbox.read_text().splitlines()] == [
        {"chat": "c9", "text": "Polly says: ahoy"}
    ]


async def test_a_middleware_that_passes_a_message_on_after_its_batch_ended_loses_nothing(
    store: BaseStore, clock: ManualClock
) -> None:
    """review23: inside a batch (a getUpdates answer), a middleware that returned and calls
    ``call_next`` later would have added its message to the batch after the batch was stored
    (and acknowledged): the message was lost. It is stored on its own instead."""
    later: list[asyncio.Task[None]] = []
    # The middleware passes the message on once the test has looked at the stored batch (a
    # fixed delay was shorter than that look on a loaded machine).
    go_on = asyncio.Event()

    def extend(app: App) -> None:
        @app.middleware
        async def deferred(event: Inbound, call_next: CallNext) -> None:
            async def pass_on() -> None:
                await go_on.wait()
                await call_next(event)

            later.append(asyncio.ensure_future(pass_on()))

    async with harness(store, clock, GatedLLM(), extend=extend, debounce=60) as h:
        async with h.router.batch():
            await h.router(Inbound(DM, "11", "Ann", "held back", "d1", True))
        assert await _stored(store) == []  # the batch had nothing to store
        go_on.set()
        await asyncio.wait_for(later[0], timeout=5)
        assert await _stored(store) == [("11", "held back")]


def test_extend_keeps_the_tool_sources_of_a_hand_built_extensions() -> None:
    """A source of run-time tools (an MCP server's kind) given to ``App.extend`` reaches the
    turns of every bot, and a per-bot one only its bot's (it was silently dropped)."""

    class Source:
        def __init__(self, name: str) -> None:
            self.name = name

        def tools_for(self, bot: str, persona: str) -> Sequence[Tool]:
            async def look(topic: str) -> str:
                """Look something up."""
                return topic

            return (Tool.from_function(look, name=self.name),)

    app = App(Settings.model_validate({}), Secrets({}))
    everyone, only_b = Source("everyone_tool"), Source("b_tool")
    app.extend(Extensions(per_bot={"b": Extensions().with_source(only_b)}).with_source(everyone))
    ext = app.extensions()
    names_a = [t.name for t in ext.for_bot("a").tools_for("a", "p").tools]
    names_b = [t.name for t in ext.for_bot("b").tools_for("b", "p").tools]
    assert names_a == ["everyone_tool"]
    assert sorted(names_b) == ["b_tool", "everyone_tool"]
