"""docs/personas.md's "from a downloaded card to a running Telegram bot in five commands", run
as written: the commands are read from the document and run as processes, in a directory
holding only a card the test wrote (``mira.png``), up to the bot answering a message.

Two things stand in for the outside world: the fake Bot API on 127.0.0.1 for Telegram (the
imported bot entry gets its ``api_server``: the one step the document does not have, since a
real bot talks to api.telegram.org) and the fake Messages API for Claude (``ANTHROPIC_BASE_URL``,
which the anthropic SDK reads). The exported variables get the test's token and key.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shlex
import shutil
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import tomlkit

from tests.adapters.test_telegram_e2e import _env
from tests.cards.cards import b64, png_bytes
from tests.fakes.messages_api import FakeMessagesAPI
from tests.fakes.telegram_api import FakeTelegramAPI, TgChat, TgUser
from tests.processes import spawn

DOC = Path(__file__).resolve().parents[2] / "docs" / "personas.md"
SECTION = "## From a downloaded card to a running Telegram bot"
TOKEN = "5550021:AAQuickstart-e2e-token-abcdefghijklmn"
# What the test gives each variable the recipe exports.
SECRETS = {"TELEGRAM_BOT_TOKEN": TOKEN, "ANTHROPIC_API_KEY": "sk-ant-test-quickstart"}
SASHA = TgUser(4242, "Sasha")


def _recipe() -> tuple[dict[str, str], list[list[str]]]:
    """The section's shell block: the variables it exports, and each ``personabot`` command's
    arguments (the commands are ``uv run personabot ...``)."""
    section = DOC.read_text(encoding="utf-8").split(SECTION, 1)[1].split("\n## ", 1)[0]
    assert section.lstrip().startswith("Five commands"), section[:200]
    block = re.search(r"^```sh\n(.*?)^```", section, re.M | re.S)
    assert block is not None, "the section has no sh block"
    lines = [line for line in block[1].splitlines() if line.strip()]
    assert len(lines) == 5, lines
    exported: dict[str, str] = {}
    commands: list[list[str]] = []
    for line in lines:
        words = shlex.split(line)
        if words[0] == "export":
            name, _, value = words[1].partition("=")
            exported[name] = value
        else:
            assert words[:3] == ["uv", "run", "personabot"], line
            commands.append(words[3:])
    return exported, commands


def _personabot() -> str:
    """The ``personabot`` console script of this environment (what ``uv run personabot`` runs)."""
    found = shutil.which("personabot", path=str(Path(sys.executable).parent))
    assert found is not None, "the personabot script is not installed (uv sync)"
    return found


def _downloaded_card(path: Path) -> None:
    """A card as SillyTavern and card sites write it: a PNG with a ``chara`` (V2) and a
    ``ccv3`` (V3) chunk."""
    data: dict[str, Any] = {
        "name": "Mira",
        "description": "{{char}} keeps the lighthouse on Kell Point and speaks softly.",
        "personality": "warm, curious",
        "scenario": "",
        "first_mes": "Oh! Come in, {{user}}, you're soaked.",
        "mes_example": "",
        "creator_notes": "",
        "system_prompt": "",
        "post_history_instructions": "",
        "alternate_greetings": [],
        "tags": ["lighthouse"],
        "creator": "someone",
        "character_version": "1.0",
        "extensions": {"talkativeness": "0.5"},
    }
    v2 = {"spec": "chara_card_v2", "spec_version": "2.0", "data": data}
    v3 = {
        "spec": "chara_card_v3",
        "spec_version": "3.0",
        "data": {**data, "group_only_greetings": [], "nickname": ""},
    }
    path.write_bytes(png_bytes({"chara": b64(v2), "ccv3": b64(v3)}))


async def _command(args: Sequence[str], cwd: Path, env: dict[str, str]) -> tuple[int, str, str]:
    proc = await spawn(
        _personabot(), *args, cwd=cwd, env=env,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), timeout=50)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@contextlib.asynccontextmanager
async def _running(args: Sequence[str], cwd: Path, env: dict[str, str]) -> AsyncIterator[None]:
    """A long-running command; on exit SIGTERM, and it must stop cleanly (exit code 0)."""
    with (cwd / "out.log").open("wb") as out, (cwd / "err.log").open("wb") as err:
        proc = await spawn(
            _personabot(), *args, cwd=cwd, env=env,
            stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=err,
        )  # fmt: skip
        try:
            yield
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
            code = await asyncio.wait_for(proc.wait(), timeout=20)
    assert code == 0, (cwd / "err.log").read_text()


# Three cold starts of the console script (exec'd, no zygote: the recipe's own commands),
# config check and run importing every library: CPU-bound, ~20 s on a quiet 2-core machine,
# three times that on a loaded one; nothing in it waits on time.
@pytest.mark.timeout(150)
async def test_the_five_command_recipe_runs_a_telegram_bot_from_a_card(tmp_path: Path) -> None:
    """Issue 18 acceptance: from a downloaded card to a running Telegram bot in five commands.
    The import creates personabot.toml with the persona and a Telegram bot reading
    $TELEGRAM_BOT_TOKEN and keeps the card in cards/; config check passes; run answers."""
    exported, (import_, check, run) = _recipe()
    assert set(exported) == set(SECRETS), "the recipe exports other variables than the test sets"
    assert (import_[:3], check, run) == (
        ["persona", "import", "mira.png"],
        ["config", "check"],
        ["run"],
    )
    _downloaded_card(tmp_path / "mira.png")
    async with FakeTelegramAPI() as telegram, FakeMessagesAPI(reply_text="Come in.") as claude:
        telegram.add_bot(TOKEN, "mira_bot")
        env = _env(**SECRETS, ANTHROPIC_BASE_URL=claude.base_url)

        code, out, err = await _command(import_, tmp_path, env)
        assert (code, err) == (0, ""), out
        config = tmp_path / "personabot.toml"
        assert "as persona 'mira' into personabot.toml" in out
        assert (tmp_path / "cards" / "mira.json").is_file()
        assert (tmp_path / "cards" / "mira.png").is_file()
        # The stand-in for api.telegram.org, on the [[bots]] entry the import wrote.
        document = tomlkit.parse(config.read_text(encoding="utf-8"))
        (bot,) = document["bots"]
        assert (bot["platform"], bot["persona"]) == ("telegram", "mira")
        bot["api_server"] = telegram.base_url
        config.write_text(tomlkit.dumps(document), encoding="utf-8")

        code, out, err = await _command(check, tmp_path, env)
        assert (code, err) == (0, ""), err
        assert "configuration OK" in out and "telegram-mira: telegram, persona mira" in out

        async with _running(run, tmp_path, env):
            await telegram.wait_for(lambda: telegram.polls_started(TOKEN), within=40, what="poll")
            telegram.push_message(TOKEN, TgChat.private(SASHA), SASHA, "hello, anyone home?")
            await telegram.wait_for(
                lambda: telegram.sent_messages(TOKEN, SASHA.id), within=30, what="the reply"
            )
    (reply,) = telegram.sent_messages(TOKEN, SASHA.id)
    assert reply.visible_text == "Come in."
    (request,) = claude.requests
    assert request.api_key == SECRETS["ANTHROPIC_API_KEY"]
    pin = request.system_blocks[0]["text"]
    assert pin.startswith("You are Mira. Speak only as Mira")  # the default framing
    assert "Mira's description:\nMira keeps the lighthouse on Kell Point and speaks softly." in pin
    assert pin.endswith("You opened this conversation with:\nOh! Come in, Sasha, you're soaked.")
    assert request.messages[-1]["content"][-1]["text"] == "hello, anyone home?"
