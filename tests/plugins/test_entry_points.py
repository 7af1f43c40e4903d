"""Plugins through the real entry points: ``personabot chat``, ``run`` and ``config check``
as processes, configured by TOML exactly as a user would (examples/ on PYTHONPATH)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from tests.fakes.telegram_api import FakeTelegramAPI, TgChat, TgUser
from tests.processes import DROPPED, clean_env, spawn

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
MIRA = "5550101:AAMira-plugin-token-abcdefghijklmnopq"
SASHA = "5550102:AASasha-plugin-token-abcdefghijklmno"
USER = TgUser(4343, "Ann")


def _env(*paths: Path, **extra: str) -> dict[str, str]:
    pythonpath = os.pathsep.join(str(p) for p in (*paths, EXAMPLES, ROOT))
    return clean_env(drop=(*DROPPED, "TELEGRAM_", "PYTHONPATH"), PYTHONPATH=pythonpath, **extra)


def _config(tmp_path: Path, body: str, *, top: str = "") -> Path:
    path = tmp_path / "personabot.toml"
    path.write_text(
        f"""{top}
[storage]
url = "sqlite:///{tmp_path / "bots.sqlite3"}"

[llm]
provider = "offline"

[queue]
debounce_seconds = 0.2
max_wait_seconds = 2
scan_interval_seconds = 0.2
shutdown_grace_seconds = 2

[[personas]]
id = "mira"
name = "Mira"
system = "You are Mira."
first_message = ["Hi, I'm Mira."]

