"""Issue 38 item 2: a provider per persona and per task, and a fallback that answers only when
the primary is unavailable (bot/llm/router.py, docs/providers.md#several-providers). The real
anthropic and openai SDKs against the fake servers; the router built from the TOML by the App,
as ``personabot run`` builds it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Final

import pytest

from adapters.telegram.adapter import TelegramAdapter
from bot.app import App
from bot.app.build import runtime
from bot.app.cli import summary
from bot.config import Secrets, Settings, load_settings
from bot.core.errors import ConfigError, ModelUnavailable, RequestRejected
from bot.core.llm import ChatMessage, ModelRequest, ModelRoute, TextBlock
from bot.llm.router import ProviderRouter
from tests.fakes.messages_api import FakeMessagesAPI
from tests.fakes.openai_api import FakeOpenAIAPI
from tests.fakes.telegram_api import FakeTelegramAPI, TgChat, TgUser

LOCAL: Final = "llama3.2:3b"
CLAUDE: Final = "claude-haiku-5-5"
TOKENS: Final = {
    "claude-bot": "5550101:AAClaudeBot-token-abcdefghijklmnopq",
    "local-bot": "5550102:AALocalBot-token-abcdefghijklmnopqr",
}


def _toml(tmp_path: Path, claude: str, local: str, extra: str = "") -> Path:
    path = tmp_path / "personabot.toml"
    path.write_text(
        f"""
[storage]
url = "sqlite:///{tmp_path / "bot.sqlite3"}"

[llm]
base_url = "{claude}"
max_retries = 0

[llm.providers.local]
provider = "openai"
base_url = "{local}"

[queue]
debounce_seconds = 0.2
scan_interval_seconds = 0.2

[[personas]]
id = "claude"
name = "Cleo"
system = "You are Cleo."
first_message = ["Hi"]
model = "{CLAUDE}"

[[personas]]
id = "local"
name = "Lola"
system = "You are Lola."
first_message = ["Hi"]
model = "{LOCAL}"
provider = "local"
fallback = {{ model = "{CLAUDE}", provider = "default" }}

[[bots]]
platform = "telegram"
id = "claude-bot"
persona = "claude"
token_env = "CLAUDE_BOT_TOKEN"

