"""Wake-ups across processes: LISTEN for the timers every process arms (docs/scaling.md#wake-ups).

Migration 13's trigger announces each armed or moved timer on ``personabot_timers`` with
``"<bot> <due_at>"`` when its transaction commits. One connection of its own (outside the
pool: a pooled connection is reset and handed to others) listens and passes each announcement
on, so another process's scheduler sets its alarm to the due time instead of finding the timer
at its next scan. Migration 17's trigger also names the timer's conversation on
``personabot_input``: a process running a generation of that conversation checks whether
newer input made it stale and cuts it (docs/architecture.md#queue rule 9).

Notifications are a shortcut, never the guarantee: one sent while this connection was down is
lost, so every (re)connection asks for a look at the store at once, and the scheduler's scan
stays the safety net. A connection that dies (a server restart, a cut network) is replaced
with backoff; a half-open one (no FIN ever arrives) is found by a periodic ping.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any, Final

import asyncpg

from bot.core.events import ConversationKey
from bot.store.migrations.postgres import INPUT_CHANNEL, TIMERS_CHANNEL

log = logging.getLogger("personabot.store")

#: Called with (bot, due time) per announcement; (None, None): look at the store now.
OnTimer = Callable[[str | None, float | None], None]
#: Called with the conversation of each armed timer; None: any conversation may have input.
OnInput = Callable[[ConversationKey | None], None]

_ERRORS: Final = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError)


def parse(payload: str) -> tuple[str, float] | None:
    """``"<bot> <due_at>"`` (a bot key may hold spaces; the due time never does)."""
    bot, _, due = payload.rpartition(" ")
    try:
        due_at = float(due)
    except ValueError:
        return None
    return (bot, due_at) if bot else None


def parse_input(payload: str) -> ConversationKey | None:
    """``[bot, platform, chat_id, thread_id]`` as JSON ('' = no thread)."""
    try:
        fields = json.loads(payload)
    except ValueError:
        return None
    if not (
        isinstance(fields, list) and len(fields) == 4 and all(isinstance(f, str) for f in fields)
    ):
        return None
    bot, platform, chat_id, thread = fields
    return ConversationKey(platform, chat_id, thread or None, bot)


class TimerListener:
    """Listens for armed timers until cancelled, reconnecting with backoff."""

    def __init__(
        self,
        *,
        dsn: str,
        on_timer: OnTimer,
        on_input: OnInput | None = None,
        redact: Callable[[str], str],
        connect_timeout: float = 10.0,
        ping_seconds: float = 15.0,
        retry_max_seconds: float = 30.0,
    ) -> None:
        self._dsn = dsn
        self._on_timer = on_timer
        self._on_input = on_input
        self._redact = redact
        self._connect_timeout = connect_timeout
        self._ping = ping_seconds
        self._retry_max = retry_max_seconds
        #: Whether a listening connection is up now (for tests and readiness).
        self.listening = asyncio.Event()
        self.connections = 0

    def _notified(self, _conn: Any, _pid: int, _channel: str, payload: object) -> None:
        parsed = parse(str(payload))
        if parsed is None:
            log.warning("ignored a malformed timer announcement: %r", str(payload)[:100])
            return
        self._on_timer(*parsed)

    def _input(self, _conn: Any, _pid: int, _channel: str, payload: object) -> None:
        if self._on_input is None:
            return
        conversation = parse_input(str(payload))
        if conversation is None:
            log.warning("ignored a malformed input announcement: %r", str(payload)[:100])
            return
        self._on_input(conversation)

    async def run(self) -> None:
        """Listen, and listen again after every failure, until cancelled."""
        delay = 0.5
        while True:
            listened = self.connections
            try:
                await self._listen_once()
            except _ERRORS as exc:
                # Not chained into the log: the driver's text may quote the URL.
                log.warning(
                    "timer announcements unavailable (the scan still runs): %s",
                    self._redact(f"{type(exc).__name__}: {exc}"),
                )
            finally:
                self.listening.clear()
            if self.connections > listened:
                delay = 0.5  # it was up: this loss starts the backoff afresh
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._retry_max)

    async def _listen_once(self) -> None:
        conn = await asyncpg.connect(
            self._dsn,
            timeout=self._connect_timeout,
            server_settings={"application_name": "personabot listener"},
        )
        closed = asyncio.Event()
        conn.add_termination_listener(lambda _c: closed.set())
        try:
            await conn.add_listener(TIMERS_CHANNEL, self._notified)
            if self._on_input is not None:
                await conn.add_listener(INPUT_CHANNEL, self._input)
            self.connections += 1
            self.listening.set()
            # Whatever was announced while no connection listened is lost: look now.
            self._on_timer(None, None)
            if self._on_input is not None:
                self._on_input(None)
            while not closed.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(closed.wait(), timeout=self._ping)
                if not closed.is_set():
                    await conn.fetchval("SELECT 1", timeout=self._connect_timeout)
            raise ConnectionResetError("the listening connection was closed")
        finally:
            conn.terminate()  # never waits on a dead peer
