"""Issue 35 item 5, from review 35a: docs/deploy.md followed by a careless operator.

tests/deploy/test_deploy_doc.py follows the doc as root and leaves out ``useradd`` and
``chown``, so it cannot see what the unit's ``User=personabot`` (with ``ProtectHome=true``)
cannot reach. These tests look at exactly that, and at the README's embedding snippet
against the installed wheel.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.deploy.doc import env, moved, step

UNIT = Path(__file__).resolve().parents[2] / "deploy" / "personabot.service"


def test_the_venv_interpreter_is_reachable_by_the_service(installed: Path) -> None:
    """``uv venv --python ">=3.11"`` run as root may pick an interpreter under /root (pyenv,
    or a uv-managed Python in /root/.local/share/uv/python when the system has none): the venv's
    bin/python is then a link into /root, which ``ProtectHome=true`` hides from the unit (and
    /root is 0700 for the personabot user anyway): the service cannot even start
    (``Permission denied``, exit 126 / 203/EXEC)."""
    assert "ProtectHome=true" in UNIT.read_text()
    python = (installed / "srv" / "personabot" / "venv" / "bin" / "python").resolve()
    assert not str(python).startswith(("/root/", "/home/")), python


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root")
def test_the_service_user_can_read_its_configuration() -> None:
    """The doc creates /etc/personabot as root with ``chmod 750`` and never gives it to the
    personabot user (only /srv/personabot/data is chowned): the unit's ``User=personabot``
    cannot open /etc/personabot/personabot.toml, so ``run`` exits 2 ("cannot read ...:
    Permission denied") and ``Restart=on-failure`` loops, while the doc's ``config check``
    (run as root) said OK. Here the doc's mkdir/chmod/chown lines run in a temporary root
    and ``nobody`` stands in for the personabot user (given /srv/personabot/data as the doc's
    chown gives it to personabot)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        root.chmod(0o755)
        lines = []
        for line in step("uv venv").splitlines():
            if "config example >" in line:  # what the wheel prints, written as root
                line = "echo '# personabot.toml' > " + line.split(">", 1)[1]
            elif not line.startswith(("mkdir", "chmod", "chown")):
                continue
            line = moved(line, root).replace("personabot:personabot", "nobody:nogroup")
            lines.append(line.replace("root:personabot", "root:nogroup"))
        subprocess.run(["bash", "-ec", "\n".join(lines)], check=True, env=env())
        config = root / "etc" / "personabot" / "personabot.toml"
        read = subprocess.run(
            ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "cat", config],
            capture_output=True,
            text=True,
            check=False,
        )
        assert read.returncode == 0, read.stderr


def test_the_readme_embedding_snippet_works_with_the_installed_wheel(installed: Path) -> None:
    """README: "To embed personabot in a program: from bot.app import App". With the wheel
    (the supported route) ``bot`` lives inside personabot/ and is put on sys.path only when
    ``personabot`` is imported first, so the snippet fails: No module named 'bot'."""
    python = installed / "srv" / "personabot" / "venv" / "bin" / "python"
    done = subprocess.run(
        [python, "-c", "from bot.app import App"],
        capture_output=True,
        text=True,
        check=False,
        env=env(),
        cwd=installed,
    )
    assert done.returncode == 0, done.stderr
