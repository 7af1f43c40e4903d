"""``personabot web`` as a real process: it refuses to start without a token, serves the
console with one, and stops cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
import re
import signal
import sys
from pathlib import Path

import aiohttp

from tests.processes import clean_env, spawn

TOKEN = "proc-token-0123456789abcdef"


def _env(**extra: str) -> dict[str, str]:
    return clean_env(drop=("PERSONABOT_",), **extra)


async def test_personabot_web_serves_the_console_and_stops_on_sigterm(tmp_path: Path) -> None:
    config = tmp_path / "personabot.toml"
    config.write_text(
        f'[storage]\nurl = "sqlite:///{tmp_path}/bot.sqlite3"\n'
        '[llm]\nprovider = "offline"\n[queue]\ndebounce_seconds = 0.5\nmax_wait_seconds = 3\n',
        encoding="utf-8",
    )
    args = [sys.executable, "-m", "bot", "web", "--config", str(config), "--listen", "127.0.0.1:0"]
    refused = await spawn(
        *args, env=_env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await refused.communicate()
    assert refused.returncode == 2, err
    assert b"PERSONABOT_WEB_TOKEN" in err + out
    proc = await spawn(
        *args,
        env=_env(PERSONABOT_WEB_TOKEN=TOKEN),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        found = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        assert found, line
        base = f"http://127.0.0.1:{found[1]}"
        jar = aiohttp.CookieJar(unsafe=True)
        async with aiohttp.ClientSession(cookie_jar=jar) as http:
            async with http.get(f"{base}/conversations", allow_redirects=False) as r:
                assert r.status == 303
            async with http.post(f"{base}/login", data={"token": TOKEN}) as r:
                assert r.status == 200 and "Overview" in await r.text()
            # The playground: a burst typed quickly gets one reply, through the real queue.
            async with http.get(f"{base}/playground") as r:
                page = await r.text()
            found_csrf = re.search(r'name="csrf" value="([^"]+)"', page)
            assert found_csrf is not None
            for text in ("one", "two", "three"):
                async with http.post(
                    f"{base}/playground/companion", data={"csrf": found_csrf[1], "text": text}
                ) as r:
                    assert r.status == 200
            bearer = {"Authorization": f"Bearer {TOKEN}"}
            transcript: list[dict[str, object]] = []
            for _ in range(100):
                async with http.get(f"{base}/api/playground", headers=bearer) as r:
                    chat = await r.json()
                transcript = chat["transcript"]
                if not chat["waiting"] and any(m["role"] == "assistant" for m in transcript):
                    break
                await asyncio.sleep(0.1)
            await asyncio.sleep(1.0)  # nothing more comes
            async with http.get(f"{base}/api/playground", headers=bearer) as r:
                transcript = (await r.json())["transcript"]
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), 20)
    assert proc.returncode == 0, err
    assert TOKEN.encode() not in err
    assert [m["role"] for m in transcript] == ["user", "user", "user", "assistant"]
    assert "one / two / three" in str(transcript[-1]["text"])
