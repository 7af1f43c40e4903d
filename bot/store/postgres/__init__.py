"""PostgreSQL store (asyncpg): the store for several processes or machines on one database.

The parts are the shared ones (bot/store/sql), the same statements as on SQLite; what differs
is how atomicity is reached when several processes write at once (the dialect's row locks):

- Every write is one transaction (READ COMMITTED). Every transaction that changes a
  conversation's queue state (messages, version, timer, sessions) first takes the
  conversation's row lock (``SELECT ... FOR UPDATE``, the row created if needed). Those
  transactions therefore run one after another per conversation, as SQLite's
  ``BEGIN IMMEDIATE`` runs all of them one after another, and every statement after the lock
  sees what the previous holder committed. Conversations never wait for each other.
- A duplicate delivery is found under that lock; the partial unique index on
  ``(conversation_id, platform_message_id)`` stands behind it.
- The lease CAS is one statement (``INSERT ... ON CONFLICT DO UPDATE ... WHERE
  leases.expires_at <= now RETURNING token``): PostgreSQL locks the conflicting row and
  evaluates the WHERE on its latest version, so of two racing workers exactly one wins.
- The final check (``finish_turn``) locks the conversation and then the lease row
  (``FOR UPDATE``), so a worker cannot take over an expired lease, read the pending messages
  and answer them again while the previous holder is committing its reply: the takeover waits
  for that commit and then finds nothing pending.
- ``pending_turn`` reads v0 and the messages in one statement, so from one snapshot.
- Due turns are claimed (``claim_due_turns``): one statement reads due timers whose turn
  lease is free, locking the lease rows ``FOR UPDATE SKIP LOCKED``, and takes them; a claim
  that meets a lease another claim has just taken re-checks it and passes over it, and never
  waits for a lock. A process claims at most its free turn slots (docs/scaling.md#claims).
- Every armed or moved timer is announced by a trigger (``NOTIFY personabot_timers``) at
  commit; ``listen_timers`` passes the announcements to the scheduler
  (bot/store/postgres/_wakeups.py).
- Migrations run in one transaction under a transaction-level advisory lock, so processes
  starting together migrate once.

Clocks: the contract passes ``now`` from the caller's injected clock, and this store uses it
everywhere, exactly like SQLite, so the contract suite runs on a manual clock. With several
machines their clocks must then be NTP-synced: skew never causes a duplicate reply (fencing
tokens and the version check are decided in the database) but a fast clock takes an expired
lease early and skews debounce timings. With ``use_db_clock=True`` (what ``personabot run``
uses through ``bot.app.build.build_store``) lease expiry (acquire and renew) is decided by the
database server's clock instead, ignoring ``now``; debounce timers keep the callers' clocks.

Secrets: the password comes from the URL or ``PGPASSWORD`` (libpq rules, applied by asyncpg);
it never appears in an error message or a log line of this module.
"""

from __future__ import annotations

from collections.abc import Callable

from bot.core.events import ConversationKey
from bot.core.redact import redact_url
from bot.store.postgres._core import PostgresCore, is_postgres_url
from bot.store.postgres._wakeups import TimerListener
from bot.store.postgres._writes import WritesPart
from bot.store.sql.agenda import AgendaPart
from bot.store.sql.commands import CommandsPart
from bot.store.sql.console import ConsolePart
from bot.store.sql.media import MediaPart
from bot.store.sql.people import PeoplePart
from bot.store.sql.queue import QueuePart
from bot.store.sql.retention import RetentionPart
from bot.store.sql.sessions import SessionsPart
from bot.store.sql.toolcalls import ToolCallsPart


class PostgresStore(
    SessionsPart,
    WritesPart,
    QueuePart,
    MediaPart,
    RetentionPart,
    PeoplePart,
    AgendaPart,
    ConsolePart,
    ToolCallsPart,
    CommandsPart,
    PostgresCore,
):
    """The BaseStore contract on PostgreSQL; each part holds one concern."""

    async def listen_timers(
        self,
        on_timer: Callable[[str | None, float | None], None],
        on_input: Callable[[ConversationKey | None], None] | None = None,
    ) -> None:
        """Pass every process's timer announcements on until cancelled (reconnecting)."""
        listener = TimerListener(
            dsn=self._dsn,
            on_timer=on_timer,
            on_input=on_input,
            redact=self._redact,
            connect_timeout=self._connect_timeout,
        )
        await listener.run()


__all__ = ["PostgresStore", "is_postgres_url", "redact_url"]
