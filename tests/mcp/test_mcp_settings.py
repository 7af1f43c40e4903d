"""``[[mcp_servers]]``: what the settings accept and refuse, what ``run`` needs from the
environment, and what ``/healthz`` says about the servers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bot.app.build import mcp_specs
from bot.app.health import HealthServer
from bot.config import RunNeeds, Secrets, Settings, load_settings
from bot.core.errors import ConfigError
from bot.mcp import Http, Stdio
from bot.metrics import Metrics

STDIO: dict[str, Any] = {
    "name": "files",
    "command": "files-server",
    "args": ["--root", "/srv"],
    "env": {"FILES_TOKEN": "MY_FILES_TOKEN"},
    "tools": ["read", "write"],
    "effects": "read_only",
    "tool_effects": {"write": "effectful"},
}
HTTP: dict[str, Any] = {
    "name": "search",
    "url": "https://search.example/mcp",
    "headers": {"Authorization": "SEARCH_AUTH"},
    "tools": ["query"],
    "effects": "read_only",
    "personas": ["companion"],
}


def problems(tmp_path: Path, toml: str, environ: dict[str, str] | None = None) -> list[str]:
    path = tmp_path / "personabot.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError) as caught:
        load_settings(path, needs=None if environ is None else Secrets(environ))
    return caught.value.problems


def test_a_stdio_and_an_http_server_become_specs_with_secrets_from_the_environment() -> None:
    settings = Settings(mcp_servers=[STDIO, HTTP])
    secrets = Secrets({"MY_FILES_TOKEN": "files-secret-1", "SEARCH_AUTH": "Bearer search-2"})
    files, search = mcp_specs(settings, secrets)
    assert isinstance(files.transport, Stdio)
    assert (files.transport.command, files.transport.args) == ("files-server", ("--root", "/srv"))
    assert dict(files.transport.env) == {"FILES_TOKEN": "files-secret-1"}
    assert dict(files.tools) == {"read": "read_only", "write": "effectful"}
    assert isinstance(search.transport, Http)
    assert dict(search.transport.headers) == {"Authorization": "Bearer search-2"}
    assert search.serves("any-bot", "companion") and not search.serves("any-bot", "other")
    assert "files-secret-1" not in repr(files) and "search-2" not in repr(search)
    # Their variables are secrets: redacted from the logs like the bots' tokens.
    assert {"MY_FILES_TOKEN", "SEARCH_AUTH"} <= set(settings.secret_names())


def test_an_unset_variable_is_named_by_config_check_and_refused_at_start() -> None:
    settings = Settings(mcp_servers=[STDIO, HTTP])
    needs = RunNeeds.of(settings).problems(Secrets({"SEARCH_AUTH": "x" * 10}), empty_ok=True)
    assert [p for p in needs if "ANTHROPIC_API_KEY" not in p] == [
        "mcp_servers[0] (files): MY_FILES_TOKEN is not set in the environment"
    ]
    with pytest.raises(ConfigError) as caught:
        mcp_specs(settings, Secrets({"MY_FILES_TOKEN": "files-secret-1"}))
    assert list(caught.value.problems) == [
        "mcp_servers[1] (search): SEARCH_AUTH is not set in the environment"
    ]


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({**STDIO, "url": "https://x.example/mcp"}, "give command (stdio) or url"),
        ({**STDIO, "colour": "red"}, "colour: unknown key"),
        ({**HTTP, "headers": {"Authorization": "Bearer sk-live-abc:def"}}, "must name an env"),
        ({**STDIO, "tools": []}, "tools"),
        ({**STDIO, "tool_effects": {"delete": "effectful"}}, "delete not in tools"),
        ({**STDIO, "effects": "harmless"}, "effects"),
        ({**HTTP, "tools": ["a" * 60]}, "longer than 64 characters"),
        ({**HTTP, "tools": ["read.file"]}, "letters, digits"),
        ({**STDIO, "name": "my_files"}, "name"),
        ({**HTTP, "args": ["--x"]}, "args, env and cwd are for a server started by command"),
        ({**STDIO, "headers": {"X-Key": "KEY"}}, "headers are for a server reached by url"),
    ],
)
def test_a_bad_entry_is_refused_with_a_clear_problem(
    tmp_path: Path, entry: dict[str, Any], expected: str
) -> None:
    toml = "[[mcp_servers]]\n" + "\n".join(f"{k} = {_toml(v)}" for k, v in entry.items())
    found = problems(tmp_path, toml)
    assert any(p.startswith("mcp_servers") for p in found), found
    assert any(expected in p for p in found), found
    assert not any("sk-live-abc" in p for p in found)


def test_names_bots_and_personas_are_checked_across_the_file(tmp_path: Path) -> None:
    toml = "\n".join(
        "[[mcp_servers]]\n" + "\n".join(f"{k} = {_toml(v)}" for k, v in entry.items())
        for entry in (
            {**STDIO, "bots": ["nobody"]},
            {**STDIO, "personas": ["ghost"]},
        )
    )
    found = problems(tmp_path, toml)
    assert "mcp_servers: two servers share a name; give each its own" in found
    assert "mcp_servers[0].bots: no bot 'nobody' (known: none)" in found
    assert "mcp_servers[1].personas: no persona 'ghost' (known: companion)" in found


def test_config_check_names_an_unset_variable_with_the_files_other_problems(
    tmp_path: Path,
) -> None:
    toml = "[[mcp_servers]]\n" + "\n".join(f"{k} = {_toml(v)}" for k, v in STDIO.items())
    toml += '\ncolour = "red"\n'
    found = problems(tmp_path, toml, environ={})
    assert "mcp_servers[0] (files): MY_FILES_TOKEN is not set in the environment" in found


async def test_healthz_lists_the_servers_state() -> None:
    lines = ["mcp server files: up", "mcp server search: down (HTTP 401; restarting in 8 s)"]

    async def ready() -> str | None:
        return None

    async with (
        HealthServer(
            host="127.0.0.1", port=0, metrics=Metrics(), readiness=ready, details=lambda: lines
        ) as server,
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{server.port}/healthz") as response,
    ):
        assert response.status == 200  # a server down takes tools away, not the bot
        assert await response.text() == "ok\n" + "\n".join(lines) + "\n"


def _toml(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f'"{k}" = {_toml(v)}' for k, v in value.items()) + " }"
    return str(value)


def test_an_unreadable_answer_is_one_short_line_in_the_log_and_on_the_health_page() -> None:
    """Review 38: the SDK's message quoted the server's raw answer over many lines."""
    from mcp.shared.exceptions import MCPError

    from bot.mcp.connection import why
    from bot.mcp.spec import Http, ServerSpec

    spec = ServerSpec(name="zap", transport=Http("http://127.0.0.1:9/mcp", {}), tools={})
    raw = "1 validation error for JSONRPCMessage\n  Invalid JSON [type=json_invalid, " + (
        "input_value=b'<html>not json</html>" + "x" * 5000 + "', input_type=bytes]"
    )
    assert why(MCPError(-32602, raw), spec) == "1 validation error for JSONRPCMessage"
    one_line = why(MCPError(-32602, raw.replace("\n", " ")), spec)
    assert len(one_line) <= 160 and "<html>" not in one_line
    assert one_line.endswith("(an unreadable answer)")
