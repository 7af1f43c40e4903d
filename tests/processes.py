"""How a test starts a child process (``personabot``, a bot, a script), and the environment it
gives it.

``spawn`` and ``run`` start ``python -m MODULE ...`` and ``python SCRIPT ...`` as a fork of the
worker's preloaded interpreter (tests/zygote.py: the same program in its own process, without
paying seconds of library imports again), and anything else, or a request that changes an
interpreter setting, through an ordinary ``exec``. ``PERSONABOT_TEST_EXEC=1`` in the test run's
environment makes every start an ``exec``.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Final, Protocol

#: Names that would configure the child from outside the test: the developer's own API key
#: and settings overrides. A test that sets one passes it in ``extra``.
DROPPED: Final = ("ANTHROPIC_", "PERSONABOT_")

ZYGOTE: Final = Path(__file__).with_name("zygote.py")

#: Environment variables the interpreter reads at start-up (the server has its own values);
#: a request that sets one differently is started with exec. PYTHONUNBUFFERED and PYTHONPATH
#: the child applies itself.
_INTERPRETER: Final = ("PYTHON", "LC_", "LANG")
_APPLIED: Final = frozenset({"PYTHONUNBUFFERED", "PYTHONPATH"})

PIPE: Final = asyncio.subprocess.PIPE
DEVNULL: Final = asyncio.subprocess.DEVNULL
STDOUT: Final = asyncio.subprocess.STDOUT

Stream = int | IO[bytes] | IO[str] | None


def clean_env(*, drop: tuple[str, ...] = DROPPED, **extra: str) -> dict[str, str]:
    """This process's environment without the variables whose names start with one of ``drop``,
    plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(extra)
    return env


class Running(Protocol):
    """What a test uses of a started process (``asyncio.subprocess.Process`` has it)."""

    @property
    def pid(self) -> int: ...
    @property
    def returncode(self) -> int | None: ...
    @property
    def stdin(self) -> asyncio.StreamWriter | None: ...
    @property
    def stdout(self) -> asyncio.StreamReader | None: ...
    @property
    def stderr(self) -> asyncio.StreamReader | None: ...
    async def wait(self) -> int: ...
    async def communicate(self, input: bytes | None = None) -> tuple[bytes, bytes]: ...
    def send_signal(self, signal: int) -> None: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...


