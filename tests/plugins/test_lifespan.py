"""Plugins' lifespans (``@app.lifespan``, bot/app/lifespans.py): a resource a plugin opens
when the bots start is closed when they stop, also when a later plugin fails to start or to
load, and in reverse order. Plugins are named in the TOML and ``personabot`` runs as a
process, as a user would run it."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.app import App
from bot.config import Secrets, Settings
from bot.core.clock import ManualClock
from bot.core.errors import ConfigError
from tests.fakes.llm import GatedLLM
from tests.fakes.media_source import FakeFiles, MediaOutlet
from tests.harness import PERSONA
from tests.plugins.test_entry_points import _cli, _config, _env, personabot_run
from tests.processes import Running, spawn

SECRET = "res-token-abcdefghijklmnop123456"


def _plugin(name: str, *, start: str = "", stop: str = "", setup: str = "") -> str:
    """A plugin module that holds a resource: it writes ``<name> open`` and ``<name> close``
    to the file ``events`` of its options, and ``/<name>`` says whether it is open now."""
    return f"""
import os
import pathlib


def setup(app):
    events = pathlib.Path(app.options["events"])
    state = {{"open": False}}
    {setup}

    def note(what):
        with events.open("a", encoding="utf-8") as file:
            file.write(f"{name} {{what}}\\n")

    @app.lifespan
    async def resource():
        {start}
        state["open"] = True
        note("open")
        try:
            yield
        finally:
            state["open"] = False
            note("close")
            {stop}

    @app.command("{name}", help="is the resource open?")
    async def ask(event, command):
        return "{name} is " + ("open" if state["open"] else "closed")
"""


BROKEN_START = "raise RuntimeError('cannot connect with ' + os.environ['RES_TOKEN'])"
BROKEN_STOP = "raise RuntimeError('the pool did not close')"


def _setup(
    tmp_path: Path, plugins: dict[str, str], body: str = ""
) -> tuple[Path, Path, dict[str, str]]:
    """The plugin modules, a TOML naming them in this order, the events file, the env."""
    folder = tmp_path / "plugins"
    folder.mkdir(exist_ok=True)
    for name, text in plugins.items():
        (folder / f"{name}.py").write_text(text, encoding="utf-8")
    events = tmp_path / "events.txt"
    top = f"plugins = {json.dumps(list(plugins))}\n" + "".join(
        f'\n[plugin_options.{name}]\nevents = "{events}"\n' for name in plugins
    )
    config = _config(tmp_path, body, top=top)
    return config, events, _env(folder, RES_TOKEN=SECRET)


def _events(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


async def test_resources_are_open_while_the_chat_runs_and_closed_in_reverse_order(
    tmp_path: Path,
) -> None:
    config, events, env = _setup(
        tmp_path, {"pool_a": _plugin("pool_a"), "pool_b": _plugin("pool_b")}
    )
    code, out, err = await _cli(
        ["chat", "--config", str(config)], tmp_path, env, "/pool_a\n/pool_b\n"
    )
    assert code == 0, err
    assert "Mira: pool_a is open" in out and "Mira: pool_b is open" in out
    assert _events(events) == ["pool_a open", "pool_b open", "pool_b close", "pool_a close"]


async def test_a_later_plugins_failed_startup_closes_what_was_opened(tmp_path: Path) -> None:
    """The process stops with one line naming the plugin (its secret masked); the resource
    the first plugin opened is closed again and no message is taken in."""
    config, events, env = _setup(
        tmp_path,
        {"pool_a": _plugin("pool_a"), "pool_b": _plugin("pool_b", start=BROKEN_START)},
    )
    code, out, err = await _cli(["chat", "--config", str(config)], tmp_path, env, "hello\n")
    assert code == 1, (out, err)
    assert err.strip().splitlines() == [
        "personabot: plugins[1] 'pool_b': startup failed: RuntimeError: cannot connect with "
        "[redacted]"
    ]
    assert SECRET not in out + err
    assert _events(events) == ["pool_a open", "pool_a close"]
    assert "You said" not in out


async def test_a_later_plugins_failed_setup_opens_nothing(tmp_path: Path) -> None:
    """Resources open when the bots start, never in ``setup``: a plugin that fails to load
    stops the process before any resource was opened (and so does ``config check``, which
    loads plugins but starts nothing)."""
    config, events, env = _setup(
        tmp_path,
        {"pool_a": _plugin("pool_a"), "pool_b": _plugin("pool_b", setup="raise KeyError('x')")},
    )
    code, out, err = await _cli(["chat", "--config", str(config)], tmp_path, env, "hello\n")
    assert code == 2, (out, err)
    assert "plugins[1] 'pool_b': setup failed: KeyError: 'x'" in err
    assert _events(events) == []


async def test_a_failed_start_after_the_plugins_started_closes_their_resources(
    tmp_path: Path,
) -> None:
    """The plugins started, then the runtime could not (its health port is taken): the
    process stops with that error and the plugins' resources are closed again."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        body = f'\n[observability]\nlisten = "127.0.0.1:{port}"\n'
        config, events, env = _setup(
            tmp_path, {"pool_a": _plugin("pool_a"), "pool_b": _plugin("pool_b")}, body
        )
        code, out, err = await _cli(["chat", "--config", str(config)], tmp_path, env, "hello\n")
    assert code == 1, (out, err)
    assert f"observability.listen: cannot listen on 127.0.0.1:{port}" in err
    assert "Traceback" not in err
    assert _events(events) == ["pool_a open", "pool_b open", "pool_b close", "pool_a close"]


