"""The settings package (bot/config/): one module per concern, one public name space."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import bot.config
from bot.config import Settings, bundled_example_path, load_settings

ROOT = Path(__file__).resolve().parents[2]


def test_the_example_is_found_from_inside_the_package() -> None:
    """`config example` and a run without a file read the checkout's example, not a path
    one folder too deep (the loader moved from bot/config.py to bot/config/loading.py)."""
    assert bundled_example_path() == ROOT / "config.example.toml"


def test_no_file_means_the_bundled_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ./personabot.toml the settings are the example's, which are the defaults."""
    monkeypatch.chdir(tmp_path)
    assert load_settings() == Settings()


def _imported_names(text: str) -> set[str]:
    names: set[str] = set()
    for match in re.finditer(r"from bot\.config import (\([^)]*\)|[^\n]*)", text):
        names |= {n.split(" as ")[0].strip() for n in match.group(1).strip("()").split(",")}
    return names - {""}


def test_every_name_the_docs_and_examples_import_is_public() -> None:
    """What docs/ and examples/ tell plugin authors to import from bot.config is there (code
    imports fail on their own; prose does not)."""
    texts = [p.read_text(encoding="utf-8") for p in (ROOT / "docs").glob("*.md")]
    texts += [p.read_text(encoding="utf-8") for p in (ROOT / "examples").rglob("*.py")]
    used = set().union(*map(_imported_names, texts))
    assert used, "no `from bot.config import` found: the scan is broken"
    assert used <= set(bot.config.__all__)
    for name in bot.config.__all__:
        assert getattr(bot.config, name) is not None
