"""A throwaway PostgreSQL cluster for tests and benchmarks.

``initdb`` into a temporary directory, ``postgres`` listening only on a Unix socket inside that
directory (so no TCP port can clash with anything else on the machine), durability switched off
(``fsync``, ``synchronous_commit``, ``full_page_writes``): a crash loses the cluster, which is
thrown away anyway. When the current user is root, the server runs as the ``postgres`` OS user
(PostgreSQL refuses to run as root) and the directory is handed to that user.

::

    with LocalCluster.start() as cluster:
        dsn = cluster.dsn("postgres")

``server()`` picks what the tests use: ``PERSONABOT_TEST_POSTGRES_DSN`` when set, otherwise a
local cluster when the binaries are installed; ``ClusterUnavailable`` says how to enable them.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Final, Self
from urllib.parse import quote, urlsplit, urlunsplit

import asyncpg

DSN_ENV: Final = "PERSONABOT_TEST_POSTGRES_DSN"
REQUIRE_ENV: Final = "PERSONABOT_REQUIRE_POSTGRES"
SUPERUSER: Final = "personabot"
PORT: Final = 5432  # only names the socket file inside our private directory
HOW_TO_ENABLE: Final = (
    f"set {DSN_ENV}=postgresql://user:password@host/db (a role that may CREATE DATABASE), "
    "or install the PostgreSQL server binaries (initdb, pg_ctl, postgres; Debian/Ubuntu: "
    "apt-get install postgresql) so that the tests start a throwaway cluster"
)
SERVER_SETTINGS: Final = (
    ("fsync", "off"),
    ("synchronous_commit", "off"),
    ("full_page_writes", "off"),
    ("max_connections", "400"),
    ("listen_addresses", "''"),  # no TCP at all: the Unix socket only
    ("shared_buffers", "128MB"),
    ("log_min_messages", "warning"),
)


class ClusterUnavailable(Exception):
    """No PostgreSQL server can be had for the tests; the message says how to enable them."""


def find_binaries() -> Path | None:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres``, or None."""
    found = shutil.which("initdb")
    candidates = [Path(found).resolve().parent] if found else []
    versions = glob.glob("/usr/lib/postgresql/*/bin")
    versions.sort(key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit() else 0)
    candidates += [Path(p) for p in reversed(versions)]
    for directory in candidates:
        if all((directory / tool).is_file() for tool in ("initdb", "pg_ctl", "postgres")):
            return directory
    return None