async def test_every_resource_closes_even_when_a_later_ones_close_raises(tmp_path: Path) -> None:
    config, events, env = _setup(
        tmp_path,
        {"pool_a": _plugin("pool_a"), "pool_b": _plugin("pool_b", stop=BROKEN_STOP)},
    )
    code, out, err = await _cli(["chat", "--config", str(config)], tmp_path, env, "/pool_a\n")
    assert code == 0, err
    assert "Mira: pool_a is open" in out
    assert _events(events) == ["pool_a open", "pool_b open", "pool_b close", "pool_a close"]
    assert "plugins[1] 'pool_b': shutdown failed: RuntimeError: the pool did not close" in err
    assert "Traceback" not in err


async def test_a_close_that_awaits_its_own_cancelled_task_is_a_failed_close_not_a_crash(
    tmp_path: Path,
) -> None:
    """A common slip in a plugin: ``task.cancel(); await task`` after ``yield`` raises
    ``CancelledError`` out of its close. That is the plugin's failed close (logged, the
    next close still runs, exit 0), not a traceback that ends the chat with exit code 1."""
    awaits_cancelled = (
        "import asyncio; task = asyncio.ensure_future(asyncio.sleep(60)); task.cancel(); await task"
    )
    config, events, env = _setup(
        tmp_path,
        {"pool_a": _plugin("pool_a"), "pool_b": _plugin("pool_b", stop=awaits_cancelled)},
    )
    code, out, err = await _cli(["chat", "--config", str(config)], tmp_path, env, "/pool_a\n")
    assert code == 0, err
    assert "Mira: pool_a is open" in out
    assert _events(events) == ["pool_a open", "pool_b open", "pool_b close", "pool_a close"]
    assert "plugins[1] 'pool_b': shutdown failed: CancelledError" in err
    assert "Traceback" not in err


async def test_a_start_that_awaits_its_own_cancelled_task_is_a_failed_start(
    tmp_path: Path,
) -> None:
    awaits_cancelled = (
        "import asyncio; task = asyncio.ensure_future(asyncio.sleep(60)); task.cancel(); await task"
    )
    config, events, env = _setup(
        tmp_path,
        {"pool_a": _plugin("pool_a"), "pool_b": _plugin("pool_b", start=awaits_cancelled)},
    )
    code, out, err = await _cli(["chat", "--config", str(config)], tmp_path, env, "hello\n")
    assert code == 1, (out, err)
    assert err.strip().splitlines() == [
        "personabot: plugins[1] 'pool_b': startup failed: CancelledError:"
    ]
    assert _events(events) == ["pool_a open", "pool_a close"]


async def test_run_opens_at_start_and_closes_after_sigterm_and_config_check_opens_nothing(
    tmp_path: Path,
) -> None:
    inbox, outbox = tmp_path / "inbox.jsonl", tmp_path / "outbox.jsonl"
    body = (
        '\n[[bots]]\nplatform = "jsonl"\npersona = "mira"\n'
        f'options = {{ inbox = "{inbox}", outbox = "{outbox}" }}\n'
    )
    config, events, env = _setup(tmp_path, {"pool_a": _plugin("pool_a")}, body)
    text = config.read_text().replace(
        'plugins = ["pool_a"]', 'plugins = ["pool_a", "personabot_extras.jsonl"]'
    )
    config.write_text(text)
    code, out, err = await _cli(["config", "check", "--config", str(config)], tmp_path, env)
    assert code == 0, err
    assert "configuration OK" in out
    assert _events(events) == []  # setup ran, nothing started
    line = {"id": "1", "chat": "c1", "user": "u1", "name": "Ann", "text": "/pool_a"}
    inbox.write_text(json.dumps(line) + "\n")
    async with personabot_run(tmp_path, config, env):
        async with asyncio.timeout(30):
            while not outbox.exists() or not outbox.read_text():  # noqa: ASYNC110 - a file
                await asyncio.sleep(0.05)
        assert _events(events) == ["pool_a open"]
    (reply,) = [json.loads(x) for x in outbox.read_text().splitlines()]
    assert reply == {"chat": "c1", "text": "pool_a is open"}
    assert _events(events) == ["pool_a open", "pool_a close"]


