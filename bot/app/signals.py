"""SIGINT/SIGTERM while ``personabot run`` runs: the first stops, a second SIGINT aborts.

The handlers stay installed from before startup until every adapter is closed, so a
supervisor that signals the whole process group twice, or a second Ctrl-C, never kills the
process mid-shutdown: a repeated SIGTERM is logged and ignored (running turns finish within
the grace period); a second SIGINT runs the abort action (cancel running turns: their leases
are released and their messages stay pending) and the process exits with ``EXIT_ABORTED``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable

log = logging.getLogger("personabot.signals")

#: Exit code after a second SIGINT cancelled running turns (128 + SIGINT, as shells show ^C).
EXIT_ABORTED = 130

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class EarlySignals:
    """SIGINT/SIGTERM that arrive before the loop's handlers exist (imports, config, the
    adapters' set-up): recorded, then replayed by :meth:`ShutdownSignals.install`, so a
    signal during startup stops the process cleanly with a log line instead of killing it."""

    def __init__(self) -> None:
        self.seen: list[signal.Signals] = []

    def install(self) -> None:
        """Record the signals from now on (the loop's handlers replace these)."""
        for sig in _SIGNALS:
            signal.signal(sig, self._record)

    def _record(self, signum: int, frame: object) -> None:
        self.seen.append(signal.Signals(signum))


class ShutdownSignals:
    """Turns signals into a stop request and, on a second SIGINT, an abort."""

    def __init__(self, *, grace_seconds: float) -> None:
        self.stop = asyncio.Event()
        self.aborted = False
        self._grace = grace_seconds
        self._abort: Callable[[], object] | None = None
        self._give_up: Callable[[], object] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def on_abort(self, action: Callable[[], object] | None) -> None:
        """What a second SIGINT does now (startup: give up; running: cancel turns)."""
        self._abort = action

    def on_stop_while_starting(self, action: Callable[[], object] | None) -> None:
        """What the first signal also does while the bots start (give up a plugin's start
        that may never return); ``None`` once they run."""
        self._give_up = action

    def install(self, early: EarlySignals | None = None) -> None:
        """Handle SIGINT and SIGTERM on the running loop (no-op where unsupported), after
        replaying what ``early`` recorded before."""
        self._loop = asyncio.get_running_loop()
        for sig in _SIGNALS:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                self._loop.add_signal_handler(sig, self.received, sig)
        for sig in early.seen if early is not None else ():
            self.received(sig)

    def uninstall(self) -> None:
        """Give the signals back to their default handlers."""
        if self._loop is None:
            return
        for sig in _SIGNALS:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                self._loop.remove_signal_handler(sig)
        self._loop = None

    def received(self, sig: signal.Signals) -> None:
        """One signal arrived (called by the loop, never from a signal frame)."""
        name = sig.name
        if not self.stop.is_set():
            log.info(
                "%s received: shutting down; running turns get up to %.0fs to finish "
                "(a second SIGINT cancels them, their messages stay pending)",
                name,
                self._grace,
            )
            self.stop.set()
            if self._give_up is not None:
                self._give_up()
        elif self.aborted:
            log.warning("%s received while aborting: ignored", name)
        elif sig == signal.SIGINT:
            log.warning(
                "second SIGINT: cancelling running turns now (leases released, messages "
                "stay pending and are answered after the next start); exit code %d",
                EXIT_ABORTED,
            )
            self.aborted = True
            if self._abort is not None:
                self._abort()
        else:
            log.warning(
                "%s received again during shutdown: ignored; running turns still get their "
                "grace period (send SIGINT twice to cancel them)",
                name,
            )
