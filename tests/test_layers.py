"""The layers stay honest: data flows adapter -> bot -> memory, never back across."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def _modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [("adapters", "memory"), ("memory", "adapters")],
)
def test_adapters_and_memory_never_import_each_other(package: str, forbidden: str) -> None:
    offenders = [p.relative_to(ROOT) for p in _modules(package) if forbidden in _imports(p)]
    assert offenders == []


def test_plain_types_import_nothing_of_personabot() -> None:
    own = {"bot", "adapters", "memory"}
    assert _imports(ROOT / "bot" / "events.py") & own == set()


def test_platform_libraries_stay_in_adapters() -> None:
    """aiogram and discord.py objects never leave adapters/; the SDK stays in the client."""
    for package in ("bot", "memory"):
        for path in _modules(package):
            found = _imports(path) & {"aiogram", "discord"}
            assert not found, f"{path.relative_to(ROOT)} imports {found}"
    users = [p.name for p in _modules("bot") if "anthropic" in _imports(p)]
    assert users == ["anthropic.py"]
