"""A Python interpreter with the product's libraries already imported, that forks test processes.

Many tests start real ``personabot`` processes (``python -m bot run``, a worker script). Each
one spent most of its CPU importing aiogram (its ~300 Telegram types are built by pydantic at
import, ~3 s), the Anthropic SDK (~2 s) and discord.py: on two cores that import time, paid
again by every process, was most of the suite's CPU (issue 36). This server imports those
libraries once; for each request it forks, and the child becomes the requested program exactly
as ``python -m MODULE ARGS`` or ``python SCRIPT ARGS`` would start it:

- its own process (pid, signals, exit status: a test can SIGKILL it mid-turn as before);
- the requested environment, working directory, ``sys.argv`` and ``sys.path[0]``;
- the requested standard input, output and error (file descriptors passed over the socket,
  ``SCM_RIGHTS``), new ``sys.std*`` objects buffered as Python buffers them at start-up, and no
  other inherited descriptor (``close_fds``);
- the product's own modules (``bot``, ``memory``, ``adapters``, ``personabot``) are NOT imported
  here: each child imports them itself, under its own environment, as a fresh process would.

What differs from a fresh interpreter: the third-party libraries were imported once, before
the request's environment was known (none of them reads it at import), and the hash seed is
the server's. The client (tests/processes.py) runs a request through an ordinary ``exec``
instead whenever the request names an interpreter setting (a ``PYTHON*`` variable, locale)
that differs from the server's, and tests of start-up itself (the installed console script,
the deploy unit, the quickstart) always ``exec``.

Protocol (one ``SOCK_SEQPACKET`` connection per child): the client sends one JSON message
``{"argv": [...], "cwd": str, "env": {...}, "session": bool}`` with three descriptors (stdin,
stdout, stderr); the server answers ``pid`` and, when the child has ended, its exit code
(``-N`` for signal N, as ``subprocess`` reports it). The server exits, killing its children,
when its standard input (a pipe from the test worker) closes.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import io
import json
import os
import runpy
import selectors
import signal
import socket
import sys
import threading
from dataclasses import dataclass

#: Imported once by the server: the heavy third-party libraries the product imports.
PRELOAD = (
    "asyncio",
    "aiogram",
    "aiogram.client.session.aiohttp",
    "aiogram.exceptions",
    "discord",
    "anthropic",
    "aiohttp",
    "aiohttp.web",
    "aiosqlite",
    "asyncpg",
    "pydantic",
    "pydantic_settings",
    "prometheus_client",
    "yarl",
    "PIL.Image",
    "regex",
    "ahocorasick",
    "tomlkit",
    "jinja2",
)


@dataclass(frozen=True, slots=True)
class Request:
    """What the child becomes."""

    argv: list[str]
    cwd: str
    env: dict[str, str]
    session: bool
    fds: list[int]


class Server:
    """The fork loop: one connection per child, watched through the child's pidfd."""

    def __init__(self, listener: socket.socket) -> None:
        self.listener = listener
        self.sel = selectors.DefaultSelector()
        self.sel.register(listener, selectors.EVENT_READ, "accept")
        self.sel.register(0, selectors.EVENT_READ, "parent")
        self.children: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (pid, connection)

    def serve(self) -> Request:
        """Fork a child per request until standard input closes. Returns only in a child."""
        while True:
            for key, _ in self.sel.select():
                if key.data == "accept":
                    request = self.fork()
                    if request is not None:
                        return request
                elif key.data == "child":
                    self.reap(key.fd)
                elif not os.read(0, 1024):
                    self.stop()

    def fork(self) -> Request | None:
        """Start the requested child; returns its request in the child, None here."""
        conn, _ = self.listener.accept()
        message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        spec = json.loads(message)
        request = Request(spec["argv"], spec["cwd"], spec["env"], spec["session"], fds)
        # A fork with another thread running could copy a lock it holds: there is none.
        assert threading.active_count() == 1, threading.enumerate()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            # The child keeps none of the server's descriptors (nor objects that would close
            # a reused descriptor number when collected).
            self.sel.close()
            for pidfd, (_, other) in self.children.items():
                os.close(other.detach())
                os.close(pidfd)
            os.close(self.listener.detach())
            os.close(conn.detach())
            return request
        for fd in fds:
            os.close(fd)
        conn.send(str(pid).encode())
        pidfd = os.pidfd_open(pid)
        self.children[pidfd] = (pid, conn)
        self.sel.register(pidfd, selectors.EVENT_READ, "child")
        return None

    def reap(self, pidfd: int) -> None:
        """A child ended: tell its client the exit code."""
        pid, conn = self.children.pop(pidfd)
        self.sel.unregister(pidfd)
        os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        with contextlib.suppress(OSError):  # the test is gone; nobody waits for this code
            conn.send(str(os.waitstatus_to_exitcode(status)).encode())
        conn.close()

    def stop(self) -> None:
        """The test worker is gone: so are its children."""
        for pid, _ in self.children.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        raise SystemExit(0)


