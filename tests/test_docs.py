"""The design document stays reachable: every pointer into docs/architecture.md lands."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
_POINTER = re.compile(r"architecture\.md#([a-z][a-z0-9-]*)(?:\s+rules?\s+(\d+))?")


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