[[personas]]
id = "sasha"
name = "Sasha"
system = "You are Sasha."
first_message = ["Hey, Sasha here."]
{body}""",
        encoding="utf-8",
    )
    return path


async def _cli(
    args: list[str], cwd: Path, env: dict[str, str], stdin: str = ""
) -> tuple[int, str, str]:
    proc = await spawn(
        sys.executable, "-m", "bot", *args, cwd=cwd, env=env,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(stdin.encode()), timeout=50)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@contextlib.asynccontextmanager
async def personabot_run(tmp_path: Path, config: Path, env: dict[str, str]) -> AsyncIterator[None]:
    """``python -m bot run``; on exit SIGTERM, and it must stop cleanly (exit code 0)."""
    with (tmp_path / "out.log").open("wb") as out, (tmp_path / "err.log").open("wb") as err:
        proc = await spawn(
            sys.executable, "-m", "bot", "run", "--config", str(config),
            cwd=tmp_path, env=env, stdout=out, stderr=err,
        )  # fmt: skip
        try:
            yield
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
            code = await asyncio.wait_for(proc.wait(), timeout=20)
    assert code == 0, (tmp_path / "err.log").read_text()


def _user_texts(db_path: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(db_path)) as db:
        rows = db.execute("SELECT text FROM messages WHERE role = 'user' ORDER BY id").fetchall()
    return [text for (text,) in rows]


DICE = (
    'plugins = ["personabot_dice"]\n\n'
    '[plugin_options.personabot_dice]\ndrop_pattern = "(?i)buy now"\n'
)


async def test_chat_plugin_command_answers_and_is_in_help_and_middleware_drops(
    tmp_path: Path,
) -> None:
    """``personabot chat`` with the example plugin from the TOML: /roll answers, /help lists
    it, and a message matching the configured pattern is never stored nor answered."""
    config = _config(tmp_path, "", top=DICE)
    stdin = "/roll 3d6\n/help\nBUY NOW cheap pills\nhello there\n"
    code, out, err = await _cli(["chat", "--config", str(config)], tmp_path, _env(), stdin)
    assert code == 0, err
    assert "Traceback" not in err
    rolls = [line for line in out.splitlines() if line.startswith("Mira: 🎲 ")]
    assert len(rolls) == 1, out
    total = int(rolls[0].rsplit("= ", 1)[1])
    assert 3 <= total <= 18
    assert "/roll - roll dice: /roll, /roll d20, /roll 3d6" in out
    replies = [line for line in out.splitlines() if line.startswith("Mira: [offline model]")]
    assert replies == ["Mira: [offline model] You said: hello there"]
    # Dropped before it was stored: the SQLite file holds only the message that went through.
    assert _user_texts(tmp_path / "bots.sqlite3") == ["hello there"]


async def test_an_installed_entry_point_plugin_loads_only_when_named(tmp_path: Path) -> None:
    """An entry point of group personabot.plugins is found by name; installing a package
    alone never changes a bot (/roll is unknown until the TOML names it)."""
    site = tmp_path / "site"
    dist = site / "personabot_dice-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: personabot-dice\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[personabot.plugins]\ndice = personabot_dice\n")
    env = _env(site)
    unnamed = _config(tmp_path, "")
    code, out, err = await _cli(["chat", "--config", str(unnamed)], tmp_path, env, "/roll\n")
    assert code == 0, err
    assert "Unknown command /roll" in out
    named = _config(tmp_path, "", top='plugins = ["dice"]\n')
    code, out, err = await _cli(["chat", "--config", str(named)], tmp_path, env, "/roll d20\n")
    assert code == 0, err
    assert "Mira: 🎲 " in out
    code, out, _ = await _cli(
        ["config", "check", "--file-only", "--config", str(named)], tmp_path, env
    )
    assert code == 0
    assert "plugins: dice" in out


async def test_run_with_a_plugin_platform_and_a_plugin_provider(tmp_path: Path) -> None:
    """``platform = "jsonl"`` and ``provider = "parrot"`` come from plugin modules named in
    the TOML; ``personabot run`` hosts the bot and the parrot answers through it."""
    inbox, outbox = tmp_path / "inbox.jsonl", tmp_path / "outbox.jsonl"
    top = 'plugins = ["personabot_extras.jsonl", "personabot_extras.parrot"]\n'
    body = (
        '\n[[bots]]\nplatform = "jsonl"\npersona = "mira"\n'
        f'options = {{ inbox = "{inbox}", outbox = "{outbox}" }}\n'
    )
    config = (
        _config(tmp_path, body, top=top)
        .read_text()
        .replace('provider = "offline"', 'provider = "parrot"\noptions = { prefix = "Polly:" }')
    )
    path = tmp_path / "personabot.toml"
    path.write_text(config)
    line = {"id": "1", "chat": "c1", "user": "u1", "name": "Ann", "text": "pieces of eight"}
    inbox.write_text(json.dumps(line) + "\n")
    async with personabot_run(tmp_path, path, _env()):
        async with asyncio.timeout(30):
            while not outbox.exists() or not outbox.read_text():  # noqa: ASYNC110 - a file
                await asyncio.sleep(0.05)
    (reply,) = [json.loads(x) for x in outbox.read_text().splitlines()]
    assert reply == {"chat": "c1", "text": "Polly: pieces of eight"}
    assert _user_texts(tmp_path / "bots.sqlite3") == ["pieces of eight"]


async def test_per_bot_plugin_applies_to_that_bot_only_with_its_menu(tmp_path: Path) -> None:
    """Two Telegram bots in one ``personabot run``: the plugin named in Mira's entry gives
    Mira /roll (answered, in /help and in setMyCommands) and its filter; Sasha has neither."""
    async with FakeTelegramAPI() as api:
        api.add_bot(MIRA, "mira_bot")
        api.add_bot(SASHA, "sasha_bot")
        bots = (
            f'\n[[bots]]\nplatform = "telegram"\npersona = "mira"\ntoken_env = "MIRA_TG"\n'
            f'api_server = "{api.base_url}"\nplugins = ["personabot_dice"]\n'
            'plugin_options = { personabot_dice = { drop_pattern = "(?i)buy now" } }\n'
            f'\n[[bots]]\nplatform = "telegram"\npersona = "sasha"\ntoken_env = "SASHA_TG"\n'
            f'api_server = "{api.base_url}"\n'
        )
        config = _config(tmp_path, bots)
        chat = TgChat.private(USER)
        async with personabot_run(tmp_path, config, _env(MIRA_TG=MIRA, SASHA_TG=SASHA)):
            await api.wait_for(
                lambda: api.polls_started(MIRA) and api.polls_started(SASHA),
                within=40,
                what="polling",
            )
            api.push_message(MIRA, chat, USER, "/roll d20")
            api.push_message(SASHA, chat, USER, "/roll d20")
            await api.wait_for(lambda: api.sent_messages(MIRA), what="Mira's /roll")
            await api.wait_for(lambda: api.sent_messages(SASHA), what="Sasha's answer")
            api.push_message(MIRA, chat, USER, "/help")
            await api.wait_for(lambda: len(api.sent_messages(MIRA)) == 2, what="Mira's /help")
            api.push_message(MIRA, chat, USER, "buy now!")
            api.push_message(SASHA, chat, USER, "buy now!")
            api.push_message(MIRA, chat, USER, "hello")
            await api.wait_for(lambda: len(api.sent_messages(MIRA)) == 3, what="Mira's reply")
            await api.wait_for(lambda: len(api.sent_messages(SASHA)) == 2, what="Sasha's reply")
        mira = [c.visible_text for c in api.sent_messages(MIRA)]
        sasha = [c.visible_text for c in api.sent_messages(SASHA)]
        assert mira[0].startswith("🎲 ")
        assert "/roll - roll dice" in mira[1]
        assert mira[2].startswith("[offline model] You said: hello")
        assert len(mira) == 3  # "buy now!" was dropped: no reply
        assert sasha[0] == "Unknown command /roll. Send /help for the list."
        assert sasha[1].startswith("[offline model] You said: buy now!")
        assert "roll" in {c["command"] for c in api.commands(MIRA)}
        assert "roll" not in {c["command"] for c in api.commands(SASHA)}
    with contextlib.closing(sqlite3.connect(tmp_path / "bots.sqlite3")) as db:
        rows = db.execute(
            "SELECT c.bot, m.text FROM messages m JOIN conversations c "
            "ON c.id = m.conversation_id WHERE m.role = 'user' ORDER BY c.bot, m.id"
        ).fetchall()
    # The two bots poll independently: only each bot's own order is defined.
    assert rows == [("telegram-mira", "hello"), ("telegram-sasha", "buy now!")]


async def test_unknown_platform_and_provider_list_what_is_installed(tmp_path: Path) -> None:
    """``config check`` (and every command that runs bots) names what is installed,
    plugins' platforms included."""
    body = '\n[[bots]]\nplatform = "slack"\npersona = "mira"\n'
    top = 'plugins = ["personabot_extras.jsonl"]\n'
    text = (
        _config(tmp_path, body, top=top)
        .read_text()
        .replace('provider = "offline"', 'provider = "my-llm"')
    )
    path = tmp_path / "personabot.toml"
    path.write_text(text)
    for command in (["config", "check", "--file-only"], ["run"], ["chat"]):
        code, out, err = await _cli([*command, "--config", str(path)], tmp_path, _env())
        assert code == 2, (command, out, err)
        assert "Traceback" not in err
        assert (
            "bots[0].platform: unknown platform 'slack' "
            "(installed: discord, jsonl, telegram; a plugin can add more)"
        ) in err
        assert (
            "llm.provider: unknown model provider 'my-llm' "
            "(installed: anthropic, offline, openai; a plugin can add more)"
        ) in err
        assert len(err.strip().splitlines()) == 2  # one line each (issue 35)