def _stdio(fd: int, mode: str, like: io.TextIOWrapper) -> io.TextIOWrapper:
    """A standard stream on ``fd`` made as the interpreter makes it at start-up: stdout is
    line-buffered on a terminal and block-buffered otherwise, stderr always line-buffered,
    both unbuffered underneath with ``PYTHONUNBUFFERED``; encoding and error handler as the
    server's (same locale settings, else the client would have used exec)."""
    unbuffered = mode == "w" and bool(os.environ.get("PYTHONUNBUFFERED"))
    raw = io.FileIO(fd, mode + "b", closefd=False)
    buffer: io.RawIOBase | io.BufferedIOBase
    if unbuffered:
        buffer = raw
    elif mode == "r":
        buffer = io.BufferedReader(raw)
    else:
        buffer = io.BufferedWriter(raw)
    return io.TextIOWrapper(
        buffer,  # type: ignore[arg-type]
        encoding=like.encoding,
        errors=like.errors,
        line_buffering=mode == "w" and not unbuffered and (fd == 2 or os.isatty(fd)),
        write_through=unbuffered,
    )


def become(request: Request) -> None:
    """In the child: take the request's descriptors, environment and arguments, and run it."""
    for target, fd in enumerate(request.fds):
        os.dup2(fd, target, inheritable=True)
    for fd in set(request.fds):
        if fd > 2:
            os.close(fd)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    if request.session:
        os.setsid()
    os.chdir(request.cwd)
    os.environ.clear()
    os.environ.update(request.env)
    sys.stdin = sys.__stdin__ = _stdio(0, "r", sys.__stdin__)  # type: ignore[arg-type]
    sys.stdout = sys.__stdout__ = _stdio(1, "w", sys.__stdout__)  # type: ignore[arg-type]
    sys.stderr = sys.__stderr__ = _stdio(2, "w", sys.__stderr__)  # type: ignore[arg-type]
    # PYTHONPATH's entries follow sys.path[0], as the interpreter puts them (the client
    # starts no child here when the server itself had a PYTHONPATH).
    extra = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    sys.path[0:0] = extra
    argv = request.argv
    if argv[0] == "-m":
        # python -m MODULE: sys.path[0] is the working directory, argv[0] the module's file.
        sys.path.insert(0, os.getcwd())
        sys.argv = ["-m", *argv[2:]]
        runpy._run_module_as_main(argv[1], alter_argv=True)  # type: ignore[attr-defined]
    else:
        # python SCRIPT: sys.path[0] is the script's folder.
        sys.path.insert(0, os.path.dirname(os.path.realpath(argv[0])))
        sys.argv = list(argv)
        runpy.run_path(argv[0], run_name="__main__")


def finish(request: Request) -> None:
    """In the child: run the program, then end as the interpreter ends a process (threads
    joined, ``atexit`` run, streams flushed, the exit code of ``SystemExit``, a traceback and 1
    for an uncaught exception, death by SIGINT for an uncaught KeyboardInterrupt), except for
    tearing down the modules: that would touch every object inherited from the server and copy
    its ~200 MB page by page (seconds per child). Objects the program left for the collector
    are still collected, and print their warnings, before the process ends."""
    code = 0
    try:
        become(request)
    except SystemExit as stop:
        code = _exit_code(stop.code)
    except KeyboardInterrupt:
        sys.excepthook(*sys.exc_info())
        code = -signal.SIGINT
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    gc.collect()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


def _exit_code(value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value & 0xFF
    print(value, file=sys.stderr)
    return 1


def main() -> None:
    """``python -P tests/zygote.py FD``: FD is the listening socket, made by the client.

    ``-P``: the server's ``sys.path`` does not start with tests/, whose folders (``queue``,
    ``tools``, ...) would hide modules of the same name; each child puts its own first entry.
    """
    listener = socket.socket(fileno=int(sys.argv[1]))
    for name in PRELOAD:
        importlib.import_module(name)
    # Every object so far is the server's: the children's collections never scan them (a scan
    # writes to each object's header, copying the page it is on).
    gc.collect()
    gc.freeze()
    finish(Server(listener).serve())


if __name__ == "__main__":
    main()
