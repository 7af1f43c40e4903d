"""The chat's log file (``personabot-chat.log``): readable by its owner only, never a link."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from bot.app.logs import open_log_file


def test_a_new_log_file_is_its_owners_only(tmp_path: Path) -> None:
    path = tmp_path / "chat.log"
    with open_log_file(path) as log:
        log.write("record\n")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == "record\n"


def test_an_existing_world_readable_log_file_is_made_its_owners_only(tmp_path: Path) -> None:
    """A file left readable by others (an older run, a umask) is appended to only once it is
    closed to them; what it held stays."""
    path = tmp_path / "chat.log"
    path.write_text("earlier\n")
    path.chmod(0o644)
    with open_log_file(path) as log:
        log.write("record\n")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == "earlier\nrecord\n"


def test_a_symbolic_link_is_refused_and_its_target_left_alone(tmp_path: Path) -> None:
    victim = tmp_path / "elsewhere.txt"
    victim.write_text("someone else's file\n")
    victim.chmod(0o644)
    (tmp_path / "chat.log").symlink_to(victim)
    with pytest.raises(OSError, match="is a symbolic link"):
        open_log_file(tmp_path / "chat.log")
    assert victim.read_text() == "someone else's file\n"
    assert stat.S_IMODE(victim.stat().st_mode) == 0o644


def test_a_directory_or_fifo_is_refused(tmp_path: Path) -> None:
    """Not a regular file: a FIFO nobody reads is refused without blocking the chat's start."""
    os.mkfifo(tmp_path / "fifo.log")
    with pytest.raises(OSError, match=r"cannot open|not a regular file"):
        open_log_file(tmp_path / "fifo.log")
    (tmp_path / "dir.log").mkdir()
    with pytest.raises(OSError, match=r"cannot open|not a regular file"):
        open_log_file(tmp_path / "dir.log")