async def test_a_broken_plugin_is_one_clear_line_without_secrets(tmp_path: Path) -> None:
    """A plugin that cannot be imported, or whose setup raises, is a config error naming it:
    no traceback, and a secret in the plugin's message is masked."""
    secret = "tg-secret-abcdefghijklmnop123456"
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "leaky_plugin.py").write_text(
        "import os\n\n\ndef setup(app):\n"
        "    raise RuntimeError('cannot log in with ' + os.environ['LEAKY_TOKEN'])\n"
    )
    (plugins / "no_setup_plugin.py").write_text("X = 1\n")
    # review14: an async setup (discord.py's habit) registered nothing, listed as loaded.
    (plugins / "async_setup_plugin.py").write_text("async def setup(app):\n    pass\n")
    cases = {
        "no_such_plugin": "plugins[0] 'no_such_plugin': cannot be imported: "
        "ModuleNotFoundError: No module named 'no_such_plugin'",
        "leaky_plugin": "plugins[0] 'leaky_plugin': setup failed: RuntimeError: cannot log in",
        "no_setup_plugin": "plugins[0] 'no_setup_plugin': has no setup(app) function",
        "async_setup_plugin": "plugins[0] 'async_setup_plugin': setup(app) must be a plain def, "
        "not async def",
    }
    for name, expected in cases.items():
        config = _config(tmp_path, "", top=f'plugins = ["{name}"]\n')
        env = _env(plugins, LEAKY_TOKEN=secret)
        code, out, err = await _cli(["chat", "--config", str(config)], tmp_path, env, "hi\n")
        assert code == 2, (name, out, err)
        assert expected in err, err
        assert "Traceback" not in err
        assert secret not in err + out
        assert len(err.strip().splitlines()) == 1


async def test_a_failing_platform_or_provider_factory_is_one_line_without_secrets(
    tmp_path: Path,
) -> None:
    """review14: a plugin factory that raised ended ``run``/``chat`` with a traceback (exit 1)
    that printed the token in its message unmasked; one returning None crashed later."""
    secret = "99:factory-secret-abcdefghijklmnop"
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "bad_factories.py").write_text(
        "def broken_platform(entry, persona, secrets):\n"
        "    raise RuntimeError('cannot log in with ' + secrets.get(entry.token_variable))\n\n"
        "def broken_provider(llm, secrets):\n"
        "    raise KeyError('region')\n\n"
        "def setup(app):\n"
        "    app.platform('broken', broken_platform)\n"
        "    app.platform('nothing', lambda entry, persona, secrets: None)\n"
        "    app.provider('broken-llm', broken_provider)\n"
    )
    top = 'plugins = ["bad_factories"]\n'
    env = _env(plugins, BROKEN_BOT_TOKEN=secret)
    cases = [
        ("broken", "offline", ["run"], "bots[0].platform 'broken': the factory failed: "
         "RuntimeError: cannot log in with"),
        ("nothing", "offline", ["run"], "bots[0].platform 'nothing': the factory returned "
         "NoneType, not a BaseAdapter"),
        ("broken", "broken-llm", ["run"], "llm.provider 'broken-llm': the factory failed: "
         "KeyError: 'region'"),
        ("broken", "broken-llm", ["chat"], "llm.provider 'broken-llm': the factory failed"),
    ]  # fmt: skip
    for platform, provider, command, expected in cases:
        body = f'\n[[bots]]\nplatform = "{platform}"\npersona = "mira"\n'
        path = _config(tmp_path, body, top=top)
        path.write_text(path.read_text().replace('"offline"', f'"{provider}"'))
        code, out, err = await _cli([*command, "--config", str(path)], tmp_path, env, "hi\n")
        assert code == 2, (platform, provider, out, err)
        assert expected in err, err
        assert "Traceback" not in err and secret not in err + out
        # One line per problem, all at once (issue 35): `run` with a broken platform and a
        # broken provider names both.
        both = platform == "broken" and provider == "broken-llm" and command == ["run"]
        assert len(err.strip().splitlines()) == (2 if both else 1), err


