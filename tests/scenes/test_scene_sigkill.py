"""docs/scenes.md#turns: ``personabot run`` killed (SIGKILL) between two speakers of a scene, then
started again on the same store: the first line is on the platform once, never again; the
second speaker's line, lost with the process, is not made up later. SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from pathlib import Path

import pytest

from tests.adapters.test_persona_switch_e2e import _rows, db_url
from tests.adapters.test_telegram_e2e import _env, personabot_run
from tests.bot.test_cli import _run
from tests.fakes.messages_api import CannedReply, FakeMessagesAPI, RecordedRequest
from tests.fakes.telegram_api import FakeTelegramAPI, TgChat, TgUser

__all__ = ["db_url"]  # the store fixture: a SQLite file or a fresh PostgreSQL database

TOKEN = "5550019:AAScene-kill-token-abcdefghijklmnop"
ANN = TgUser(4343, "Ann")
GROUP = TgChat.supergroup(-1001000000077, "Tavern")


def _config(tmp_path: Path, telegram: str, claude: str, url: str) -> Path:
    people = "".join(
        f"""
[[personas]]
id = "{pid}"
name = "{name}"
description = "{about}"
first_message = ["Hello."]
model = "claude-test"
"""
        for pid, name, about in (
            ("alice", "Alice", "A cheerful baker."),
            ("bob", "Bob", "A grumpy blacksmith."),
        )
    )
    path = tmp_path / "personabot.toml"
    path.write_text(
        f"""
[storage]
url = {json.dumps(url)}

[llm]
base_url = {json.dumps(claude)}
max_retries = 0

[queue]
debounce_seconds = 0.2
max_wait_seconds = 2
scan_interval_seconds = 0.2
shutdown_grace_seconds = 1
lease_seconds = 3

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
strategy = "list"
max_speakers = 2
""",
        encoding="utf-8",
    )
    return path


def _asks(name: str, request: RecordedRequest) -> bool:
    return f'Write the next line of "{name}" only' in request.last_user_text


@pytest.mark.timeout(120)
async def test_sigkill_between_two_speakers_never_posts_twice(tmp_path: Path, db_url: str) -> None:
    never = asyncio.Event()  # Bob's answer never comes before the kill
    async with FakeTelegramAPI() as telegram, FakeMessagesAPI(reply_text="Mm.") as claude:
        telegram.add_bot(TOKEN, "tavern_bot")
        alice = iter(["Fresh bread today!", "Still fresh."])
        claude.answer_when(lambda r: _asks("Alice", r), lambda r: CannedReply(next(alice)))
        claude.answer_when(lambda r: _asks("Bob", r), CannedReply("Hmph."), gate=never)
        config = _config(tmp_path, telegram.base_url, claude.base_url, db_url)
        env = _env(TG_TOKEN=TOKEN, ANTHROPIC_API_KEY="sk-test-e2e")

        def lines() -> list[str]:
            return [c.visible_text for c in telegram.sent_messages(TOKEN, GROUP.id)]

        def bob_asked() -> bool:
            return any(_asks("Bob", r) for r in claude.requests)

        with contextlib.suppress(AssertionError):  # killed: its exit code is not 0
            async with personabot_run(tmp_path, config, env) as proc:
                await telegram.wait_for(lambda: telegram.polls_started(TOKEN), within=40)
                telegram.push_message(TOKEN, GROUP, ANN, "good morning, Alice and Bob")
                await telegram.wait_for(bob_asked, within=20, what="Bob's line being written")
                assert lines() == ["Alice: Fresh bread today!"]
                proc.send_signal(signal.SIGKILL)
                await proc.wait()
        polls = telegram.polls_started(TOKEN)
        never.set()  # from now on Bob would answer at once: nothing may ask him again
        async with personabot_run(tmp_path, config, env):
            # Restarted: it polls. A turn of the old burst run again (it would be, were its
            # messages still pending) would post before or with the next turn's lines, which
            # are checked below, whole and in order.
            await telegram.wait_for(
                lambda: telegram.polls_started(TOKEN) > polls, within=40, what="a new poll"
            )
            telegram.push_message(TOKEN, GROUP, ANN, "Bob?")
            await telegram.wait_for(lambda: len(lines()) >= 3, within=20, what="the next turn")
        rows = await _rows(db_url, "SELECT role, persona, text FROM messages ORDER BY id")
        # The operator's preview of the next line: who would speak, why, and its request.
        where = ["--platform", "telegram", "--chat", str(GROUP.id), "--bot", "tavern"]
        code, preview, err = await _run(
            ["prompt", "--config", str(config), *where, "--message", "and you, Bob?"],
            tmp_path,
            env=env,
        )
    assert code == 0, err
    assert "Bob speaks first (addressed)" in preview
    assert 'Write the next line of "Bob" only' in preview
    assert '"Alice" (character "alice"):' in preview and "Still fresh." in preview
    # The new turn: Bob (addressed), then the list's next; the killed line never came back.
    assert lines() == ["Alice: Fresh bread today!", "Bob: Hmph.", "Alice: Still fresh."]
    assert [tuple(r) for r in rows] == [
        ("user", None, "good morning, Alice and Bob"),
        ("assistant", "alice", "Fresh bread today!"),
        ("user", None, "Bob?"),
        ("assistant", "bob", "Hmph."),
        ("assistant", "alice", "Still fresh."),
    ]
