"""The processes tests start: a fork of the preloaded interpreter (tests/zygote.py) must look,
to the program and to the test, like ``exec`` of the same command (tests/processes.py)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import pytest

from tests.processes import DEVNULL, PIPE, Forked, Running, clean_env, spawn

PROBE = Path(__file__).parent / "data" / "processes" / "probe.py"


@pytest.fixture(autouse=True)
def _forking(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests compare the zygote's children with exec'd ones: they fork even in a run
    that execs every other process (``PERSONABOT_TEST_EXEC=1``)."""
    monkeypatch.delenv("PERSONABOT_TEST_EXEC", raising=False)


async def _start(forked: bool, *args: str, cwd: Path, **kwargs: object) -> Running:
    env = clean_env(PROBE_VALUE="from the test")
    if not forked:
        return await asyncio.create_subprocess_exec(
            sys.executable,
            str(PROBE),
            *args,
            cwd=cwd,
            env=env,
            **kwargs,  # type: ignore[arg-type]
        )
    proc = await spawn(sys.executable, PROBE, *args, cwd=cwd, env=env, **kwargs)  # type: ignore[arg-type]
    assert isinstance(proc, Forked), "the zygote did not start the probe"
    return proc


async def _both(
    tmp_path: Path, *args: str, stdin: bytes = b"", **kwargs: object
) -> list[tuple[int, bytes, bytes]]:
    results = []
    for forked in (False, True):
        proc = await _start(
            forked, *args, cwd=tmp_path, stdin=PIPE, stdout=PIPE, stderr=PIPE, **kwargs
        )
        out, err = await asyncio.wait_for(proc.communicate(stdin), 30)
        assert proc.returncode is not None
        results.append((proc.returncode, out, err))
    return results


async def test_a_forked_child_sees_what_an_executed_one_sees(tmp_path: Path) -> None:
    """argv, sys.path[0], working directory, environment, standard input, buffering, no
    descriptor but 0-2, Python's SIGINT handler, the script as __main__."""
    (execd, forked) = await _both(tmp_path, "report", stdin=b"typed")
    assert execd[0] == forked[0] == 0, (execd, forked)
    seen = json.loads(execd[1])
    assert seen["stdin"] == "typed" and seen["env"] == "from the test" and seen["leaked"] == []
    assert json.loads(forked[1]) == seen


async def test_a_new_session_is_a_new_session(tmp_path: Path) -> None:
    (execd, forked) = await _both(tmp_path, "report", start_new_session=True)
    assert json.loads(execd[1])["session"] is True
    assert json.loads(forked[1]) == json.loads(execd[1])


@pytest.mark.parametrize(
    ("args", "code", "in_err"),
    [
        (("exit", "3"), 3, b""),
        (("message",), 1, b"stopped with a message"),
        (("raise",), 1, b"RuntimeError: boom"),
        (("interrupt",), -signal.SIGINT, b"KeyboardInterrupt"),
        (("atexit",), 0, b""),
    ],
)
async def test_exit_codes_tracebacks_and_atexit_are_the_interpreters(
    tmp_path: Path, args: tuple[str, ...], code: int, in_err: bytes
) -> None:
    (execd, forked) = await _both(tmp_path, *args)
    for result in (execd, forked):
        assert result[0] == code and in_err in result[2], result
    assert forked[1] == execd[1]
    if args == ("atexit",):
        assert forked[1] == b"unflushed atexit ran\n"


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
async def test_a_signal_ends_the_child_and_its_code_says_which(tmp_path: Path, sig: int) -> None:
    """What the SIGKILL tests rely on: the process is gone when wait() returns."""
    proc = await _start(True, "wait", cwd=tmp_path, stdin=PIPE, stdout=PIPE, stderr=DEVNULL)
    assert proc.stdout is not None
    assert await asyncio.wait_for(proc.stdout.readline(), 30) == b"ready\n"
    proc.send_signal(sig)
    assert await asyncio.wait_for(proc.wait(), 30) == -sig
    assert proc.returncode == -sig
    with pytest.raises(ProcessLookupError):
        os.kill(proc.pid, 0)


async def test_pythonpath_comes_after_the_scripts_folder(tmp_path: Path) -> None:
    """Plugins on PYTHONPATH (the entry-point tests) are found as with exec."""
    results = []
    for forked in (False, True):
        env = clean_env(PYTHONPATH=f"{tmp_path}{os.pathsep}{tmp_path / 'b'}")
        proc = await (
            spawn(sys.executable, PROBE, "path", cwd=tmp_path, env=env, stdout=PIPE)
            if forked
            else asyncio.create_subprocess_exec(
                sys.executable, PROBE, "path", cwd=tmp_path, env=env, stdout=PIPE
            )
        )
        assert isinstance(proc, Forked) == forked
        results.append(json.loads((await proc.communicate())[0]))
    assert results[0] == results[1]
    assert results[0][1:3] == [str(tmp_path), str(tmp_path / "b")]


async def test_an_interpreter_setting_is_started_with_exec(tmp_path: Path) -> None:
    """A PYTHON* variable the zygote did not start with (here the hash seed) cannot be applied
    to a running interpreter: that process is executed."""
    env = clean_env(PYTHONHASHSEED="7")
    proc = await spawn(sys.executable, PROBE, "report", cwd=tmp_path, env=env, stdout=PIPE)
    assert not isinstance(proc, Forked)
    out, _ = await proc.communicate()
    assert json.loads(out)["cwd"] == str(tmp_path)
