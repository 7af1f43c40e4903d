"""Issue 35, items 5 and 6: docs/deploy.md's install, followed step by step in a temporary
root, gives a service that runs and answers, from the built wheel, with no dev tools, the
dependency versions of deploy/constraints.txt, and no file outside its own ``personabot``
package.

The doc's shell blocks are run as written, with ``/etc/`` and ``/srv/`` moved under the
temporary root; ``useradd``, ``chown``, ``systemctl`` and ``journalctl`` are left out (they
change this machine). Then the installed unit's ``ExecStart`` is started with its
``WorkingDirectory`` and ``EnvironmentFile`` (paths moved the same way), and a Telegram
message (the local fake Bot API) is answered by the model (the local fake Messages API)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shlex
import signal
import stat
import subprocess
import tomllib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import tomlkit
import tomlkit.items
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.deploy.doc import ROOT, bash, blocks, env, moved, script, step
from tests.fakes.messages_api import FakeMessagesAPI
from tests.fakes.telegram_api import FakeTelegramAPI, TgChat, TgUser
from tests.processes import spawn

TOKEN = "5550035:AAdeploy-doc-token-abcdefghijklmnop"
API_KEY = "sk-ant-deploy-doc-test-key"


def test_the_doc_installs_the_wheel_alone_with_the_pinned_versions(installed: Path) -> None:
    venv = installed / "srv" / "personabot" / "venv"
    python = venv / "bin" / "python"
    probe = (
        "import importlib.util as u, importlib.metadata as m, json;"
        "print(json.dumps({'dev': [n for n in ('pytest', 'mypy', 'ruff', 'playwright',"
        " 'hypothesis') if u.find_spec(n)], 'versions': {d.metadata['Name'].lower(): d.version"
        " for d in m.distributions()}}))"
    )
    found = subprocess.run(
        [python, "-c", probe], capture_output=True, text=True, check=True, env=env()
    )
    seen = json.loads(found.stdout)
    assert seen["dev"] == []  # no test or lint tools in the service's environment
    pins = {}
    for line in (ROOT / "deploy" / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate():
                pins[canonicalize_name(req.name)] = str(req.specifier).removeprefix("==")
    versions = {canonicalize_name(k): v for k, v in seen["versions"].items()}
    assert {n: versions.get(n) for n in pins} == pins  # every pin, exactly
    # One top-level name: nothing of personabot's outside personabot/ (and its metadata and
    # script), so the public packages named `adapters` or `memory` are never overwritten.
    site = next((venv / "lib").glob("python3.*/site-packages"))
    record = next(site.glob("personabot-*.dist-info")) / "RECORD"
    tops = {line.split(",")[0].split("/", 1)[0] for line in record.read_text().splitlines()}
    # ..: bin/personabot; the .pth appends site-packages/personabot to sys.path (at the end).
    assert tops == {"personabot", "personabot-0.1.0.dist-info", "personabot-names.pth", ".."}
    assert not any((site / name).exists() for name in ("bot", "adapters", "memory"))
    # Compiled at install (the doc's --compile-bytecode): the service may not write the venv
    # (ProtectSystem=strict), so it would compile everything it imports at every start.
    for module in ("discord/ext/tasks/__init__.py", "aiogram/utils/i18n/core.py"):
        source = site / module
        assert list(source.parent.glob(f"__pycache__/{source.stem}.cpython-*.pyc")), module
    # The constraints file pins every runtime dependency within pyproject's ranges.
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for spec in map(Requirement, declared):
        name = canonicalize_name(spec.name)
        assert name in pins, f"{name} is not pinned in deploy/constraints.txt"
        assert Version(pins[name]) in spec.specifier, (name, pins[name], str(spec.specifier))


def test_the_installed_wheel_speaks_every_shipped_language(installed: Path) -> None:
    """The compiled catalogs are in the wheel (docs/i18n.md), read without Babel."""
    python = installed / "srv" / "personabot" / "venv" / "bin" / "python"
    probe = (
        "from bot.core.i18n import SHIPPED, load_texts;"
        "print('|'.join(load_texts(lang)('list the commands') for lang in SHIPPED))"
    )
    found = subprocess.run(
        [python, "-c", probe], capture_output=True, text=True, check=True, env=env()
    )
    assert found.stdout.strip() == (
        "list the commands|список команд|список команд|רשימת הפקודות|列出命令"
    )


def test_the_doc_config_and_the_unit_file_are_the_shipped_ones(installed: Path) -> None:
    (unit_block,) = blocks("ini")
    shipped = (ROOT / "deploy" / "personabot.service").read_text(encoding="utf-8")
    assert unit_block == shipped
    installed_unit = installed / "etc" / "systemd" / "system" / "personabot.service"
    assert installed_unit.read_text(encoding="utf-8") == shipped
    config = installed / "etc" / "personabot" / "personabot.toml"
    assert config.read_text(encoding="utf-8") == (ROOT / "config.example.toml").read_text(
        encoding="utf-8"
    )
    env_file = installed / "etc" / "personabot" / "env"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    for folder in (installed / "etc" / "personabot", installed / "srv" / "personabot" / "data"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o750, folder


def _unit(installed: Path) -> dict[str, str]:
    text = (installed / "etc" / "systemd" / "system" / "personabot.service").read_text()
    keys = {}
    for line in moved(text, installed).splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            keys[key] = value
    return keys


@contextlib.asynccontextmanager
async def _service(unit: dict[str, str], env: dict[str, str]) -> AsyncIterator[Path]:
    """The unit's ExecStart in its WorkingDirectory with its EnvironmentFile; SIGTERM at the
    end, and it must stop as the unit's comments say (exit 0)."""
    cwd = Path(unit["WorkingDirectory"])
    log = cwd.parent / "service.log"
    with log.open("wb") as out:
        proc = await spawn(
            *shlex.split(unit["ExecStart"]), cwd=cwd, env=env, stdout=out, stderr=out
        )
        try:
            yield log
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
            code = await asyncio.wait_for(proc.wait(), timeout=30)
    assert code == 0, log.read_text()


