"""Review 15: ``personabot config check`` refuses a ``[transcription] url`` that ``run`` refuses.

``config check`` said "configuration OK" for a URL without a host or with a query, and
``personabot run`` then stopped at start with a config error (or, for ``http://:80/v1``, with
"the factory failed: ValueError"): the check is where an operator should learn it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bot.test_cli import _run


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("http://", "transcription.url: must name a host"),
        ("http://:80/v1", "transcription.url: must name a host"),
        ("http://127.0.0.1:8000/v1?key=abc", "transcription.url: must not have a query"),
        ("http://127.0.0.1:8000/v1#top", "transcription.url: must not have a query"),
    ],
)
async def test_config_check_refuses_a_transcription_url_run_would_refuse(
    tmp_path: Path, url: str, needle: str
) -> None:
    (tmp_path / "bad.toml").write_text(f'[transcription]\nurl = "{url}"\n')
    code, _out, err = await _run(
        ["config", "check", "--file-only", "--config", "bad.toml"], tmp_path
    )
    assert code == 2
    assert needle in err
    assert len(err.strip().splitlines()) == 1


async def test_config_check_accepts_a_usable_transcription_url(tmp_path: Path) -> None:
    (tmp_path / "ok.toml").write_text('[transcription]\nurl = "http://[::1]:8000/v1/"\n')
    code, out, err = await _run(["config", "check", "--file-only", "--config", "ok.toml"], tmp_path)
    assert code == 0, err
    assert "configuration OK" in out