async def _run_on_jsonl(tmp_path: Path, pool_b: str, command: str) -> tuple[Running, Path, Path]:
    """``personabot run`` hosting a JSONL bot with plugins pool_a and ``pool_b`` (stderr
    piped), its inbox holding one ``command`` from Ann: the process, the events file and the
    outbox."""
    inbox, outbox = tmp_path / "inbox.jsonl", tmp_path / "outbox.jsonl"
    body = (
        '\n[[bots]]\nplatform = "jsonl"\npersona = "mira"\n'
        f'options = {{ inbox = "{inbox}", outbox = "{outbox}" }}\n'
    )
    config, events, env = _setup(tmp_path, {"pool_a": _plugin("pool_a"), "pool_b": pool_b}, body)
    text = config.read_text().replace(
        'plugins = ["pool_a", "pool_b"]',
        'plugins = ["pool_a", "pool_b", "personabot_extras.jsonl"]',
    )
    config.write_text(text)
    line = {"id": "1", "chat": "c1", "user": "u1", "name": "Ann", "text": command}
    inbox.write_text(json.dumps(line) + "\n")
    proc = await spawn(
        sys.executable, "-m", "bot", "run", "--config", str(config),
        cwd=tmp_path, env=env, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    return proc, events, outbox


async def test_sigterm_while_a_lifespan_never_yields_stops_run_and_closes_the_others(
    tmp_path: Path,
) -> None:
    """A lifespan whose start never returns (a connect without a timeout): SIGTERM still
    stops ``personabot run`` (exit 0, not a hang), the resource opened before it is closed
    and no message is answered."""
    hangs = 'note("starting"); import asyncio; await asyncio.Event().wait()'
    proc, events, outbox = await _run_on_jsonl(tmp_path, _plugin("pool_b", start=hangs), "/pool_a")
    try:
        async with asyncio.timeout(30):
            while "pool_b starting" not in _events(events):  # noqa: ASYNC110 - a file
                await asyncio.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), timeout=10)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, err.decode()
    assert _events(events) == ["pool_a open", "pool_b starting", "pool_a close"]
    assert not outbox.exists() or not outbox.read_text()


async def test_sigterm_while_a_lifespan_never_yields_stops_chat_and_closes_the_others(
    tmp_path: Path,
) -> None:
    """``personabot chat`` as above: SIGTERM while a lifespan hangs in its start closes the
    resource opened before it (not a kill by the signal), and says the input went unread."""
    hangs = 'note("starting"); import asyncio; await asyncio.Event().wait()'
    config, events, env = _setup(
        tmp_path, {"pool_a": _plugin("pool_a"), "pool_b": _plugin("pool_b", start=hangs)}
    )
    proc = await spawn(
        sys.executable, "-m", "bot", "chat", "--config", str(config),
        cwd=tmp_path, env=env, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        async with asyncio.timeout(30):
            while "pool_b starting" not in _events(events):  # noqa: ASYNC110 - a file
                await asyncio.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, err = await asyncio.wait_for(proc.communicate(b"hello\n"), timeout=10)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 1, (out, err)
    assert _events(events) == ["pool_a open", "pool_b starting", "pool_a close"]
    assert "Stopped: input after line 0 was not read." in out.decode()
    assert "Traceback" not in err.decode()


async def test_sigterm_while_a_lifespan_never_yields_stops_web_and_closes_the_others(
    tmp_path: Path,
) -> None:
    """``personabot web`` (its playground starts the plugins' lifespans) as above."""
    hangs = 'note("starting"); import asyncio; await asyncio.Event().wait()'
    config, events, env = _setup(
        tmp_path, {"pool_a": _plugin("pool_a"), "pool_b": _plugin("pool_b", start=hangs)}
    )
    env["PERSONABOT_WEB_TOKEN"] = "web-token-0123456789abcdef"
    proc = await spawn(
        sys.executable, "-m", "bot", "web", "--config", str(config), "--listen", "127.0.0.1:0",
        cwd=tmp_path, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        async with asyncio.timeout(30):
            while "pool_b starting" not in _events(events):  # noqa: ASYNC110 - a file
                await asyncio.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), timeout=10)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, err.decode()
    assert _events(events) == ["pool_a open", "pool_b starting", "pool_a close"]
    assert "Traceback" not in err.decode()