# Two cold starts of the installed environment (config check, then the service), each
# compiling what it imports: CPU-bound, ~30 s on a quiet 2-core machine, twice that when it
# is loaded; no wait on time in it.
@pytest.mark.timeout(150)
async def test_the_installed_unit_runs_a_bot_that_answers(installed: Path) -> None:
    unit = _unit(installed)
    assert unit["ReadWritePaths"] == unit["WorkingDirectory"]
    config = installed / "etc" / "personabot" / "personabot.toml"
    env_file = Path(unit["EnvironmentFile"])
    async with FakeTelegramAPI() as telegram, FakeMessagesAPI(reply_text="Hello from Mira") as llm:
        telegram.add_bot(TOKEN, "mira_bot")
        # The operator's edits (the doc's "then edit"): the model's address and a bot.
        doc = tomlkit.parse(config.read_text(encoding="utf-8"))
        llm_table = doc["llm"]
        assert isinstance(llm_table, tomlkit.items.Table)
        llm_table["base_url"], llm_table["max_retries"] = llm.base_url, 0
        doc["plugins"] = ["dice"]
        text = tomlkit.dumps(doc) + (
            f'\n[[bots]]\nplatform = "telegram"\npersona = "companion"\n'
            f'api_server = "{telegram.base_url}"\n'
        )
        config.write_text(text, encoding="utf-8")
        # A plugin package installed into the service's environment as the doc says.
        (plugin_line,) = (line for line in step("./my-plugin").splitlines() if line)
        plugin_line = plugin_line.split("#")[0].replace("./my-plugin", str(ROOT / "examples"))
        bash(script(plugin_line, installed), installed)
        env_file.write_text(f"ANTHROPIC_API_KEY={API_KEY}\nTELEGRAM_BOT_TOKEN={TOKEN}\n")
        out = bash(script(step("config check"), installed), installed)
        assert "configuration OK" in out and TOKEN not in out and API_KEY not in out
        assert "plugins: dice" in out
        service_env = env() | dict(
            line.split("=", 1) for line in env_file.read_text().splitlines() if line
        )
        async with _service(unit, service_env) as log:
            await telegram.wait_for(
                lambda: telegram.polls_started(TOKEN), within=60, what="polling"
            )
            user = TgUser(4242, "Ada")
            telegram.push_message(TOKEN, TgChat.private(user), user, "hello")
            await telegram.wait_for(lambda: telegram.sent_messages(TOKEN), what="the reply")
        (reply,) = telegram.sent_messages(TOKEN)
        assert reply.visible_text == "Hello from Mira"
        assert (Path(unit["WorkingDirectory"]) / "personabot.sqlite3").is_file()
        logged = log.read_text()
        assert TOKEN not in logged and API_KEY not in logged
