"""The design documents stay reachable: every pointer into docs/architecture.md lands, and
every relative link of the docs and the README names a file and a heading that exist."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
_POINTER = re.compile(r"architecture\.md#([a-z][a-z0-9-]*)(?:\s+rules?\s+(\d+))?")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def _anchors() -> set[str]:
    return set(re.findall(r'<a id="([^"]+)"></a>', DOC.read_text(encoding="utf-8")))


def _sources() -> list[Path]:
    found: list[Path] = []
    for folder in ("bot", "adapters", "memory", "tests", "bench", "docs", "examples"):
        found += [p for p in (ROOT / folder).rglob("*") if p.suffix in {".py", ".md", ".toml"}]
    return [*found, ROOT / "README.md", ROOT / "pyproject.toml"]


def test_every_pointer_names_an_anchor_of_the_document() -> None:
    anchors = _anchors()
    broken = [
        f"{path.relative_to(ROOT)}: #{match[1]}"
        for path in _sources()
        for match in _POINTER.finditer(path.read_text(encoding="utf-8"))
        if match[1] not in anchors
    ]
    assert anchors >= {"flow", "keys", "queue", "prompt", "retention", "delivery", "layers"}
    assert broken == []


def test_numbered_rules_exist_in_their_section() -> None:
    """``#queue rule 6`` points at a section that has a rule 6."""
    text = DOC.read_text(encoding="utf-8")
    sections = re.split(r'<a id="([^"]+)"></a>', text)
    rules = {
        sections[i]: {int(n) for n in re.findall(r"^\s*(\d+)\.\s", sections[i + 1], re.M)}
        for i in range(1, len(sections) - 1, 2)
    }
    missing = [
        f"{path.relative_to(ROOT)}: #{match[1]} rule {match[2]}"
        for path in _sources()
        for match in _POINTER.finditer(path.read_text(encoding="utf-8"))
        if match[2] and int(match[2]) not in rules.get(match[1], set())
    ]
    assert missing == []


def _targets(path: Path) -> set[str]:
    """The anchors a link into ``path`` may name: ``<a id>`` and GitHub's heading slugs."""
    text = path.read_text(encoding="utf-8")
    found = set(re.findall(r'<a id="([^"]+)"></a>', text))
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6}\s+(.*)$", _FENCE.sub("", text), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return found


def test_every_relative_link_of_the_docs_lands() -> None:
    """A reader who follows ``[..](initiatives.md#reminders)`` finds that file and heading."""
    broken = []
    for path in [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]:
        for match in _LINK.finditer(_FENCE.sub("", path.read_text(encoding="utf-8"))):
            target = match[1]
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            file, _, anchor = target.partition("#")
            linked = path.parent / file if file else path
            where = f"{path.relative_to(ROOT)}: {target}"
            if not linked.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in _targets(linked):
                broken.append(f"{where} (no such heading)")
    assert broken == []


def test_the_test_processes_reuse_the_installed_bytecode() -> None:
    """The processes the tests start write the bytecode of what they compile and read what
    ``uv sync`` compiled (tests/conftest.py): no cache prefix that hides the installed
    libraries' ``__pycache__``, and the libraries are compiled at installation."""
    assert "PYTHONDONTWRITEBYTECODE" not in os.environ
    assert "PYTHONPYCACHEPREFIX" not in os.environ
    root = Path(__file__).resolve().parent.parent
    uv = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["uv"]
    assert uv.get("compile-bytecode") is True