async def test_a_secret_a_plugin_reads_is_masked_whatever_its_name(tmp_path: Path) -> None:
    """review14: only *_TOKEN, *_SECRET and *_API_KEY variables were masked; the key of the
    provider in docs/plugins.md (MY_LLM_KEY) showed in plain text in logs and errors."""
    secret = "my-llm-key-abcdefghijklmnop"
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "keyed_llm.py").write_text(
        "import logging\n\n\n"
        "def create_llm(llm, secrets):\n"
        "    key = secrets.get('MY_LLM_KEY')\n"
        "    logging.getLogger('personabot.keyed').warning('logging in with %s', key)\n"
        "    raise RuntimeError('the provider refused ' + key)\n\n\n"
        "def setup(app):\n"
        "    app.provider('keyed-llm', create_llm)\n"
    )
    path = _config(tmp_path, "", top='plugins = ["keyed_llm"]\n')
    path.write_text(path.read_text().replace('"offline"', '"keyed-llm"'))
    env = _env(plugins, MY_LLM_KEY=secret)
    code, out, err = await _cli(["chat", "--config", str(path)], tmp_path, env, "hi\n")
    assert code == 2, (out, err)
    assert "logging in with [redacted]" in err
    assert "the factory failed: RuntimeError: the provider refused [redacted]" in err
    assert secret not in err + out


async def test_options_of_a_plugin_that_is_not_loaded_are_a_config_error(tmp_path: Path) -> None:
    """review14: ``[plugin_options.personabot_dcie]`` (a typo) was ignored without a word: the
    operator's drop_pattern never applied and config check said OK."""
    top = (
        'plugins = ["personabot_dice"]\n\n'
        '[plugin_options.personabot_dcie]\ndrop_pattern = "(?i)buy now"\n'
    )
    body = (
        '\n[[bots]]\nplatform = "telegram"\npersona = "mira"\n'
        "plugin_options = { personabot_extras = { x = 1 } }\n"
    )
    config = _config(tmp_path, body, top=top)
    for command in (["config", "check", "--file-only"], ["run"]):
        code, out, err = await _cli([*command, "--config", str(config)], tmp_path, _env())
        assert code == 2, (out, err)
        assert (
            "plugin_options.personabot_dcie: no plugin of that name is loaded "
            "(plugins: personabot_dice)" in err
        )
        assert "bots[0].plugin_options.personabot_extras: not a plugin of this bot" in err
        # One line each, all in one round (issue 35): `run` also names the unset token.
        assert len(err.strip().splitlines()) == (2 if "--file-only" in command else 3)


def _readme_block(start: str) -> str:
    """The fenced code block of README.md whose first line begins with ``start``."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    at = text.index("```toml\n" + start) + len("```toml\n") if "=" in start else text.index(start)
    return text[at : text.index("```", at)]


async def test_the_readme_plugin_works_as_shown(tmp_path: Path) -> None:
    """README's ten-line plugin and the TOML line next to it, as a user would copy them."""
    package = tmp_path / "src" / "my_plugins"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    code = _readme_block("# my_plugins/dice.py")
    assert len([line for line in code.splitlines() if line.strip()]) <= 11
    (package / "dice.py").write_text(code, encoding="utf-8")
    toml = _readme_block('plugins = ["my_plugins.dice"]')
    config = _config(tmp_path, "", top=toml)
    env = _env(tmp_path / "src")
    code_, out, err = await _cli(
        ["chat", "--config", str(config)], tmp_path, env, "/roll 20\n/help\n"
    )
    assert code_ == 0, err
    (roll,) = [line for line in out.splitlines() if line.startswith("Mira: 🎲 ")]
    assert 1 <= int(roll.removeprefix("Mira: 🎲 ")) <= 20
    assert "/roll - roll a die: /roll or /roll 20" in out
