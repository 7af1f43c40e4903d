"""The doc's install, once for the tests of this folder (it builds the wheel)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.deploy.doc import ROOT, bash, script, step


@pytest.fixture(scope="package")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The temporary root after the doc's release and install steps."""
    assert shutil.which("uv"), "uv is needed to follow docs/deploy.md (README: Python + uv)"
    root = tmp_path_factory.mktemp("root")
    release = root / "release"
    (root / "etc" / "systemd" / "system").mkdir(parents=True)  # there on any systemd host
    # The release step runs in the checkout; its folder is this test's, not the checkout's.
    bash(script(step("uv build").replace("release", str(release)), root), ROOT)
    bash(script(step("uv venv"), root), release)
    # The upgrade, run over the install: the venv, configuration and data stay.
    bash(script(step("systemctl restart"), root), release)
    return root
