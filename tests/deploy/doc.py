"""docs/deploy.md as a script: its shell blocks, run as written with ``/etc/`` and ``/srv/``
moved under a temporary root; ``useradd``, ``chown``, ``systemctl`` and ``journalctl`` left
out (they change this machine)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.processes import DROPPED, clean_env

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "deploy.md"
SKIPPED = ("useradd", "chown", "systemctl", "journalctl")


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def moved(text: str, root: Path) -> str:
    """The doc's absolute paths under ``root`` (``/dev/null`` stays where it is)."""
    return re.sub(r"(?<![\w.])/(etc|srv)/", lambda m: f"{root}/{m.group(1)}/", text)


def script(block: str, root: Path) -> str:
    lines = [
        moved(line, root)
        for line in block.splitlines()
        if line.strip() and not line.lstrip().startswith(SKIPPED)
    ]
    return "set -euo pipefail\n" + "\n".join(lines) + "\n"


def bash(script: str, cwd: Path) -> str:
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=cwd,
        env=env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"{script}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    return done.stdout


def env(**extra: str) -> dict[str, str]:
    return clean_env(drop=(*DROPPED, "TELEGRAM_", "VIRTUAL_ENV", "PYTHONPATH"), **extra)


def step(needle: str) -> str:
    """The one shell block of the doc that holds ``needle`` (``uv build``: the release,
    ``uv venv``: the server install, ``config check``, ``systemctl restart``: the upgrade)."""
    (found,) = (b for b in blocks("sh") if needle in b)
    return found