def _run_as() -> list[str]:
    """The command prefix that runs a server tool as a non-root user."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        raise ClusterUnavailable(
            "running as root needs a 'postgres' OS user to run the server as "
            "(the distribution's postgresql package creates it); " + HOW_TO_ENABLE
        ) from None
    runuser = shutil.which("runuser")
    if runuser:
        return [runuser, "-u", "postgres", "--"]
    return ["su", "postgres", "-s", "/bin/sh", "-c", '"$0" "$@"']


@dataclass
class LocalCluster:
    """A running throwaway cluster (use :meth:`start`)."""

    bindir: Path
    root: Path
    socket_dir: Path
    data_dir: Path
    prefix: list[str]
    _stopped: bool = False

    @classmethod
    def start(cls, bindir: Path | None = None, *, settings: Sequence[tuple[str, str]] = ()) -> Self:
        """initdb and start a cluster in a new temporary directory (a few seconds);
        ``settings`` are server settings on top of SERVER_SETTINGS (e.g. a benchmark's
        ``shared_preload_libraries``)."""
        bindir = bindir or find_binaries()
        if bindir is None:
            raise ClusterUnavailable("PostgreSQL server binaries not found; " + HOW_TO_ENABLE)
        prefix = _run_as()
        root = Path(tempfile.mkdtemp(prefix="personabot-pg-"))
        cluster = cls(bindir, root, root / "sock", root / "data", prefix)
        try:
            cluster._init_and_start(settings)
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _tool(self, name: str, *args: str) -> None:
        cmd = [*self.prefix, str(self.bindir / name), *args]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=120)
        if done.returncode != 0:
            raise ClusterUnavailable(
                f"{name} failed ({done.returncode}): {(done.stderr or done.stdout).strip()[-2000:]}"
            )

    def _init_and_start(self, settings: Sequence[tuple[str, str]] = ()) -> None:
        self.socket_dir.mkdir()
        if self.prefix:
            uid, gid = pwd.getpwnam("postgres")[2:4]
            for path in (self.root, self.socket_dir):
                os.chown(path, uid, gid)
        self._tool(
            "initdb",
            "-D",
            str(self.data_dir),
            "-U",
            SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        )
        # pg_ctl hands these to the server through /bin/sh.
        options = " ".join(f"-c {k}={v}" for k, v in (*SERVER_SETTINGS, *settings))
        options += f" -p {PORT} -k {self.socket_dir}"
        self._tool(
            "pg_ctl",
            "start",
            "-D",
            str(self.data_dir),
            "-l",
            str(self.root / "server.log"),
            "-o",
            options,
            "-w",
            "-t",
            "60",
        )

    def dsn(self, database: str = "postgres") -> str:
        """A libpq-style URL to ``database`` over the cluster's Unix socket."""
        return (
            f"postgresql://{SUPERUSER}@/{quote(database)}"
            f"?host={quote(str(self.socket_dir))}&port={PORT}"
        )

    def log_tail(self, lines: int = 40) -> str:
        """The end of the server log (for failure messages)."""
        with contextlib.suppress(OSError):
            text = (self.root / "server.log").read_text(errors="replace")
            return "\n".join(text.splitlines()[-lines:])
        return ""

    def stop(self) -> None:
        """Stop the server at once (nothing of it is kept) and delete the directory."""
        if self._stopped:
            return
        self._stopped = True
        if (self.data_dir / "postmaster.pid").exists():
            with contextlib.suppress(ClusterUnavailable, subprocess.TimeoutExpired):
                self._tool("pg_ctl", "stop", "-D", str(self.data_dir), "-m", "immediate", "-w")
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@contextlib.contextmanager
def server(settings: Sequence[tuple[str, str]] = ()) -> Iterator[str]:
    """A DSN of a server on which databases may be created: the env DSN or a local cluster
    (started with ``settings`` on top of SERVER_SETTINGS; the env DSN's server is as it is)."""
    dsn = os.environ.get(DSN_ENV, "").strip()
    if dsn:
        yield dsn
        return
    with LocalCluster.start(settings=settings) as cluster:
        yield cluster.dsn("postgres")


def required() -> bool:
    """Whether a missing server is an error (CI) rather than a reason to skip."""
    return os.environ.get(REQUIRE_ENV, "").strip() not in ("", "0", "false", "no")


def with_database(dsn: str, database: str) -> str:
    """``dsn`` pointing at another database of the same server (query options kept)."""
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path="/" + quote(database)))


async def create_database(server_dsn: str, name: str, *, template: str | None = None) -> str:
    """Create database ``name`` (cloned from ``template`` when given); return its DSN."""
    conn = await asyncpg.connect(server_dsn)
    try:
        clone = f" TEMPLATE {_ident(template)}" if template else ""
        await conn.execute(f"CREATE DATABASE {_ident(name)}{clone}")
    finally:
        await conn.close()
    return with_database(server_dsn, name)


async def drop_database(server_dsn: str, name: str) -> None:
    """Drop database ``name`` if it exists, disconnecting whoever is still on it."""
    conn = await asyncpg.connect(server_dsn)
    try:
        await conn.execute(f"DROP DATABASE IF EXISTS {_ident(name)} WITH (FORCE)")
    finally:
        await conn.close()


def _ident(name: str) -> str:
    if not name.replace("_", "").isalnum():
        raise ValueError(f"unexpected database name {name!r}")
    return f'"{name}"'