[[bots]]
platform = "telegram"
id = "local-bot"
persona = "local"
token_env = "LOCAL_BOT_TOKEN"
{extra}""",
        encoding="utf-8",
    )
    return path


def _request(provider: str, fallback: ModelRoute | None = None) -> ModelRequest:
    return ModelRequest(
        model=LOCAL if provider == "local" else CLAUDE,
        system=(TextBlock("You are Lola."),),
        messages=(ChatMessage.of("user", "hello"),),
        provider=provider,
        fallback=fallback,
    )


def test_each_persona_and_its_memory_tasks_name_who_answers(tmp_path: Path) -> None:
    path = _toml(tmp_path, "http://127.0.0.1:9/", "http://127.0.0.1:9/v1")
    settings = load_settings(path)
    claude, local = settings.personas
    assert str(settings.routes(claude).reply) == f"{CLAUDE} on default"
    routes = settings.routes(local)
    assert str(routes.reply) == f"{LOCAL} on local"
    assert str(routes.fallback) == f"{CLAUDE} on default"
    assert str(routes.tasks) == f"{LOCAL} on local"  # no summary_model: the persona's
    shown = summary(settings)
    assert "model provider local: openai (base_url http://127.0.0.1:9/v1)" in shown
    assert f"local: Lola, replies {LOCAL} on local, fallback {CLAUDE} on default" in shown
    # A summary model of its own without a provider is [llm]'s; with one, that provider's.
    path.write_text(path.read_text() + f'\n[memory]\nsummary_model = "{CLAUDE}"\n')
    assert str(load_settings(path).routes(local).tasks) == f"{CLAUDE} on default"
    path.write_text(path.read_text() + 'provider = "local"\n')
    assert str(load_settings(path).routes(local).tasks) == f"{CLAUDE} on local"


def test_a_provider_nobody_configured_is_a_config_error(tmp_path: Path) -> None:
    path = _toml(tmp_path, "http://127.0.0.1:9/", "http://127.0.0.1:9/v1")
    path.write_text(
        path.read_text().replace('provider = "local"\nfallback', 'provider = "loca"\nfallback')
    )
    with pytest.raises(ConfigError, match=r"personas\[1\]\.provider: no provider 'loca'"):
        load_settings(path)


async def test_requests_go_to_their_provider_and_fall_back_only_when_it_is_unavailable() -> None:
    async with (
        FakeMessagesAPI(reply_text="from Claude") as claude,
        FakeOpenAIAPI(reply_text="from the local model") as local,
    ):
        settings = Settings.model_validate(
            {
                "llm": {
                    "base_url": claude.base_url,
                    "max_retries": 0,
                    "providers": {
                        "local": {"provider": "openai", "base_url": local.api_url, "max_retries": 0}
                    },
                },
                "personas": [{"id": "p", "name": "P", "system": "s", "first_message": ["Hi"]}],
            }
        )
        llm = App(settings, Secrets({"ANTHROPIC_API_KEY": "sk-test"})).build_llm()
        assert isinstance(llm, ProviderRouter)
        try:
            fallback = ModelRoute("default", CLAUDE)
            answer = await llm.complete(_request("local", fallback))
            assert answer.text == "from the local model" and answer.model == LOCAL
            assert (local.call_count, claude.call_count) == (1, 0)

            local.fail_next(status=503)  # unavailable: the fallback answers, and says so
            answer = await llm.complete(_request("local", fallback))
            assert answer.text == "from Claude" and answer.model == CLAUDE
            assert claude.last_request.body["model"] == CLAUDE

            local.fail_next(status=400)  # rejected: never sent elsewhere
            with pytest.raises(RequestRejected):
                await llm.complete(_request("local", fallback))
            assert claude.call_count == 1

            local.fail_next(status=503)  # no fallback named: the failure stands
            with pytest.raises(ModelUnavailable):
                await llm.complete(_request("local"))

            pieces: list[str] = []
            local.fail_next(status=503)  # a stream that fails before any text falls back
            streamed = await llm.stream(_request("local", fallback), pieces.append)
            assert streamed.text == "from Claude" and "".join(pieces) == "from Claude"
        finally:
            await llm.aclose()


async def test_one_process_answers_a_claude_persona_and_a_local_persona(tmp_path: Path) -> None:
    """Two bots of one `personabot` runtime, one persona on Claude and one on an
    OpenAI-compatible endpoint: each message is answered once, by its persona's model."""
    async with (
        FakeTelegramAPI() as tg,
        FakeMessagesAPI(reply_text="Cleo here.") as claude,
        FakeOpenAIAPI(reply_text="Lola here.") as local,
    ):
        for key, token in TOKENS.items():
            tg.add_bot(token, key.replace("-", "_"), key)
        settings = load_settings(_toml(tmp_path, claude.base_url, local.api_url))
        secrets = Secrets({"ANTHROPIC_API_KEY": "sk-test"})
        app = App(settings, secrets)
        llm = app.build_llm()
        adapters = {
            key: (
                settings.persona(key.split("-")[0]),
                TelegramAdapter(bot_key=key, token=TOKENS[key], api_server=tg.base_url),
            )
            for key in TOKENS
        }
        sasha = TgUser(7001, "Sasha")
        chat = TgChat.private(sasha)
        async with runtime(settings, llm=llm, adapters=adapters) as rt:
            tasks = [asyncio.create_task(a.run(rt.router)) for _, a in adapters.values()]
            try:
                for key, token in TOKENS.items():
                    await tg.wait_for(lambda t=token: tg.polls_started(t), what=f"{key} polling")
                    tg.push_message(token, chat, sasha, f"hello {key}")
                for token in TOKENS.values():
                    await tg.wait_for(
                        lambda t=token: tg.sent_messages(t, chat.id), what="a reply", within=30
                    )
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                for _, adapter in adapters.values():
                    await adapter.aclose()
                await llm.aclose()
        [cleo] = tg.sent_messages(TOKENS["claude-bot"], chat.id)
        [lola] = tg.sent_messages(TOKENS["local-bot"], chat.id)
        assert (cleo.visible_text, lola.visible_text) == ("Cleo here.", "Lola here.")
        replies = [r for r in claude.requests if "hello claude-bot" in str(r.body)]
        assert len(replies) == 1 and replies[0].body["model"] == CLAUDE
        calls = [r for r in local.requests if "hello local-bot" in str(r.body)]
        assert len(calls) == 1 and calls[0].body["model"] == LOCAL
        assert not any("hello local-bot" in str(r.body) for r in claude.requests)


def test_credentials_in_every_configured_url_are_redacted_from_logs(tmp_path: Path) -> None:
    """Review 38: a named provider's and an MCP server's URL credentials join those of [llm]
    in the list the log filter redacts."""
    path = tmp_path / "p.toml"
    path.write_text(
        """
[llm]
provider = "openai"
base_url = "http://u:DEFAULTPASSWORD123@127.0.0.1:9/v1"

[llm.providers.loc]
provider = "openai"
base_url = "http://u:NAMEDPASSWORD12345@127.0.0.1:9/v1?api_key=NAMEDQUERYKEY12345"

[[mcp_servers]]
name = "zap"
url = "https://u:MCPPASSWORD123456@mcp.example/mcp?token=MCPQUERYTOKEN12345"
tools = ["x"]
effects = "read_only"
""",
        encoding="utf-8",
    )
    settings = load_settings(path)
    found = settings.credentials()
    for secret in (
        "DEFAULTPASSWORD123",
        "NAMEDPASSWORD12345",
        "NAMEDQUERYKEY12345",
        "MCPPASSWORD123456",
        "MCPQUERYTOKEN12345",
    ):
        assert secret in found
    shown = summary(settings)
    assert "MCP servers (1):" in shown and "zap: HTTP" in shown
    assert not any(secret in shown for secret in found)


def test_a_fallback_that_is_the_primary_itself_is_refused(tmp_path: Path) -> None:
    path = _toml(tmp_path, "http://127.0.0.1:9/", "http://127.0.0.1:9/v1")
    text = path.read_text().replace(
        f'fallback = {{ model = "{CLAUDE}", provider = "default" }}',
        f'fallback = {{ model = "{LOCAL}" }}',
    )
    path.write_text(text)
    with pytest.raises(ConfigError, match=r"personas\[1\]\.fallback: the same model"):
        load_settings(path)