@dataclass(eq=False)
class Forked:
    """A child forked by the zygote: ``asyncio.subprocess.Process``'s interface over the
    connection that reports its exit code."""

    pid: int
    _conn: socket.socket
    stdin: asyncio.StreamWriter | None
    stdout: asyncio.StreamReader | None
    stderr: asyncio.StreamReader | None
    returncode: int | None = None
    _ended: asyncio.Future[int] = field(init=False)

    def __post_init__(self) -> None:
        loop = asyncio.get_running_loop()
        self._ended = loop.create_future()
        # Read the exit code at once, as asyncio's child watcher does: ``returncode`` is set
        # when the child ends, whether or not anyone awaits wait().
        self._watch = loop.create_task(self._watch_exit())

    async def _watch_exit(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            data = await loop.sock_recv(self._conn, 64)
        finally:
            self._conn.close()
        if not data:
            self._ended.set_exception(RuntimeError("the zygote ended before its child"))
            return
        self.returncode = int(data)
        self._ended.set_result(self.returncode)

    async def wait(self) -> int:
        return await asyncio.shield(self._ended)

    async def communicate(self, input: bytes | None = None) -> tuple[bytes, bytes]:
        async def feed() -> None:
            if self.stdin is None:
                return
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                if input:
                    self.stdin.write(input)
                    await self.stdin.drain()
            self.stdin.close()

        async def read(stream: asyncio.StreamReader | None) -> bytes:
            return b"" if stream is None else await stream.read()

        _, out, err = await asyncio.gather(feed(), read(self.stdout), read(self.stderr))
        await self.wait()
        return out, err

    def send_signal(self, signal: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, signal)

    def terminate(self) -> None:
        self.send_signal(15)

    def kill(self) -> None:
        self.send_signal(9)


#: The socket of a zygote the test run's controller started for all its workers.
SHARED: Final = "PERSONABOT_TEST_ZYGOTE"


class _Zygote:
    """A zygote server: this process's own (started on first use, stopped at exit), or the
    one the controller of a run on several workers shares with them (``SHARED``)."""

    def __init__(self, path: str, proc: subprocess.Popen[bytes] | None) -> None:
        self.path = path
        self.proc = proc
        self.env = clean_env()

    @classmethod
    def start(cls) -> _Zygote:
        folder = tempfile.mkdtemp(prefix="personabot-zygote-")
        path = os.path.join(folder, "socket")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        listener.bind(path)
        listener.listen(64)
        log = open(os.path.join(folder, "zygote.log"), "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            [sys.executable, "-P", str(ZYGOTE), str(listener.fileno())],
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=log,
            env=clean_env(),
            pass_fds=(listener.fileno(),),
        )
        listener.close()
        log.close()
        made = cls(path, proc)
        atexit.register(made.stop)
        return made

    def stop(self) -> None:
        if self.proc is not None and self.proc.stdin is not None:
            self.proc.stdin.close()  # the server kills its children and exits
            self.proc.wait(timeout=30)

    def accepts(self, argv: Sequence[str], env: dict[str, str]) -> bool:
        """Whether the server can start this: ``python -m M`` or ``python SCRIPT.py`` with the
        interpreter settings it was started with."""
        if os.environ.get("PERSONABOT_TEST_EXEC") == "1":
            return False
        if self.proc is not None and self.proc.poll() is not None:
            return False
        if len(argv) < 2 or argv[0] != sys.executable:
            return False
        if not ((argv[1] == "-m" and len(argv) > 2) or argv[1].endswith(".py")):
            return False
        if "PYTHONPATH" in self.env:
            return False
        names = {k for k in (*env, *self.env) if k.startswith(_INTERPRETER)} - _APPLIED
        return all(env.get(k) == self.env.get(k) for k in names)

    def connect(
        self, argv: Sequence[str], cwd: str, env: dict[str, str], session: bool, fds: list[int]
    ) -> socket.socket:
        """Ask for a child; the connection then reports its pid and, later, its exit code."""
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        conn.connect(self.path)
        spec = {"argv": list(argv[1:]), "cwd": cwd, "env": env, "session": session}
        socket.send_fds(conn, [json.dumps(spec).encode()], fds)
        return conn


_zygote: _Zygote | None = None
_lock = threading.Lock()


def prestart() -> None:
    """Start this process's zygote now, so that its imports overlap with other tests instead
    of delaying the first test that starts a process (tests/conftest.py, for big runs)."""
    _server()


def share() -> None:
    """Start a zygote for the workers this process (a run's controller) is about to start:
    they inherit its socket in ``SHARED`` and start none of their own (tests/conftest.py)."""
    os.environ[SHARED] = _server().path


def _server() -> _Zygote:
    global _zygote
    with _lock:
        if _zygote is None:
            shared = os.environ.get(SHARED)
            _zygote = _Zygote(shared, None) if shared else _Zygote.start()
        return _zygote


async def spawn(
    *argv: str | os.PathLike[str],
    cwd: str | os.PathLike[str] | None = None,
    env: dict[str, str] | None = None,
    stdin: Stream = None,
    stdout: Stream = None,
    stderr: Stream = None,
    start_new_session: bool = False,
) -> Running:
    """Start ``argv`` like ``asyncio.create_subprocess_exec`` (same arguments and process
    interface), forked from the zygote when it can start it (module docstring)."""
    args = [os.fspath(a) for a in argv]
    environ = dict(os.environ if env is None else env)
    server = _server()
    if not server.accepts(args, environ):
        return await asyncio.create_subprocess_exec(
            *args,
            cwd=cwd,
            env=environ,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            start_new_session=start_new_session,
        )
    loop = asyncio.get_running_loop()
    ours: list[int] = []  # child ends to close here once sent
    ends: list[int] = []

    def child_end(stream: Stream, number: int, mine: list[int]) -> int:
        if stream is None:
            return number
        if stream == PIPE:
            r, w = os.pipe()
            mine.append(w if number == 0 else r)
            ours.append(r if number == 0 else w)
            return r if number == 0 else w
        if stream == DEVNULL:
            fd = os.open(os.devnull, os.O_RDWR)
            ours.append(fd)
            return fd
        if isinstance(stream, int):
            return stream
        return stream.fileno()

    parent: list[list[int]] = [[], [], []]
    ends.append(child_end(stdin, 0, parent[0]))
    ends.append(child_end(stdout, 1, parent[1]))
    ends.append(ends[1] if stderr == STDOUT else child_end(stderr, 2, parent[2]))
    try:
        conn = server.connect(args, os.fspath(cwd or os.getcwd()), environ, start_new_session, ends)
    finally:
        for fd in ours:
            os.close(fd)
    conn.setblocking(False)
    pid = int(await loop.sock_recv(conn, 64))
    writer = reader_out = reader_err = None
    if parent[0]:
        transport, protocol = await loop.connect_write_pipe(
            lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader()),
            os.fdopen(parent[0][0], "wb", buffering=0),
        )
        writer = asyncio.StreamWriter(transport, protocol, None, loop)
    if parent[1]:
        reader_out = await _reader(parent[1][0])
    if parent[2]:
        reader_err = await _reader(parent[2][0])
    return Forked(pid, conn, writer, reader_out, reader_err)


async def _reader(fd: int) -> asyncio.StreamReader:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2**16, loop=loop)
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader, loop=loop), os.fdopen(fd, "rb", buffering=0)
    )
    return reader


def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: dict[str, str] | None = None,
    input: str | None = None,
    timeout: float = 50.0,
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(argv, input=..., capture_output=True, text=True)`` through ``spawn``
    (standard input is empty when ``input`` is None); raises ``subprocess.TimeoutExpired``."""

    async def go() -> subprocess.CompletedProcess[str]:
        proc = await spawn(
            *argv,
            cwd=cwd,
            env=env,
            stdin=DEVNULL if input is None else PIPE,
            stdout=PIPE,
            stderr=PIPE,
        )
        try:
            out, err = await asyncio.wait_for(
                proc.communicate(None if input is None else input.encode()), timeout
            )
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise subprocess.TimeoutExpired([os.fspath(a) for a in argv], timeout) from None
        code = proc.returncode
        assert code is not None
        return subprocess.CompletedProcess(
            [os.fspath(a) for a in argv], code, out.decode(), err.decode()
        )

    # Its own thread and loop: callable from a test's running loop as from plain code.
    result: list[subprocess.CompletedProcess[str] | BaseException] = []
    thread = threading.Thread(target=lambda: result.append(_catch(go)))
    thread.start()
    thread.join()
    done = result[0]
    if isinstance(done, BaseException):
        raise done
    return done


def _catch(go: object) -> subprocess.CompletedProcess[str] | BaseException:
    try:
        return asyncio.run(go())  # type: ignore[operator]
    except BaseException as exc:
        return exc