async def test_a_second_sigint_ends_run_when_a_close_never_returns(tmp_path: Path) -> None:
    """A close that never returns (a pool waiting for a connection that is gone) keeps the
    process in its shutdown; a second SIGINT aborts as documented (bot/app/signals.py): the
    hanging close is given up, the next one still runs, exit code 130."""
    hangs = "import asyncio; await asyncio.Event().wait()"
    proc, events, outbox = await _run_on_jsonl(tmp_path, _plugin("pool_b", stop=hangs), "/pool_b")
    try:
        async with asyncio.timeout(30):
            while not outbox.exists() or not outbox.read_text():  # noqa: ASYNC110 - a file
                await asyncio.sleep(0.05)
            proc.send_signal(signal.SIGINT)
            while "pool_b close" not in _events(events):  # noqa: ASYNC110 - a file
                await asyncio.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = await asyncio.wait_for(proc.communicate(), timeout=10)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 130, err.decode()
    assert _events(events) == ["pool_a open", "pool_b open", "pool_b close", "pool_a close"]
    assert "plugins[1] 'pool_b': shutdown given up (second SIGINT)" in err.decode()
    assert "Traceback" not in err.decode()


async def test_a_runtime_inside_another_shares_the_resources(tmp_path: Path) -> None:
    """The console's playground runs a second runtime of the same App inside ``run``: the
    resources open once, at the first start, and close at the last stop."""
    seen: list[str] = []
    settings = Settings.model_validate({"storage": {"url": f"sqlite:///{tmp_path / 'db'}"}})
    clock = ManualClock(1000.0)
    app = App(settings, Secrets({}), clock=clock, llm=GatedLLM())

    @app.lifespan
    async def resource() -> AsyncIterator[None]:
        seen.append("open")
        yield
        seen.append("close")

    outlet = MediaOutlet(clock, FakeFiles(clock))
    async with app.running({"a": (PERSONA, outlet)}):
        async with app.running({"b": (PERSONA, outlet)}):
            assert seen == ["open"]
        assert seen == ["open"]
    assert seen == ["open", "close"]


async def test_config_check_refuses_a_lifespan_run_would_refuse(tmp_path: Path) -> None:
    """``def`` instead of ``async def`` (a plain generator): ``run`` cannot start it (no
    async context manager), so ``config check`` refuses it too, naming the plugin."""
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "sync_pool.py").write_text(
        "def setup(app):\n    @app.lifespan\n    def pool():\n        yield\n",
        encoding="utf-8",
    )
    body = (
        '\n[[bots]]\nplatform = "jsonl"\npersona = "mira"\n'
        f'options = {{ inbox = "{tmp_path / "in"}", outbox = "{tmp_path / "out"}" }}\n'
    )
    top = 'plugins = ["sync_pool", "personabot_extras.jsonl"]\n'
    config = _config(tmp_path, body, top=top)
    code, out, err = await _cli(
        ["config", "check", "--config", str(config)], tmp_path, _env(folder)
    )
    assert code == 2, (out, err)
    assert "plugins[0] 'sync_pool': lifespan 'setup.<locals>.pool': must be an async" in err


def test_a_lifespan_must_yield() -> None:
    """A plain ``async def`` would open and never close: refused when it is registered."""
    app = App(Settings.model_validate({}), Secrets({}))

    async def opens_only() -> None:
        pass

    with pytest.raises(ConfigError, match="must be an async generator function that yields"):
        app.lifespan(opens_only)


async def test_the_example_journal_holds_every_reply_when_the_chat_ends(tmp_path: Path) -> None:
    """examples/personabot_extras/journal.py: a file opened with the bots, a line per reply,
    complete once the process stopped."""
    journal = tmp_path / "replies.jsonl"
    top = (
        'plugins = ["personabot_extras.journal"]\n\n'
        f'[plugin_options."personabot_extras.journal"]\npath = "{journal}"\n'
    )
    config = _config(tmp_path, "", top=top)
    code, out, err = await _cli(
        ["chat", "--config", str(config)], tmp_path, _env(), "hello\nhow are you?\n"
    )
    assert code == 0, err
    lines = [json.loads(line) for line in journal.read_text(encoding="utf-8").splitlines()]
    assert [line["reply"].splitlines()[0] for line in lines] == [
        "[offline model] You said: hello",
        "[offline model] You said: how are you?",
    ]
    assert "Mira: [offline model] You said: how are you?" in out
    assert {line["persona"] for line in lines} == {"mira"}
